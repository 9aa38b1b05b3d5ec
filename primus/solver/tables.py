"""The ledger's pieces tabulated over the few axes each depends on.

Both the CP-SAT model and the vectorised enumerator read these tables, and both combine them with the
ledger's own arithmetic (`primus.memory.ledger.combine`), so the solver's bytes are the ledger's bytes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from functools import cached_property

import numpy as np

from primus.job import Job
from primus.memory.activations import ActContext
from primus.memory.evaluate import MemoryModel
from primus.memory.shapes import PipelineKey, StageShape, stage_classes, stage_shapes
from primus.memory.units import ActUnits, ParamUnits, act_units, param_units
from primus.parallel import RECOMPUTES, Layout
from primus.solver.space import Space

SHAPE_FIELDS = tuple(f.name for f in fields(StageShape))
PARAM_FIELDS = tuple(f.name for f in fields(ParamUnits))
ACT_FIELDS = tuple(f.name for f in fields(ActUnits))


class LedgerTables:
    """Memoised access to stage shapes, parameter units and activation units for one job."""

    def __init__(self, job: Job, space: Space | None = None) -> None:
        self.job = job
        self.space = space or Space(job)
        self.memory = MemoryModel(job)
        self.model = job.model
        self.method = self.memory.recompute_method
        self._shapes: dict[tuple[int, ...], tuple[StageShape, ...]] = {}
        self._params: dict[tuple[int, int, int], ParamUnits] = {}
        self._acts: dict[tuple[int, int, bool, int, int, str], ActUnits] = {}

    @cached_property
    def num_slots(self) -> int:
        """Stage slots the peak is taken over, the same number at every PP x VP: 3 ({0, 1, PP−1}, enough
        for Megatron's own splits of layers that all weigh the same), or the largest PP at which any rank may
        be the worst: an explicit layout there (the job's, or the one its stack's recipe names,
        `Job.pipeline_at`), or at any PP layers that differ along depth (`uniform_depth`)."""
        pairs = self.space.split_pairs
        layouts = [pp for (pp, vp) in pairs
                   if not self.uniform_depth or self.job.pipeline_at(pp, vp).layout is not None]
        return max([3, *layouts])

    @cached_property
    def uniform_depth(self) -> bool:
        """Every decoder layer weighs the same on every rank: one layer kind (all dense or all MoE) and no
        listed-layer recompute; otherwise any middle rank may be the worst (`stage_classes`)."""
        kinds = set(self.model.moe_layers)
        return len(kinds) <= 1 and self.memory.recompute_layer_ids is None

    def slot_stages(self, pp: int, vp: int) -> tuple[int, ...]:
        """Stage index of each slot at PP x VP (`slot_stage`): the first slots the first stages, the last
        slot always the last stage, slots beyond PP − 1 aliasing it. Every stage an explicit layout may
        make the worst is in a slot (PP is at most `num_slots` there); for Megatron's own splits the
        classes {0, 1, PP−1} are (`stage_classes`)."""
        out = tuple(slot_stage(i, self.num_slots, pp) for i in range(self.num_slots))
        assert set(stage_classes(pp, self.job.pipeline_at(pp, vp), self.uniform_depth)) <= set(out)
        return out

    def shapes(self, pp: int, vp: int, microbatches: int, recompute: str, recompute_num_layers: int | None
               ) -> tuple[StageShape, ...]:
        memo_key = (pp, vp, microbatches, recompute == "full", recompute_num_layers or 0)
        hit = self._shapes.get(memo_key)
        if hit is None:
            key = PipelineKey(pp=pp, vp=vp, num_microbatches=microbatches, recompute=recompute,
                              recompute_num_layers=recompute_num_layers, recompute_method=self.method,
                              recompute_layer_ids=self.memory.recompute_layer_ids,
                              offloaded_layers=self.memory.offloaded_layers)
            all_stages = stage_shapes(self.model, self.job.pipeline_at(pp, vp), key)
            hit = tuple(all_stages[i] for i in self.slot_stages(pp, vp))
            self._shapes[memo_key] = hit
        return hit

    def params(self, tp: int, ep: int, etp: int) -> ParamUnits:
        key = (tp, ep, etp)
        hit = self._params.get(key)
        if hit is None:
            hit = self._params[key] = param_units(self.model, tp, ep, etp)
        return hit

    def acts(self, tp: int, cp: int, sp: bool, mbs: int, etp: int, recompute: str) -> ActUnits:
        key = (tp, cp, sp, mbs, etp, recompute)
        hit = self._acts.get(key)
        if hit is None:
            layout = Layout(tp=tp, pp=1, vp=1, cp=cp, ep=1, etp=etp, dp=1, mbs=mbs, sp=sp, recompute=recompute,
                            sharding="none")
            ctx: ActContext = self.memory.act_context(layout)
            hit = self._acts[key] = act_units(self.model, ctx, recompute, self.model.padded_vocab_size(tp))
        return hit

    def comm_figure(self) -> int:
        return self.memory.comm_figure


def slot_stage(slot: int, num_slots: int, pp: int) -> int:
    """The stage a slot holds at PP `pp` (`LedgerTables.slot_stages`)."""
    return pp - 1 if slot == num_slots - 1 or slot >= pp - 1 else slot


class Gathered:
    """A per-distinct-key table and the row → key index: columns are expanded one at a time, so a
    million candidates never materialise a million-row copy of a wide table."""

    def __init__(self, table: np.ndarray, inverse: np.ndarray) -> None:
        self.table = table
        self.inverse = inverse

    def column(self, j: int) -> np.ndarray:
        return np.ascontiguousarray(self.table[:, j])[self.inverse]


def gather(keys: np.ndarray, compute: dict[tuple[int, ...], tuple[int, ...]] | None,
           fn: Callable[..., list[int]], width: int) -> Gathered:
    """Evaluate `fn` once per distinct row of `keys`.

    Rows are packed into one int64 per row (mixed radix) so the distinct-row search is a 1-D unique."""
    if len(keys) == 0:
        return Gathered(np.zeros((0, width), dtype=np.int64), np.zeros(0, dtype=np.int64))
    lo = keys.min(axis=0)
    span = keys.max(axis=0) - lo + 1
    packed = np.zeros(len(keys), dtype=np.int64)
    for j in range(keys.shape[1]):
        packed = packed * span[j] + (keys[:, j] - lo[j])
    uniq, first, inverse = np.unique(packed, return_index=True, return_inverse=True)
    table = np.empty((len(uniq), width), dtype=np.int64)
    for i, row_index in enumerate(first):
        table[i] = fn(*[int(v) for v in keys[row_index]])
    return Gathered(table, inverse.reshape(-1))


RECOMPUTE_INDEX = {r: i for i, r in enumerate(RECOMPUTES)}
