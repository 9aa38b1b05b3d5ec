"""Typed access to one Hugging Face config, and the fields every decoder family shares.

The structural dimensions are required; a key that the family's configuration class documents a
default for may be absent, and then takes that class default, named in the model's `notes`. A key
that is present is read with its value, never guessed around: a layer pattern, a window or a bias
that primus cannot represent exactly is refused with the key named, rather than counted wrongly.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

from primus.errors import InputError, shown
from primus.specs.base import MAX_COUNT


class Reader:
    """Typed access to the config with one-line errors and a record of class defaults and notes.

    `prefix` names where the decoder's keys sit (`text_config` in a multimodal config), so an error
    names the key as the file spells it.
    """

    def __init__(self, data: Mapping[str, Any], where: str, family: str, prefix: str = "") -> None:
        self.data = data
        self.where = where
        self.family = family
        self.prefix = prefix
        self.defaults_used: list[str] = []
        self.notes: list[str] = []
        self.scalings: dict[str, float] = {}
        #: every key read, in order (given or class default): a refused spec field is reported under
        #: the key of this family that holds it (`primus.catalog.hf.HF_KEYS`)
        self.read: list[str] = []

    def key(self, key: str) -> str:
        return f"{self.prefix}.{key}" if self.prefix else key

    def error(self, key: str, reason: str) -> InputError:
        return InputError(self.where, self.key(key), reason)

    def req_int(self, key: str) -> int:
        self.read.append(key)
        if key not in self.data or self.data[key] is None:
            raise self.error(key, f"required for a {self.family} config and missing")
        return self.as_int(key, self.data[key])

    def opt_int(self, key: str, default: int | None) -> int | None:
        value = self.data.get(key)
        if value is not None or default is not None:
            self.read.append(key)
        if value is None:
            if default is not None:
                self.defaults_used.append(f"{key}={default}")
            return default
        return self.as_int(key, value)

    def int_or(self, key: str, default: int) -> int:
        """An integer with a class default (recorded when used)."""
        value = self.opt_int(key, default)
        assert value is not None
        return value

    def opt_bool(self, key: str, default: bool) -> bool:
        self.read.append(key)
        value = self.data.get(key)
        if value is None:
            self.defaults_used.append(f"{key}={default}")
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false (got {value!r})")
        return value

    def opt_float(self, key: str, default: float | None) -> float | None:
        """A positive number (a soft-cap, a multiplier); None when absent and the class has none."""
        value = self.data.get(key)
        if value is None:
            if default is not None:
                self.defaults_used.append(f"{key}={default:g}")
            return default
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                or not 0 < value <= 1e18:
            raise self.error(key, f"must be a positive number (got {value!r})")
        return float(value)

    def record(self, key: str, default: float | None = None) -> None:
        """Record a constant scaling the config applies (no parameters), under its own key."""
        value = self.opt_float(key, default)
        if value is not None:
            self.scalings[key] = value

    def explicit_null(self, key: str) -> bool:
        return key in self.data and self.data[key] is None

    def as_int(self, key: str, value: Any) -> int:
        """A count: an integer from 0 to MAX_COUNT, the range every spec's counts share."""
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
            raise self.error(key, f"must be an integer from 0 to {MAX_COUNT:,} (got {shown(value)})")
        return value

    def int_list(self, key: str) -> list[int] | None:
        value = self.data.get(key)
        if value is None:
            return None
        self.read.append(key)
        if not isinstance(value, list) or len(value) > 100_000 or \
                any(isinstance(i, bool) or not isinstance(i, int) for i in value):
            raise self.error(key, "must be a list of integers")
        return value

    def str_list(self, key: str) -> list[str] | None:
        value = self.data.get(key)
        if value is None:
            return None
        self.read.append(key)
        if not isinstance(value, list) or len(value) > 100_000 or any(not isinstance(i, str) for i in value):
            raise self.error(key, "must be a list of strings")
        return value


def dropout(r: Reader, key: str) -> float:
    value = r.data.get(key, 0.0)
    if value is None:
        value = 0.0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise r.error(key, f"must be a probability between 0 and 1 (got {value!r})")
    return float(value)


