"""Admissible upper bounds on a layout's projected tokens/s/GPU, and the bounded search built on them.

A step on pipeline rank r lasts at least that rank's own work: M microbatches of its chunks' exposed
time (compute, exposed communication, recompute) plus its tail (`project.py`: step >= end_r + tail_r >=
work_r + tail_r). The busiest rank works at least the average, so

    step >= M / PP x S,  S = the sum over every block of the model (embedding, layers, MTP, loss) of
                             its exposed forward and backward time for one microbatch + the forward
                             recompute re-runs

with each block costed by the projection's own (cached) block costs. With M = GBS / (MBS x DP) and
world = TP x CP x DP x PP this gives tokens/s/GPU <= seq x MBS / (TP x CP x S) (`upper_bound`): it
leaves out the bubble, the tail and the imbalance between ranks, so it is never below the projection
(tested on every legal layout of small jobs). S depends on the shape context (TP, CP, SP, MBS, EP,
ETP), the placement of the groups the blocks talk on, FSDP and recompute; not on VP, the schedule or,
under Megatron's default rank order, on DP and PP (`context_bound`).

A layout's own bound (`upper_bound`) adds the pipeline bubble: the projection times 1F1B and the
interleaved schedule, in which the path "microbatch 0's forward through chunks 0..s-1, all of rank s's
work, the last microbatch's backward back" always exists, so step >= max_s(sum_{r<s} c_r + M x S_s)
with c the chunks' work (`pipeline_floor`; (M + (PP-1)/VP) x a stage's work for uniform chunks). It
depends on PP, VP and M, so the search applies it last, per layout (`layout_bounds`).

A coarser bound (`group_bounds`) covers every micro-batch size at once. Under the analytic kernel timer
a block's cost per microbatch is sub-homogeneous in MBS: at k x MBS (k a whole number) it is at most k
times the cost at MBS, because every kernel's work and bytes scale by k or less (token counts exactly
when MBS x seq is divisible by CP and the rank's tokens by the SP divisor, routed tokens and tokens per
expert are rounded up, ceil(k x) <= k x ceil(x)), every time is an affine function of work with a
non-negative intercept (GEMM roofline plus its per-problem cost, memory-bound passes, alpha-beta
collectives), and exposed communication, hiding (TP, MoE, CP, FSDP overlap, with fractions <= 1) and
the kernel-launch floor are non-decreasing, positively homogeneous functions of those times. So the
bound at MBS is at most the bound at any multiple of it, and the largest bound over the micro-batch
sizes that divide no other candidate's covers every layout of the same (TP, CP, SP, EP, ETP,
recompute). FSDP's gathers only add exposed time, so a bound without them covers FSDP layouts too.
That costs one block evaluation per group of layouts instead of one per shape context; a property test
checks the scaling on many contexts and models. (A layout whose MBS divides several maximal ones takes
the smallest of their bounds: each covers it.)

ZeRO-2 reduce-scatters gradients on every microbatch's backward (`tail.py`), which is part of each
rank's work; `_zero2` adds a floor on it (under the analytic timer), so a layout that waits seconds on
its gradients is ruled out without projecting it.

Between the two, `unsharded_bounds` bounds each row at its own MBS without its sharding's collectives
(FSDP's gathers and ZeRO-2's reduce-scatter only add time): one evaluation per (context, recompute), no
placement, which rules out most FSDP and ZeRO-2 rows before their placed keys are costed.

`primus.solver.search.best_first` scores layouts in decreasing order of the coarse bound, refines a
layout through the unsharded and its own bound before projecting it, and stops when every remaining
bound falls below the k-th best score found: the same k best an exhaustive scoring would return (ties
keep the given order). `primus project` (free axes) and `fit`'s suggestions use it; `tune` shares it (`speed_of`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from primus.memory.shapes import balanced_layout
from primus.memory.units import param_units
from primus.parallel import RECOMPUTES, SHARDINGS, Layout, normalise
from primus.projection.cost import BlockCost
from primus.projection.placement import DEFAULT_ORDER
from primus.projection.project import Projector
from primus.projection.stages import RankParams, chunk_keys, rank_params, selective_seconds
from primus.projection.timer import AnalyticTimer, CollectiveCall
from primus.solver.vector import Candidates

#: Candidate columns a layout's shape context is made of.
CONTEXT_COLUMNS = ("tp", "cp", "sp", "mbs", "ep", "etp")
#: Columns the group placement depends on beyond the context when the rank order is not Megatron's
#: default (tp-cp-ep-dp-pp puts the TP, CP, EP and ETP groups innermost, so DP and PP cannot move them).
PLACEMENT_COLUMNS = ("dp", "pp")
#: Shardings whose bound depends on where the data-parallel groups sit: FSDP's per-block gathers and
#: ZeRO-2's per-microbatch gradient reduce-scatter.
PLACED = ("fsdp", "zero2")
#: Relative slack on the coarse bound for floating-point rounding: the scaling argument is exact in real
#: arithmetic, and sums of floats taken in a different order can differ by a few units in the last place.
ROUNDING = 1e-9


def pipeline_floor(chunks: Sequence[float], pp: int, m: int) -> float:
    """max over ranks s of (the first s chunks' work + M x rank s's work): a floor on the makespan of M
    microbatches through chunks of the given forward + backward seconds (chunk i on rank i % pp), under
    1F1B and the interleaved schedule (`SpeedBound._pipeline_floor`)."""
    best = fill = 0.0
    for s in range(pp):
        best = max(best, fill + m * sum(chunks[s::pp]))
        fill += chunks[s]
    return best


class SpeedBound:
    """Upper bounds on tokens/s/GPU for layouts of one Projector's job."""

    def __init__(self, proj: Projector) -> None:
        self.proj = proj
        model = proj.model
        # every block of the model once, whatever the split: the same items in every PP x VP split
        flat = balanced_layout(model.num_layers, 1, 1, model.mtp_num_layers)
        self.items = Counter(k for keys in chunk_keys(model, flat) for k in keys)
        self.decoder = {k: n for k, n in self.items.items() if k.startswith(("dense", "moe"))}
        self._sum_cache: dict[tuple[int, ...], tuple[float, float, float, float]] = {}
        self._params: dict[tuple[int, int, int], RankParams] = {}
        self._zero2_cache: dict[tuple[int, ...], float] = {}
        self._cost_cache: dict[tuple[int, ...], dict[str, BlockCost]] = {}
        self._chunk_cache: dict[tuple[int, ...], tuple[float, ...]] = {}
        self.flat = flat
        self.seq = proj.job.spec.seq_len
        self.default_order = proj.order == DEFAULT_ORDER
        #: the scaling argument (module docstring) holds for the analytic timer's formulas only; a
        #: measured table can time any call, so then every micro-batch size is bounded on its own
        self.scalable = isinstance(proj.timer, AnalyticTimer)

    # ---- one layout ----

    def _key(self, layout: Layout, shardings: tuple[str, ...] = PLACED) -> tuple[int, ...]:
        """What a layout's bound depends on: its context, and DP and PP where `shardings` (or a rank
        order other than Megatron's) make the placement of the data-parallel groups matter."""
        placed = layout.sharding in shardings
        key = (layout.tp, layout.cp, int(layout.sp), layout.mbs, layout.ep, layout.etp,
               SHARDINGS.index(layout.sharding) if placed else 0)
        return (*key, layout.dp, layout.pp) if placed or not self.default_order else key

    def _sums(self, layout: Layout) -> tuple[float, float, float, float]:
        """(every block's forward + backward, the decoder's forward, the decoder's selective recompute)
        exposed seconds for one microbatch of a normalised layout, and every block's backward compute."""
        key = self._key(layout, ("fsdp",))
        sums = self._sum_cache.get(key)
        if sums is None:
            proj = self.proj
            ctx, groups = proj.context(layout), proj.groups(layout)
            cid = proj.context_id(ctx)
            costs = self._cost_cache[key] = {k: proj.block_cost(k, layout, ctx, groups, cid) for k in self.items}
            sums = self._sum_cache[key] = (
                sum(n * (costs[k].fwd_total + costs[k].bwd_total) for k, n in self.items.items()),
                sum(n * costs[k].fwd_total for k, n in self.decoder.items()),
                sum(n * costs[k].selective for k, n in self.decoder.items()),
                sum(n * costs[k].compute_bwd for k, n in self.items.items()))
        return sums

    def _per_microbatch(self, layout: Layout) -> float:
        """S of the module docstring: the sums plus the forward that recompute re-runs (and ZeRO-2's
        gradient reduce-scatter on every microbatch)."""
        total, fwd, selective, _ = self._sums(layout)
        if self._recompute(layout) == "full":
            total += fwd
        elif self._recompute(layout) == "selective":
            total += selective
        if layout.sharding == "zero2" and self.scalable:
            total += self._zero2(layout)
        return total

    def _zero2(self, layout: Layout) -> float:
        """A floor on ZeRO-2's exposed gradient reduce-scatter, summed over the pipeline ranks, for one
        microbatch (`tail.py` puts it on every microbatch's backward, so it is part of each rank's work).

        A rank exposes at least its bucketed reduce-scatter time less the overlap fraction of its
        backward compute (`rank_tail`: min(total, last + max(0, total - last - f x window)) >= total -
        f x window). Summed over ranks: every bucket of every rank, at least one alpha-beta call of all
        the model's gradient bytes (alpha >= 0, so calls are sub-additive: the analytic timer only),
        less f x the backward compute of every block; the ranks hold every parameter at least once
        (tied or MTP embeddings a second time), so the PP = 1 count is a floor."""
        key = self._key(layout)
        z = self._zero2_cache.get(key)
        if z is None:
            proj = self.proj
            pkey = (layout.tp, layout.ep, layout.etp)
            params = self._params.get(pkey)
            if params is None:
                params = self._params[pkey] = rank_params(proj.model, self.flat, param_units(proj.model, *pkey))[0]
            groups = proj.groups(layout)
            grad = proj.widths.grad
            total = sum(proj.timer.collective(CollectiveCall("reduce_scatter", p * grad, groups[g])).seconds
                        for p, g in ((params.dense, "dp_cp"), (params.expert, "edp")) if p > 0)
            ov = proj.job.spec.overlap
            if ov.grad_reduce:
                total -= float(proj.profile.overlap.grad_reduce.value) * self._sums(layout)[3]
            z = self._zero2_cache[key] = max(0.0, total) * (1 - ROUNDING)
        return z

    def _recompute(self, layout: Layout) -> str:
        """The recompute whose re-run forward the bound counts in every decoder layer: "full" when
        every layer re-runs (uniform, no listed layer ids: `recomputed_mask`), "selective" unless
        torchtitan's op-level policy, else "none" (counting nothing is always a floor)."""
        proj = self.proj
        if layout.recompute == "full" and proj.recompute_method == "uniform" and proj.recompute_layer_ids is None:
            return "full"
        return "selective" if layout.recompute == "selective" and not proj.op_sac else "none"

    def _bound(self, layout: Layout) -> float:
        per_mb = self._per_microbatch(layout)
        return float("inf") if per_mb <= 0 else self.seq * layout.mbs / (layout.tp * layout.cp * per_mb)

    def _chunks(self, layout: Layout) -> tuple[float, ...]:
        """A floor on each chunk's forward + backward seconds for one microbatch (model-chunk order):
        its blocks' exposed times plus what recompute re-runs (every layer's forward under `_recompute`'s
        "full", else none; selective exactly as `chunk_work` counts it); offloading, ZeRO-2's
        reduce-scatter and P2P only add to it."""
        playout, _, keys = self.proj.chunk_keys(layout.pp, layout.vp)
        rec = self._recompute(layout)
        key = (*self._key(layout, ("fsdp",)), RECOMPUTES.index(layout.recompute), int(rec == "full"), layout.pp,
               playout.vp)
        out = self._chunk_cache.get(key)
        if out is None:
            self._sums(layout)
            costs = self._cost_cache[self._key(layout, ("fsdp",))]
            work = {k: c.fwd_total + c.bwd_total for k, c in costs.items()}
            for k in self.decoder:
                if rec == "full":
                    work[k] += costs[k].fwd_total
                elif layout.recompute == "selective":
                    work[k] += selective_seconds(costs[k], k, self.proj.selective)
            out = self._chunk_cache[key] = tuple(sum(work[k] for k in ks) for _, ks in keys)
        return out

    def _pipeline_floor(self, layout: Layout, m: int) -> float:
        """Seconds the pipeline takes at least under the projection's own timing (`timing.py`): the
        path "microbatch 0's forward through chunks 0..s-1, every op of rank s, the last microbatch's
        backward back through chunks s-1..0" exists in the 1F1B and interleaved schedules' dependency
        graphs (rank s starts on chunk s and ends on its backward), so the simulation's makespan, the
        closed forms (equal to it) and the bottleneck path (its largest such path plus P2P) are all at
        least max_s(sum_{r<s} c_r + M x S_s), c the chunks' work and S_s rank s's. Uniform chunks give
        (M + (PP-1)/VP) x S_s: the bubble. The path ends on rank 0, whose step is at least its end plus
        a non-negative tail, so the step is at least this too. No schedule whose bubble can vanish
        (zero-bubble) is projected; one added to `primus.schedule.pipeline.SCHEDULES` must revisit this
        floor (a test pins the list)."""
        return pipeline_floor(self._chunks(layout), layout.pp, m) * (1 - ROUNDING)

    def step_floor(self, layout: Layout) -> float:
        """Seconds the step takes at least (see the module docstring): M / PP times one microbatch of
        every block's exposed forward and backward time, plus the forward that recompute re-runs, or the
        pipeline's fill and drain around its busiest path (`_pipeline_floor`), whichever is larger."""
        layout = normalise(layout, is_moe=self.proj.model.is_moe)
        m = layout.num_microbatches(self.proj.job.spec.global_batch_size)
        return max(m * self._per_microbatch(layout) / layout.pp, self._pipeline_floor(layout, m))

    def context_bound(self, layout: Layout) -> float:
        """tokens/s/GPU the projection cannot exceed for any layout of this one's bound key (`_key`):
        the average rank's work, whatever the pipeline split, VP and (default rank order) DP."""
        return self._bound(normalise(layout, is_moe=self.proj.model.is_moe))

    def upper_bound(self, layout: Layout) -> float:
        """tokens/s/GPU the projection cannot exceed for this layout: `context_bound`, tightened by the
        pipeline's bubble (`step_floor`)."""
        layout = normalise(layout, is_moe=self.proj.model.is_moe)
        bound = self._bound(layout)
        m = layout.num_microbatches(self.proj.job.spec.global_batch_size)
        floor = self._pipeline_floor(layout, m)
        if floor <= 0:
            return bound
        spec = self.proj.job.spec
        return min(bound, spec.global_batch_size * self.seq / (layout.world * floor))

    # ---- many layouts ----

    def _columns(self, cands: Candidates, names: tuple[str, ...]) -> np.ndarray:
        return np.stack([np.asarray(cands.cols[c], dtype=np.int64) for c in names], axis=1)

    @staticmethod
    def _distinct(cols: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """np.unique over rows (distinct rows, first index of each, each row's distinct index), with
        the rows packed into one integer first (a mixed-radix number of the column values: much faster
        than unique over a 2-D array, and the same grouping)."""
        lo = cols.min(axis=0)
        span = cols.max(axis=0) - lo + 1
        if float(np.prod(span.astype(float))) >= 2.0**62:
            _, first, inverse = np.unique(cols, axis=0, return_index=True, return_inverse=True)
            return cols[first], first, inverse.reshape(-1)
        packed = np.zeros(len(cols), dtype=np.int64)
        for j in range(cols.shape[1]):
            packed = packed * span[j] + (cols[:, j] - lo[j])
        _, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
        return cols[first], first, inverse.reshape(-1)

    def layout_bounds(self, cands: Candidates) -> Callable[[int], float]:
        """`upper_bound` of row i (its pipeline's bubble included): the level after `row_bounds`."""
        return lambda i: self.upper_bound(cands.layout(i))

    def unsharded_bounds(self, cands: Candidates) -> Callable[[int], float]:
        """`context_bound` of row i as if it did not shard (no FSDP gathers, no ZeRO-2 reduce-scatter),
        at its own micro-batch size, evaluated once per distinct (context, recompute) among the rows
        (lazily): the level between `group_bounds` and `row_bounds`. Sharding only adds exposed time
        (`group_bounds`), so this covers every sharding, and it needs no placement of the
        data-parallel groups, the key that multiplies FSDP's and ZeRO-2's bounds by every (DP, PP)."""
        place = () if self.default_order else PLACEMENT_COLUMNS
        _, first, ids = self._distinct(self._columns(cands, (*CONTEXT_COLUMNS, "recompute", *place)))
        return self._lazy(ids, lambda j: self.context_bound(replace(cands.layout(int(first[j])), sharding="none")))

    @staticmethod
    def _lazy(ids: np.ndarray, value_of: Callable[[int], float]) -> Callable[[int], float]:
        """Row i's value: `value_of` its distinct index ids[i], evaluated once per index when first asked
        (the indices as a list: a search asks for tens of thousands of rows, one at a time)."""
        index = ids.tolist()
        values: dict[int, float] = {}

        def bound(i: int) -> float:
            j = index[i]
            v = values.get(j)
            if v is None:
                v = values[j] = value_of(j)
            return v
        return bound

    def row_bounds(self, cands: Candidates) -> Callable[[int], float]:
        """`context_bound` of row i, evaluated once per distinct bound key among the rows (lazily)."""
        cols = self._columns(cands, (*CONTEXT_COLUMNS, "recompute", "sharding", *PLACEMENT_COLUMNS))
        if self.default_order:  # DP and PP matter only to FSDP's gathers and ZeRO-2's reduce (`_key`)
            cols[~np.isin(cols[:, 7], [SHARDINGS.index(x) for x in PLACED]), 8:] = 0
        _, first, ids = self._distinct(cols)
        return self._lazy(ids, lambda j: self.context_bound(cands.layout(int(first[j]))))

    def group_bounds(self, cands: Candidates) -> np.ndarray:
        """A bound on every row's tokens/s/GPU, one block evaluation per group of rows that share all
        but the micro-batch size (and sharding, and DP and PP under the default rank order): the bound
        at the group's micro-batch sizes that divide no other, the smallest among the multiples of the
        row's own (module docstring)."""
        if cands.n == 0:
            return np.zeros(0)
        place = () if self.default_order else PLACEMENT_COLUMNS
        names = CONTEXT_COLUMNS + place  # tp cp sp mbs ep etp [dp pp]
        contexts, first, ctx_of_row = self._distinct(self._columns(cands, names))
        groups: dict[tuple[int, ...], dict[int, int]] = {}  # group (all but mbs) -> mbs -> context row
        for c, row in enumerate(contexts.tolist()):
            groups.setdefault(tuple(row[:3] + row[4:]), {})[row[3]] = c
        # per context: the contexts whose bounds each cover it (itself, or the group's maximal multiples)
        cover: list[list[int]] = [[] for _ in range(len(contexts))]
        for members in groups.values():
            maximal = [e for e in members if not any(o != e and o % e == 0 for o in members)]
            for m, c in members.items():
                tp, cp, sp = (int(x) for x in contexts[c][:3])
                if self._scales(m, tp, cp, sp):
                    cover[c] = [members[e] for e in maximal if e % m == 0]
                else:
                    cover[c] = [c]
        needed = sorted({e for cs in cover for e in cs})
        model_moe = self.proj.model.is_moe
        rec = np.asarray(cands.cols["recompute"], dtype=np.int64)
        per_rec: dict[int, np.ndarray] = {}
        for r in np.unique(rec).tolist():
            values = np.full(len(contexts), -np.inf)
            for e in needed:
                layout = cands.layout(int(first[e]))
                layout = normalise(replace(layout, sharding="none", recompute=RECOMPUTES[r]), is_moe=model_moe)
                values[e] = self._bound(layout)
            per_rec[r] = np.array([min(values[e] for e in cs) for cs in cover])
        out = np.empty(cands.n)
        for r, table in per_rec.items():
            mask = rec == r
            out[mask] = table[ctx_of_row[mask]]
        return out * (1 + ROUNDING)

    def _scales(self, mbs: int, tp: int, cp: int, sp: int) -> bool:
        """Whether the scaling argument covers MBS: the analytic timer, and token counts that scale
        exactly (MBS x seq divisible by CP, the rank's tokens by the SP divisor)."""
        if not self.scalable or (mbs * self.seq) % cp:
            return False
        return (mbs * self.seq // cp) % (tp if sp else 1) == 0

