"""What a pin means, once: `tp: 8` is satisfied by layouts with TP 8.

A pin Megatron-LM refuses is refused here too: VP above 1 with PP 1 (validate_args builds the
interleaved schedule and asserts the pipeline size is above 1, above 2 without --overlap-p2p-comm:
NVIDIA/Megatron-LM d98e8a6 megatron/training/arguments.py:1000-1009; rule
`interleaving-needs-pipeline`), and EP above 1 for a model without experts (arguments.py:1655-1656,
"num_experts must be non None to use expert model parallelism"; rule `ep-needs-experts`). A pin
Megatron-LM normalises is normalised, and said (`normalisation_notes`): SP at TP 1 is switched off
(arguments.py:1433-1439, "Disabling sequence parallelism because tensor model parallelism is
disabled"), ETP of a dense model sizes no layer, and a recompute layer count without full recompute is
not read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from primus.parallel import RECOMPUTES, SHARDINGS

PIN_AXES = ("tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "sp", "recompute", "sharding", "recompute_num_layers")


def pin_columns(axis: str) -> tuple[str, ...]:
    """Columns a pin's test reads (so the enumerator can apply it as soon as they exist)."""
    return {"sp": ("sp", "tp"), "recompute_num_layers": ("recompute_num_layers", "recompute")
            }.get(axis, (axis,))


def pin_mask(cols: dict[str, np.ndarray], axis: str, value: Any, is_moe: bool, n: int) -> np.ndarray:
    """Rows of `cols` that satisfy the pin `axis: value`."""
    if axis == "etp" and not is_moe:
        return np.ones(n, dtype=bool)
    if axis == "sp":
        return (cols["sp"] | (cols["tp"] == 1)) if value else ~cols["sp"]
    if axis == "recompute":
        return cols["recompute"] == RECOMPUTES.index(value)
    if axis == "sharding":
        return cols["sharding"] == SHARDINGS.index("dist_opt" if value == "zero1" else value)
    if axis == "recompute_num_layers":
        return (cols["recompute_num_layers"] == value) | (cols["recompute"] != RECOMPUTES.index("full"))
    return cols[axis] == value


def normalisation_notes(pins: dict[str, Any], parallel: dict[str, Any], model_name: str,
                        is_moe: bool) -> tuple[str, ...]:
    """What the evaluated layout (`parallel`, as `Layout.as_parallel` gives it) does not take from the
    pins as written, and why, so no pin changes silently."""
    out: list[str] = []
    if pins.get("sp") is True and parallel.get("tp") == 1 and not parallel.get("sp"):
        out.append("sp: true at TP1 is evaluated with sequence parallelism off, as Megatron-LM runs it "
                   "(validate_args: 'Disabling sequence parallelism because tensor model parallelism is disabled')")
    etp = pins.get("etp")
    if not is_moe and isinstance(etp, int) and etp != parallel.get("etp", 1):
        out.append(f"etp: {etp} has no effect: {model_name} has no expert layers for an expert tensor-parallel "
                   f"group to split, so the layout is evaluated as ETP{parallel.get('etp', 1)}")
    layers = pins.get("recompute_num_layers")
    if isinstance(layers, int) and parallel.get("recompute") != "full":
        out.append(f"recompute_num_layers: {layers} has no effect with recompute {parallel.get('recompute')}: "
                   "Megatron-LM reads it only under full recompute (--recompute-granularity full)")
    return tuple(out)


def refused_pin_notes(pins: dict[str, Any], parallel: dict[str, Any]) -> tuple[str, ...]:
    """The pins Megatron-LM refuses that a byte ledger still has to read some way (`primus memory` and
    `primus project` print the bytes of a refused layout with its rules): which value the bytes are
    for. VP at PP 1 builds no interleaved chunks and EP of a dense model splits no experts, so the
    bytes are those of VP 1 and EP 1."""
    out: list[str] = []
    for axis, rule in (("vp", "interleaving-needs-pipeline"), ("ep", "ep-needs-experts")):
        value = pins.get(axis)
        if isinstance(value, int) and not isinstance(value, bool) and value != parallel.get(axis, 1):
            out.append(f"{axis}: {value} is refused by Megatron-LM ({rule}); the bytes shown are those of "
                       f"{axis.upper()}{parallel.get(axis, 1)}, the layout without it")
    return tuple(out)
