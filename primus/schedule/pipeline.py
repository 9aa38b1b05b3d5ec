"""Per-rank order of forward and backward chunk passes, as Megatron-Core runs them.

One schedule feeds both halves of the tool: the memory ledger asks which forward passes are still
waiting for their backward at each rank's peak (:func:`in_flight`, :func:`peak_activation`), and the
projection times the very same op order (:mod:`primus.schedule.simulate`). Keeping them on one
object is what makes "fits" and "is fast" statements about the same run.

Chunk indices are model-chunk order ``i = v * pp + r`` (see :mod:`primus.schedule.layout`): chunk
``i`` runs on rank ``i % pp`` as virtual stage ``i // pp``.

Schedules (``megatron/core/pipeline_parallel/schedules.py``):

* ``"1f1b"`` (PipeDream-flush, ``forward_backward_pipelining_without_interleaving``): rank r runs
  ``min(pp - r - 1, M)`` warm-up forwards, then alternates one forward and one backward, then drains.
* ``"interleaved"`` (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
  Clusters Using Megatron-LM", §2.2; ``forward_backward_pipelining_with_interleaving``): virtual
  microbatch k maps to (microbatch, virtual stage) through Megatron's ``get_schedule_table`` with
  ``microbatch_group_size_per_vp_stage = pp`` (the default): microbatches go through each virtual
  stage in groups of pp. Rank r runs ``(pp - r - 1) * 2 + (vp - 1) * pp`` warm-up forwards (capped at
  ``M * vp``; if the cap is hit it is all forwards then all backwards), then 1F1B, then drains.
  Backward virtual microbatch k uses the same table entry with the virtual stage mirrored.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Final, Literal

from primus.errors import InputError, did_you_mean

OpKind = Literal["F", "B", "W"]  # "W": zero-bubble weight-gradient pass, reserved (no builder emits it)


@dataclass(frozen=True, slots=True)
class Op:
    """One pass of one microbatch through one model chunk on one rank."""

    kind: OpKind
    microbatch: int
    chunk: int
    rank: int


@dataclass(frozen=True, slots=True)
class InFlight:
    """Peak number of forward chunk passes on a rank whose backward has not run yet.

    ``chunks_at_peak`` is the multiset (chunk, count) sorted by chunk at the *first* moment the
    peak count is reached; with uneven chunks the byte peak can fall at another moment with the same
    count, so the memory ledger should use :func:`peak_activation` for bytes.
    """

    rank: int
    peak: int
    chunks_at_peak: tuple[tuple[int, int], ...]

    def count(self, chunk: int) -> int:
        return dict(self.chunks_at_peak).get(chunk, 0)


@dataclass(frozen=True, eq=False)
class Schedule:
    """The op order of every rank plus the cross-op dependencies the order relies on.

    Dependencies (what the P2P transfers carry): F of chunk i for microbatch m needs F of chunk
    i-1 for m; B of chunk i needs B of chunk i+1; B of the last chunk needs its own F. An op's
    earlier ops on the same rank (including the F of the same chunk before its B) are ordered by the
    rank itself. Built by :func:`build_schedule`, which caches, so schedules compare by identity.
    """

    pp: int
    vp: int
    num_microbatches: int
    kind: str
    ops_by_rank: tuple[tuple[Op, ...], ...]

    @cached_property
    def rank_offsets(self) -> tuple[int, ...]:
        """Flat op index of each rank's first op; ranks are laid out one after another."""
        offsets = [0]
        for ops in self.ops_by_rank:
            offsets.append(offsets[-1] + len(ops))
        return tuple(offsets)

    @cached_property
    def dep_index(self) -> tuple[int, ...]:
        """For each flat op index (ranks one after another), the flat index of its producer, or -1.

        The producer is on the neighbouring rank, except for the last chunk's B, whose producer is its
        own F on the same rank. A "W" op (zero-bubble) would need its own rule: refused until added.
        """
        chunks, m_count = self.pp * self.vp, self.num_microbatches
        flat = [op for ops in self.ops_by_rank for op in ops]
        # Flat index of every (kind, microbatch, chunk), in an array keyed by an integer code.
        index = [-1] * (2 * m_count * chunks)
        for i, op in enumerate(flat):
            index[((op.kind == "B") * m_count + op.microbatch) * chunks + op.chunk] = i
        last = chunks - 1
        deps = []
        for op in flat:
            fwd = op.microbatch * chunks + op.chunk
            if op.kind == "F":
                deps.append(index[fwd - 1] if op.chunk > 0 else -1)
            elif op.kind != "B":
                raise ValueError(f"no dependency rule for {op.kind!r} ops yet")
            elif op.chunk < last:
                deps.append(index[m_count * chunks + fwd + 1])
            else:
                deps.append(index[fwd])
        return tuple(deps)

    def dependency(self, rank: int, position: int) -> tuple[int, int] | None:
        """(rank, position) of the op that ``ops_by_rank[rank][position]`` waits for, if any."""
        d = self.dep_index[self.rank_offsets[rank] + position]
        if d < 0:
            return None
        r = next(r for r in range(self.pp) if self.rank_offsets[r] <= d < self.rank_offsets[r + 1])
        return r, d - self.rank_offsets[r]

    @cached_property
    def in_flight(self) -> tuple[InFlight, ...]:
        return tuple(_rank_in_flight(r, ops, self.pp * self.vp) for r, ops in enumerate(self.ops_by_rank))


