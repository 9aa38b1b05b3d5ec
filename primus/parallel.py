"""The one definition of every parallel group size.

Megatron-Core folds the same ranks two ways: dense layers see world = TP × CP × DP × PP, MoE layers see
world = ETP × EP × EDP × PP ("MoE parallel folding"), so EP need not divide DP. Memory, projection,
search and reports all take group sizes from `Layout`, never recompute them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from primus.specs.job import Recompute

SHARDINGS = ("none", "dist_opt", "zero2", "fsdp")
RECOMPUTES: tuple[Recompute, ...] = ("none", "selective", "full")
SCHEDULES = ("1f1b", "interleaved")
INT_AXES = ("tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs")


def parallel_text(p: dict[str, Any] | None) -> str:
    """A `parallel` mapping in one line (`TP2 PP4 ... sp=on recompute=none sharding=dist_opt`): the one
    spelling `fit`, `tune`, `export` and the reports print, so a layout reads the same wherever it is
    shown and a user can copy it between them. No mapping reads `none`."""
    if not p:
        return "none"
    text = " ".join(f"{k.upper()}{p[k]}" for k in INT_AXES if k in p)
    extra = f" recompute_num_layers={p['recompute_num_layers']}" if p.get("recompute_num_layers") else ""
    return (f"{text} sp={'on' if p.get('sp') else 'off'} recompute={p.get('recompute')} "
            f"sharding={p.get('sharding')}{extra}")


@dataclass(frozen=True, slots=True, order=True)
class Layout:
    """A complete, normalised parallel configuration (every axis pinned)."""

    tp: int
    pp: int
    vp: int
    cp: int
    ep: int
    etp: int
    dp: int
    mbs: int
    sp: bool
    recompute: str
    sharding: str
    recompute_num_layers: int | None = None
    schedule: str = "1f1b"

    @property
    def world(self) -> int:
        return self.tp * self.cp * self.dp * self.pp

    @property
    def dp_cp(self) -> int:
        """Megatron's data-parallel group with context parallel: the dense optimizer shards over it."""
        return self.dp * self.cp

    @property
    def edp(self) -> int:
        """Expert data parallel: world / (PP × EP × ETP)."""
        return self.world // (self.pp * self.ep * self.etp)

    def num_microbatches(self, global_batch_size: int) -> int:
        return global_batch_size // (self.mbs * self.dp)

    def as_parallel(self) -> dict[str, Any]:
        """The complete, null-free `parallel` mapping a job accepts back verbatim."""
        out: dict[str, Any] = {"tp": self.tp, "pp": self.pp, "vp": self.vp, "cp": self.cp, "ep": self.ep,
                               "etp": self.etp, "dp": self.dp, "mbs": self.mbs, "sp": self.sp,
                               "recompute": self.recompute, "sharding": self.sharding}
        if self.recompute_num_layers is not None:
            out["recompute_num_layers"] = self.recompute_num_layers
        return out

    def text(self) -> str:
        """The layout in one line, as every command prints it (`parallel_text`)."""
        return parallel_text(self.as_parallel())

    def key(self) -> tuple[Any, ...]:
        """Canonical sort key (the order of `enumerate`)."""
        return (self.tp, self.pp, self.vp, self.cp, self.ep, self.etp, self.mbs, int(self.sp),
                RECOMPUTES.index(self.recompute), SHARDINGS.index(self.sharding),
                self.recompute_num_layers or 0, SCHEDULES.index(self.schedule))


def normalise(layout: Layout, *, is_moe: bool) -> Layout:
    """The layout the byte ledger and the projection read: SP at TP 1 is off, VP at PP 1 is 1, EP/ETP of a
    dense model are 1, zero1 is the distributed optimizer, and the schedule follows VP.

    This is no verdict on legality. Megatron-LM itself normalises only SP at TP 1 (NVIDIA/Megatron-LM
    d98e8a6 megatron/training/arguments.py:1433-1439); it refuses VP above 1 at PP 1 (:1000-1009) and
    EP above 1 without experts (:1655-1656). A user's pins are judged before they reach here, by the
    rules `fit` reads them with (`primus.solver.pins`; `primus.solver.check.pinned_breaks` for a
    fully pinned job)."""
    changes: dict[str, Any] = {}
    if layout.tp == 1 and layout.sp:
        changes["sp"] = False
    if layout.pp == 1 and layout.vp != 1:
        changes["vp"] = 1
    if not is_moe and (layout.ep != 1 or layout.etp != 1):
        changes["ep"] = 1
        changes["etp"] = 1
    if layout.sharding == "zero1":
        changes["sharding"] = "dist_opt"
    vp = changes.get("vp", layout.vp)
    schedule = "interleaved" if vp > 1 else "1f1b"
    if layout.schedule != schedule:
        changes["schedule"] = schedule
    if layout.recompute != "full" and layout.recompute_num_layers is not None:
        changes["recompute_num_layers"] = None
    return replace(layout, **changes) if changes else layout
