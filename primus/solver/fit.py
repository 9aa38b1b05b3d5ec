"""`fit`: a proof that a job fits, or the minimal reason it does not and the nearest configs that do.

A proof is the ledger's per-stage bytes of the pinned layout (or, with free axes, of the legal
completion with the most headroom) together with every rule it satisfies and the ledger's
assumptions. A refusal is a minimal set of conflicting rules and pins: CP-SAT's sufficient
assumptions for infeasibility, shrunk by deletion until removing any member makes the question
feasible; plus the bytes over capacity, the nearest legal layouts (fewest pinned axes changed) and,
when nothing at all fits, the smallest node count at which something would.

A nearest layout changes some pins; the axes the job leaves free are then completed. Least memory is
the wrong completion to suggest (it picks CP 32 over DP 32 for a 70B model), so when the caller gives a
`speed` (projected tokens/s/GPU of a layout; the CLI passes the projection oracle's) each suggestion is
the fastest completion of its pin assignment, and says how fast. The solver itself knows nothing of
projection: without `speed` the completion with the least memory is shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from primus.memory.evaluate import MemoryModel, MemoryReport
from primus.memory.ledger import Reserves
from primus.parallel import Layout
from primus.solver.api import Question
from primus.solver.core import (
    certify,
    closest_request_row,
    explain_structural,
    minimal_core,
    nearest_groups,
    violations,
)
from primus.solver.space import divisors

MAX_ALTERNATIVES = 5
#: Pin assignments projected before the fastest MAX_ALTERNATIVES are shown (nearest first, least memory
#: next): a search budget that keeps a refusal well under a second, not a modelling constant.
SCORED_GROUPS = 4 * MAX_ALTERNATIVES
MIN_NODES_SCAN = 256
#: Projected tokens/s/GPU of a legal layout, given its peak bytes (the ranking key for completions).
Speed = Callable[[Layout, int], float]


@dataclass(frozen=True)
class Alternative:
    layout: Layout
    peak_bytes: int
    headroom_bytes: int
    changed: tuple[str, ...]
    tokens_per_s_per_gpu: float | None = None  # when completed by projected speed


@dataclass(frozen=True)
class FitResult:
    fits: bool
    layout: Layout | None  # the proof (fits) or the closest evaluation of the request (does not fit)
    report: MemoryReport | None
    satisfied_rules: tuple[str, ...] = ()
    violated_rules: tuple[str, ...] = ()
    alternatives: tuple[Alternative, ...] = ()
    min_nodes: int | None = None
    min_nodes_note: str | None = None
    completed_axes: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_json(self, capacity: int, reserves: Reserves | None = None) -> dict[str, Any]:
        """The fit document; with the job's `reserves`, also the three-way verdict: `verdict` (fits,
        tight, does not fit), `tight` and `tight_by_bytes` (how far the headroom falls short of the
        allocator reserve), and `over_hbm` (the peak exceeds the device's raw memory too)."""
        doc: dict[str, Any] = {"fits": self.fits}
        r = self.report
        if reserves is not None and r is not None:
            verdict = reserves.verdict(r.peak_bytes) if self.fits else "does not fit"
            doc["verdict"] = verdict
            doc["tight"] = verdict == "tight"
            if verdict == "tight":
                doc["tight_by_bytes"] = reserves.tight_band_bytes - (capacity - r.peak_bytes)
            doc["allocator_reserve_bytes"] = reserves.fragmentation_bytes
            doc["over_hbm"] = r.peak_bytes > reserves.hbm_bytes
        doc["parallel"] = self.layout.as_parallel() if self.layout else None
        doc["completed_axes"] = list(self.completed_axes)
        doc["peak_bytes"] = r.peak_bytes if r else None
        doc["capacity_bytes"] = capacity
        doc["headroom_bytes"] = (capacity - r.peak_bytes) if r else None
        doc["stages"] = [
            {"stage": s.stage, "params": s.params, "bytes": s.bytes, "over_capacity_bytes": max(0, s.bytes - capacity),
             "breakdown": s.breakdown, "dominant_terms": dominant_terms(s.terms)}
            for s in r.stages] if r else []
        doc["satisfied_rules"] = list(self.satisfied_rules)
        doc["violated_rules"] = list(self.violated_rules)
        doc["alternatives"] = [
            {"parallel": a.layout.as_parallel(), "peak_bytes": a.peak_bytes, "headroom_bytes": a.headroom_bytes,
             "changed": list(a.changed),
             **({"tokens_per_s_per_gpu": a.tokens_per_s_per_gpu} if a.tokens_per_s_per_gpu is not None else {})}
            for a in self.alternatives]
        if self.min_nodes is not None or self.min_nodes_note:
            doc["min_nodes"] = self.min_nodes
            if self.min_nodes_note:
                doc["min_nodes_note"] = self.min_nodes_note
        doc["assumptions"] = list(r.assumptions) if r else []
        doc["notes"] = list(self.notes)
        return doc


def dominant_terms(terms: dict[str, int], k: int = 3) -> list[dict[str, Any]]:
    ranked = sorted(terms.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return [{"term": name, "bytes": value} for name, value in ranked if value > 0]


def meaningful_free_axes(question: Question) -> tuple[str, ...]:
    """Axes the job leaves free that mean something for this model (EP/ETP only for MoE)."""
    axes = ["tp", "pp", "vp", "cp", "mbs", "sp", "recompute", "sharding"]
    if question.job.model.is_moe:
        axes[4:4] = ["ep", "etp"]
    return tuple(a for a in axes if a not in question.pins)


def fit(question: Question, certify_core: bool = False, speed: Speed | None = None) -> FitResult:
    job = question.job
    hard_ids = tuple(r.id for r, _ in question.ruleset.hard())
    free = meaningful_free_axes(question)
    mm = MemoryModel(job)
    best = question.most_headroom()
    if best is not None:
        proof = mm.evaluate(best.layout, strict=False)
        return FitResult(True, best.layout, proof, satisfied_rules=hard_ids, completed_axes=free)
    v = violations(question)
    core = explain_structural(v, minimal_core(v))
    notes: list[str] = []
    if certify_core and core:
        certified = certify(question, tuple(n for n in core if n.startswith("pin:") or n in v.names))
        notes.append("core certified by CP-SAT (INFEASIBLE under its assumption literals)" if certified
                     else "CP-SAT did NOT confirm this core")
    row = closest_request_row(v)
    request = v.cands.layout(row) if row is not None else None
    report = mm.evaluate(request, strict=False) if request is not None else None
    capacity = question.space.reserves.capacity_bytes
    groups = nearest_groups(v, MAX_ALTERNATIVES if speed is None else SCORED_GROUPS)
    alternatives = tuple(_alternative(v, rows, tuple(p[4:] for p in changed), capacity, speed)
                         for rows, changed in groups)
    if speed is not None:  # fewest pins changed first, then fastest
        alternatives = tuple(sorted(alternatives, key=lambda a: (len(a.changed), -(a.tokens_per_s_per_gpu or 0.0)))
                             [:MAX_ALTERNATIVES])
    min_nodes: int | None = None
    note: str | None = None
    if not alternatives:
        min_nodes, note = smallest_nodes(question)
    return FitResult(False, request, report, violated_rules=core, alternatives=alternatives, completed_axes=free,
                     min_nodes=min_nodes, min_nodes_note=note, notes=tuple(notes))


def _alternative(v: Any, rows: list[int], changed: tuple[str, ...], capacity: int,
                 speed: Speed | None) -> Alternative:
    """One pin assignment's suggestion: its fastest completion when `speed` is given (ties keep the
    least-memory order), else its least-memory one."""
    best, tokens = rows[0], None
    if speed is not None:
        scores = [speed(v.cands.layout(r), int(v.peak[r])) for r in rows]
        k = max(range(len(rows)), key=lambda i: (scores[i], -i))
        best, tokens = rows[k], scores[k]
    peak = int(v.peak[best])
    return Alternative(v.cands.layout(best), peak, capacity - peak, changed, tokens)


def smallest_nodes(question: Question) -> tuple[int | None, str | None]:
    """The fewest nodes (same convergence settings, pins released) at which some layout fits."""
    from primus.job import Job

    job = question.job
    gpn = job.cluster.gpus_per_node
    start = job.num_nodes
    for nodes in range(start + 1, start + MIN_NODES_SCAN + 1):
        world = nodes * gpn
        if not any(job.spec.global_batch_size % d == 0 for d in divisors(world)):
            continue
        spec = job.spec.model_copy(update={"nodes": nodes, "gpus": None})
        trial_job = Job(spec, job.model, job.cluster, job.where, job.base_dir)
        trial = Question(trial_job, pins={})
        trial.ruleset = question.ruleset  # same rules
        if trial.count() > 0:
            return nodes, None
    return None, f"no layout fits on up to {start + MIN_NODES_SCAN} nodes"
