"""Discrete-event timing of a pipeline schedule: the step time the projection reports.

Model (the usual one for pipeline bubbles, e.g. Narayanan et al. 2021, §2.2):

* each rank executes its ops in the schedule's order, one at a time, on one compute stream;
* an op with a cross-rank dependency starts no earlier than that producer's end plus the P2P
  transfer time; the transfer is a pure delay on the link — it does not occupy either rank's
  compute stream (Megatron overlaps the isend/irecv with compute), but it does lie on the
  critical path whenever a rank has to wait for it;
* durations depend on (rank, chunk) only, not on the microbatch, so each callback is evaluated once
  per chunk (or per (src, dst, kind) link) rather than once per op.

The simulation is a dependency-driven sweep, O(total ops), with no priority queue: every rank runs
forward until its next op waits on an unfinished producer, then parks on that producer; finishing
an op wakes the (at most one) rank parked on it. Deterministic for a given schedule and callbacks.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass

from primus.schedule.pipeline import Schedule


@dataclass(frozen=True)
class Timeline:
    """Result of :func:`simulate`; per-rank tuples align with ``schedule.ops_by_rank``."""

    starts: tuple[tuple[float, ...], ...]
    ends: tuple[tuple[float, ...], ...]
    busy: tuple[float, ...]
    """Compute time of each rank (sum of its op durations)."""
    idle: tuple[float, ...]
    """Bubble of each rank before its last op finishes: last end − busy (includes the initial wait)."""
    p2p_recv: tuple[float, ...]
    """Total transfer time of the P2P messages each rank receives (not on its compute stream)."""
    p2p_send: tuple[float, ...]
    """Total transfer time of the P2P messages each rank sends."""
    makespan: float

    def bubble_fraction(self, rank: int) -> float:
        """Share of the step that ``rank`` spends not computing: 1 − busy / makespan."""
        return 1.0 - self.busy[rank] / self.makespan if self.makespan > 0 else 0.0


@dataclass(frozen=True)
class _Plan:
    """Integer arrays derived once per schedule, so each :func:`simulate` call only fills in times."""

    offsets: tuple[int, ...]
    deps: tuple[int, ...]
    dur_code: tuple[int, ...]  # 2 * chunk + (1 if backward)
    link_code: tuple[int, ...]  # index into links for a cross-rank dependency, else -1
    links: tuple[tuple[int, int, str], ...]  # distinct (src_rank, dst_rank, kind)
    link_uses: tuple[int, ...]


_PLANS: weakref.WeakKeyDictionary[Schedule, _Plan] = weakref.WeakKeyDictionary()


def _plan(schedule: Schedule) -> _Plan:
    plan = _PLANS.get(schedule)
    if plan is not None:
        return plan
    offsets = schedule.rank_offsets
    deps = schedule.dep_index
    op_rank = [r for r, ops in enumerate(schedule.ops_by_rank) for _ in ops]
    flat = [op for ops in schedule.ops_by_rank for op in ops]
    link_ids: dict[tuple[int, int, str], int] = {}
    uses: list[int] = []
    link_code = []
    for i, op in enumerate(flat):
        d = deps[i]
        if d < 0 or op_rank[d] == op.rank:
            link_code.append(-1)
            continue
        key = (op_rank[d], op.rank, op.kind)
        k = link_ids.setdefault(key, len(link_ids))
        if k == len(uses):
            uses.append(0)
        uses[k] += 1
        link_code.append(k)
    plan = _Plan(
        offsets=offsets,
        deps=deps,
        dur_code=tuple(2 * op.chunk + (op.kind != "F") for op in flat),
        link_code=tuple(link_code),
        links=tuple(link_ids),
        link_uses=tuple(uses),
    )
    _PLANS[schedule] = plan
    return plan


def simulate(
    schedule: Schedule,
    fwd_time: Callable[[int, int], float],
    bwd_time: Callable[[int, int], float],
    p2p_time: Callable[[int, int, str], float],
) -> Timeline:
    """Time ``schedule``: ``fwd_time(rank, chunk)``, ``bwd_time(rank, chunk)`` per op and
    ``p2p_time(src_rank, dst_rank, kind)`` per transfer (kind "F" activations, "B" gradients).

    Producer and consumer on the same rank (the last chunk's B after its own F) need no transfer.
    Raises ValueError on negative/NaN durations or if the order deadlocks (a programming error).
    """
    pp = schedule.pp
    plan = _plan(schedule)
    offsets = plan.offsets
    deps = plan.deps
    n = offsets[-1]

    table: list[float] = []
    for c in range(pp * schedule.vp):
        table.append(_duration(fwd_time(c % pp, c), "fwd_time", (c % pp, c)))
        table.append(_duration(bwd_time(c % pp, c), "bwd_time", (c % pp, c)))
    link_t = [_duration(p2p_time(*key), "p2p_time", key) for key in plan.links]
    recv = [0.0] * pp
    send = [0.0] * pp
    for (src, dst, _), t, k in zip(plan.links, link_t, plan.link_uses, strict=True):
        recv[dst] += t * k
        send[src] += t * k
    dur = [table[k] for k in plan.dur_code]
    delay = [link_t[k] if k >= 0 else 0.0 for k in plan.link_code]

    start = [0.0] * n
    end = [0.0] * n
    done = bytearray(n)
    waiter = [-1] * n
    pos = list(offsets[:-1])
    free = [0.0] * pp
    runnable = list(range(pp - 1, -1, -1))
    while runnable:
        r = runnable.pop()
        i = pos[r]
        stop = offsets[r + 1]
        t = free[r]
        while i < stop:
            d = deps[i]
            if d >= 0:
                if not done[d]:
                    waiter[d] = r  # park on the producer; its completion re-queues this rank
                    break
                ready = end[d] + delay[i]
                if ready > t:
                    t = ready
            start[i] = t
            t += dur[i]
            end[i] = t
            done[i] = 1
            w = waiter[i]
            if w >= 0:
                runnable.append(w)
            i += 1
        pos[r] = i
        free[r] = t
    if any(pos[r] != offsets[r + 1] for r in range(pp)):
        raise ValueError(f"schedule {schedule.kind} (pp={pp}, vp={schedule.vp}) deadlocks")

    busy = tuple(math.fsum(dur[offsets[r] : offsets[r + 1]]) for r in range(pp))
    last = tuple(end[offsets[r + 1] - 1] if offsets[r + 1] > offsets[r] else 0.0 for r in range(pp))
    return Timeline(
        starts=tuple(tuple(start[offsets[r] : offsets[r + 1]]) for r in range(pp)),
        ends=tuple(tuple(end[offsets[r] : offsets[r + 1]]) for r in range(pp)),
        busy=busy,
        idle=tuple(last[r] - busy[r] for r in range(pp)),
        p2p_recv=tuple(recv),
        p2p_send=tuple(send),
        makespan=max(last, default=0.0),
    )


def _duration(value: float, name: str, key: object) -> float:
    t = float(value)
    if not t >= 0.0 or math.isinf(t):
        raise ValueError(f"{name}{key} must be a finite non-negative number, got {value!r}")
    return t


def _check_closed_form_args(pp: int, vp: int, m: int, tf: float, tb: float, p2p: float) -> None:
    if pp < 1 or vp < 1 or m < 1:
        raise ValueError(f"pp, vp, num_microbatches must be >= 1, got {pp}, {vp}, {m}")
    if min(tf, tb, p2p) < 0:
        raise ValueError("times must be non-negative")


def one_f_one_b_p2p_hops(pp: int, num_microbatches: int) -> int:
    """P2P transfers on the critical path of a uniform 1F1B step (each adds one ``p2p`` delay).

    Rank 0 keeps pp microbatches in flight, so every pp microbatches it must wait for one full
    round trip of a microbatch (pp forwards, pp backwards, 2(pp-1) transfers): in steady state a
    group of pp microbatches costs ``pp*(tf+tb) + 2*(pp-1)*p2p``. Adding the fill/drain trip gives
    ``2(pp-1) + 2((M-2) - (M-2)//pp)`` hops for M >= 2 and ``2(pp-1)`` for M = 1; the tests check it
    against :func:`simulate` for all p2p >= 0.
    """
    if pp < 1 or num_microbatches < 1:
        raise ValueError(f"pp and num_microbatches must be >= 1, got {pp}, {num_microbatches}")
    if num_microbatches == 1:
        return 2 * (pp - 1)
    rest = num_microbatches - 2
    return 2 * (pp - 1) + 2 * (rest - rest // pp)


def closed_form_1f1b(pp: int, num_microbatches: int, tf: float, tb: float, p2p: float = 0.0) -> float:
    """Makespan of 1F1B when every stage takes ``tf`` forward and ``tb`` backward per microbatch.

    ``(M + pp - 1) * (tf + tb) + hops * p2p`` with ``hops`` from :func:`one_f_one_b_p2p_hops`
    (P2P is a link delay, not compute). With p2p = 0 this is the textbook
    ``(M + pp - 1)(tf + tb)``, i.e. bubble fraction ``(pp - 1) / (M + pp - 1)``. Exact for any
    p2p >= 0 under :func:`simulate`'s model.
    """
    _check_closed_form_args(pp, 1, num_microbatches, tf, tb, p2p)
    return (num_microbatches + pp - 1) * (tf + tb) + one_f_one_b_p2p_hops(pp, num_microbatches) * p2p


def closed_form_interleaved(
    pp: int, vp: int, num_microbatches: int, tf_chunk: float, tb_chunk: float, p2p: float = 0.0
) -> float:
    """Makespan of Megatron's interleaved 1F1B with uniform per-chunk times.

    ``tf_chunk``/``tb_chunk`` are the times of one virtual chunk (a stage's time divided by vp).
    Result: ``(M*vp + pp - 1) * (tf_chunk + tb_chunk) + 2*(pp*vp - 1) * p2p``, i.e. in stage times
    ``M*(tf+tb) + (pp-1)*(tf+tb)/vp`` — the bubble shrinks by vp (Narayanan et al. 2021, §2.2).
    The P2P term is the first microbatch crossing all pp*vp chunks forward and back; in steady state
    the ``2*(pp-r-1)`` extra warm-up forwards of Megatron's schedule give every transfer one op of
    slack, so transfers are hidden as long as ``p2p <= min(tf_chunk, tb_chunk)``. Beyond that the
    makespan is piecewise-linear in p2p and this raises ValueError: use :func:`simulate`.
    Needs ``M % pp == 0`` like the schedule itself.
    """
    _check_closed_form_args(pp, vp, num_microbatches, tf_chunk, tb_chunk, p2p)
    if num_microbatches % pp:
        raise ValueError(f"num_microbatches={num_microbatches} must be a multiple of pp={pp}")
    if p2p > min(tf_chunk, tb_chunk):
        raise ValueError("closed form is exact only for p2p <= min(tf_chunk, tb_chunk); use simulate()")
    return (num_microbatches * vp + pp - 1) * (tf_chunk + tb_chunk) + 2 * (pp * vp - 1) * p2p
