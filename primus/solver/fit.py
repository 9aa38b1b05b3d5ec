"""`fit`: a proof that a job fits, or the minimal reason it does not and the nearest configs that do.

A proof is the ledger's per-stage bytes of the pinned layout (or, with free axes, of the legal
completion with the most headroom) together with every rule it satisfies and the ledger's
assumptions. A refusal is a minimal set of conflicting rules and pins: CP-SAT's sufficient
assumptions for infeasibility, shrunk by deletion until removing any member makes the question
feasible; plus the bytes over capacity, the nearest legal layouts (fewest pinned axes changed) and,
when nothing at all fits, the smallest node count at which something would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from primus.memory.evaluate import MemoryModel, MemoryReport
from primus.parallel import Layout
from primus.solver.api import Question
from primus.solver.core import (
    certify,
    closest_request_row,
    explain_structural,
    minimal_core,
    nearest_rows,
    violations,
)
from primus.solver.space import divisors

MAX_ALTERNATIVES = 5
MIN_NODES_SCAN = 256


@dataclass(frozen=True)
class Alternative:
    layout: Layout
    peak_bytes: int
    headroom_bytes: int
    changed: tuple[str, ...]


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

    def to_json(self, capacity: int) -> dict[str, Any]:
        doc: dict[str, Any] = {"fits": self.fits}
        r = self.report
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
             "changed": list(a.changed)} for a in self.alternatives]
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


def fit(question: Question, certify_core: bool = False) -> FitResult:
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
    alternatives = tuple(
        Alternative(v.cands.layout(r), int(v.peak[r]), capacity - int(v.peak[r]), tuple(p[4:] for p in changed))
        for r, changed in nearest_rows(v, MAX_ALTERNATIVES))
    min_nodes: int | None = None
    note: str | None = None
    if not alternatives:
        min_nodes, note = smallest_nodes(question)
    return FitResult(False, request, report, violated_rules=core, alternatives=alternatives, completed_axes=free,
                     min_nodes=min_nodes, min_nodes_note=note, notes=tuple(notes))


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
