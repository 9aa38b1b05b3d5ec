"""The ledger's pieces tabulated over the few axes each depends on.

Both the CP-SAT model and the vectorised enumerator read these tables, and both combine them with the
ledger's own arithmetic (`primus.memory.ledger.combine`), so the solver's bytes are the ledger's bytes.
"""

from __future__ import annotations

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
        self.options = job.spec.pipeline
        self.method = self.memory.recompute_method

    @cached_property
    def num_slots(self) -> int:
        """Stage slots the peak is taken over: {0, 1, PP−1} (aliased for small PP), or every stage
        when an explicit layout fixes PP×VP."""
        if self.options.layout is not None:
            return max(self.space.pp_values)
        return 3

    def slot_stages(self, pp: int) -> tuple[int, ...]:
        """Stage index of each slot for a given PP (slots beyond PP alias the last stage)."""
        classes = stage_classes(pp, self.options)
        if self.options.layout is not None:
            return tuple(min(i, pp - 1) for i in range(self.num_slots))
        first, second, last = 0, min(1, pp - 1), pp - 1
        assert set(classes) <= {first, second, last}
        return first, second, last

    def shapes(self, pp: int, vp: int, microbatches: int, recompute: str, recompute_num_layers: int | None
               ) -> tuple[StageShape, ...]:
        key = PipelineKey(pp=pp, vp=vp, num_microbatches=microbatches, recompute=recompute,
                          recompute_num_layers=recompute_num_layers, recompute_method=self.method)
        all_stages = stage_shapes(self.model, self.options, key)
        return tuple(all_stages[i] for i in self.slot_stages(pp))

    def params(self, tp: int, ep: int, etp: int) -> ParamUnits:
        return param_units(self.model, tp, ep, etp)

    def acts(self, tp: int, cp: int, sp: bool, mbs: int, etp: int, recompute: str) -> ActUnits:
        layout = Layout(tp=tp, pp=1, vp=1, cp=cp, ep=1, etp=etp, dp=1, mbs=mbs, sp=sp, recompute=recompute,
                        sharding="none")
        ctx: ActContext = self.memory.act_context(layout)
        return act_units(self.model, ctx, recompute, self.model.padded_vocab_size(tp))

    def comm_figure(self) -> int:
        return self.memory.comm_figure


def gather(keys: np.ndarray, compute: dict[tuple[int, ...], tuple[int, ...]] | None, fn, width: int
           ) -> np.ndarray:
    """Evaluate `fn` once per distinct row of `keys` and broadcast: an (n, width) int64 array."""
    uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
    table = np.empty((len(uniq), width), dtype=np.int64)
    for i, row in enumerate(uniq):
        table[i] = fn(*[int(v) for v in row])
    return table[inverse.reshape(-1)]


RECOMPUTE_INDEX = {r: i for i, r in enumerate(RECOMPUTES)}
