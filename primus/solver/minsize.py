"""The nearest job sizes, below and above, at which some layout fits, when none does at the size asked for.

Each candidate size is asked only whether one legal layout exists (`Enumerator.first`), never how
many. Sizes too small to hold the model's state at all are skipped without enumerating: whatever the
layout, every parameter keeps its fp32 main copy, both Adam moments and a gradient somewhere (every
sharding stores at least these, once), so the busiest rank holds at least their total over the world
size (`state_floor_bytes`); when that exceeds the capacity the `memory` rule refuses every layout.
"""

from __future__ import annotations

from dataclasses import replace

from primus.job import Job
from primus.memory.ledger import StateWidths
from primus.memory.units import param_units
from primus.solver.api import Question
from primus.solver.space import divisors
from primus.solver.vector import Enumerator

#: Whole nodes tried above the job's size before `fit` says nothing fits (a search budget).
MIN_NODES_SCAN = 256
#: The built-in memory rule the pre-check stands in for (constraints/memory.yaml).
MEMORY_RULE = ("memory", "peak_bytes <= hbm_bytes - reserve_bytes")


def model_state_params(job: Job) -> int:
    """Parameters the ledger holds for the whole model at TP = EP = ETP = 1 and one stage: every split
    of the model over ranks holds at least these in total (shards round up, copies add)."""
    m = job.model
    pu = param_units(m, 1, 1, 1)
    n_moe = m.num_moe_layers
    return ((m.num_layers - n_moe) * pu.dense_layer + n_moe * (pu.moe_layer_dense + pu.moe_layer_expert)
            + m.mtp_num_layers * (pu.mtp_dense + pu.mtp_expert) + pu.embedding + pu.output)


def state_floor_bytes(job: Job, world: int) -> int:
    """A lower bound on the peak bytes of every layout of `job` on `world` GPUs: the main copy, the
    moments and the gradient of every parameter (the ledger's widths), averaged over the ranks."""
    w = StateWidths.of(job.spec.optimizer, job.spec.fp8_param_gather)
    return model_state_params(job) * (w.optimizer + w.grad) // world


def fits_at(question: Question, world: int, capacity: int, memory_rule: bool) -> bool:
    """Whether some layout fits the job at `world` GPUs (same rules, pins released): one existence
    question that stops at the first legal layout, skipped when the model's state cannot fit at all."""
    job = question.job
    if memory_rule and state_floor_bytes(job, world) > capacity:
        return False  # too small to hold the model's state in any layout
    spec = job.spec.model_copy(update={"nodes": None, "gpus": world})
    trial_job = replace(job, spec=spec)
    trial = question.with_job(trial_job).with_pins({})  # same rules, pins released
    return Enumerator(trial.tables, trial.ruleset, {}).first().n > 0


def _memory_rule(question: Question) -> bool:
    return any((r.id, r.require) == MEMORY_RULE for r, _ in question.ruleset.hard())


def smallest_size(question: Question) -> tuple[int | None, str | None]:
    """The fewest GPUs larger than the job (same convergence settings, pins released) at which some
    layout fits: a job smaller than a node tries the sub-node sizes that divide a node first (1, 2, 4
    of 8), then whole nodes. Returns the GPU count; `nodes_text` says it in nodes and GPUs."""
    job = question.job
    gpn = job.cluster.gpus_per_node
    sizes = [g for g in divisors(gpn) if g > job.num_gpus]
    sizes += [n * gpn for n in range(job.num_nodes + 1, job.num_nodes + MIN_NODES_SCAN + 1)]
    capacity = question.space.reserves.capacity_bytes
    memory_rule = _memory_rule(question)
    for world in sizes:
        if fits_at(question, world, capacity, memory_rule):
            return world, None
    return None, f"no layout fits on up to {job.num_nodes + MIN_NODES_SCAN} nodes ({sizes[-1]:,} GPUs)"


def largest_size_below(question: Question) -> int | None:
    """The most GPUs fewer than the job's at which some layout fits: whole nodes down from one fewer
    (at most MIN_NODES_SCAN of them), then the sub-node sizes that divide a node, largest first. The
    search stops at the first size too small to hold the model's state, since every smaller one is
    too (the floor only grows as the world shrinks). Llama 3.1 8B on 96 H100 at global batch 64 fits at
    64 GPUs, not at 88, 80 or 72 (a factor 11, 5 or 9 that no axis can hold)."""
    job = question.job
    gpn = job.cluster.gpus_per_node
    sizes = [n * gpn for n in range(job.num_nodes - 1, max(0, job.num_nodes - 1 - MIN_NODES_SCAN), -1)
             if n * gpn < job.num_gpus]
    sizes += [g for g in sorted(divisors(gpn), reverse=True) if g < min(job.num_gpus, gpn)]
    capacity = question.space.reserves.capacity_bytes
    memory_rule = _memory_rule(question)
    for world in sizes:
        if memory_rule and state_floor_bytes(job, world) > capacity:
            return None
        if fits_at(question, world, capacity, memory_rule):
            return world
    return None
