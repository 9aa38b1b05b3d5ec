"""Downscale a target layout to the largest sub-configuration the local devices can run.

A measurement campaign times each unique kernel of the *target* at the target's own per-rank shapes
(a TP-8 GEMM is just a smaller GEMM, so one device can time it), but everything that needs several
ranks at once — collectives on a group, a whole layer's memory — can only run on the devices at hand.
`downscale` says which sub-configuration that is and what was given up, in this order:

1. PP to 1: the pipeline schedule (PP × VP stages, M microbatches, P2P hops) is simulated at the target;
2. DP replicas: identical per-rank work; the DP × CP gradient sync is modelled at the target's size
   (kept at the smallest DP the MoE fold allows: EP × ETP must divide TP × CP × DP);
3. EP, with the DP share it folds into: experts per rank (E / EP) are kept, so the sub-model has
   E / EP × EP' experts, and tokens per expert are kept (each rank still routes its tokens × top-k
   over its local experts) unless top-k exceeds the sub-model's experts, which is said;
4. CP: per-rank kernels keep the target's sequence share; the ring exchange is modelled;
5. TP last (with ETP where the fold needs it): kernels are still timed at the target's TP shard
   shapes; TP collectives on groups larger than the local devices are modelled.

Pure (no torch): it is a statement about group sizes, testable on any machine.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from primus.parallel import Layout, normalise
from primus.specs.model import ModelSpec


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


@dataclass(frozen=True, slots=True)
class Reduction:
    axis: str
    before: int
    after: int
    why: str

    def text(self) -> str:
        return f"{self.axis.upper()} {self.before} → {self.after}: {self.why}"


@dataclass(frozen=True, slots=True)
class Downscale:
    """The target, the sub-layout that fits `devices`, the sub-model's experts, and what was reduced."""

    target: Layout
    local: Layout
    devices: int
    num_experts: int | None
    topk: int | None
    reductions: tuple[Reduction, ...]

    @property
    def reduced(self) -> bool:
        return bool(self.reductions)

    def describe(self) -> list[str]:
        if not self.reductions:
            return [f"the target layout (world {self.target.world}) runs on the {self.devices} local device(s) "
                    "as is: nothing reduced"]
        out = [r.text() for r in self.reductions]
        out.append(f"local sub-layout: TP {self.local.tp}, CP {self.local.cp}, DP {self.local.dp}, PP 1, "
                   f"EP {self.local.ep}, ETP {self.local.etp} (world {self.local.world} ≤ {self.devices} devices)")
        return out

    def to_json(self) -> dict[str, Any]:
        return {"devices": self.devices, "target": self.target.as_parallel(), "local": self.local.as_parallel(),
                "num_experts": self.num_experts, "topk": self.topk,
                "reductions": [{"axis": r.axis, "before": r.before, "after": r.after, "why": r.why}
                               for r in self.reductions]}


def _folds(tp: int, cp: int, dp: int, ep: int, etp: int) -> bool:
    """MoE parallel folding: the expert mesh ETP × EP × EDP re-folds the dense TP × CP × DP ranks."""
    return (tp * cp * dp) % (ep * etp) == 0


def downscale(model: ModelSpec, layout: Layout, devices: int) -> Downscale:
    """The largest sub-configuration of `layout` with at most `devices` ranks (see the module doc)."""
    if devices < 1:
        raise ValueError("devices must be at least 1")
    target = normalise(layout, is_moe=model.is_moe)
    tp, cp, dp, pp, ep, etp = target.tp, target.cp, target.dp, target.pp, target.ep, target.etp
    experts = model.num_experts
    red: list[Reduction] = []

    def world() -> int:
        return tp * cp * dp * pp

    if world() > devices and pp > 1:
        red.append(Reduction("pp", pp, 1, f"the pipeline schedule (PP {pp} × VP {target.vp}, the target's "
                                          "microbatches and P2P hops) is simulated at the target"))
        pp = 1
    if world() > devices and dp > 1:
        valid = [d for d in _divisors(dp) if _folds(tp, cp, d, ep, etp)]
        fit = [d for d in valid if tp * cp * d <= devices]
        new = max(fit) if fit else min(valid)
        if new != dp:
            red.append(Reduction("dp", dp, new, "replicas run identical per-rank work; the DP × CP gradient "
                                                "sync is modelled at the target's group size"))
            dp = new
    if world() > devices and ep > 1:
        best: tuple[int, int] | None = None
        for e in sorted(_divisors(ep), reverse=True):
            if e == ep:
                continue
            valid = [d for d in _divisors(dp) if _folds(tp, cp, d, e, etp)]
            fit = [d for d in valid if tp * cp * d <= devices]
            if fit:
                best = (e, max(fit))
                break
        if best is None:
            best = (1, min(d for d in _divisors(dp) if _folds(tp, cp, d, 1, etp)))
        new_ep, new_dp = best
        per_rank = -(-(experts or 0) // ep)
        sub = per_rank * new_ep
        why = (f"experts per rank kept ({per_rank}): the sub-model has {sub} of {experts} experts; tokens per "
               "expert kept; the all-to-all over the target's EP group is modelled")
        if model.topk > sub:
            why += (f"; top-k {model.topk} exceeds the sub-model's {sub} experts, so it routes top-{sub} "
                    "(fewer tokens per expert)")
        red.append(Reduction("ep", ep, new_ep, why))
        if new_dp != dp:
            red.append(Reduction("dp", dp, new_dp, f"the expert-data-parallel share of EP {ep} → {new_ep}"))
        ep, dp, experts = new_ep, new_dp, sub
    if world() > devices and cp > 1:
        valid = [c for c in _divisors(cp) if _folds(tp, c, dp, ep, etp)]
        fit = [c for c in valid if tp * c * dp <= devices]
        new = max(fit) if fit else min(valid)
        red.append(Reduction("cp", cp, new, "kernels keep the target's sequence share per rank; the ring "
                                            "attention exchange is modelled"))
        cp = new
    if world() > devices and tp > 1:
        new = max(t for t in _divisors(tp) if t * cp * dp <= devices)
        red.append(Reduction("tp", tp, new, "kernels are still timed at the target's TP shard shapes; TP "
                                            "collectives on groups above the local devices are modelled"))
        tp = new
        if not _folds(tp, cp, dp, ep, etp):
            new_etp = max(e for e in _divisors(etp) if _folds(tp, cp, dp, ep, e))
            red.append(Reduction("etp", etp, new_etp, "expert-TP folded into the reduced TP"))
            etp = new_etp
    local = normalise(replace(target, tp=tp, cp=cp, dp=dp, pp=pp, vp=1 if pp == 1 else target.vp, ep=ep, etp=etp),
                      is_moe=model.is_moe)
    topk = min(model.topk, experts) if experts else None
    return Downscale(target, local, devices, experts, topk, tuple(red))
