"""Read a Hugging Face `config.json` into a `ModelSpec`, without `transformers`.

Users have HF configs for whatever they train, so any `.json` model path is read as one, recognised by
`model_type` (or `architectures`). The structural dimensions are required; only keys that the family's
configuration class documents a default for (`num_key_value_heads`, `head_dim`, `tie_word_embeddings`,
biases, ...) may be absent, and then take that class default, named in the model's `notes`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any

from primus.errors import InputError
from primus.specs.base import parse_spec
from primus.specs.model import ModelSpec

REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")

_ARCH_TO_TYPE = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss",
}


class _Reader:
    """Typed access to the config with one-line errors and a record of class defaults used."""

    def __init__(self, data: Mapping[str, Any], where: str, family: str) -> None:
        self.data = data
        self.where = where
        self.family = family
        self.defaults_used: list[str] = []

    def req_int(self, key: str) -> int:
        if key not in self.data or self.data[key] is None:
            raise InputError(self.where, key, f"required for a {self.family} config and missing")
        return self._as_int(key, self.data[key])

    def opt_int(self, key: str, default: int | None) -> int | None:
        value = self.data.get(key)
        if value is None:
            if default is not None:
                self.defaults_used.append(f"{key}={default}")
            return default
        return self._as_int(key, value)

    def opt_bool(self, key: str, default: bool) -> bool:
        value = self.data.get(key)
        if value is None:
            self.defaults_used.append(f"{key}={default}")
            return default
        if not isinstance(value, bool):
            raise InputError(self.where, key, f"must be true or false (got {value!r})")
        return value

    def _as_int(self, key: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0 or value > 10**9:
            raise InputError(self.where, key, f"must be a non-negative integer (got {value!r})")
        return value


def _dropout(r: _Reader, key: str) -> float:
    value = r.data.get(key, 0.0)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise InputError(r.where, key, f"must be a probability between 0 and 1 (got {value!r})")
    return float(value)


def _family(data: Mapping[str, Any], where: str) -> str:
    """The reader family: a known model_type, else a known architecture (Kimi K2 ships model_type
    "kimi_k2" with DeepseekV3ForCausalLM), else the unknown model_type so the refusal names it."""
    model_type = data.get("model_type")
    if isinstance(model_type, str) and model_type in _FAMILIES:
        return model_type
    archs = data.get("architectures")
    if isinstance(archs, list):
        for arch in archs:
            if isinstance(arch, str) and arch in _ARCH_TO_TYPE:
                return _ARCH_TO_TYPE[arch]
    if isinstance(model_type, str) and model_type:
        return model_type
    raise InputError(where, "model_type", "cannot tell the architecture (no model_type, no known architectures)")


def _common(r: _Reader, *, kv_default: int | None, tie_default: bool = False,
            head_dim_default: int | None = None) -> dict[str, Any]:
    heads = r.req_int("num_attention_heads")
    hidden = r.req_int("hidden_size")
    out: dict[str, Any] = {
        "num_layers": r.req_int("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "vocab_size": r.req_int("vocab_size"),
        "position_embedding_type": "rope",
        "normalization": "RMSNorm",
        "swiglu": True,
        "add_bias_linear": False,
        "untie_embeddings_and_output_weights": not r.opt_bool("tie_word_embeddings", tie_default),
        # HF decoder configs train without hidden dropout; attention dropout is the config's own field
        "hidden_dropout": 0.0,
        "attention_dropout": _dropout(r, "attention_dropout"),
    }
    kv = r.opt_int("num_key_value_heads", kv_default if kv_default is not None else heads)
    out["num_query_groups"] = kv
    head_dim = r.data.get("head_dim")
    if head_dim is not None:
        out["kv_channels"] = r._as_int("head_dim", head_dim)
    elif head_dim_default is not None:
        out["kv_channels"] = r.opt_int("head_dim", head_dim_default)
    elif hidden % heads:
        raise InputError(r.where, "hidden_size",
                         f"{hidden} is not divisible by num_attention_heads {heads} and no head_dim is given")
    max_pos = r.data.get("max_position_embeddings")
    if max_pos is not None:
        out["max_position_embeddings"] = r._as_int("max_position_embeddings", max_pos)
    return out


def _llama(r: _Reader) -> dict[str, Any]:
    out = _common(r, kv_default=None)
    out["ffn_hidden_size"] = r.req_int("intermediate_size")
    attn_bias = r.opt_bool("attention_bias", False)
    mlp_bias = r.opt_bool("mlp_bias", False)
    if attn_bias != mlp_bias:
        raise InputError(r.where, "attention_bias",
                         "attention_bias without mlp_bias (or the reverse) has no Megatron equivalent")
    out["add_bias_linear"] = attn_bias
    return out


def _mistral(r: _Reader) -> dict[str, Any]:
    out = _common(r, kv_default=8)
    out["ffn_hidden_size"] = r.req_int("intermediate_size")
    window = r.data.get("sliding_window")
    if window is not None:
        out["window_size"] = r._as_int("sliding_window", window)
    return out


def _mixtral(r: _Reader) -> dict[str, Any]:
    out = _mistral(r)
    ffn = out.pop("ffn_hidden_size")
    out["num_experts"] = r.opt_int("num_local_experts", 8)
    out["moe_router_topk"] = r.opt_int("num_experts_per_tok", 2)
    out["moe_ffn_hidden_size"] = ffn
    return out


def _qwen2(r: _Reader) -> dict[str, Any]:
    out = _common(r, kv_default=32)
    out["ffn_hidden_size"] = r.req_int("intermediate_size")
    out["add_qkv_bias"] = True  # Qwen2 attention always has q/k/v biases
    if r.data.get("use_sliding_window"):
        raise InputError(r.where, "use_sliding_window", "per-layer sliding windows of Qwen2 are not supported")
    return out


def _qwen3(r: _Reader) -> dict[str, Any]:
    out = _common(r, kv_default=8, head_dim_default=128)
    out["ffn_hidden_size"] = r.req_int("intermediate_size")
    out["qk_layernorm"] = True  # Qwen3 normalises q and k per head
    out["add_qkv_bias"] = r.opt_bool("attention_bias", False)
    if r.data.get("use_sliding_window"):
        raise InputError(r.where, "use_sliding_window", "per-layer sliding windows of Qwen3 are not supported")
    return out


def _qwen3_moe(r: _Reader) -> dict[str, Any]:
    out = _qwen3_base_moe(r)
    return out


def _qwen3_base_moe(r: _Reader) -> dict[str, Any]:
    out = _common(r, kv_default=4, head_dim_default=128)
    out["qk_layernorm"] = True
    out["add_qkv_bias"] = r.opt_bool("attention_bias", False)
    layers = out["num_layers"]
    out["num_experts"] = r.opt_int("num_experts", 128)
    out["moe_router_topk"] = r.opt_int("num_experts_per_tok", 8)
    out["moe_ffn_hidden_size"] = r.req_int("moe_intermediate_size")
    step = r.opt_int("decoder_sparse_step", 1) or 1
    mlp_only = r.data.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list) or any(not isinstance(i, int) or isinstance(i, bool) for i in mlp_only):
        raise InputError(r.where, "mlp_only_layers", "must be a list of layer indices")
    pattern = [0 if (i in mlp_only or (i + 1) % step) else 1 for i in range(layers)]
    out["moe_layer_freq"] = pattern
    if 0 in pattern:
        out["ffn_hidden_size"] = r.req_int("intermediate_size")
    return out


def _explicit_null(r: _Reader, key: str) -> bool:
    return key in r.data and r.data[key] is None


def _deepseek_v3(r: _Reader) -> dict[str, Any]:
    out = _common(r, kv_default=None)
    out.pop("num_query_groups", None)
    out.pop("kv_channels", None)
    layers = out["num_layers"]
    first_dense = r.opt_int("first_k_dense_replace", 3) or 0
    freq = r.opt_int("moe_layer_freq", 1) or 1
    pattern = [1 if (i >= first_dense and i % freq == 0) else 0 for i in range(layers)]
    out["moe_layer_freq"] = pattern
    if 0 in pattern:
        out["ffn_hidden_size"] = r.req_int("intermediate_size")
    out["num_experts"] = r.opt_int("n_routed_experts", 256)
    out["moe_router_topk"] = r.opt_int("num_experts_per_tok", 8)
    out["moe_ffn_hidden_size"] = r.req_int("moe_intermediate_size")
    shared = 0 if _explicit_null(r, "n_shared_experts") else (r.opt_int("n_shared_experts", 1) or 0)
    if shared:
        out["moe_shared_expert_intermediate_size"] = shared * out["moe_ffn_hidden_size"]
    out["multi_latent_attention"] = True
    # an explicit null means no query compression (DeepSeek-V2-Lite, Moonlight), not the class default
    out["q_lora_rank"] = None if _explicit_null(r, "q_lora_rank") else r.opt_int("q_lora_rank", 1536)
    out["kv_lora_rank"] = r.opt_int("kv_lora_rank", 512)
    out["qk_head_dim"] = r.opt_int("qk_nope_head_dim", 128)
    out["qk_pos_emb_head_dim"] = r.opt_int("qk_rope_head_dim", 64)
    out["v_head_dim"] = r.opt_int("v_head_dim", 128)
    out["mtp_num_layers"] = r.opt_int("num_nextn_predict_layers", 0) or 0
    return out


def _gpt_oss(r: _Reader) -> dict[str, Any]:
    out = _common(r, kv_default=8, head_dim_default=64)
    out["add_bias_linear"] = True  # q/k/v/o, router and expert projections all carry biases
    out["moe_router_bias"] = True
    out["softmax_type"] = "learnable"  # attention sinks: one learned logit per head
    out["num_experts"] = r.opt_int("num_local_experts", 128)
    out["moe_router_topk"] = r.opt_int("num_experts_per_tok", None) or r.opt_int("experts_per_token", 4)
    out["moe_ffn_hidden_size"] = r.req_int("intermediate_size")
    window = r.opt_int("sliding_window", 128)
    types = r.data.get("layer_types")
    if types is not None:
        expected = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(out["num_layers"])]
        if types != expected:
            raise InputError(r.where, "layer_types", "only alternating sliding/full attention is supported")
    out["window_size"] = window
    out["window_attn_skip_freq"] = 2
    return out


_FAMILIES: dict[str, Callable[[_Reader], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "qwen2": _qwen2,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "deepseek_v3": _deepseek_v3,
    "gpt_oss": _gpt_oss,
}


def supported_families() -> list[str]:
    return sorted(_FAMILIES)


def _name(data: Mapping[str, Any], where: str) -> str:
    given = data.get("_name_or_path")
    if isinstance(given, str) and given.strip():
        return PurePath(given.strip()).name[:100] or "hf-model"
    path = PurePath(where)
    stem = path.parent.name if path.stem == "config" and path.parent.name else path.stem
    return (stem or "hf-model")[:100]


def model_from_hf_config(data: Mapping[str, Any], where: str) -> ModelSpec:
    family = _family(data, where)
    reader_fn = _FAMILIES.get(family)
    if reader_fn is None:
        raise InputError(where, "model_type",
                         f"unsupported architecture {family!r}; supported: {', '.join(supported_families())}")
    reader = _Reader(data, where, family)
    fields = reader_fn(reader)
    fields["name"] = _name(data, where)
    fields["source"] = f"Hugging Face config ({family}) read from {where}"
    if reader.defaults_used:
        fields["notes"] = f"{family} class defaults used: " + ", ".join(reader.defaults_used)
    return parse_spec(ModelSpec, fields, where)
