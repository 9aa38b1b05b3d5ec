"""Layouts a named Megatron-LM release (or Transformer Engine under it) refuses at start-up, and the launch lines
an old release can parse.

- Biases in MoE layers need ETP 1 from core_v0.15.0: transformer_config.py lines 1301-1304, "Bias in Moe is only
  supported when ETP==1" (gpt-oss: add_bias_linear, openai/gpt-oss-120b config.json has biases on every
  projection). Before it, core_v0.12.1 to core_v0.14.0, TEGroupedMLP builds no expert biases at all.
- Before MoE parallel folding (core_v0.10.0) the experts run at the dense TP and EP splits the data-parallel
  ranks: core_v0.8.0 parallel_state.py lines 442-445 and core_v0.9.0 lines 536-540 raise "data_parallel_size
  ... is not divisible by expert_model_parallel_size"; neither release has --expert-tensor-parallel-size.
(What Transformer Engine's context parallelism refuses per cp_comm_type: tests/test_cp_comm_type.py.)
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from primus.stacks.core import resolve_stack
from primus.stacks.megatron_release import (
    MOE_BIAS_ETP1_FROM,
    MOE_FOLDING_FROM,
    TE_GROUPED_BIAS_REFUSED,
    folds_experts,
    refuses_expert_bias_etp,
)

GPT_OSS_ETP2: dict[str, Any] = {
    "model": "gpt-oss-120b", "hardware": "b200", "gpus": 64, "seq_len": 4096, "global_batch_size": 256,
    "parallel": {"tp": 2, "pp": 1, "vp": 1, "cp": 1, "ep": 8, "etp": 2, "mbs": 1, "sp": True, "recompute": "full",
                 "sharding": "dist_opt"}}
MIXTRAL_OLD: dict[str, Any] = {
    "model": "mixtral-8x7b", "hardware": "h100-80gb", "gpus": 64, "seq_len": 8192, "global_batch_size": 64,
    "stack": "megatron-lm@core_v0.9.0",
    "parallel": {"tp": 8, "pp": 1, "vp": 1, "cp": 1, "ep": 8, "etp": 8, "mbs": 1, "sp": True, "recompute": "full",
                 "sharding": "dist_opt"}}

def _fit(run_cli, write_job, job: dict[str, Any]) -> tuple[int, dict[str, Any]]:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("fit", write_job(job), "--format", "json")
    return code, json.loads(out)


def test_the_releases_that_carry_the_asserts() -> None:
    assert (MOE_BIAS_ETP1_FROM, MOE_FOLDING_FROM) == ("core_v0.15.0", "core_v0.10.0")
    assert TE_GROUPED_BIAS_REFUSED == ("core_v0.12.1", "core_v0.15.0")
    assert refuses_expert_bias_etp(resolve_stack("megatron-lm@core_v0.15.0"))
    assert not refuses_expert_bias_etp(resolve_stack("megatron-lm@core_v0.14.0"))
    assert not refuses_expert_bias_etp(resolve_stack("torchtitan"))  # runs no Megatron-LM
    assert not folds_experts(resolve_stack("megatron-lm@core_v0.9.0"))
    assert folds_experts(resolve_stack("megatron-lm@core_v0.10.0"))
    assert not folds_experts(resolve_stack("nemo@24.07"))  # NeMo v2.0.0 pins core_r0.9.0


def test_gpt_oss_at_etp_2_is_refused_by_megatron_core_0_15_and_later(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    code, doc = _fit(run_cli, write_job, GPT_OSS_ETP2)
    assert code == 1 and not doc["fits"] and "moe-bias-needs-etp-1" in doc["violated_rules"]


def test_gpt_oss_on_megatron_bridge_25_11_runs_core_0_15_with_its_etp_1_rule(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # NeMo 25.11 (Megatron-Bridge v0.2.0) runs Megatron Core dev:0.15.0, 0d8e0714cd, which holds a329dd6da5
    code, doc = _fit(run_cli, write_job, {**GPT_OSS_ETP2, "stack": "megatron-bridge@25.11"})
    assert code == 1 and "moe-bias-needs-etp-1" in doc["violated_rules"]
    job = {**GPT_OSS_ETP2, "stack": "megatron-bridge@25.11", "parallel": {**GPT_OSS_ETP2["parallel"], "etp": 1}}
    code, doc = _fit(run_cli, write_job, job)
    assert code == 0 and doc["fits"]


@pytest.mark.parametrize("stack", ["megatron-lm@core_v0.14.0", "megatron-bridge@25.09", "megatron-lm@core_v0.12.1"])
def test_before_core_0_15_te_grouped_mlp_builds_no_expert_biases(run_cli, write_job, stack: str) -> None:  # type: ignore[no-untyped-def]
    # experts.py TEGroupedMLP: "bias not supported in TEGroupedMLP yet" (core_v0.12.1 line 677 to core_v0.14.0 line 763)
    code, _, err = run_cli("fit", write_job({**GPT_OSS_ETP2, "stack": stack}), "--format", "json")
    assert code == 2 and "moe.grouped_gemm: te cannot build gpt-oss-120b's expert biases" in err
    assert len(err.strip().splitlines()) == 1


def test_enumerated_gpt_oss_layouts_keep_etp_1(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    job = {**GPT_OSS_ETP2, "parallel": {"pp": 1, "vp": 1, "cp": 1, "ep": 8, "mbs": 1, "recompute": "full",
                                        "sharding": "dist_opt"}}
    code, out, _ = run_cli("enumerate", write_job(job), "--format", "jsonl")
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and rows and {r["parallel"]["etp"] for r in rows} == {1}
    assert {r["parallel"]["tp"] for r in rows} > {1}  # TP > 1 stays legal: only the experts keep TP 1


def test_before_folding_the_experts_take_the_dense_tp(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    code, doc = _fit(run_cli, write_job, {**MIXTRAL_OLD, "parallel": {**MIXTRAL_OLD["parallel"], "etp": 1}})
    assert code == 1 and "no-moe-folding-before-core-0.10" in doc["violated_rules"]


def test_before_folding_ep_must_divide_the_data_parallel_ranks(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # 64 GPUs at TP 8 and CP 2: DP 4, which EP 8 does not divide (folding alone would take it: ETP 8 x EP 8 = 64)
    job = {**MIXTRAL_OLD, "parallel": {**MIXTRAL_OLD["parallel"], "cp": 2}}
    code, doc = _fit(run_cli, write_job, job)
    assert code == 1 and "no-moe-folding-before-core-0.10" in doc["violated_rules"]


def test_the_old_release_line_states_the_expert_width_as_ffn_hidden_size(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # core_v0.8.0 examples/mixtral/train_mixtral_8x7b_distributed.sh: --ffn-hidden-size 14336 --num-experts 8
    code, doc = _fit(run_cli, write_job, MIXTRAL_OLD)
    assert code == 0 and doc["fits"]
    code, out, err = run_cli("export", write_job(MIXTRAL_OLD), "--to", "megatron")
    assert code == 0, err
    words = out.split()
    assert words[words.index("--ffn-hidden-size") + 1] == "14336"
    assert "--moe-ffn-hidden-size" not in words and "--expert-tensor-parallel-size" not in words
