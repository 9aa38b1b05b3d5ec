"""The Llama 3.1 405B presets fit as they ran (issue 15): Megatron-Bridge and NeMo keep the linear weights
of their FP8 recipes only in FP8 (the stacks' `fp8_param_gather`, tests/test_stack_recipes.py), and
Megatron-Bridge 26.06 runs every workload with expandable segments. `--fp8-param-gather` travels through
export and import."""

from __future__ import annotations

from typing import Any

import pytest

from primus.fidelity.jobs import build
from primus.fidelity.runs import bundled_runs_path, read_runs
from primus.job import job_from_mapping
from primus.memory.evaluate import MemoryModel, pinned_layout

ROWS = {r.run_id: r for r in read_runs(bundled_runs_path())}
BASE = {"model": "llama3-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 8192, "global_batch_size": 128}


def _job(**keys: Any) -> Any:
    return job_from_mapping({**BASE, **keys}, "t")


def _at_recompute_none(run_id: str) -> Any:
    jobs = build(ROWS[run_id])
    assert jobs.escalated == ()  # the preset's "no recompute" is what is projected
    job = jobs.project
    assert job.spec.parallel.recompute == "none" and job.spec.fp8_param_gather
    return MemoryModel(job).evaluate(pinned_layout(job), strict=False)


def test_the_405b_h100_preset_fits_without_recompute_once_its_weights_are_fp8_only() -> None:
    # Megatron-Bridge 26.06, 1,024 H100, TP8 PP8 VP8 CP2 (LLAMA31_405B_PRETRAIN_CONFIG_H100_FP8_CS: no recompute).
    # Stage 1 holds 16 of the 126 layers; a layer's linear weights are 16384 x (16384 + 2 x 1024) + 16384^2
    # + 16384 x 2 x 53248 + 53248 x 16384 = 3,187,671,040, split over TP 8; only its two 16384-wide norms
    # (replicated) stay in bf16.
    report = _at_recompute_none("MB26.06-DGX-H100-Llama3.1-405B-FP8")
    stage = report.stages[1]
    gemm = 16 * 3_187_671_040 // 8
    assert stage.params == gemm + 16 * 2 * 16384
    assert stage.terms["weights.model"] == 2 * 16 * 2 * 16384  # bf16 norms only
    assert stage.terms["weights.low_precision_cache"] == 2 * gemm  # FP8 weight + its transpose (Hopper)
    assert report.peak.stage == 1 and report.verdict == "fits"
    assert report.peak_bytes == 64_786_702_336  # 60.34 GiB of 73.50 GiB (was 72.21 GiB with a bf16 copy)


@pytest.mark.parametrize("run_id", [
    "MB25.09-DGX-H100-Llama3.1-405B-FP8", "MB25.11-DGX-H100-Llama3.1-405B-FP8-CS",
    "MB26.02-DGX-H100-Llama3.1-405B-FP8", "MB26.04.01-DGX-H100-Llama3.1-405B-FP8",
    "MB26.06-DGX-H100-Llama3.1-405B-FP8", "MB25.11-DGX-B200-Llama3.1-405B-FP8-CS",
    "MB25.11-DGX-B200-Llama3.1-405B-FP8-MX", "MB26.06-DGX-GB200-Llama3.1-405B-MXFP8",
    "MB26.06-DGX-GB300-Llama3.1-405B-MXFP8", "DGXC25.04.01-H100-Llama3.1-405B-FP8-512",
    "DGXC25.04.01-H100-Llama3.1-405B-FP8-1024", "DGXC25.05-GB200-Llama3.1-405B-FP8-128",
])
def test_every_405b_run_fits_at_its_presets_recompute(run_id: str) -> None:
    report = _at_recompute_none(run_id)
    assert report.fits, (report.peak_bytes, report.capacity_bytes)


def test_megatron_bridge_26_06_runs_with_expandable_segments() -> None:
    # v0.5.0 scripts/performance/utils/executors.py PERF_ENV_VARS: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True,
    # so the GB200 MXFP8 preset (TP4 PP16 VP8, no recompute) keeps 6% of 183.31 GiB, not 9%
    report = _at_recompute_none("MB26.06-DGX-GB200-Llama3.1-405B-MXFP8")
    r = report.reserves
    assert r.allocator == "expandable_segments"
    assert r.fragmentation_bytes == int(0.06 * (r.hbm_bytes - r.runtime_context_bytes))
    assert report.peak_bytes == 178_871_549_952 and report.verdict == "tight"  # 166.59 of 172.31 GiB
    older = build(ROWS["MB25.11-DGX-B200-Llama3.1-405B-FP8-CS"]).project
    assert MemoryModel(older).reserves.allocator == "default"


@pytest.mark.parametrize("kind", ["megatron", "primus"])
def test_fp8_parameters_travel_through_export_and_import(kind: str, tmp_path: Any) -> None:
    from primus.launch import export_job, import_launch

    job = _job(stack="megatron-bridge", precision="fp8",
               parallel={"tp": 1, "pp": 1, "cp": 1, "dp": 8, "mbs": 1, "recompute": "full", "sharding": "dist_opt"})
    exported = export_job(job, kind)
    if kind == "megatron":
        assert "--fp8-param-gather" in exported.text
    path = tmp_path / "job.cfg"
    path.write_text(exported.text)
    config = import_launch(kind, path)
    assert config.unmodelled == () and config.job["fp8_param_gather"] is True
    assert job_from_mapping(config.job, str(path), tmp_path).spec.fp8_param_gather
