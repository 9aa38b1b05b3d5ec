"""The RoPE a launch file trains, against the model its job names.

Megatron-LM's --rotary-base, --rotary-percent and --use-rope-scaling --rope-scaling-factor change no byte or
step time, so an import never tells two architectures apart by them (`primus.launch.arch.ROPE_FIELDS`); but a
run of the file trains what it states, Megatron-LM's defaults where it states none (10000, 1.0, no scaling),
which for Llama 3.1 is not the model's (HF rope_theta 500000, llama3 scaling factor 8). The import says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from primus.launch.megatron_args import MEGATRON_DEFAULTS
from primus.specs.model import ModelSpec

#: the Megatron-LM arguments (dests) behind each RoPE field of the model
ROPE_DESTS: dict[str, tuple[str, ...]] = {
    "rotary_base": ("rotary_base",), "rotary_percent": ("rotary_percent",),
    "rope_scaling_factor": ("use_rope_scaling", "rope_scaling_factor"),
    "mla_rotary_scaling_factor": ("rotary_scaling_factor",), "mla_mscale": ("mscale",),
    "mla_mscale_all_dim": ("mscale_all_dim",)}
MLA_ROPE = ("mla_rotary_scaling_factor", "mla_mscale", "mla_mscale_all_dim")


def file_rope(read: Callable[[str], Any], mla: bool = False) -> dict[str, Any]:
    """The RoPE a run of the file trains, as the model's fields; `read(dest)` is the file's value of an argument
    (its default when absent). With multi-latent attention, also the YaRN its rotary part applies."""
    factor = read("rope_scaling_factor")  # read (a Primus model file states it) whether or not it applies
    out = {"rotary_base": read("rotary_base"), "rotary_percent": read("rotary_percent"),
           "rope_scaling_factor": factor if read("use_rope_scaling") else None}
    if mla:
        out.update({field: read(ROPE_DESTS[field][0]) for field in MLA_ROPE})
    return out


def model_rope(model: ModelSpec) -> dict[str, Any]:
    """The RoPE `model` trains, Megatron-LM's defaults where it states none."""
    out = {"rotary_base": model.rotary_base or MEGATRON_DEFAULTS["rotary_base"],
           "rotary_percent": model.rotary_percent or MEGATRON_DEFAULTS["rotary_percent"],
           "rope_scaling_factor": model.rope_scaling_factor}
    if model.multi_latent_attention:
        out.update({field: getattr(model, field) if getattr(model, field) is not None
                    else MEGATRON_DEFAULTS[ROPE_DESTS[field][0]] for field in MLA_ROPE})
    return out


def rope_note(read: Callable[[str], Any], model: ModelSpec) -> str | None:
    """The note for a file whose RoPE differs from `model`'s. None when they agree, or where the model does
    not state its own."""
    rope, mine = file_rope(read, model.multi_latent_attention), model_rope(model)
    differ = [k for k in rope if rope[k] != mine[k] and not (k == "rotary_base" and model.rotary_base is None)]
    if not differ:
        return None
    said = ", ".join(f"{k} {_value(rope[k])} (the model's {_value(mine[k])})" for k in differ)
    return (f"the file's RoPE differs from {model.name}'s: {said} (Megatron-LM's default for any it does not "
            "state); the job keeps what the file states (the model's RoPE fields), so an export writes it back; "
            "primus's answers do not depend on it")


def with_rope(ref: Any, rope: dict[str, Any]) -> Any:
    """The job's `model` value with the file's RoPE: a catalog name becomes {base: name, ...}."""
    return {**ref, **rope} if isinstance(ref, dict) else {"base": ref, **rope}


def _value(value: Any) -> str:
    if value is None:
        return "none"
    return str(int(value)) if float(value).is_integer() and abs(value) >= 1 else str(value)
