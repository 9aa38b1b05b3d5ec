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


def test_the_default_reserve_is_within_the_bound_runs_that_ran_set() -> None:
    # Runs with the default allocator whose every memory setting is known, at their recipe's recompute:
    # Megatron-Bridge 25.11 Qwen3-30B-A3B FP8 on 16 H100 (qwen3_llm_pretrain.py sets recompute_granularity
    # None), MosaicML MPT-3B 8K on 8 H100 (all stated) and DGX Cloud 25.04.01 Llama 3 70B FP8 on 64 H100
    # (TP4 PP8 VP5, no recompute; NeMo's bf16_with_fp8_mixed keeps FP8 parameters).
    bounds = {}
    for run_id in ("MB25.11-DGX-H100-Qwen3-30B-A3B-FP8-CS", "MPT-H100-80GB-amp_bf16-3b-s8192-n8",
                   "DGXC25.04.01-H100-Llama3-70B-FP8-64"):
        peak, room = _peak_and_room(run_id, "none")
        bounds[run_id] = 1 - peak / room
    # Megatron-Bridge 25.11 Llama 3 70B FP8-CS on 64 GB200 at its preset (Megatron-FSDP, MBS 2, 40 of 80
    # layers' activations offloaded; v0.2.0 perf_plugins.py lines 250-252 set expandable segments only for
    # Llama 3.1 405B on GB200): 170.47 of 183.3 GiB after the runtime context (41 layers beside the last
    # layer's backward working set, which outweighs 40 beside the loss).
    gb200 = "MB25.11-DGX-GB200-Llama3-70B-FP8-CS"
    peak, room = _peak_and_room(gb200)
    bounds[gb200] = 1 - peak / room
    assert 0.121 < bounds["MB25.11-DGX-H100-Qwen3-30B-A3B-FP8-CS"] < 0.122  # TE's in-place loss: 12.16%
    # fp32 gradient shards: Composer mixed_precision DEFAULT reduce-scatters in fp32 (stacks/llm-foundry.yaml)
    assert 0.093 < bounds["MPT-H100-80GB-amp_bf16-3b-s8192-n8"] < 0.094
    assert 0.142 < bounds["DGXC25.04.01-H100-Llama3-70B-FP8-64"] < 0.143  # 67.06 of 78.19 GiB
    assert 0.0700 < bounds[gb200] < 0.0701  # the binding one
    # the default allocator fragments no less than the expandable one (whose figure the torchtitan runs
    # measure) and no more than the binding run left: primus takes the lower end, the expandable figure
    reserve = allocators().default.reserve_fraction
    assert allocators().expandable_segments.reserve_fraction == reserve <= min(bounds.values())


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
    # the default allocator holds no less than the expandable one on the same evidence
    assert reserve <= allocators().default.reserve_fraction


def test_megatron_bridge_26_06_runs_bound_the_expandable_segments_reserve() -> None:
    # v0.5.0 sets PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for every workload, so the 26.06 Llama 3.1
    # 405B MXFP8 run on 256 GB200 (TP4 PP16 VP8, no recompute) bounds that allocator's reserve, not the
    # default's: 166.59 of 183.31 GiB, at most 9.12%
    peak, room = _peak_and_room("MB26.06-DGX-GB200-Llama3.1-405B-MXFP8", "none")
    assert 0.091 < 1 - peak / room < 0.092
    assert allocators().expandable_segments.reserve_fraction <= 1 - peak / room
