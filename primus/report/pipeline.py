"""The pipeline timeline of one layout, exactly as the projection timed it.

`Projector.project(..., "simulate")` runs the discrete-event simulation of the schedule but returns only
the figures; the per-op starts and ends stay inside. Rather than re-deriving every chunk's forward and
backward time here (a second copy of the projection that could drift from the first), the report
records the `PipelineTiming` the projector itself computed, by wrapping the one function it calls for it
for the duration of one projection.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from primus.parallel import Layout
from primus.projection import Projection, Projector
from primus.projection.timing import PipelineTiming
from primus.report.charts import TimelineData


@contextmanager
def _recording() -> Iterator[list[PipelineTiming]]:
    # `primus.projection.project` is also the name of a function the package re-exports: fetch the module.
    module = importlib.import_module("primus.projection.project")
    seen: list[PipelineTiming] = []
    original = module.time_pipeline

    def record(*args: Any, **kwargs: Any) -> PipelineTiming:
        timing = original(*args, **kwargs)
        seen.append(timing)
        return timing

    setattr(module, "time_pipeline", record)  # noqa: B010  (a module attribute, restored below)
    try:
        yield seen
    finally:
        setattr(module, "time_pipeline", original)  # noqa: B010


def simulate(projector: Projector, layout: Layout, peak: tuple[int, bool] | None) -> tuple[Projection, PipelineTiming]:
    """The simulated projection of `layout` and the pipeline timing behind it."""
    with _recording() as seen:
        p = projector.project(layout, "simulate", peak=peak)
    if not seen:
        raise RuntimeError("the projection did not time a pipeline")
    return p, seen[-1]


def timeline_data(timing: PipelineTiming, step_time: float) -> TimelineData:
    """Per-rank ops, the P2P transfers each rank waited on, and the step time, for the chart."""
    schedule, tl = timing.schedule, timing.timeline
    if schedule is None or tl is None:
        raise ValueError("a timeline needs the simulated schedule (method 'simulate')")
    offsets = schedule.rank_offsets
    deps = schedule.dep_index
    flat_end = [x for row in tl.ends for x in row]
    owner = [r for r in range(schedule.pp) for _ in range(offsets[r], offsets[r + 1])]
    ops = []
    transfers = []
    for r, row in enumerate(schedule.ops_by_rank):
        ops.append(tuple((tl.starts[r][k], tl.ends[r][k], op.kind, op.chunk, op.microbatch)
                         for k, op in enumerate(row)))
        for k in range(len(row)):
            d = deps[offsets[r] + k]
            if d >= 0 and owner[d] != r and timing.p2p > 0:
                transfers.append((r, flat_end[d], flat_end[d] + timing.p2p))
    return TimelineData(tuple(ops), tuple(transfers), tuple(timing.ends), step_time)