Builder = Callable[[int, int, int], tuple[tuple[Op, ...], ...]]


def _warmup_1f1b(pp: int, vp: int, rank: int, total: int) -> int:
    return min(pp - rank - 1, total)


def _warmup_interleaved(pp: int, vp: int, rank: int, total: int) -> int:
    return min((pp - rank - 1) * 2 + (vp - 1) * pp, total)


def schedule_table(num_microbatches: int, vp: int, group: int) -> tuple[tuple[int, int], ...]:
    """Megatron's ``get_schedule_table``: virtual microbatch k → (microbatch, virtual stage).

    Microbatches are taken in groups of ``group``; each group runs through every virtual stage
    before the next group starts (the last group may be short).
    """
    table: list[tuple[int, int]] = []
    for lo in range(0, num_microbatches, group):
        hi = min(lo + group, num_microbatches)
        table.extend((m, v) for v in range(vp) for m in range(lo, hi))
    return tuple(table)


def _one_f_one_b_order(
    pp: int, vp: int, num_microbatches: int, warmup: Callable[[int, int, int, int], int]
) -> tuple[tuple[Op, ...], ...]:
    """Warm-up forwards, then F/B pairs, then the backward drain — the shape of both Megatron loops."""
    table = schedule_table(num_microbatches, vp, pp)
    total = len(table)
    out = []
    for r in range(pp):
        fwd = [Op("F", m, v * pp + r, r) for m, v in table]
        bwd = [Op("B", m, (vp - 1 - v) * pp + r, r) for m, v in table]
        w = warmup(pp, vp, r, total)
        ops = fwd[:w]
        for k in range(total - w):
            ops.append(fwd[w + k])
            ops.append(bwd[k])
        ops.extend(bwd[total - w :])
        out.append(tuple(ops))
    return tuple(out)


def _build_1f1b(pp: int, vp: int, num_microbatches: int) -> tuple[tuple[Op, ...], ...]:
    return _one_f_one_b_order(pp, vp, num_microbatches, _warmup_1f1b)


def _build_interleaved(pp: int, vp: int, num_microbatches: int) -> tuple[tuple[Op, ...], ...]:
    return _one_f_one_b_order(pp, vp, num_microbatches, _warmup_interleaved)


#: Schedule name → builder(pp, vp, M). Add "zb-h1" / "v-schedule" here; validation lives in
#: :data:`_CHECKS` so a builder only ever sees arguments it supports.
SCHEDULES: Final[dict[str, Builder]] = {
    "1f1b": _build_1f1b,
    "interleaved": _build_interleaved,
}


def _check_1f1b(pp: int, vp: int, m: int) -> str | None:
    return f"1f1b runs one model chunk per rank (vp=1), got vp={vp}; use 'interleaved'" if vp != 1 else None


def _check_interleaved(pp: int, vp: int, m: int) -> str | None:
    if vp < 2 or pp < 2:
        return f"the interleaved schedule needs pp > 1 and vp > 1, got pp={pp}, vp={vp}"
    if m % pp:
        return (
            f"Megatron's interleaved schedule needs num_microbatches divisible by pp: {m} microbatches "
            f"with pp={pp}"
        )
    return None


