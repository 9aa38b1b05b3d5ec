"""Mixture-of-experts families with standard attention: Mixtral, Qwen3-MoE, Qwen2-MoE, OLMoE, Granite
MoE, PhiMoE, gpt-oss and Llama 4 (text).

Routers are bias-free linear layers (h × experts) unless said; experts are gated MLPs whose width is
the family's expert width. Class defaults are `transformers` 5.x's.
"""

from __future__ import annotations

from typing import Any

from primus.catalog.hf.dense import mistral
from primus.catalog.hf.reader import (
    Reader,
    attention_bias,
    common,
    gated_mlp,
    layer_step,
    rope_scaling_key,
    rope_type,
    window_every,
)
from primus.errors import shown
from primus.specs.model import every_nth, moe_layer_pattern


def _experts(r: Reader, out: dict[str, Any], experts_key: str, experts_default: int, topk_default: int,
             width_key: str) -> None:
    out["num_experts"] = r.int_or(experts_key, experts_default)
    out["moe_router_topk"] = r.int_or("num_experts_per_tok", topk_default)
    out["moe_ffn_hidden_size"] = r.req_int(width_key)


def sparse_step_pattern(r: Reader, layers: int) -> list[int]:
    """Qwen's MoE layer rule: layer i is MoE unless listed in `mlp_only_layers` or (i + 1) is not a
    multiple of `decoder_sparse_step`."""
    step = layer_step(r, "decoder_sparse_step", 1)
    mlp_only = set(r.int_list("mlp_only_layers") or [])
    return [int(moe) for moe in moe_layer_pattern(layers, first=step - 1, period=every_nth(step), dense=mlp_only)]


def mixtral(r: Reader) -> dict[str, Any]:
    out = mistral(r)
    ffn = out.pop("ffn_hidden_size")
    out["num_experts"] = r.int_or("num_local_experts", 8)
    out["moe_router_topk"] = r.int_or("num_experts_per_tok", 2)
    out["moe_ffn_hidden_size"] = ffn
    return out


def qwen3_moe(r: Reader) -> dict[str, Any]:
    """Qwen3MoeConfig: num_key_value_heads defaults to 4, and it has no head_dim of its own: Qwen3MoeAttention
    takes `getattr(config, "head_dim", hidden_size // num_attention_heads)` (transformers
    models/qwen3_moe/modeling_qwen3_moe.py), so a config without one gets hidden / heads (published Qwen3-MoE
    configs state head_dim 128)."""
    out = common(r, kv_default=4)
    out["qk_layernorm"] = True
    attention_bias(r, out)  # q, k, v and o_proj (modeling_qwen3_moe.py: o_proj bias=config.attention_bias)
    if r.data.get("use_sliding_window"):
        raise r.error("use_sliding_window", "per-layer sliding windows of Qwen3-MoE are not supported")
    _experts(r, out, "num_experts", 128, 8, "moe_intermediate_size")
    out["moe_layer_freq"] = pattern = sparse_step_pattern(r, out["num_layers"])
    if 0 in pattern:
        out["ffn_hidden_size"] = r.req_int("intermediate_size")
    return out


def qwen2_moe(r: Reader) -> dict[str, Any]:
    """Qwen2MoeConfig (Qwen1.5-MoE, Qwen2-57B-A14B): q/k/v biases (`qkv_bias`, default true), routed
    experts of `moe_intermediate_size`, one shared expert of `shared_expert_intermediate_size` behind a
    sigmoid gate (`shared_expert_gate`, an h → 1 linear), MoE layers by `decoder_sparse_step`."""
    out = common(r, kv_default=16, vocab_default=151936)
    out["add_qkv_bias"] = r.opt_bool("qkv_bias", True)
    _experts(r, out, "num_experts", 60, 4, "moe_intermediate_size")
    out["moe_shared_expert_intermediate_size"] = r.req_int("shared_expert_intermediate_size")
    out["moe_shared_expert_gate"] = True
    out["moe_layer_freq"] = pattern = sparse_step_pattern(r, out["num_layers"])
    if 0 in pattern:
        out["ffn_hidden_size"] = r.req_int("intermediate_size")
    if r.data.get("use_sliding_window"):
        raise r.error("use_sliding_window", "per-layer sliding windows of Qwen2-MoE are not supported")
    gated_mlp(r, "hidden_act", "silu")
    return out


def olmoe(r: Reader) -> dict[str, Any]:
    """OlmoeConfig: 64 experts of `intermediate_size`, top-8, RMSNorm over the whole q and k projections
    (as OLMo 2, but with pre-norm layers); `clip_qkv` clamps q, k, v (no parameters)."""
    out = common(r, kv_default=None, vocab_default=50304)
    out["qk_layernorm"] = True
    out["qk_layernorm_per_head"] = False
    attention_bias(r, out)
    _experts(r, out, "num_experts", 64, 8, "intermediate_size")
    r.record("clip_qkv")
    gated_mlp(r, "hidden_act", "silu")
    return out


def granitemoe(r: Reader) -> dict[str, Any]:
    """GraniteMoeConfig (Granite 3.0/3.1 MoE): experts of `intermediate_size`; its four multipliers
    (embedding, residual, attention scale, logits divisor) are constants, recorded, not parameters."""
    out = common(r, kv_default=None, vocab_default=32000)
    attention_bias(r, out)
    _experts(r, out, "num_local_experts", 8, 2, "intermediate_size")
    for key in ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling"):
        r.record(key, 1.0)
    gated_mlp(r, "hidden_act", "silu")
    return out


