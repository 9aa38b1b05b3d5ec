"""TP above the key/value heads: Megatron-LM from core_v0.16.0 runs it, earlier releases and other frameworks
refuse it (NVIDIA/Megatron-LM f7dfb99795, "Support TP greater than num_kv_heads by supporting QKV activation
sub-sharding (#2565)"; transformer_config.py: "num_query_groups must be a multiple or divisor of
tensor_model_parallel_size").

Qwen3-30B-A3B has 32 query heads in 4 groups (Qwen/Qwen3-30B-A3B config.json: num_attention_heads 32,
num_key_value_heads 4, head_dim 128, hidden_size 2048), so TP 8 puts half a key/value head on a rank."""

from __future__ import annotations

import json
from typing import Any

import pytest

from primus.projection.ops import layer_block
from primus.stacks.core import resolve_stack
from primus.stacks.megatron_release import KV_SUBSHARDING_FROM, splits_kv_heads
from tests.test_projection_ops import ctx, model

QWEN_TP8: dict[str, Any] = {
    "model": "qwen3-30b-a3b", "hardware": "h100-80gb", "gpus": 8, "precision": "bf16", "seq_len": 4096,
    "global_batch_size": 64, "parallel": {"tp": 8, "pp": 1, "cp": 1, "ep": 8, "etp": 1, "mbs": 1}}


def _fit(run_cli, write_job, stack: str) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("fit", write_job({**QWEN_TP8, "stack": stack}), "--format", "json")
    doc: dict[str, Any] = json.loads(out)
    assert code == (0 if doc["fits"] else 1)
    return doc


@pytest.mark.parametrize("stack", ["megatron-lm@core_v0.16.0", "megatron-lm@core_v0.19.0", "megatron-lm",
                                   "megatron-bridge@26.02", "primus"])
def test_tp_above_the_key_value_heads_is_legal_from_core_v0_16_0(run_cli, write_job, stack: str) -> None:  # type: ignore[no-untyped-def]
    # Megatron-Bridge v0.3.0 (NeMo 26.02) pins NVIDIA/Megatron-LM b0cc2706dd, first tagged core_v0.16.0; AMD
    # Primus fd1eeab pins d3528a2, first tagged core_v0.17.0
    doc = _fit(run_cli, write_job, stack)
    assert "query-groups-divisible" not in doc["violated_rules"]


@pytest.mark.parametrize("stack", ["megatron-lm@core_v0.15.3", "megatron-bridge@25.11", "nemo", "torchtitan",
                                   "megatron-deepspeed"])
def test_tp_above_the_key_value_heads_is_refused_before_it(run_cli, write_job, stack: str) -> None:  # type: ignore[no-untyped-def]
    # core_v0.15.3 (2026-02-06, its release branch) still raises "must be a multiple of
    # tensor_model_parallel_size"; Megatron-Bridge v0.2.0 (25.11) pins 0d8e0714cd, before f7dfb99795
    doc = _fit(run_cli, write_job, stack)
    assert not doc["fits"] and "query-groups-divisible" in doc["violated_rules"]


def test_a_stack_runs_sub_sharding_only_with_a_megatron_lm_that_has_it() -> None:
    assert KV_SUBSHARDING_FROM == "core_v0.16.0"
    assert splits_kv_heads(resolve_stack("megatron-bridge@26.04"))
    assert not splits_kv_heads(resolve_stack("megatron-lm@core_v0.15.3"))
    assert not splits_kv_heads(resolve_stack("megatron-lm@2022.05"))  # older than every release primus read
    assert not splits_kv_heads(resolve_stack("maxtext"))  # runs no Megatron-LM


def test_tp_16_over_8_key_value_heads_is_legal_in_one_nvl72_domain(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # Llama 3.1 70B: 8 key/value heads (meta-llama/Llama-3.1-70B config.json num_key_value_heads 8); TP 16 is a
    # multiple of them, which transformer_config.py accepts from core_v0.16.0
    m = model("llama3.1-70b")
    assert m.query_groups == 8
    job = {"model": "llama3.1-70b", "hardware": "gb200", "gpus": 16, "precision": "bf16", "seq_len": 8192,
           "global_batch_size": 64, "stack": "megatron-lm@core_v0.16.0",
           "parallel": {"tp": 16, "pp": 1, "cp": 1, "mbs": 1}}
    out = run_cli("fit", write_job(job), "--format", "json")[1]
    assert "query-groups-divisible" not in json.loads(out)["violated_rules"]


def test_the_qkv_activations_are_all_gathered_over_tp() -> None:
    # attention.py get_query_key_value_tensors: linear_qkv keeps (32 + 2 x 4) x 128 / 8 = 640 output features per
    # rank; all_gather_last_dim_from_tensor_parallel_region gathers the 5120 of every token (bf16) and its
    # backward reduce-scatters the gradient; the rank keeps one key/value head and 32 / 8 = 4 query heads
    m = model("qwen3-30b-a3b")
    c = ctx(m, tp=8, sp=True, ep=8, etp=1)
    block = layer_block(m, "moe", c)
    qkv = next(g for g in block.gemms if g.name == "attention.linear_qkv")
    assert qkv.n == 640
    gathered = [x for x in block.comms if x.overlap == "none" and x.group == "tp"]
    tokens = c.T
    assert [(x.kind, x.nbytes, x.fwd, x.bwd) for x in gathered] == [
        ("all_gather", tokens * 5120 * 2, 1, 0), ("reduce_scatter", tokens * 5120 * 2, 0, 1)]


def test_tp_within_the_key_value_heads_gathers_nothing_extra() -> None:
    m = model("qwen3-30b-a3b")
    block = layer_block(m, "moe", ctx(m, tp=4, sp=True, ep=8, etp=1))
    assert not [x for x in block.comms if x.overlap == "none" and x.group == "tp"]
    assert next(g for g in block.gemms if g.name == "attention.linear_qkv").n == (8 + 2) * 128


def _odd_head_job(stack: str) -> dict[str, Any]:
    # 8 query heads of width 66 in one group: linear_qkv is (8 + 2 x 1) x 66 = 660 wide, which TP 8 does not
    # divide although it divides the heads and is a multiple of the one group
    return {"model": {"base": "llama3.1-8b", "num_layers": 2, "hidden_size": 528, "num_attention_heads": 8,
                      "num_query_groups": 1, "kv_channels": 66, "ffn_hidden_size": 1408},
            "hardware": "h100-80gb", "gpus": 8, "precision": "bf16", "seq_len": 4096, "global_batch_size": 8,
            "stack": stack, "parallel": {"tp": 8, "pp": 1, "cp": 1, "mbs": 1}}


def test_a_qkv_projection_tp_does_not_divide_is_refused(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # ColumnParallelLinear divide(output_size, tp) (Megatron-Core tensor_parallel/layers.py) raises for 660 / 8
    code, out, _ = run_cli("fit", write_job(_odd_head_job("megatron-lm@core_v0.16.0")), "--format", "json")
    doc = json.loads(out)
    assert code == 1 and "qkv-projection-divisible" in doc["violated_rules"]


def test_a_qkv_projection_tp_divides_is_legal_with_the_same_heads(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    job = _odd_head_job("megatron-lm@core_v0.16.0")
    job["model"] = {**job["model"], "kv_channels": 64, "hidden_size": 512}  # (8 + 2) x 64 = 640 = 8 x 80
    code, out, _ = run_cli("fit", write_job(job), "--format", "json")
    assert code == 0 and json.loads(out)["violated_rules"] == []