_CHECKS: Final[dict[str, Callable[[int, int, int], str | None]]] = {
    "1f1b": _check_1f1b,
    "interleaved": _check_interleaved,
}


def build_schedule(
    pp: int, vp: int, num_microbatches: int, kind: str = "auto", *, where: str = "pipeline"
) -> Schedule:
    """The op order for ``pp`` ranks × ``vp`` virtual stages × ``num_microbatches`` microbatches.

    ``kind``: one of :data:`SCHEDULES` or ``"auto"`` (``"1f1b"`` when vp == 1, else
    ``"interleaved"``). pp == 1 with 1f1b gives F0 B0 F1 B1 …. Results are cached on
    (pp, vp, M, kind) because the projection builds the same schedule for many candidates.
    """
    for field, value in (
        ("pipeline_model_parallel_size", pp),
        ("virtual_pipeline_model_parallel_size", vp),
        ("num_microbatches", num_microbatches),
    ):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(where, field, f"must be a positive integer, got {value!r}")
    if kind == "auto":
        kind = "1f1b" if vp == 1 else "interleaved"
    if kind not in SCHEDULES:
        raise InputError(
            where,
            "schedule",
            f"unknown pipeline schedule {kind!r}{did_you_mean(kind, SCHEDULES)}; "
            f"known: {', '.join(sorted(SCHEDULES))}, auto",
        )
    check = _CHECKS.get(kind)
    reason = check(pp, vp, num_microbatches) if check else None
    if reason:
        raise InputError(where, "schedule", reason)
    return _cached_schedule(pp, vp, num_microbatches, kind)


@lru_cache(maxsize=512)
def _cached_schedule(pp: int, vp: int, num_microbatches: int, kind: str) -> Schedule:
    return Schedule(pp, vp, num_microbatches, kind, SCHEDULES[kind](pp, vp, num_microbatches))


def _rank_in_flight(rank: int, ops: tuple[Op, ...], num_chunks: int) -> InFlight:
    live = peak = peak_at = 0
    for i, op in enumerate(ops):
        if op.kind == "F":
            live += 1
            if live > peak:
                peak, peak_at = live, i
        elif op.kind == "B":
            live -= 1
    counts = [0] * num_chunks
    if peak:
        for op in ops[: peak_at + 1]:
            if op.kind == "F":
                counts[op.chunk] += 1
            elif op.kind == "B":
                counts[op.chunk] -= 1
    return InFlight(rank, peak, tuple((c, n) for c, n in enumerate(counts) if n))


def in_flight(schedule: Schedule) -> tuple[InFlight, ...]:
    """Per rank: the peak count of forward passes awaiting backward, and which chunks they are.

    1F1B: rank r holds ``min(pp - r, M)``; interleaved: ``min((pp-r-1)*2 + (vp-1)*pp + 1, M*vp)``
    chunk passes, i.e. ``vp*pp + pp - 1`` on rank 0 — Megatron's stage-0 estimate of pp microbatches
    × (1 + (pp-1)/(pp*vp)). O(ops) once per schedule, then cached on it.
    """
    return schedule.in_flight


def peak_activation(schedule: Schedule, rank: int, chunk_bytes: Callable[[int], int]) -> int:
    """Max over time of the summed ``chunk_bytes(chunk)`` of forwards awaiting backward on ``rank``.

    Exact integer arithmetic; ``chunk_bytes`` is called once per chunk of the rank. The peak is taken
    right after each forward completes (activations are freed by that chunk's backward).
    """
    if not 0 <= rank < schedule.pp:
        raise ValueError(f"rank {rank} outside 0..{schedule.pp - 1}")
    sizes: dict[int, int] = {}
    for v in range(schedule.vp):
        chunk = v * schedule.pp + rank
        b = chunk_bytes(chunk)
        if isinstance(b, bool) or not isinstance(b, int) or b < 0:
            raise ValueError(f"chunk_bytes({chunk}) must be a non-negative int, got {b!r}")
        sizes[chunk] = b
    live = peak = 0
    for op in schedule.ops_by_rank[rank]:
        if op.kind == "F":
            live += sizes[op.chunk]
            if live > peak:
                peak = live
        elif op.kind == "B":
            live -= sizes[op.chunk]
    return peak