def common(r: Reader, *, kv_default: int | None, tie_default: bool = False, head_dim_default: int | None = None,
           vocab_default: int | None = None, heads_default: int | None = None,
           kv_null_is_heads: bool = False) -> dict[str, Any]:
    """Fields of every decoder family: layers, widths, heads, vocabulary, tying, RoPE, RMSNorm, gated MLP.

    `head_dim` is read as given (Gemma's 256 is not hidden / heads); without it, and without a class
    default, the head width is hidden / heads and must divide exactly. An explicit `num_key_value_heads: null`
    is not the class default: a family whose config turns None into the query head count (`kv_null_is_heads`:
    Qwen2Config and Qwen3Config, `if self.num_key_value_heads is None: ... = self.num_attention_heads`; Llama's
    class default is None) reads it so, and one whose field is a plain int (Mistral, Mixtral, Qwen2-MoE,
    Qwen3-MoE: transformers' strict configs refuse None) refuses it.
    """
    # Gemma 3's published text_config omits the head counts its class defaults give (gemma-3-4b)
    heads = r.req_int("num_attention_heads") if heads_default is None \
        else r.int_or("num_attention_heads", heads_default)
    if heads < 1:  # the head width below divides by it
        raise r.error("num_attention_heads", f"must be at least 1 (got {heads})")
    hidden = r.req_int("hidden_size")
    vocab = r.req_int("vocab_size") if vocab_default is None else r.int_or("vocab_size", vocab_default)
    out: dict[str, Any] = {
        "num_layers": r.req_int("num_hidden_layers"),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "vocab_size": vocab,
        "position_embedding_type": "rope",
        "normalization": "RMSNorm",
        "swiglu": True,
        "add_bias_linear": False,
        "untie_embeddings_and_output_weights": not r.opt_bool("tie_word_embeddings", tie_default),
        # HF decoder configs train without hidden dropout; attention dropout is the config's own field
        "hidden_dropout": 0.0,
        "attention_dropout": dropout(r, "attention_dropout"),
    }
    if "num_key_value_heads" in r.data and r.data["num_key_value_heads"] is None and kv_default is not None:
        if not kv_null_is_heads:
            raise r.error("num_key_value_heads", f"is null: a {r.family} config takes an integer (transformers "
                                                 f"refuses None here; its class default is {kv_default})")
        r.read.append("num_key_value_heads")
        r.defaults_used.append(f"num_key_value_heads=null read as num_attention_heads ({heads})")
        kv: int | None = heads
    else:
        kv = r.opt_int("num_key_value_heads", kv_default if kv_default is not None else heads)
    out["num_query_groups"] = kv
    head_dim = r.data.get("head_dim")
    if head_dim is not None:
        out["kv_channels"] = r.as_int("head_dim", head_dim)
    elif head_dim_default is not None:
        out["kv_channels"] = r.opt_int("head_dim", head_dim_default)
    elif hidden % heads:
        raise r.error("hidden_size",
                      f"{hidden} is not divisible by num_attention_heads {heads} and no head_dim is given")
    max_pos = r.data.get("max_position_embeddings")
    if max_pos is not None:
        out["max_position_embeddings"] = r.as_int("max_position_embeddings", max_pos)
    factor = yarn_factor(r)
    if factor is not None:
        out["position_embedding_type"] = "yarn"
        out["yarn_rotary_scaling_factor"] = factor
    out.update(rope_settings(r))
    return out


