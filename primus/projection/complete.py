"""Complete a job's free axes with the fastest legal layout that fits, and rank legal layouts.

The candidates are exactly `Question(job).legal()` (every rule holds and the ledger says it fits), so
"fastest" is only ever chosen among layouts that can run. All candidates are ranked with the fast path
(closed form, or the bottleneck bound for uneven stages); the best few are re-timed by discrete-event
simulation and the fastest of those is the answer.

"Fastest" has one definition, shared by `primus project`, `primus tune` and `primus enumerate --rank`
(`fastest_first`): the most projected tokens/s/GPU, the fast path ranking and the simulation deciding among
the RESIMULATE leaders; equal numbers go to the canonical layout order (`Layout.key`, the order of
`enumerate`). There is no tolerance band: a layout projected slower is never called the fastest.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

import numpy as np

from primus.errors import InputError
from primus.job import Job
from primus.memory.evaluate import free_axes, pinned_layout
from primus.parallel import Layout
from primus.projection.bound import SpeedBound
from primus.projection.profile import Profile
from primus.projection.project import Projection, Projector, projector_for
from primus.projection.timer import KernelTimer
from primus.solver.api import LegalLayout, Question
from primus.solver.search import best_first
from primus.solver.vector import Candidates

#: Leaders of the fast ranking re-timed by simulation before the fastest is named (project, tune's default
#: `resimulate_top`, enumerate --rank): a search budget, not a modelling constant.
RESIMULATE = 8


class _Ranked(Protocol):
    @property
    def tokens_per_s_per_gpu(self) -> float: ...

    @property
    def layout(self) -> Layout: ...


R = TypeVar("R", bound=_Ranked)


def fastest_key(item: _Ranked) -> tuple[Any, ...]:
    """The one order "fastest first" means everywhere: most projected tokens/s/GPU, equal numbers in
    canonical layout order (deterministic, and the order `enumerate` lists them in)."""
    return (-item.tokens_per_s_per_gpu, item.layout.key())


def fastest_first(items: Sequence[R]) -> list[R]:
    """`items` (projections or tune's scores) fastest first, by `fastest_key`."""
    return sorted(items, key=fastest_key)


class NothingFits(Exception):
    """No legal layout of the job fits; `reason` says why in one line. When the job pins every axis,
    `projection` is that layout projected anyway (how fast it would be if it ran)."""

    def __init__(self, reason: str, projection: Projection | None = None) -> None:
        self.reason = reason
        self.projection = projection
        super().__init__(reason)


def _free_axes(job: Job) -> list[str]:
    pins = job.spec.parallel.pinned()
    axes = ["tp", "pp", "vp", "cp", "mbs", "sp", "recompute", "sharding"]
    if job.model.is_moe:
        axes += ["ep", "etp"]
    return [a for a in axes if a not in pins]


def _nothing_fits(job: Job, proj: Projector) -> NothingFits:
    """Why a job with no legal completion has none, in one line; for pins that describe a layout, the
    projection of it anyway. Pins Megatron-LM cannot build at all (a global batch of no whole
    microbatches, an interleaved schedule with microbatches not in groups of PP) have no bytes or
    step time to show: the rules they break, as `fit` names them, are the answer."""
    from primus.solver.check import pinned_breaks

    if free_axes(job):
        return NothingFits(f"no completion of the free axes ({', '.join(_free_axes(job))}) is legal and fits "
                           f"{job.model.name} on {job.num_gpus} x {job.cluster.name}; see `primus fit` for the "
                           "binding rule")
    breaks = pinned_breaks(Question(job))
    named = "; ".join(f"{rid}: {why}" for rid, why in breaks.items()) or "a rule"
    broken = NothingFits(f"the pinned layout breaks {named} (see `primus fit` for the nearest legal layouts)")
    try:
        layout = pinned_layout(job)
        report = proj.memory.evaluate(layout, strict=False)
        projection = proj.project(layout, "auto", peak=(report.peak_bytes, report.fits))
    except InputError:
        return broken
    if not report.fits:
        return NothingFits(f"the pinned layout needs {report.peak_bytes / 2**30:,.2f} GiB on stage "
                           f"{report.peak.stage}, more than the {report.capacity_bytes / 2**30:,.2f} GiB "
                           "capacity", projection)
    return NothingFits(broken.reason, projection)


def rank_layouts(job: Job, candidates: Sequence[LegalLayout | Layout], profile: Profile | None = None, *,
                 timer: KernelTimer | None = None, method: str = "fast",
                 resimulate: int = RESIMULATE) -> list[Projection]:
    """Projections of `candidates`, fastest first (`fastest_first`). With the fast `method`, the first
    `resimulate` of that ranking are re-timed ("auto": simulation where the closed form is not exact) and
    re-ordered, as `complete_and_project` and `primus tune` decide, so the first row is their answer.
    (Without assumptions text: re-project the one you report.)"""
    proj = projector_for(job, profile, timer)
    peaks: list[tuple[int, bool] | None] = []
    out = []
    for cand in candidates:
        if isinstance(cand, LegalLayout):
            peaks.append((cand.peak_bytes, True))
            out.append(proj.project(cand.layout, method, peak=peaks[-1], explain=False))
        else:
            peaks.append(None)
            out.append(proj.project(cand, method, explain=False))
    order = sorted(range(len(out)), key=lambda i: fastest_key(out[i]))
    ranked = [out[i] for i in order]
    if method != "fast" or resimulate <= 0:
        return ranked
    leaders = [proj.project(out[i].layout, "auto", peak=peaks[i], explain=False) for i in order[:resimulate]]
    return fastest_first(leaders) + ranked[resimulate:]


class Speed:
    """Projected tokens/s/GPU of a legal layout given its peak bytes (the fast path), with the admissible
    upper bound (`primus.projection.bound`) a bounded search prunes by."""

    def __init__(self, proj: Projector) -> None:
        self.proj = proj
        self.bounds = SpeedBound(proj)

    def __call__(self, layout: Layout, peak_bytes: int) -> float:
        return self.proj.project(layout, "fast", peak=(peak_bytes, True), explain=False).tokens_per_s_per_gpu

    def final(self, layout: Layout, peak_bytes: int) -> float:
        """The number a chosen layout is shown with: its projection as `primus project` gives it (simulated
        where that matters, `fastest_first`), so fit, tune and project print one figure for one layout."""
        return self.proj.project(layout, "auto", peak=(peak_bytes, True), explain=False).tokens_per_s_per_gpu

    def bound(self, layout: Layout) -> float:
        return self.bounds.upper_bound(layout)

    def coarse_bounds(self, cands: Candidates) -> np.ndarray:
        """A looser bound for every row at once (one evaluation per group of rows that differ only in
        MBS, sharding, DP and PP: `SpeedBound.group_bounds`), the first level of a bounded search
        before `bound` refines it."""
        return self.bounds.group_bounds(cands)


def speed_of(job: Job, profile: Profile | None = None) -> Speed | None:
    """Projected tokens/s/GPU of a legal layout given its peak bytes (the fast path), for ranking the
    completions `primus fit` suggests; None when the job cannot be projected (e.g. its precision has no
    GEMM efficiency in the accelerator's profile), and the suggestions fall back to least memory."""
    try:
        proj = projector_for(job, profile)
    except InputError:
        return None
    return Speed(proj)


def _describe(job: Job, layout: Layout, n: int) -> str:
    free = _free_axes(job)
    if not free:
        return "every axis pinned; projected as given"
    values = layout.as_parallel()
    chosen = ", ".join(f"{a}={values[a]}" for a in free if a in values)
    return (f"free axes completed as {chosen}: the fastest of {n:,} legal layout(s) that fit, by projected "
            "tokens/s/GPU")


def complete_and_project(job: Job, profile: Profile | None = None, *, timer: KernelTimer | None = None,
                         question: Question | None = None) -> Projection:
    """The fastest fitting completion of the job's pins, projected (simulation where it matters).
    Raises NothingFits when no legal layout fits (carrying the pinned layout's projection, if every
    axis is pinned)."""
    q = question or Question(job)
    cands = q.candidates
    proj = projector_for(job, profile, timer)
    if cands.n == 0:
        raise _nothing_fits(job, proj)
    peaks = cands.cols["peak_bytes"]
    if cands.n == 1:
        best = proj.project(cands.layout(0), "auto", peak=(int(peaks[0]), True))
        return best.with_completion(_describe(job, best.layout, 1))
    sb = SpeedBound(proj)
    top, scored, stop = best_first(
        sb.group_bounds(cands),
        lambda i: proj.project(cands.layout(i), "fast", peak=(int(peaks[i]), True), explain=False).tokens_per_s_per_gpu,
        RESIMULATE, refine=[sb.unsharded_bounds(cands), sb.row_bounds(cands), sb.layout_bounds(cands)])
    finals = [proj.project(cands.layout(i), "auto", peak=(int(peaks[i]), True)) for _, i in top]
    best = fastest_first(finals)[0]
    proof = (f"; {scored:,} projected, the other {cands.n - scored:,} ruled out by the step-time bound "
             f"(at most {stop:,.0f} tokens/s/GPU)" if scored < cands.n else "")
    return best.with_completion(_describe(job, best.layout, cands.n) + proof)
