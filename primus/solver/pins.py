"""What a pin means, once: `tp: 8` is satisfied by layouts with TP 8, and a pin on a setting that means
nothing for a layout (VP at PP 1, SP at TP 1, EP/ETP of a dense model, recompute layers without full
recompute) is satisfied by normalisation, not refused."""

from __future__ import annotations

from typing import Any

import numpy as np

from primus.parallel import RECOMPUTES, SHARDINGS

PIN_AXES = ("tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "sp", "recompute", "sharding", "recompute_num_layers")


def pin_columns(axis: str) -> tuple[str, ...]:
    """Columns a pin's test reads (so the enumerator can apply it as soon as they exist)."""
    return {"vp": ("vp", "pp"), "sp": ("sp", "tp"), "recompute_num_layers": ("recompute_num_layers", "recompute")
            }.get(axis, (axis,))


def pin_mask(cols: dict[str, np.ndarray], axis: str, value: Any, is_moe: bool, n: int) -> np.ndarray:
    """Rows of `cols` that satisfy the pin `axis: value`."""
    if axis in ("ep", "etp") and not is_moe:
        return np.ones(n, dtype=bool)
    if axis == "vp":
        return (cols["vp"] == value) | (cols["pp"] == 1)
    if axis == "sp":
        return (cols["sp"] | (cols["tp"] == 1)) if value else ~cols["sp"]
    if axis == "recompute":
        return cols["recompute"] == RECOMPUTES.index(value)
    if axis == "sharding":
        return cols["sharding"] == SHARDINGS.index("dist_opt" if value == "zero1" else value)
    if axis == "recompute_num_layers":
        return (cols["recompute_num_layers"] == value) | (cols["recompute"] != RECOMPUTES.index("full"))
    return cols[axis] == value
