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

import re
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


def _family(data: Mapping[str, Any], where: str) -> tuple[str, str | None]:
    """The reader family and, when `architectures` decided it, a note saying so: a known model_type,
    else a known architecture (Kimi K2 ships model_type "kimi_k2" with DeepseekV3ForCausalLM, the class
    its remote code builds), else the unknown model_type so the refusal names it."""
    model_type = data.get("model_type")
    if isinstance(model_type, str) and (model_type in _FAMILIES or model_type in _TEXT_CONFIG):
        return model_type, None
    archs = data.get("architectures")
    if isinstance(archs, list):
        for arch in archs:
            if isinstance(arch, str) and arch in _ARCH_TO_TYPE:
                family = _ARCH_TO_TYPE[arch]
                given = f"model_type {model_type[:100]!r} is not one primus reads" \
                    if isinstance(model_type, str) and model_type else "no model_type"
                return family, f"{given}: read as {family}, the family of its architectures entry {arch}"
    if isinstance(model_type, str) and model_type:
        return model_type[:100], None
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
    family, by_architecture = _family(data, where)
    if family not in _FAMILIES and family not in _TEXT_CONFIG:
        raise InputError(where, "model_type",
                         f"unsupported architecture {family!r}; supported: {', '.join(supported_families())}")
    reader, text_family = _reader(data, where, family)
    if by_architecture:
        reader.notes.insert(0, by_architecture)
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
    except InputError as exc:  # name the keys as the config spells them, not the ModelSpec fields
        raise _in_config_keys(exc, reader) from None


#: ModelSpec fields read from config keys: the keys the families read, in the order they are tried,
#: so a refused value is reported under the key the file holds (or the family read with its class
#: default). A field absent here is read from the key of its own name (`kv_lora_rank`, `v_head_dim`).
HF_KEYS: dict[str, tuple[str, ...]] = {
    "name": ("_name_or_path",),
    "num_layers": ("num_hidden_layers",),
    "ffn_hidden_size": ("intermediate_size_mlp", "intermediate_size"),
    "num_query_groups": ("num_key_value_heads",),
    "kv_channels": ("head_dim",),
    "num_experts": ("n_routed_experts", "num_local_experts", "num_experts"),
    "moe_router_topk": ("num_experts_per_tok", "experts_per_token"),
    "moe_ffn_hidden_size": ("moe_intermediate_size", "intermediate_size"),
    # Qwen2-MoE's own width, DeepSeek's count of moe_intermediate_size-wide experts, Llama 4's intermediate_size
    "moe_shared_expert_intermediate_size": ("shared_expert_intermediate_size", "n_shared_experts",
                                            "intermediate_size"),
    "moe_layer_freq": ("moe_layers", "mlp_only_layers", "decoder_sparse_step", "interleave_moe_layer_step",
                       "first_k_dense_replace", "moe_layer_freq"),
    "mtp_num_layers": ("num_nextn_predict_layers",),
    "qk_head_dim": ("qk_nope_head_dim",),
    "qk_pos_emb_head_dim": ("qk_rope_head_dim",),
    "window_size": ("sliding_window", "attention_chunk_size"),
    "window_attn_skip_freq": ("sliding_window_pattern", "no_rope_layer_interval", "layer_types", "no_rope_layers"),
    "untie_embeddings_and_output_weights": ("tie_word_embeddings",),
    "add_qkv_bias": ("attention_bias", "qkv_bias"),
    "yarn_rotary_scaling_factor": ("rope_scaling", "rope_parameters"),
}

_FIELD_NAME = re.compile(r"\b[a-z][a-z0-9_]*\b")


def _config_key(field: str, reader: Reader) -> str | None:
    """The config key that holds a ModelSpec field in this family, as the file spells it."""
    candidates = HF_KEYS.get(field, (field,))
    key = next((k for k in candidates if k in reader.read), None) or \
        next((k for k in candidates if k in reader.data), None)
    return reader.key(key) if key is not None else None


def _in_config_keys(exc: InputError, reader: Reader) -> InputError:
    """The refusal with every ModelSpec field it names (its field, and those a cross-field reason
    quotes: `num_attention_heads (32) must be divisible by num_query_groups (5)`, with both values)
    replaced by the config key that holds it."""

    def rename(match: re.Match[str]) -> str:
        word = match.group(0)
        key = _config_key(word, reader) if word in ModelSpec.model_fields else None
        return word if key is None else key

    reason = _FIELD_NAME.sub(rename, exc.reason)
    own = _config_key(exc.field, reader) if exc.field in ModelSpec.model_fields else None
    return InputError(exc.where, own or exc.field, reason)
