"""Pipeline timing on the ledger's schedule: discrete-event simulation, closed forms, and a fast bound.

The memory ledger reads its activation peak off `primus.schedule.build_schedule(pp, vp, M)`; this module
times the very same op order with `primus.schedule.simulate` (per-chunk forward/backward times, a P2P
delay per cross-rank transfer). Three methods:

- `simulation`: the discrete-event simulation, exact for any per-chunk times (uneven stages, the
  embedding on the first chunk, the output layer and loss on the last);
- `closed_form`: when every chunk takes the same time (and, interleaved, P2P is no longer than a
  chunk pass), `closed_form_1f1b` / `closed_form_interleaved` give the simulation's makespan exactly;
- `bottleneck` (the fast path for uneven chunks): the longest of the paths "fill through ranks
  0..s−1, all M microbatches of rank s, drain back", i.e. max_s(Σ_{r<s}(f_r + b_r) + M·S_s) with S_s
  rank s's work per microbatch, plus the uniform schedule's P2P hops. Every such path exists in the
  schedule's dependency graph, so without P2P it is a lower bound of the simulation; it is exact for
  uniform chunks and within 2% when only the first and last chunks differ (tested), which is what
  ranking thousands of candidates needs. The chosen layout is re-timed by simulation.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field

from primus.schedule.pipeline import Schedule, build_schedule
from primus.schedule.simulate import (
    Timeline,
    closed_form_1f1b,
    closed_form_interleaved,
    one_f_one_b_p2p_hops,
    simulate,
)

METHODS = ("auto", "fast", "simulate")


@dataclass(frozen=True)
class PipelineTiming:
    """Makespan of the schedule and each rank's first start and last end."""

    makespan: float
    starts: tuple[float, ...]
    ends: tuple[float, ...]
    method: str
    p2p: float
    hops: int = 0  # P2P transfers on rank 0's critical path (closed form / bottleneck)
    schedule: Schedule | None = field(default=None, compare=False)
    timeline: Timeline | None = field(default=None, compare=False)

    def p2p_on_path(self, rank: int) -> float:
        """P2P delay on the critical path that ends at `rank`'s last op."""
        if self.p2p <= 0:
            return 0.0
        if self.timeline is None or self.schedule is None:
            return max(0, self.hops - rank) * self.p2p
        return _walk(self.schedule, self.timeline, rank, self.p2p)


def _uniform(values: Sequence[float]) -> bool:
    first = values[0]
    tol = 1e-12 * max(abs(first), 1e-30)
    return all(abs(v - first) <= tol for v in values)


def time_pipeline(pp: int, vp: int, m: int, fwd: Sequence[float], bwd: Sequence[float], p2p: float,
                  method: str = "auto") -> PipelineTiming:
    """Time `m` microbatches through pp × vp chunks with per-chunk `fwd`/`bwd` seconds (model-chunk
    order, chunk i on rank i % pp) and `p2p` seconds per cross-rank transfer."""
    if method not in METHODS:
        raise ValueError(f"unknown timing method {method!r}; known: {', '.join(METHODS)}")
    if len(fwd) != pp * vp or len(bwd) != pp * vp:
        raise ValueError("need one forward and one backward time per chunk")
    p2p = p2p if pp > 1 else 0.0
    if method != "simulate" and _uniform(fwd) and _uniform(bwd):
        out = _closed_form(pp, vp, m, fwd[0], bwd[0], p2p)
        if out is not None:
            return out
    if method == "fast":
        out = _bottleneck(pp, vp, m, fwd, bwd, p2p)
        if out is not None:
            return out
    return _simulate(pp, vp, m, fwd, bwd, p2p)


def _closed_form(pp: int, vp: int, m: int, tf: float, tb: float, p2p: float) -> PipelineTiming | None:
    if vp == 1:
        t = closed_form_1f1b(pp, m, tf, tb, p2p)
        hops = one_f_one_b_p2p_hops(pp, m)
    else:
        if m % pp or p2p > min(tf, tb):
            return None
        t = closed_form_interleaved(pp, vp, m, tf, tb, p2p)
        hops = 2 * (pp * vp - 1)
    starts = tuple(r * (tf + p2p) for r in range(pp))
    ends = tuple(t - r * (tb + p2p) for r in range(pp))
    return PipelineTiming(t, starts, ends, "closed_form", p2p, hops)


def _bottleneck(pp: int, vp: int, m: int, fwd: Sequence[float], bwd: Sequence[float],
                p2p: float) -> PipelineTiming | None:
    if vp == 1:
        hops = one_f_one_b_p2p_hops(pp, m)
    else:
        if m % pp or p2p > min(min(fwd), min(bwd)):
            return None
        hops = 2 * (pp * vp - 1)
    work = [sum(fwd[v * pp + r] + bwd[v * pp + r] for v in range(vp)) for r in range(pp)]
    fill = 0.0
    best = 0.0
    for s in range(pp):
        best = max(best, fill + m * work[s])
        fill += fwd[s] + bwd[s]  # chunk s is rank s's first virtual stage
    t = best + hops * p2p
    starts, ends = [], []
    acc_f = acc_b = 0.0
    for r in range(pp):
        starts.append(acc_f)
        ends.append(t - acc_b)
        acc_f += fwd[r] + p2p
        acc_b += bwd[r] + p2p
    return PipelineTiming(t, tuple(starts), tuple(ends), "bottleneck", p2p, hops)


def _simulate(pp: int, vp: int, m: int, fwd: Sequence[float], bwd: Sequence[float], p2p: float) -> PipelineTiming:
    schedule = build_schedule(pp, vp, m, "auto")
    tl = simulate(schedule, lambda r, c: fwd[c], lambda r, c: bwd[c], lambda s, d, k: p2p)
    starts = tuple(row[0] if row else 0.0 for row in tl.starts)
    ends = tuple(row[-1] if row else 0.0 for row in tl.ends)
    return PipelineTiming(tl.makespan, starts, ends, "simulation", p2p, 0, schedule, tl)


def _walk(schedule: Schedule, tl: Timeline, rank: int, p2p: float) -> float:
    """Walk the critical path back from `rank`'s last op, summing the P2P delays it waited on."""
    offsets = schedule.rank_offsets
    deps = schedule.dep_index
    starts = [x for row in tl.starts for x in row]
    ends = [x for row in tl.ends for x in row]
    eps = 1e-12 * max(tl.makespan, 1e-30)
    i = offsets[rank + 1] - 1
    total = 0.0
    while i >= 0:
        r = bisect_right(offsets, i) - 1
        lo = offsets[r]
        prev_end = ends[i - 1] if i > lo else 0.0
        d = deps[i]
        if d >= 0 and starts[i] > prev_end + eps:  # it waited for its producer
            if not lo <= d < offsets[r + 1]:
                total += p2p
            i = d
            continue
        if i == lo:
            break
        i -= 1
    return total
