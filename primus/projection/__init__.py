"""The projection oracle: how fast a complete layout trains, and why.

    from primus.projection import project, complete_and_project, load_profile
    p = project(job, layout)            # Projection: step_time_s, tokens/s/GPU, MFU, breakdown, ...
    best = complete_and_project(job)    # the fastest legal completion of the job's free axes

Modules, one job each: `profile` (calibration parameters), `ops` and `ends` (per-rank kernel
inventory of each block: decoder layers; embedding, loss, MTP), `timer` (KernelTimer: analytic,
measured, recording), `placement` + `collectives` (where groups sit, alpha-beta costs), `cost` (block
times and the overlap inside a block), `stages` (chunks and per-rank parameters), `timing` (pipeline
simulation and closed forms), `tail` (DP reduction, optimizer), `project` (the Projector), `complete`
(completion and ranking), `report` (the result).
"""

from primus.projection.complete import NothingFits, complete_and_project, rank_layouts
from primus.projection.placement import DEFAULT_ORDER, GroupShape, Placement
from primus.projection.profile import Profile, gemm_format, load_profile, profile_from_mapping
from primus.projection.project import BREAKDOWN_ORDER, Projector, project, projector_for
from primus.projection.report import Projection
from primus.projection.timer import (
    AnalyticTimer,
    AttentionCall,
    CollectiveCall,
    GemmCall,
    KernelTimer,
    MeasuredTimer,
    MemoryCall,
    RecordingTimer,
    Timed,
)

__all__ = [
    "BREAKDOWN_ORDER",
    "DEFAULT_ORDER",
    "AnalyticTimer",
    "AttentionCall",
    "CollectiveCall",
    "GemmCall",
    "GroupShape",
    "KernelTimer",
    "MeasuredTimer",
    "MemoryCall",
    "NothingFits",
    "Placement",
    "Profile",
    "Projection",
    "Projector",
    "RecordingTimer",
    "Timed",
    "complete_and_project",
    "gemm_format",
    "load_profile",
    "profile_from_mapping",
    "project",
    "projector_for",
    "rank_layouts",
]
