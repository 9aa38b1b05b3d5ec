"""Per-model presets carried as stack recipes, and the FP8 parameter setting of the NVIDIA stacks (issue
15: at most 3% of `validate` rows escalated). Each preset's values and source are in stacks/*.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest

from primus.fidelity.jobs import build
from primus.fidelity.runs import bundled_runs_path, read_runs
from primus.job import job_from_mapping
from primus.memory.evaluate import MemoryModel, pinned_layout
from primus.stacks.core import resolve_stack
from tests.helpers.runs_csv import row_of, write_rows

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
    # DGX Cloud 25.05 (dgxc-benchmarking 68eaf7e deepseek_v3/pretraining/launch.sh: RM='mla_up_proj' on H100,
    # 'core_attn' on GB200; NeMo 7a8f1cc pretrain_deepseek_v3.py line 67: recompute_granularity 'selective')
    ("DGXC25.05-H100-DeepSeek-V3-BF16-1024", "selective", {"recompute_modules": ("mla_up_proj",)}),
    ("DGXC25.05-GB200-DeepSeek-V3-BF16-128", "selective", {"recompute_modules": ("core_attn",)}),
])
def test_a_run_without_recompute_in_its_table_takes_its_presets_recompute(run_id: str, recompute: str,
                                                                          extra: dict[str, object]) -> None:
    jobs = build(_row(run_id))
    pins = jobs.project.spec.parallel
    assert pins.recompute == recompute and jobs.escalated == ()
    assert all(getattr(pins, k) == v for k, v in extra.items())
    assert any("the stack's recipe" in a for a in jobs.assumed)


def test_a_preset_that_changed_in_a_release_is_picked_only_from_that_release(tmp_path: Path) -> None:
    # Megatron-Bridge v0.4.0 (26.04) DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2 (GBS 4096 at 256 GPUs, as the
    # row) recomputes ['mlp'], v0.5.0
    # (26.06) ['mla_up_proj']: a 26.04 run of the same layout takes the 26.04 preset
    fields, row = row_of(bundled_runs_path(), "MB26.06-DGX-GB200-DeepSeek-V3-MXFP8")
    path = write_rows(tmp_path / "runs.csv", fields, [{**row, "run_id": "older", "source": "megatron-bridge-26.04"}])
    jobs = build(read_runs(path)[0])
    assert jobs.project.spec.parallel.recompute_modules == ("mlp",)
    assert any("v0.4.0" in a and "DEEPSEEK_V3_PRETRAIN_CONFIG_GB200_FP8_MX_V2" in a for a in jobs.assumed)


def test_the_dgx_cloud_deepseek_recipes_hold_for_the_release_read_only() -> None:
    # read at dgxc-benchmarking 68eaf7e (DGX Cloud 25.05); DGX Cloud 25.04.01 shipped no DeepSeek-V3 recipe
    for gpu, module in (("h100-80gb", "mla_up_proj"), ("gb200", "core_attn")):
        recipe = resolve_stack("nemo@25.05").recipe_for("deepseek-v3", gpu, "bf16")
        assert recipe is not None and recipe.settings.recompute_modules == (module,)
        assert resolve_stack("nemo@25.04.01").recipe_for("deepseek-v3", gpu, "bf16") is None


def _amd_row(tmp_path: Path, source: str, **values: str):  # type: ignore[no-untyped-def]
    """AMD's Llama 3.1 70B MI325X row at the FP8 example config's own batch (8 GPUs, MBS 1, GBS 16: lines
    20-21) under `source`, with its table leaving sharding and recompute empty."""
    fields, row = row_of(bundled_runs_path(), "AMD-Primus-MI325X-Llama3-70B-BF16-1-node")
    path = write_rows(tmp_path / "runs.csv", fields, [{
        **row, "run_id": "t", "source": source, "precision": "fp8", "num_gpus": "8", "mbs": "1", "gbs": "16",
        "sharding": "", "recompute": "", **values}])
    return read_runs(path)[0]


def test_a_primus_run_from_26_3_takes_the_mi325x_llama_70b_example_config(tmp_path: Path) -> None:
    # AMD-AGI/Primus fd1eeabb examples/megatron/configs/MI325X/llama3.1_70B-FP8-pretrain.yaml: torch FSDP2
    # (lines 62-63), full block recompute of 72 layers (lines 70-72), TE's fused loss (lines 79-80); the
    # MI325X examples first ship in v26.3. It fits as shipped.
    jobs = build(_amd_row(tmp_path, "amd-primus-26.3"))
    spec = jobs.project.spec
    assert (spec.parallel.sharding, spec.parallel.recompute, spec.parallel.recompute_method,
            spec.parallel.recompute_num_layers) == ("fsdp", "full", "block", 72)
    assert spec.kernels.cross_entropy_fusion and jobs.escalated == ()
    assert spec.kernels.cross_entropy_fusion_impl == "te"  # cross_entropy_fusion_impl te (line 79)
    assert sum("the stack's recipe" in a for a in jobs.assumed) == 3  # sharding, loss, recompute


def test_a_primus_run_before_26_3_or_stating_its_sharding_does_not_take_the_example(tmp_path: Path) -> None:
    older = build(_amd_row(tmp_path, "amd-primus-26.1"))
    assert older.project.spec.parallel.sharding == "dist_opt"
    assert not any("the stack's recipe" in a for a in older.assumed)
    stated = build(_amd_row(tmp_path, "amd-primus-26.3", sharding="zero2"))
    assert stated.project.spec.parallel.sharding == "zero2"  # the table's own sharding wins
