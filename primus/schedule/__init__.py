"""Pipeline stage layout, pipeline schedules, and their discrete-event timing.

Memory and time come from the same objects: :func:`build_layout` says which layers each model chunk
holds, :func:`build_schedule` orders the chunk passes on each rank, :func:`in_flight` /
:func:`peak_activation` read the activation peak off that order, and :func:`simulate` times it.
"""

from primus.schedule.layout import Item, PipelineLayout, build_layout, parse_layout_string
from primus.schedule.pipeline import (
    SCHEDULES,
    InFlight,
    Op,
    Schedule,
    build_schedule,
    in_flight,
    peak_activation,
    schedule_table,
)
from primus.schedule.simulate import (
    Timeline,
    closed_form_1f1b,
    closed_form_interleaved,
    one_f_one_b_p2p_hops,
    simulate,
)

__all__ = [
    "SCHEDULES",
    "InFlight",
    "Item",
    "Op",
    "PipelineLayout",
    "Schedule",
    "Timeline",
    "build_layout",
    "build_schedule",
    "closed_form_1f1b",
    "closed_form_interleaved",
    "in_flight",
    "one_f_one_b_p2p_hops",
    "parse_layout_string",
    "peak_activation",
    "schedule_table",
    "simulate",
]
