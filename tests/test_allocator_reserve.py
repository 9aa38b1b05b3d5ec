"""The allocator reserve is derived from measurements (docs/memory.md, "Allocator reserve"): runs that
ran bound it from above, published reserved peaks measure it. These tests recompute both from the
development set and hold stacks/allocators.yaml to them."""

from __future__ import annotations

from primus.fidelity.jobs import build
from primus.fidelity.runs import bundled_runs_path, read_runs
from primus.job import job_from_mapping
from primus.memory.evaluate import MemoryModel, pinned_layout
from primus.stacks.allocator import allocators

ROWS = {r.run_id: r for r in read_runs(bundled_runs_path())}


def _peak_and_room(run_id: str, recompute: str | None = None) -> tuple[int, int]:
    job = build(ROWS[run_id]).project
    if recompute is not None:
        data = job.spec.model_dump()
        data["parallel"] = {**job.spec.parallel.pinned(), "recompute": recompute}
        job = job_from_mapping(data, run_id)
    report = MemoryModel(job).evaluate(pinned_layout(job), strict=False)
    r = report.reserves
    return report.peak_bytes, r.hbm_bytes - r.runtime_context_bytes


def test_the_default_reserve_is_within_the_bound_a_run_that_ran_sets() -> None:
    # DGX Cloud 25.04.01 Llama 3 70B FP8, 64 H100, TP4 PP8 VP5: Megatron-Bridge's preset for this layout
    # (LLAMA3_70B_PRETRAIN_CONFIG_H100_FP8_CS_V1) sets no recompute, and the run ran.
    peak, room = _peak_and_room("DGXC25.04.01-H100-Llama3-70B-FP8-64", "none")
    bound = 1 - peak / room
    assert 0.091 < bound < 0.092  # 71.04 GiB of 78.19 GiB
    reserve = allocators().default.reserve_fraction
    assert reserve <= bound and bound - reserve < 0.01


def test_the_expandable_segments_reserve_covers_torchtitans_reserved_peaks() -> None:
    # torchtitan benchmarks/llama3_h100_202412_torchtitan.md: max reserved 76.8 GiB (8 GPUs) and 61.8 GiB
    # (128 GPUs), Llama 3.1 8B, FSDP + torch.compile + Float8, run_train.sh with expandable segments.
    excess = []
    for run_id in ("TT-8B-8gpu-FSDP + torch.compile + Float8", "TT-8B-128gpu-FSDP + torch.compile + Float8"):
        peak, room = _peak_and_room(run_id)
        measured = ROWS[run_id].measured_peak_gib
        assert measured is not None
        excess.append((measured * 2**30 - peak) / room)
    assert min(excess) > 0.04 and max(excess) < 0.06
    reserve = allocators().expandable_segments.reserve_fraction
    assert max(excess) <= reserve and reserve - max(excess) < 0.01
    assert reserve < allocators().default.reserve_fraction