def phimoe(r: Reader) -> dict[str, Any]:
    """PhimoeConfig (Phi-3.5-MoE): LayerNorm with biases, `attention_bias` on q, k, v and o, an optional
    bias on the output layer (`lm_head_bias`), 16 experts of `intermediate_size`, top-2, sliding windows
    on every layer when `sliding_window` is set."""
    out = common(r, kv_default=8, vocab_default=32064)
    out["normalization"] = "LayerNorm"
    attention_bias(r, out)
    out["output_layer_bias"] = r.opt_bool("lm_head_bias", False)
    _experts(r, out, "num_local_experts", 16, 2, "intermediate_size")
    window_every(r, out, r.opt_int("sliding_window", None), None, None)
    gated_mlp(r, "hidden_act", "silu")
    return out


def _gpt_oss_rope(r: Reader, out: dict[str, Any]) -> None:
    """gpt-oss's RoPE is YaRN-scaled (GptOssConfig's class default and openai/gpt-oss-120b's config.json:
    rope_type yarn, factor 32); an explicit null is plain RoPE, and another scaling is not gpt-oss's."""
    key = rope_scaling_key(r)
    if r.explicit_null(key):
        r.notes.append(f"{key}: null, so plain RoPE (no YaRN scaling)")
        return
    if key not in r.data:
        r.defaults_used.append(f"{key}={{rope_type: yarn, factor: 32}}")
        out.update(position_embedding_type="yarn", yarn_rotary_scaling_factor=32.0)
        return
    if out.get("position_embedding_type") != "yarn":
        scaling = r.data[key]
        kind = rope_type(scaling) if isinstance(scaling, dict) else None
        raise r.error(f"{key}.rope_type", f"gpt-oss uses YaRN RoPE (rope_type yarn), got {shown(kind)}")


def gpt_oss(r: Reader) -> dict[str, Any]:
    out = common(r, kv_default=8, head_dim_default=64)
    out["add_bias_linear"] = True  # q/k/v/o, router and expert projections all carry biases
    out["moe_router_bias"] = True
    out["softmax_type"] = "learnable"  # attention sinks: one learned logit per head
    out["num_experts"] = r.int_or("num_local_experts", 128)
    out["moe_router_topk"] = r.opt_int("num_experts_per_tok", None) or r.int_or("experts_per_token", 4)
    out["moe_ffn_hidden_size"] = r.req_int("intermediate_size")
    # GptOssExperts clamps the gate at `swiglu_limit` and the linear half at +-limit (HF default 7.0)
    out["activation_func_clamp_value"] = r.opt_float("swiglu_limit", 7.0)
    _gpt_oss_rope(r, out)
    window = r.int_or("sliding_window", 128)
    types = r.data.get("layer_types")
    if types is not None:
        expected = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(out["num_layers"])]
        if isinstance(types, list) and len(types) != len(expected):
            raise r.error("layer_types", f"has {len(types)} entries but num_hidden_layers is {len(expected)}")
        if types != expected:
            raise r.error("layer_types", "only alternating sliding/full attention is supported")
    out["window_size"] = window
    out["window_attn_skip_freq"] = 2
    return out


def llama4_text(r: Reader) -> dict[str, Any]:
    """Llama4TextConfig: MoE layers from `moe_layers` (else every `interleave_moe_layer_step`-th, from
    layer step − 1), each with `num_local_experts` routed experts and one shared expert, both of
    `intermediate_size`; dense layers of `intermediate_size_mlp`. Chunked attention (`attention_chunk_size`)
    on the RoPE layers and global NoPE attention on each `no_rope_layer_interval`-th layer: a chunk of
    C attends at most C keys, as a window of C does, so it is counted as that window. The QK-norm is a
    weightless L2 norm (no parameters)."""
    out = common(r, kv_default=8, head_dim_default=128, vocab_default=202048)
    attention_bias(r, out)
    layers = out["num_layers"]
    out["num_experts"] = r.int_or("num_local_experts", 16)
    out["moe_router_topk"] = r.int_or("num_experts_per_tok", 1)
    width = r.req_int("intermediate_size")
    out["moe_ffn_hidden_size"] = width
    out["moe_shared_expert_intermediate_size"] = width
    moe_layers = r.int_list("moe_layers")
    if moe_layers is None:
        step = layer_step(r, "interleave_moe_layer_step", 1)
        pattern = [int(moe) for moe in moe_layer_pattern(layers, first=step - 1, period=every_nth(step))]
    elif any(not 0 <= i < layers for i in moe_layers):
        raise r.error("moe_layers", f"layer indices must lie in 0..{layers - 1}")
    else:  # a list of layers, not a rule
        listed = set(moe_layers)
        pattern = [1 if i in listed else 0 for i in range(layers)]
    out["moe_layer_freq"] = pattern
    if 0 in pattern:
        out["ffn_hidden_size"] = r.req_int("intermediate_size_mlp")
    interval = r.int_or("no_rope_layer_interval", 4)
    no_rope = r.int_list("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(layers)]
    kinds = r.str_list("layer_types")
    key = "layer_types"
    chunk = None if r.explicit_null("attention_chunk_size") else r.opt_int("attention_chunk_size", 8192)
    if kinds is None:
        kinds = ["chunked_attention" if rope and chunk is not None else "full_attention" for rope in no_rope]
        key = "no_rope_layers"
    window_every(r, out, chunk, interval, kinds, ("chunked_attention",), key)
    if chunk is not None:
        r.notes.append(f"chunked attention (chunks of {chunk}) counted as a window of {chunk} keys")
    if r.opt_bool("use_qk_norm", True):
        r.notes.append("QK-norm is a weightless L2 norm (no parameters)")
    gated_mlp(r, "hidden_act", "silu")
    return out
