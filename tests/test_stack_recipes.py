"""Per-model presets carried as stack recipes, and the FP8 parameter setting of the NVIDIA stacks (issue
15: at most 3% of `validate` rows escalated). Each preset's values and source are in stacks/*.yaml."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from primus.fidelity.jobs import build
from primus.fidelity.runs import bundled_runs_path, read_runs
from primus.job import job_from_mapping
from primus.memory.evaluate import MemoryModel, pinned_layout

BASE = {"model": "llama3-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 8192, "global_batch_size": 128}


def _row(run_id: str):  # type: ignore[no-untyped-def]
    return next(r for r in read_runs(bundled_runs_path()) if r.run_id == run_id)


@pytest.mark.parametrize(("stack", "gather"), [("megatron-bridge", True), ("nemo", True), ("megatron-lm", False)])
def test_nvidia_recipes_keep_fp8_gemm_weights_only_in_fp8(stack: str, gather: bool) -> None:
    # Megatron-Bridge bf16_with_fp8_current_scaling_mixed / bf16_with_mxfp8_mixed and NeMo
    # bf16_with_fp8_mixed set fp8_param_gather (fp8_params) True; Megatron-LM's flag is off by default
    job = job_from_mapping({**BASE, "stack": stack, "precision": "fp8"}, "t")
    assert job.spec.fp8_param_gather is gather
    assert job_from_mapping({**BASE, "stack": stack}, "t").spec.fp8_param_gather is False  # bf16
    own = job_from_mapping({**BASE, "stack": stack, "precision": "fp8", "fp8_param_gather": False}, "t")
    assert own.spec.fp8_param_gather is False  # the job file wins


@pytest.mark.parametrize("run_id", ["DGXC25.04.01-H100-Llama3-8B-FP8-8", "NeMo24.07-H100-LLAMA3-8B-8gpu",
                                    "DGXC25.04.01-H100-Nemotron4-15B-FP8-16", "MB25.09-DGX-H100-Qwen3-30B-A3B-FP8",
                                    "MB25.11-DGX-H100-Qwen3-30B-A3B-FP8-CS"])
def test_fp8_runs_whose_recipe_sets_no_recompute_fit_without_it(run_id: str) -> None:
    # NeMo's model_configs_h100.csv (Llama 3 8B, Nemotron-4 15B) and Megatron-Bridge's Qwen3-30B-A3B H100
    # preset (set_qwen3_common_configs: recompute_granularity None) recompute nothing: with the GEMM
    # weights only in FP8, as those recipes keep them, the ledger agrees
    jobs = build(_row(run_id))
    assert jobs.project.spec.parallel.recompute == "none" and jobs.escalated == ()
    assert jobs.project.spec.fp8_param_gather


def test_dgx_cloud_llama3_8b_fp8_peak_is_under_its_logged_reserved_peak() -> None:
    # NVIDIA/dgxc-benchmarking 85380ff llama3.1/README.md, "Llama 3.1 8b FP8 on 8x H100 GPUs (GBS=128)":
    # peak_memory_usage 70833405952 (NeMo logs torch.cuda.max_memory_reserved) - allocated can only be less
    job = build(_row("DGXC25.04.01-H100-Llama3-8B-FP8-8")).project
    assert MemoryModel(job).evaluate(pinned_layout(job)).peak_bytes < 70_833_405_952


@pytest.mark.parametrize(("run_id", "recompute", "extra"), [
    ("MB25.11-DGX-B200-GPT-OSS-120B-BF16", "selective", {"recompute_modules": ("layernorm", "moe_act")}),
    ("MB26.06-DGX-GB200-DeepSeek-V3-MXFP8", "selective", {"recompute_modules": ("mla_up_proj",)}),
    ("MB26.06-DGX-GB300-Kimi-K2-MXFP8", "selective", {"recompute_modules": ("mla_up_proj",)}),
    ("AutoModel-H100-DeepSeek-V3-256", "full", {"recompute_method": "uniform", "recompute_num_layers": 1}),
    ("AutoModel-H100-DeepSeek-V3-1024", "full", {"recompute_method": "uniform", "recompute_num_layers": 1}),
    ("AutoModel-H100-Kimi-K2-256", "full", {"recompute_method": "uniform", "recompute_num_layers": 1}),
])
def test_a_run_without_recompute_in_its_table_takes_its_presets_recompute(run_id: str, recompute: str,
                                                                          extra: dict[str, object]) -> None:
    jobs = build(_row(run_id))
    pins = jobs.project.spec.parallel
    assert pins.recompute == recompute and jobs.escalated == ()
    assert all(getattr(pins, k) == v for k, v in extra.items())
    assert any("the stack's recipe" in a for a in jobs.assumed)


def test_a_preset_that_changed_in_a_release_is_picked_only_from_that_release(tmp_path: Path) -> None:
    # Megatron-Bridge v0.4.0 (26.04) recomputed ['mlp'] for DeepSeek-V3 GB200 MXFP8, v0.5.0 (26.06)
    # ['mla_up_proj']: the recipe carries `since: "26.06"`, so a 26.04 run does not take it
    src = bundled_runs_path()
    with src.open() as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames or [])
        row = next(r for r in reader if r["run_id"] == "MB26.06-DGX-GB200-DeepSeek-V3-MXFP8")
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerow({**row, "run_id": "older", "source": "megatron-bridge-26.04"})
    jobs = build(read_runs(path)[0])
    assert jobs.project.spec.parallel.recompute_modules is None
    assert not any("the stack's recipe" in a for a in jobs.assumed)
