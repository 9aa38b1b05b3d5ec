"""Read a Hugging Face `config.json` into a `ModelSpec`, without `transformers`.

Users have HF configs for whatever they train, so any `.json` model path is read as one, recognised by
`model_type` (or `architectures`). Each family reader (`dense`, `moe`, `deepseek`) maps its
`transformers` configuration class onto Megatron's names; the parameter total of the spec equals the
count of `transformers`' own model built from the same config (tests/test_hf_families.py checks every
family against it). Multimodal configs (`gemma3`, `llama4`) are read through their `text_config`: the
decoder is what trains with a layout; the vision tower and projector are not counted, and the notes
say so. Constants without parameters (soft-caps, multipliers) are recorded in `scalings`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import PurePath
from typing import Any

from primus.catalog.hf import deepseek, dense, moe
from primus.catalog.hf.reader import Reader
from primus.errors import InputError
from primus.specs.base import parse_spec
from primus.specs.model import ModelSpec

_ARCH_TO_TYPE = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "MixtralForCausalLM": "mixtral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen2MoeForCausalLM": "qwen2_moe",
    "DeepseekV2ForCausalLM": "deepseek_v2",
    "DeepseekV3ForCausalLM": "deepseek_v3",
    "GptOssForCausalLM": "gpt_oss",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3_text",
    "Gemma3ForConditionalGeneration": "gemma3",
    "Phi3ForCausalLM": "phi3",
    "PhimoeForCausalLM": "phimoe",
    "Olmo2ForCausalLM": "olmo2",
    "OlmoeForCausalLM": "olmoe",
    "GraniteMoeForCausalLM": "granitemoe",
    "Llama4ForCausalLM": "llama4_text",
    "Llama4ForConditionalGeneration": "llama4",
    "Glm4MoeForCausalLM": "glm4_moe",
}

_FAMILIES: dict[str, Callable[[Reader], dict[str, Any]]] = {
    "llama": dense.llama,
    "mistral": dense.mistral,
    "qwen2": dense.qwen2,
    "qwen3": dense.qwen3,
    "phi3": dense.phi3,
    "gemma2": dense.gemma2,
    "gemma3_text": dense.gemma3_text,
    "olmo2": dense.olmo2,
    "mixtral": moe.mixtral,
    "qwen3_moe": moe.qwen3_moe,
    "qwen2_moe": moe.qwen2_moe,
    "olmoe": moe.olmoe,
    "granitemoe": moe.granitemoe,
    "phimoe": moe.phimoe,
    "gpt_oss": moe.gpt_oss,
    "llama4_text": moe.llama4_text,
    "deepseek_v2": deepseek.deepseek_v2,
    "deepseek_v3": deepseek.deepseek_v3,
    "glm4_moe": deepseek.glm4_moe,
}

#: multimodal wrappers: the decoder's config sits under `text_config` and is read as this family
_TEXT_CONFIG = {"gemma3": "gemma3_text", "llama4": "llama4_text"}


def supported_families() -> list[str]:
    """Every `model_type` the reader accepts (the multimodal wrappers included)."""
    return sorted([*_FAMILIES, *_TEXT_CONFIG])


def _family(data: Mapping[str, Any], where: str) -> str:
    """The reader family: a known model_type, else a known architecture (Kimi K2 ships model_type
    "kimi_k2" with DeepseekV3ForCausalLM), else the unknown model_type so the refusal names it."""
    model_type = data.get("model_type")
    if isinstance(model_type, str) and (model_type in _FAMILIES or model_type in _TEXT_CONFIG):
        return model_type
    archs = data.get("architectures")
    if isinstance(archs, list):
        for arch in archs:
            if isinstance(arch, str) and arch in _ARCH_TO_TYPE:
                return _ARCH_TO_TYPE[arch]
    if isinstance(model_type, str) and model_type:
        return model_type[:100]
    raise InputError(where, "model_type", "cannot tell the architecture (no model_type, no known architectures)")


def _name(data: Mapping[str, Any], where: str) -> str:
    given = data.get("_name_or_path")
    if isinstance(given, str) and given.strip():
        return PurePath(given.strip()).name[:100] or "hf-model"
    path = PurePath(where)
    stem = path.parent.name if path.stem == "config" and path.parent.name else path.stem
    return (stem or "hf-model")[:100]


def _reader(data: Mapping[str, Any], where: str, family: str) -> tuple[Reader, str]:
    """The reader over the decoder's keys and the family that reads them."""
    text_family = _TEXT_CONFIG.get(family)
    if text_family is None:
        return Reader(data, where, family), family
    text = data.get("text_config")
    if not isinstance(text, Mapping):
        raise InputError(where, "text_config", f"a {family} config needs its decoder's text_config mapping")
    reader = Reader(text, where, text_family, prefix="text_config")
    reader.notes.append(f"{family}: the decoder of text_config; the vision tower and projector are not counted")
    return reader, text_family


def model_from_hf_config(data: Mapping[str, Any], where: str) -> ModelSpec:
    family = _family(data, where)
    if family not in _FAMILIES and family not in _TEXT_CONFIG:
        raise InputError(where, "model_type",
                         f"unsupported architecture {family!r}; supported: {', '.join(supported_families())}")
    reader, text_family = _reader(data, where, family)
    fields = _FAMILIES[text_family](reader)
    fields["name"] = _name(data, where)
    fields["source"] = f"Hugging Face config ({family}) read from {where}"
    notes = list(reader.notes)
    if reader.defaults_used:
        notes.append(f"{text_family} class defaults used: " + ", ".join(reader.defaults_used))
    if notes:
        fields["notes"] = "; ".join(notes)[:2000]
    if reader.scalings:
        fields["scalings"] = dict(reader.scalings)
    try:
        return parse_spec(ModelSpec, fields, where)
    except InputError as exc:  # name the key as the config spells it, not the ModelSpec field
        key = next((k for k in HF_KEYS.get(exc.field or "", ()) if k in reader.data), None)
        if key is None:
            raise
        raise InputError(where, reader.key(key), exc.reason) from None


#: ModelSpec fields read from a differently named config key: the keys the families read, in the
#: order they are tried, so a refused value is reported under the key the file holds.
HF_KEYS: dict[str, tuple[str, ...]] = {
    "num_layers": ("num_hidden_layers",),
    "ffn_hidden_size": ("intermediate_size_mlp", "intermediate_size"),
    "num_query_groups": ("num_key_value_heads",),
    "kv_channels": ("head_dim",),
    "num_experts": ("n_routed_experts", "num_local_experts", "num_experts"),
    "moe_router_topk": ("num_experts_per_tok", "experts_per_token"),
    "moe_ffn_hidden_size": ("moe_intermediate_size", "intermediate_size"),
    "mtp_num_layers": ("num_nextn_predict_layers",),
    "max_position_embeddings": ("max_position_embeddings",),
    "hidden_size": ("hidden_size",),
    "num_attention_heads": ("num_attention_heads",),
    "vocab_size": ("vocab_size",),
}
