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


def test_the_default_reserve_is_within_the_bound_the_runs_that_ran_set() -> None:
    # Megatron-Bridge 26.06 Llama 3.1 405B MXFP8 on 256 GB200 (preset ..._GB200_FP8_MX_V2) and 25.09
    # Qwen3-30B-A3B FP8 on 16 H100 (set_qwen3_common_configs): no recompute in either preset; both ran
    bounds = {}
    for run_id in ("MB26.06-DGX-GB200-Llama3.1-405B-MXFP8", "MB25.09-DGX-H100-Qwen3-30B-A3B-FP8"):
        peak, room = _peak_and_room(run_id, "none")
        bounds[run_id] = 1 - peak / room
    assert 0.091 < bounds["MB26.06-DGX-GB200-Llama3.1-405B-MXFP8"] < 0.092  # 166.59 of 183.31 GiB
    assert 0.091 < bounds["MB25.09-DGX-H100-Qwen3-30B-A3B-FP8"] < 0.093  # 71.00 of 78.19 GiB
    reserve = allocators().default.reserve_fraction
    assert reserve <= min(bounds.values()) and min(bounds.values()) - reserve < 0.01


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
