"""Megatron-Core's `--recompute-modules`: what each module's selective recompute frees, and what it costs.

Sources: megatron/core/transformer/transformer_config.py (`recompute_modules`), multi_latent_attention.py
(`qkv_up_checkpoint`), transformer_layer.py (layernorm recompute only for norms that are modules of their
own), moe/experts.py (`activation_checkpoint`), NVIDIA/Megatron-LM d98e8a6. Every figure below is
computed from the published model dimensions, not read back from the ledger.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus.catalog.models import resolve_model
from primus.job import job_from_mapping
from primus.memory.activations import ActContext, layer_bytes
from primus.memory.evaluate import MemoryModel, pinned_layout
from primus.memory.numerics import numerics_for
from primus.memory.recompute import DEFAULT_SELECTIVE
from primus.memory.units import act_units
from primus.parallel import Layout
from primus.projection import Projector
from primus.projection.timer import MemoryCall

BF16 = 2
FP32 = 4


def ctx(seq: int = 4096, mbs: int = 1, modules: frozenset[str] = DEFAULT_SELECTIVE) -> ActContext:
    return ActContext(seq_len=seq, mbs=mbs, tp=1, cp=1, sp=False, etp=1, numerics=numerics_for("bf16", None),
                      recompute_modules=modules)


def freed(model: str, kind: str, modules: set[str], seq: int = 4096, mbs: int = 1) -> int:
    spec = resolve_model(model, "test")
    c = ctx(seq, mbs, frozenset(modules))
    return layer_bytes(spec, kind, c, "none") - layer_bytes(spec, kind, c, "selective")


def test_mla_up_proj_frees_query_key_value_and_the_fused_latent_norms() -> None:
    # DeepSeek-V3: 128 heads, qk 128 + rope 64, v 128, q_lora 1536, kv_lora 512; 4096 tokens, bf16.
    # q and k are 128 x 192 per token, v 128 x 128; each latent norm frees its output and rsigma.
    T = 4096
    qkv = T * 128 * 192 * BF16 * 2 + T * 128 * 128 * BF16
    norms = T * 1536 * BF16 + T * FP32 + T * 512 * BF16 + T * FP32
    assert freed("deepseek-v3", "moe", {"mla_up_proj"}) == qkv + norms == 553_680_896


#: gpt-oss clamps its GLU at 7: Megatron-Core keeps the clamped, concatenated 2 x 2880-wide copy of the FC1
#: output for its fused GLU (core_v0.16.0 fused_bias_geglu.py lines 424-432), inside the moe_act region
CLAMPED_FC1 = 2 * 2880


def test_moe_act_frees_the_experts_activation_output() -> None:
    # gpt-oss-120b: top-4 of 128 experts, expert FFN 2880; 4 x 4096 tokens make 65,536 routed copies
    copies = 4 * 4096 * 4
    assert freed("gpt-oss-120b", "moe", {"moe_act"}, mbs=4) == copies * (2880 + CLAMPED_FC1) * BF16 == 1_132_462_080


def test_layernorm_frees_only_norms_that_are_modules_of_their_own() -> None:
    # standard attention fuses input_layernorm into the QKV linear (an IdentityOp: nothing to
    # recompute); the MoE layer's pre_mlp_layernorm is its own module: its output and rsigma go
    T = 4 * 4096
    assert freed("gpt-oss-120b", "moe", {"layernorm"}, mbs=4) == T * 2880 * BF16 + T * FP32
    # MLA keeps its input norm as a module: DeepSeek-V3 frees the input and pre-MLP norms' outputs
    t = 4096
    assert freed("deepseek-v3", "moe", {"layernorm"}) == 2 * (t * 7168 * BF16 + t * FP32)


def test_mlp_recomputes_a_dense_mlp_and_leaves_moe_layers_alone() -> None:
    # Llama 3 8B: FFN 14336 (SwiGLU FC1 is 2 x 14336 wide), hidden 4096; FC1 fuses the pre-MLP norm
    T = 4096
    dense = T * 2 * 14336 * BF16 + T * 14336 * BF16 + T * 4096 * BF16 + T * FP32
    assert freed("llama3-8b", "dense", {"mlp"}) == dense
    assert freed("gpt-oss-120b", "moe", {"mlp"}) == 0


def test_megatron_default_is_core_attention_and_an_explicit_list_replaces_it() -> None:
    # with flash attention core_attn frees the fp32 log-sum-exp per head and token (64 heads)
    assert freed("gpt-oss-120b", "moe", {"core_attn"}) == 4096 * 64 * FP32
    assert freed("gpt-oss-120b", "moe", {"moe_act"}) == 4096 * 4 * (2880 + CLAMPED_FC1) * BF16  # no log-sum-exp


def test_selective_recompute_rebuilds_one_layers_dropped_tensors_in_backward() -> None:
    spec = resolve_model("gpt-oss-120b", "test")
    c = ctx(mbs=4, modules=frozenset({"moe_act", "layernorm"}))
    plain = act_units(spec, c, "none", spec.padded_vocab_size(1))
    sel = act_units(spec, c, "selective", spec.padded_vocab_size(1))
    dropped = plain.moe - sel.moe
    assert dropped == freed("gpt-oss-120b", "moe", {"moe_act", "layernorm"}, mbs=4)
    assert sel.work_moe == plain.work_moe + dropped


GPT_OSS_B200 = {"stack": "megatron-bridge@25.11", "model": "gpt-oss-120b", "hardware": "b200", "gpus": 64,
                "seq_len": 4096, "global_batch_size": 512, "precision": "bf16",
                "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": 8, "etp": 1, "mbs": 4, "sp": False,
                             "recompute": "selective", "sharding": "dist_opt",
                             "recompute_modules": ["layernorm", "moe_act"]}}


def test_the_ledger_reads_the_jobs_modules() -> None:
    # Megatron-Bridge 25.11's GPT-OSS 120B B200 run: 36 layers, one microbatch in flight (PP 1); the
    # preset's layernorm + moe_act recompute frees 36 x 1.1 GiB against no recompute
    job = job_from_mapping(GPT_OSS_B200, "test")
    layout = pinned_layout(job)
    with_modules = MemoryModel(job).evaluate(layout).peak_bytes
    none = MemoryModel(job).evaluate(replace(layout, recompute="none")).peak_bytes
    per_layer = 4 * 4096 * 4 * (2880 + CLAMPED_FC1) * BF16 + 4 * 4096 * (2880 * BF16 + FP32)
    # the preset runs Transformer Engine's cross-entropy, in place on the logits; its peak is the loss backward
    # (the bf16 logits over 201,088 entries outweigh a layer's rebuilt tensors and working set), before any
    # layer rebuilds what the modules freed: all 36 layers' worth (primus.memory.ledger.backward_moments)
    assert none - with_modules == 36 * per_layer == 44_168_380_416


def test_the_projection_reruns_the_modules_forward_in_backward() -> None:
    job = job_from_mapping(GPT_OSS_B200, "test")
    layout: Layout = pinned_layout(job)
    p = Projector(job)
    ctx_ = p.context(layout)
    cost = p.block_cost("moe", layout, ctx_, p.groups(layout))
    block = p.block("moe", ctx_)
    tagged = [op for op in block.memops if op.module in ("layernorm", "moe_act")]
    assert sorted(op.name for op in tagged) == ["mlp.experts.activation", "mlp.experts.activation_clamp",
                                                "pre_mlp_layernorm"]
    expected = sum(p.timer.memory(MemoryCall(op.fwd_bytes))[0] for op in tagged)
    # re-running the clamped GLU re-runs its blocking host-to-device copy too (fused_bias_geglu.py line 434):
    # one more host round trip, host.moe_layer_us
    sync = float(p.profile.host.moe_layer_us.value) * 1e-6 * sum(op.host_syncs for op in tagged)
    assert sum(op.host_syncs for op in tagged) == 1
    assert cost.selective == pytest.approx(expected + sync, rel=1e-12)
    plain = Projector(job_from_mapping({**GPT_OSS_B200, "parallel": {**GPT_OSS_B200["parallel"],
                                                                      "recompute_modules": None}}, "t"))
    core = plain.block_cost("moe", layout, plain.context(layout), plain.groups(layout)).selective
    assert core > 0 and core != expected  # the default re-runs the core attention instead


def test_export_writes_the_modules_megatron_reads_and_torchtitan_refuses_them(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # written for Megatron-Bridge 26.06's Megatron-LM, core_v0.18.0 (25.09's, core_v0.14.0, has no --softmax-type
    # or --window-size for gpt-oss's sinks and window: core_v0.15.0 added them)
    path = write_job({**GPT_OSS_B200, "stack": "megatron-bridge@26.06"})
    code, out, _ = run_cli("export", path, "--to", "megatron")
    assert code == 0 and "--recompute-modules layernorm moe_act" in out
    llama = {"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 8192, "global_batch_size": 32,
             "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "sp": False, "recompute": "selective",
                          "sharding": "fsdp", "recompute_modules": ["mlp"]}}
    code, out, err = run_cli("export", write_job(llama, "llama.yaml"), "--to", "torchtitan")
    assert code == 2 and out == "" and "recompute_modules" in err and len(err.strip().splitlines()) == 1
