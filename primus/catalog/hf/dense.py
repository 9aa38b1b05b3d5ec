"""Dense decoder families: Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 2, Gemma 3, OLMo 2.

Each reader maps one `transformers` configuration class onto Megatron's names, with that class's
defaults for absent keys (cited by class; `transformers` 5.x).
"""

from __future__ import annotations

import math
from typing import Any

from primus.catalog.hf.reader import Reader, attention_bias, common, gated_mlp, layer_step, window_every


def llama(r: Reader) -> dict[str, Any]:
    out = common(r, kv_default=None)
    out["ffn_hidden_size"] = r.req_int("intermediate_size")
    attn_bias = r.opt_bool("attention_bias", False)
    mlp_bias = r.opt_bool("mlp_bias", False)
    if attn_bias != mlp_bias:
        raise r.error("attention_bias", "attention_bias without mlp_bias (or the reverse) has no Megatron equivalent")
    out["add_bias_linear"] = attn_bias
    return out


def mistral(r: Reader) -> dict[str, Any]:
    """MistralConfig: `sliding_window: int | None = 4096` (transformers models/mistral/configuration_mistral.py):
    a config without the key has the class's 4,096-token window (Mistral 7B v0.1 states it), an explicit null
    has none (v0.2 and v0.3 state null)."""
    out = common(r, kv_default=8)
    out["ffn_hidden_size"] = r.req_int("intermediate_size")
    if "sliding_window" not in r.data:
        r.read.append("sliding_window")
        r.defaults_used.append("sliding_window=4096")
        out["window_size"] = 4096
    elif r.data["sliding_window"] is not None:
        out["window_size"] = r.as_int("sliding_window", r.data["sliding_window"])
    return out


def qwen2(r: Reader) -> dict[str, Any]:
    out = common(r, kv_default=32, kv_null_is_heads=True)
    out["ffn_hidden_size"] = r.req_int("intermediate_size")
    out["add_qkv_bias"] = True  # Qwen2 attention always has q/k/v biases
    if r.data.get("use_sliding_window"):
        raise r.error("use_sliding_window", "per-layer sliding windows of Qwen2 are not supported")
    return out


def qwen3(r: Reader) -> dict[str, Any]:
    """Qwen3Config: num_key_value_heads defaults to 32 and head_dim to 128 (transformers
    models/qwen3/configuration_qwen3.py: `num_key_value_heads: int | None = 32`, `head_dim: int = 128`)."""
    out = common(r, kv_default=32, head_dim_default=128, kv_null_is_heads=True)
    out["ffn_hidden_size"] = r.req_int("intermediate_size")
    out["qk_layernorm"] = True  # Qwen3 normalises q and k per head
    attention_bias(r, out)  # q, k, v and o_proj (modeling_qwen3.py: o_proj bias=config.attention_bias)
    if r.data.get("use_sliding_window"):
        raise r.error("use_sliding_window", "per-layer sliding windows of Qwen3 are not supported")
    return out


def phi3(r: Reader) -> dict[str, Any]:
    """Phi3Config (Phi-3, Phi-3.5-mini, Phi-4-mini): fused qkv and gate/up projections without biases
    (the same weights as separate ones); `sliding_window` applies to every layer; partial rotary
    (Phi-4-mini) has no parameters."""
    out = common(r, kv_default=None, vocab_default=32064)
    out["ffn_hidden_size"] = r.req_int("intermediate_size")
    gated_mlp(r, "hidden_act", "silu")
    window = r.opt_int("sliding_window", None)
    window_every(r, out, window, None, None)
    return out


def _gemma_scalings(r: Reader, out: dict[str, Any], softcap_defaults: tuple[float | None, float | None]) -> None:
    """Gemma's constants: the sqrt(hidden) embedding scale, the query scale 1/sqrt(query_pre_attn_scalar)
    and the attention and final-logit soft-caps (cap · tanh(x / cap)); none has parameters."""
    r.scalings["embedding_multiplier"] = math.sqrt(out["hidden_size"])
    r.record("query_pre_attn_scalar", 256)
    attn_cap, final_cap = softcap_defaults
    if not r.explicit_null("attn_logit_softcapping"):
        r.record("attn_logit_softcapping", attn_cap)
    if not r.explicit_null("final_logit_softcapping"):
        r.record("final_logit_softcapping", final_cap)


def gemma2(r: Reader) -> dict[str, Any]:
    """Gemma2Config: head_dim 256 by default (not hidden / heads), sandwich norms (four per layer),
    GeGLU, tied embeddings, sliding windows of 4096 on every other layer (layer 0 sliding), attention
    logits soft-capped at 50 and final logits at 30."""
    out = common(r, kv_default=4, tie_default=True, head_dim_default=256, vocab_default=256000, heads_default=8)
    out["ffn_hidden_size"] = r.req_int("intermediate_size")
    out["norm_placement"] = "sandwich"
    attention_bias(r, out)
    gated_mlp(r, "hidden_activation", "gelu_pytorch_tanh")
    window_every(r, out, r.opt_int("sliding_window", 4096), 2, r.str_list("layer_types"))
    _gemma_scalings(r, out, (50.0, 30.0))
    return out


def gemma3_text(r: Reader) -> dict[str, Any]:
    """Gemma3TextConfig: as Gemma 2, plus per-head q/k RMSNorm, windows of 4096 by default on five of
    every six layers (`sliding_window_pattern`), no soft-capping unless the config sets it."""
    out = common(r, kv_default=4, tie_default=True, head_dim_default=256, vocab_default=262208, heads_default=8)
    out["ffn_hidden_size"] = r.req_int("intermediate_size")
    out["norm_placement"] = "sandwich"
    out["qk_layernorm"] = True
    attention_bias(r, out)
    gated_mlp(r, "hidden_activation", "gelu_pytorch_tanh")
    kinds = r.str_list("layer_types")  # when given, transformers builds the layers from it alone
    pattern = r.int_or("sliding_window_pattern", 6) if kinds is not None else layer_step(r, "sliding_window_pattern", 6)
    window_every(r, out, r.opt_int("sliding_window", 4096), pattern, kinds)
    _gemma_scalings(r, out, (None, None))
    return out


def olmo2(r: Reader) -> dict[str, Any]:
    """Olmo2Config: post-norm layers (RMSNorm on the attention and MLP outputs, none before them) and
    RMSNorm over the whole q and k projections (weights of heads × head_dim and kv_heads × head_dim)."""
    out = common(r, kv_default=None, vocab_default=50304)
    out["ffn_hidden_size"] = r.req_int("intermediate_size")
    out["norm_placement"] = "post"
    out["qk_layernorm"] = True
    out["qk_layernorm_per_head"] = False
    attention_bias(r, out)
    gated_mlp(r, "hidden_act", "silu")
    return out
