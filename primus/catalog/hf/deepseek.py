"""DeepSeek-style MoE: DeepSeek-V2 (V2, V2.5, V2-Lite), DeepSeek-V3 (and Kimi K2) and GLM-4.5 (glm4_moe).

All three keep the first `first_k_dense_replace` layers dense (an MLP of `intermediate_size`) and make
the rest MoE, with `n_routed_experts` routed experts of `moe_intermediate_size` and `n_shared_experts`
shared experts fused into one MLP of n_shared × moe_intermediate_size. DeepSeek uses multi-latent
attention (`q_lora_rank` null means no query compression: V2-Lite); GLM-4.5 uses GQA with q/k/v biases
and an optional per-head QK-norm. The MTP modules (`num_nextn_predict_layers`) are not part of the
`transformers` model nor of the published totals; they are recorded as `mtp_num_layers`.
"""

from __future__ import annotations

from typing import Any

from primus.catalog.hf.reader import Reader, common, gated_mlp, layer_step, rope_scaling_key, rope_type
from primus.specs.model import every_nth, moe_layer_pattern


def _dense_first(r: Reader, out: dict[str, Any], first_dense_default: int, experts_default: int,
                 shared_default: int, topk_default: int | None) -> None:
    layers = out["num_layers"]
    first_dense = r.int_or("first_k_dense_replace", first_dense_default)
    freq = layer_step(r, "moe_layer_freq", 1)
    # layer i is MoE when i >= first_dense and i % freq == 0: from the first multiple of freq on
    first_moe = -(-first_dense // freq) * freq
    out["moe_layer_freq"] = pattern = [int(moe) for moe in moe_layer_pattern(layers, first=first_moe,
                                                                             period=every_nth(freq))]
    if 0 in pattern:
        out["ffn_hidden_size"] = r.req_int("intermediate_size")
    out["num_experts"] = r.int_or("n_routed_experts", experts_default)
    out["moe_router_topk"] = r.req_int("num_experts_per_tok") if topk_default is None \
        else r.int_or("num_experts_per_tok", topk_default)
    out["moe_ffn_hidden_size"] = r.req_int("moe_intermediate_size")
    shared = 0 if r.explicit_null("n_shared_experts") else r.int_or("n_shared_experts", shared_default)
    if shared:
        out["moe_shared_expert_intermediate_size"] = shared * out["moe_ffn_hidden_size"]
    out["mtp_num_layers"] = r.int_or("num_nextn_predict_layers", 0)
    gated_mlp(r, "hidden_act", "silu")


def _mla(r: Reader, out: dict[str, Any], q_lora_default: int | None) -> None:
    out.pop("num_query_groups", None)
    out.pop("kv_channels", None)
    # MLA applies YaRN in its own rotary part: the provider stays 'rope' (Megatron-Bridge v0.6.0 model_bridge.py)
    out["position_embedding_type"] = "rope"
    out.pop("yarn_rotary_scaling_factor", None)
    out["multi_latent_attention"] = True
    # an explicit null means no query compression (DeepSeek-V2-Lite, Moonlight), not the class default
    out["q_lora_rank"] = None if r.explicit_null("q_lora_rank") else r.opt_int("q_lora_rank", q_lora_default)
    out["kv_lora_rank"] = r.int_or("kv_lora_rank", 512)
    out["qk_head_dim"] = r.int_or("qk_nope_head_dim", 128)
    out["qk_pos_emb_head_dim"] = r.int_or("qk_rope_head_dim", 64)
    out["v_head_dim"] = r.int_or("v_head_dim", 128)
    if r.opt_bool("attention_bias", False):
        raise r.error("attention_bias", "biases in multi-latent attention are not supported")
    _mla_yarn(r, out)


#: What Megatron-Core's MLATransformerConfig builds YaRN with beyond the factor and the two mscales, which
#: Megatron-LM's arguments do not set (core_v0.15.0 transformer_config.py: beta_fast 32, beta_slow 1,
#: original_max_position_embeddings 4096)
MEGATRON_MLA_YARN = {"beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 4096}


def _mla_yarn(r: Reader, out: dict[str, Any]) -> None:
    """HF rope_scaling type yarn of an MLA model (DeepSeek-V2/V3, Kimi-K2) as Megatron-LM's
    --rotary-scaling-factor, --mscale and --mscale-all-dim; what Megatron cannot state is noted."""
    key = rope_scaling_key(r)
    scaling = r.data.get(key)
    if not isinstance(scaling, dict) or rope_type(scaling) != "yarn":
        return
    sub = Reader(scaling, r.where, r.family, r.key(key))
    out["mla_rotary_scaling_factor"] = sub.opt_float("factor", None)
    out["mla_mscale"] = sub.opt_float("mscale", None)
    out["mla_mscale_all_dim"] = sub.opt_float("mscale_all_dim", None)
    others = [f"{k} {scaling[k]}" for k, v in MEGATRON_MLA_YARN.items() if k in scaling and scaling[k] != v]
    if others:
        r.notes.append(f"{key} yarn with {', '.join(others)}: Megatron-Core builds MLA's YaRN with beta_fast 32, "
                       "beta_slow 1 and 4,096 original positions, and Megatron-LM has no argument for them")


def deepseek_v2(r: Reader) -> dict[str, Any]:
    """DeepseekV2Config: no dense-first layers by default, 64 routed and 2 shared experts, q_lora_rank 1536
    unless the config says null (V2-Lite)."""
    out = common(r, kv_default=None)
    if r.opt_bool("mlp_bias", False):  # DeepseekV2MLP's gate, up and down projections (modeling_deepseek_v2.py)
        raise r.error("mlp_bias", "MLP biases without attention biases have no Megatron equivalent "
                                  "(add_bias_linear puts a bias on every linear layer)")
    _dense_first(r, out, 0, 64, 2, None)  # the class has no top-k default
    _mla(r, out, 1536)
    return out


def deepseek_v3(r: Reader) -> dict[str, Any]:
    """DeepseekV3Config: 3 dense-first layers, 256 routed and 1 shared expert, top-8 by default; the
    router's expert-score correction bias is a buffer, not a parameter."""
    out = common(r, kv_default=None)
    _dense_first(r, out, 3, 256, 1, 8)
    _mla(r, out, 1536)
    return out


def glm4_moe(r: Reader) -> dict[str, Any]:
    """Glm4MoeConfig (GLM-4.5, GLM-4.5-Air): GQA with `head_dim`, q/k/v biases when `attention_bias`
    (never on the output projection), per-head QK-norm when `use_qk_norm`; partial rotary has no
    parameters."""
    out = common(r, kv_default=8, vocab_default=151552)
    out["add_qkv_bias"] = r.opt_bool("attention_bias", False)
    out["qk_layernorm"] = r.opt_bool("use_qk_norm", False)
    _dense_first(r, out, 1, 128, 1, 8)
    return out
