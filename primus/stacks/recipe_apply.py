"""A stack's per-model recipe under a job file, as `validate` puts it under a published run.

DESIGN-NOTES §7: users say which stack they run (`stack:`), and the tool must answer with the same data
`validate` uses. A stack's recipes (a framework's workload presets: recompute, VP, offloading, sharding, the
loss kernel, the MoE all-to-all overlap and token dispatcher) were chosen for one split of the model, so a job
takes one only when it pins that split: TP, PP and CP, the axes a run is compared on (`PARTITION_AXES`); the
preset's variant is then the one its other pinned axes, GPU count and batch agree with most
(`Stack.recipe_for`). Only what the job file leaves unstated is filled, and each filled key is named with
the recipe's source, so a job never silently differs from what it says.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from primus.stacks.core import Stack
from primus.stacks.schema import PARTITION_AXES, Recipe, loss_kernels

#: the recipe key of a job's GEMM format: FP8 by its scaling recipe (a delayed-scaling FP8 job is no preset's)
RECIPE_PRECISION = {("bf16", None): "bf16", ("fp16", None): "fp16", ("nvfp4", None): "nvfp4",
                    ("fp8", "tensorwise"): "fp8", ("fp8", "mxfp8"): "mxfp8", ("fp8", "blockwise"): "fp8-block"}


def _section(data: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = data.get(key)
    return value if isinstance(value, Mapping) else {}


def job_recipe(stack: Stack, data: Mapping[str, Any], model: str, hardware: str, is_moe: bool) -> Recipe | None:
    """The stack's recipe for a job mapping (stack defaults already under it), or None: the job does not pin
    TP, PP and CP, its format is no preset's, or the stack ships none for this model, GPU and release."""
    parallel = _section(data, "parallel")
    if any(not isinstance(parallel.get(axis), int) for axis in PARTITION_AXES):
        return None
    fmt = str(data.get("precision", "bf16"))
    precision = RECIPE_PRECISION.get((fmt, data.get("fp8_recipe") if fmt == "fp8" else None))
    if precision is None:
        return None
    stated: dict[str, int | None] = {k: parallel.get(k) if isinstance(parallel.get(k), int) else None
                                     for k in ("tp", "pp", "vp", "cp", "ep", "etp", "mbs")}
    if not is_moe:
        stated["ep"] = stated["etp"] = None
    stated["gpus"] = data.get("gpus") if isinstance(data.get("gpus"), int) else None
    stated["gbs"] = data.get("global_batch_size") if isinstance(data.get("global_batch_size"), int) else None
    return stack.recipe_for(model, hardware, precision, stated)


def apply_recipe(recipe: Recipe, written: Mapping[str, Any], merged: Mapping[str, Any],
                 is_moe: bool) -> tuple[dict[str, Any], list[str]]:
    """`merged` with the recipe's settings for what `written` (the job file as typed) leaves unstated, and
    one note per setting taken."""
    s, out, notes = recipe.settings, dict(merged), []
    own_parallel = _section(written, "parallel")
    parallel = dict(_section(out, "parallel"))

    def take(key: str, value: Any) -> None:  # "KEY (what)", as `Job.assumed` names a supplied key
        notes.append(f"{key} ({value} from the stack's recipe)")

    if s.vp and "vp" not in own_parallel and (own_parallel.get("pp") or 1) > 1:
        parallel["vp"] = s.vp
        take("parallel.vp", s.vp)
    if s.sharding and "sharding" not in own_parallel:
        parallel["sharding"] = s.sharding
        take("parallel.sharding", s.sharding)
    recompute_stated = "recompute" in own_parallel
    if s.recompute and not recompute_stated:
        parallel["recompute"] = s.recompute
        take("parallel.recompute", s.recompute)
        for key in ("recompute_num_layers", "recompute_method", "recompute_modules"):
            value = getattr(s, key)
            if value is not None and key not in own_parallel:
                parallel[key] = list(value) if isinstance(value, tuple) else value
                take(f"parallel.{key}", parallel[key])
    out["parallel"] = parallel
    if s.selective_recompute and "selective_recompute" not in written:
        out["selective_recompute"] = s.selective_recompute
        take("selective_recompute", s.selective_recompute)
    if s.cpu_offloading_num_layers and not recompute_stated and "cpu_offloading" not in written:
        out["cpu_offloading"] = {"num_layers": s.cpu_offloading_num_layers}
        take("cpu_offloading.num_layers", s.cpu_offloading_num_layers)
    own_kernels = _section(written, "kernels")
    if s.cross_entropy and not ({"cross_entropy_fusion", "eager_cross_entropy"} & set(own_kernels)):
        loss = loss_kernels(s.cross_entropy)
        out["kernels"] = {**_section(out, "kernels"), **loss}
        for key, value in loss.items():
            take(f"kernels.{key}", value)
    if is_moe and s.moe_a2a_overlap is not None and "moe_a2a" not in _section(written, "overlap"):
        out["overlap"] = {**_section(out, "overlap"), "moe_a2a": s.moe_a2a_overlap}
        take("overlap.moe_a2a", s.moe_a2a_overlap)
    if is_moe and s.moe_dispatcher is not None and "token_dispatcher" not in _section(written, "moe"):
        out["moe"] = {**_section(out, "moe"), "token_dispatcher": s.moe_dispatcher}
        take("moe.token_dispatcher", s.moe_dispatcher)
    if notes:
        notes.append(f"recipe ({recipe.source})")
    return out, notes
