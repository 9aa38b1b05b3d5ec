"""Jobs the target framework asserts against at start-up are bad input, never proved and exported
(review 45: sync-free with the legacy grouped GEMM on Primus, the legacy grouped GEMM on gpt-oss's
biased experts, fp16 MoE on a Megatron-LM before #2495)."""

from __future__ import annotations

from typing import Any

from primus.stacks.core import resolve_stack
from primus.stacks.megatron_release import FP16_MOE_FROM, megatron_target

# review 45's sfl.yaml: DeepSeek-V2-Lite on one MI355X node, EP 8
SYNC_FREE: dict[str, Any] = {
    "stack": "primus", "model": "deepseek-v2-lite", "hardware": "mi355x", "nodes": 1, "seq_len": 4096,
    "global_batch_size": 256, "precision": "bf16",
    "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 8, "etp": 1, "mbs": 4, "sp": False, "recompute": "none",
                 "sharding": "dist_opt"},
    "moe": {"sync_free": True, "token_dispatcher": "flex", "grouped_gemm": "legacy"}}

# review 45's mixfp16.yaml: Mixtral 8x7B on 16 H100, EP 8
MIXTRAL_FP16: dict[str, Any] = {
    "model": "mixtral-8x7b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 4096, "global_batch_size": 256,
    "precision": "fp16",
    "parallel": {"tp": 2, "pp": 2, "vp": 1, "sp": True, "cp": 1, "ep": 8, "etp": 1, "mbs": 1,
                 "recompute": "selective", "sharding": "dist_opt"}}


def test_sync_free_with_the_legacy_grouped_gemm_is_bad_input(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # AMD-AGI/Primus fd1eeab primus/backends/megatron/patches/args/rocm_arg_validation.py lines 190-205: stage 2
    # requires use_turbo_grouped_gemm, which raises "incompatible with moe_use_legacy_grouped_gemm=True"
    code, out, err = run_cli("fit", write_job(SYNC_FREE), "--format", "json")
    assert (code, out) == (2, "") and "moe.grouped_gemm" in err and "sync-free" in err


def test_sync_free_with_the_legacy_grouped_gemm_is_not_exported(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("export", write_job(SYNC_FREE), "--to", "primus")
    assert (code, out) == (2, "")


def test_the_legacy_grouped_gemm_on_biased_experts_is_bad_input(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # NVIDIA/Megatron-LM 000c4ac megatron/core/transformer/moe/experts.py lines 116-118: GroupedMLP asserts
    # add_bias_linear == False; gpt-oss has biases on its experts (review 45's goss.yaml)
    job = {"model": "gpt-oss-120b", "hardware": "h200", "nodes": 4, "seq_len": 4096, "global_batch_size": 256,
           "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 32, "etp": 1, "mbs": 1, "sp": False,
                        "recompute": "full", "sharding": "dist_opt"},
           "moe": {"grouped_gemm": "legacy"}}
    code, out, err = run_cli("export", write_job(job), "--to", "megatron")
    assert (code, out) == (2, "") and "moe.grouped_gemm" in err and "add_bias_linear" in err


def test_fp16_moe_on_a_megatron_lm_before_2495_is_bad_input(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # 000c4ac (core_r0.14) megatron/training/arguments.py lines 876-877 ("GroupedGEMM for MoE only supports
    # bf16") and 1041-1042 ("Expert parallelism is not supported with fp16 training")
    code, out, err = run_cli("fit", write_job(MIXTRAL_FP16), "--stack", "megatron-lm@2025.03")
    assert (code, out) == (2, "") and "precision" in err and "#2495" in err


def test_fp16_moe_is_accepted_from_the_release_that_removed_the_asserts(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # NVIDIA/Megatron-LM 4193f3aa9b (2025-12-22, first tagged core_v0.16.0) removed both asserts
    assert not megatron_target(resolve_stack("megatron-lm@2026.04", "test")).before(FP16_MOE_FROM)
    code, _, _ = run_cli("fit", write_job(MIXTRAL_FP16), "--stack", "megatron-lm@2026.04")
    assert code == 0


def test_an_fp16_moe_export_for_a_release_with_2495_writes_fp16(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # the default stack's line is core_v0.18.0's, which holds #2495 (4193f3aa9b, first tagged core_v0.16.0)
    code, out, _ = run_cli("export", write_job(MIXTRAL_FP16), "--to", "megatron")
    assert code == 0 and "--fp16" in out.split() and "Megatron-LM core_v0.18.0 argument names" in out


def test_an_fp16_moe_export_for_a_release_branch_without_2495_is_bad_input(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # core_v0.15.3 (2026-02-06) is dated after #2495 (2025-12-22) but its release branch does not hold it:
    # core_v0.15.3 megatron/training/arguments.py lines 877 and 1042 still assert both (core_v0.16.0 has neither)
    code, out, err = run_cli("export", write_job(MIXTRAL_FP16), "--to", "megatron",
                             "--stack", "megatron-lm@core_v0.15.3")
    refusal = err.splitlines()[-1]  # after the note on how the release name resolves
    assert (code, out) == (2, "") and ": precision: " in refusal and "core_v0.15.3" in refusal
