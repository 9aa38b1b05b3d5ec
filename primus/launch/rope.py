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


def rope_note(read: Callable[[str], Any], model: ModelSpec) -> str | None:
    """The note for a file whose RoPE differs from `model`'s; `read(dest)` is the file's value of an argument
    (its default when absent). None when they agree, or where the model does not state its own."""
    factor = read("rope_scaling_factor")  # read (a Primus model file states it) whether or not it applies
    scaling = factor if read("use_rope_scaling") else None
    file_rope = {"rotary_base": read("rotary_base"), "rotary_percent": read("rotary_percent"),
                 "rope_scaling_factor": scaling}
    model_rope = {"rotary_base": model.rotary_base or MEGATRON_DEFAULTS["rotary_base"],
                  "rotary_percent": model.rotary_percent or MEGATRON_DEFAULTS["rotary_percent"],
                  "rope_scaling_factor": model.rope_scaling_factor}
    differ = [k for k in file_rope if file_rope[k] != model_rope[k] and
              not (k == "rotary_base" and model.rotary_base is None)]
    if not differ:
        return None
    said = ", ".join(f"{k} {_value(file_rope[k])} (the model's {_value(model_rope[k])})" for k in differ)
    return (f"the file's RoPE differs from {model.name}'s: {said}, Megatron-LM's default where the file states "
            "none; primus's answers do not depend on it, a run of this file trains it")


def _value(value: Any) -> str:
    if value is None:
        return "none"
    return str(int(value)) if float(value).is_integer() and abs(value) >= 1 else str(value)