#: Llama 3's frequency scaling as Megatron-Core applies it (rotary_pos_embedding.py `_apply_scaling`,
#: core_v0.18.0: low and high frequency factors 1 and 4 over 8,192 original positions; only the factor is an
#: argument)
MEGATRON_LLAMA3_SCALING: Final = {"low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 8192}


def rope_settings(r: Reader) -> dict[str, Any]:
    """The RoPE base (`rope_theta`, or transformers v5's `rope_parameters.rope_theta`), the share of each head
    it rotates (`partial_rotary_factor`) and Llama 3's frequency scaling factor (rope_type llama3), as
    Megatron-LM's --rotary-base, --rotary-percent and --rope-scaling-factor state them: they change no byte or
    step time, only what an exported launch file trains. A base Megatron cannot state (not a whole number) or
    Llama 3 scaling with other frequency factors than Megatron-Core's is left out, with a note."""
    out: dict[str, Any] = {}
    key = rope_scaling_key(r)
    scaling = r.data.get(key)
    nested = scaling if isinstance(scaling, dict) else {}
    theta_key, theta = ("rope_theta", r.data["rope_theta"]) if "rope_theta" in r.data else \
        (f"{key}.rope_theta", nested.get("rope_theta"))
    if theta is not None:
        if isinstance(theta, bool) or not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta <= 0:
            raise r.error(theta_key, f"must be a positive number (got {shown(theta)})")
        r.read.append(theta_key)
        if float(theta).is_integer() and theta <= MAX_COUNT:
            out["rotary_base"] = int(theta)
        else:
            r.notes.append(f"{theta_key} {theta:g} not kept: Megatron-LM's --rotary-base is a whole number")
    partial = r.data.get("partial_rotary_factor")
    if partial is not None:
        if isinstance(partial, bool) or not isinstance(partial, (int, float)) or not 0 < partial <= 1:
            raise r.error("partial_rotary_factor", f"must be a number in (0, 1] (got {shown(partial)})")
        r.read.append("partial_rotary_factor")
        if partial < 1:
            out["rotary_percent"] = float(partial)
    if rope_type(nested) == "llama3":
        r.read.append(key)
        factor = Reader(nested, r.where, r.family, r.key(key)).opt_float("factor", None)
        if factor is None:
            raise r.error(f"{key}.factor", "required with rope_type llama3 and missing")
        others = [f"{k} {nested[k]}" for k, v in MEGATRON_LLAMA3_SCALING.items() if k in nested and nested[k] != v]
        if others:
            r.notes.append(f"{key} llama3 with {', '.join(others)}: Megatron-Core applies 1, 4 and 8192, so the "
                           "factor is kept and these are not")
        out["rope_scaling_factor"] = factor
    elif nested and rope_type(nested) not in (None, "default", "yarn"):
        # YaRN is the family's (gpt-oss: position_embedding_type yarn) or MLA's own (mla_rotary_scaling_factor)
        r.notes.append(f"{key} {rope_type(nested)} not kept: Megatron-LM states Llama 3's scaling and YaRN only, so "
                       "an exported launch line trains unscaled RoPE (no byte or second depends on it)")
    return out


def rope_scaling_key(r: Reader) -> str:
    """Where the config keeps its RoPE scaling: `rope_scaling`, or transformers v5's `rope_parameters`."""
    return "rope_parameters" if "rope_parameters" in r.data else "rope_scaling"


def rope_type(scaling: Mapping[str, Any]) -> Any:
    """A RoPE scaling's type: `rope_type`, or the older `type`."""
    return scaling.get("rope_type", scaling.get("type"))


def yarn_factor(r: Reader) -> float | None:
    """YaRN's factor when the RoPE scaling is YaRN (rope_type or type 'yarn'), else None: Megatron-Bridge
    (v0.6.0 model_bridge.py, the provider's position_embedding_type from HF rope_scaling) makes such a model
    'yarn' unless its attention is multi-latent, and another scaling (Llama 3's 'llama3', 'linear') leaves
    it 'rope' (those scale the frequencies of the same fused kernel)."""
    key = rope_scaling_key(r)
    scaling = r.data.get(key)
    if scaling is None:
        return None
    if not isinstance(scaling, dict):
        raise r.error(key, f"must be a mapping (got {shown(scaling)})")
    if rope_type(scaling) != "yarn":
        return None
    r.read.append(key)
    factor = Reader(scaling, r.where, r.family, r.key(key)).opt_float("factor", None)
    if factor is None:
        raise r.error(f"{key}.factor", "required with rope_type yarn and missing")
    return factor


def attention_bias(r: Reader, out: dict[str, Any], *, output_projection: bool = True) -> None:
    """HF's `attention_bias`: biases on q, k, v and (in most families) the output projection; the MLP
    keeps none, so Megatron's add_bias_linear stays off."""
    if r.opt_bool("attention_bias", False):
        out["add_qkv_bias"] = True
        out["add_proj_bias"] = output_projection


def gated_mlp(r: Reader, activation_key: str, default: str) -> None:
    """Every family here has a gated MLP (gate and up projections); a GELU gate (GeGLU) has SwiGLU's
    weights, saved bytes and FLOPs, so it is counted as one and noted."""
    act = r.data.get(activation_key)
    if act is None:
        act = default
    if not isinstance(act, str):
        raise r.error(activation_key, f"must be an activation name (got {act!r})")
    if act not in ("silu", "swish"):
        r.notes.append(f"gated MLP with {act[:40]} (counted as SwiGLU: same weights, bytes and FLOPs)")


def window_every(r: Reader, out: dict[str, Any], window: int | None, full_every: int | None,
                 kinds: list[str] | None, windowed_kinds: tuple[str, ...] = ("sliding_attention",),
                 key: str = "layer_types") -> None:
    """Sliding (or chunked) attention on every layer but each `full_every`-th (0-based index i with
    (i + 1) % full_every == 0 is full), or on every layer when `full_every` is None. An explicit
    `layer_types` list decides instead (newer configs carry it, and a private pattern key beside it):
    it must be such a periodic pattern, which Megatron's window_attn_skip_freq expresses, else it is
    refused rather than miscounted."""
    layers = out["num_layers"]
    if kinds is not None:
        if len(kinds) != layers:
            raise r.error(key, f"has {len(kinds)} entries but num_hidden_layers is {layers}")
        windowed = [k in windowed_kinds for k in kinds]
        if not any(windowed):
            return
        if window is None:
            raise r.error(key, "windowed layers without a window size")
        full_every = windowed.index(False) + 1 if not all(windowed) else None
        if windowed != [not (full_every and (i + 1) % full_every == 0) for i in range(layers)]:
            raise r.error(key, "only windows on every layer but each k-th are supported (the pattern given differs)")
    if window is None or full_every == 1:
        return
    out["window_size"] = window
    if full_every:
        out["window_attn_skip_freq"] = full_every


def layer_step(r: Reader, key: str, default: int) -> int:
    """A layer period (`decoder_sparse_step`, `interleave_moe_layer_step`, DeepSeek's `moe_layer_freq`,
    Gemma 3's `sliding_window_pattern`): the model's code divides layer indices by it or steps a range by
    it (`transformers`; DeepSeek's own modeling_deepseek.py for `moe_layer_freq`, which transformers 5.x
    ignores), so 0 raises there (ZeroDivisionError, ValueError) and is refused here rather than read as 1."""
    step = r.int_or(key, default)
    if step < 1:
        raise r.error(key, f"must be at least 1 (got {step}): the model's code divides the layer index by it")
    return step
