"""An admissible upper bound on a layout's projected tokens/s/GPU, and the bounded search built on it.

A step on pipeline rank r lasts at least that rank's own work: M microbatches of its chunks' exposed
time (compute, exposed communication, recompute) plus its tail (`project.py`: step >= end_r + tail_r >=
work_r + tail_r). The busiest rank works at least the average, so

    step >= M / PP x (sum over every block of the model (embedding, layers, MTP, loss) of its exposed
            forward and backward time for one microbatch + the forward recompute re-runs)

with each block costed by the projection's own (cached) block costs. Block costs depend on the shape
context and the group placement, not on VP or the schedule, so the bound needs one evaluation per
distinct (TP, CP, SP, MBS, EP, ETP, PP, DP, sharding, recompute): far fewer than the legal layouts.
It leaves out the bubble, the tail and the imbalance between ranks, so it is never below the
projection's step time (tested on every legal layout of small jobs): tokens/s/GPU <= `upper_bound`.

`primus.solver.search.best_first` scores layouts in decreasing order of the bound and stops when the
bound falls below the k-th best score found: the same k best an exhaustive scoring would return (ties
keep the given order), having projected only the layouts the bound cannot rule out. `primus project`
(free axes) and `fit`'s suggestions use it; `tune` can share it.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np

from primus.memory.shapes import balanced_layout
from primus.parallel import Layout, normalise
from primus.projection.cost import block_cost
from primus.projection.ops import OpContext
from primus.projection.project import Projector
from primus.projection.stages import chunk_keys
from primus.solver.vector import Candidates

#: Candidate columns the compute bound depends on: the shape context (TP, CP, SP, MBS, EP, ETP) and
#: recompute; M / PP = GBS x TP x CP / (MBS x world) needs nothing else.
COMPUTE_COLUMNS = ("tp", "cp", "sp", "mbs", "ep", "etp", "recompute")


class SpeedBound:
    """Upper bounds on tokens/s/GPU for layouts of one Projector's job."""

    def __init__(self, proj: Projector) -> None:
        self.proj = proj
        model = proj.model
        # every block of the model once, whatever the split: the same items in every PP x VP split
        flat = balanced_layout(model.num_layers, 1, 1, model.mtp_num_layers)
        self.items = Counter(k for keys in chunk_keys(model, flat) for k in keys)
        self.decoder = {k: n for k, n in self.items.items() if k.startswith(("dense", "moe"))}
        self._sum_cache: dict[tuple[int, ...], tuple[float, float, float]] = {}
        self._compute_cache: dict[tuple[str, OpContext], float] = {}
        self._fwd_cache: dict[tuple[str, OpContext], float] = {}
        job = proj.job
        self.tokens = job.spec.global_batch_size * job.spec.seq_len
        self.gpus = job.num_gpus

    def _sums(self, layout: Layout) -> tuple[float, float, float]:
        """(every block's forward + backward, the decoder's forward, the decoder's selective recompute)
        exposed seconds for one microbatch; shared by every sharding but FSDP and every recompute."""
        key = (layout.tp, layout.cp, int(layout.sp), layout.mbs, layout.ep, layout.etp, layout.pp, layout.dp,
               int(layout.sharding == "fsdp"))
        sums = self._sum_cache.get(key)
        if sums is None:
            proj = self.proj
            ctx, groups = proj.context(layout), proj.groups(layout)
            costs = {k: proj.block_cost(k, layout, ctx, groups) for k in self.items}
            sums = self._sum_cache[key] = (
                sum(n * (costs[k].fwd_total + costs[k].bwd_total) for k, n in self.items.items()),
                sum(n * costs[k].fwd_total for k, n in self.decoder.items()),
                sum(n * costs[k].selective for k, n in self.decoder.items()))
        return sums

    def step_floor(self, layout: Layout) -> float:
        """Seconds the step takes at least (see the module docstring): M / PP times one microbatch of
        every block's exposed forward and backward time, plus the forward that recompute re-runs."""
        proj = self.proj
        layout = normalise(layout, is_moe=proj.model.is_moe)
        total, fwd, selective = self._sums(layout)
        if layout.recompute == "full" and proj.recompute_method == "uniform":
            total += fwd
        elif layout.recompute == "selective" and not proj.op_sac:
            total += selective
        m = layout.num_microbatches(proj.job.spec.global_batch_size)
        return m * total / layout.pp

    def upper_bound(self, layout: Layout) -> float:
        """tokens/s/GPU the projection cannot exceed for this layout."""
        floor = self.step_floor(layout)
        return float("inf") if floor <= 0 else self.tokens / floor / self.gpus

    def _compute(self, key: str, ctx: OpContext) -> float:
        """Forward + backward compute seconds of one block (its communication left out, so no groups)."""
        ck = (key, ctx)
        t = self._compute_cache.get(ck)
        if t is None:
            block = self.proj.block(key, ctx)
            cost = block_cost(replace(block, comms=()), self.proj.timer, {}, self.proj.cost_settings)
            t = self._compute_cache[ck] = cost.compute_fwd + cost.compute_bwd
            self._fwd_cache[ck] = cost.compute_fwd
        return t

    def compute_floor(self, layout: Layout) -> float:
        """A looser floor from compute alone (GEMM, attention, memory-bound kernels and the recomputed
        forward), which does not depend on where the ranks sit: one evaluation per shape context."""
        proj = self.proj
        ctx = proj.context(layout)
        per_mb = sum(n * self._compute(k, ctx) for k, n in self.items.items())
        if layout.recompute == "full" and proj.recompute_method == "uniform":
            per_mb += sum(n * self._fwd_cache[(k, ctx)] for k, n in self.decoder.items())
        m = layout.num_microbatches(proj.job.spec.global_batch_size)
        return m * per_mb / layout.pp

    def compute_bounds(self, cands: Candidates) -> np.ndarray:
        """tokens/s/GPU bounds from `compute_floor` for every row, one evaluation per distinct context."""
        if cands.n == 0:
            return np.zeros(0)
        keys = np.stack([np.asarray(cands.cols[c], dtype=np.int64) for c in COMPUTE_COLUMNS], axis=1)
        _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        floors = np.array([self.compute_floor(normalise(cands.layout(int(i)), is_moe=self.proj.model.is_moe))
                           for i in first])
        with np.errstate(divide="ignore"):
            values = np.where(floors > 0, self.tokens / np.maximum(floors, 1e-300) / self.gpus, np.inf)
        return values[inverse.reshape(-1)]
