"""The tuner's view of the legal set: every legal layout, scored on demand with the projection.

The legal set is the rule engine's answer for the job with its pins released (convergence settings
stay fixed); scores come from one cached `Projector`, so what depends on few axes is computed once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from primus.job import Job
from primus.parallel import Layout, normalise
from primus.projection import Projection, Projector
from primus.rules.model import Rule
from primus.solver.api import Question
from primus.solver.check import violated_rules
from primus.solver.ruleset import RuleSet

AXES = ("tp", "pp", "vp", "cp", "ep", "etp", "mbs", "sp", "recompute", "sharding")
PARALLEL_MIN = 4_000  # below this, forking costs more than it saves

_WORKER: dict[str, TuneSpace] = {}  # set in forked scoring workers only (see score_many)


def _set_worker_space(space: TuneSpace) -> None:
    _WORKER["space"] = space


def _score_slice(indices: list[int]) -> list[tuple[float, float, dict[str, float]]]:
    space = _WORKER["space"]
    out = []
    for i in indices:
        s = space.score(i)
        out.append((s.tokens_per_s_per_gpu, s.step_time_s, s.breakdown))
    return out
# Ordering heuristic for guided search only (never a score, never reported): a few percent per doubling
# of the TP x CP group, so that among equal-bubble layouts the less chatty are looked at first.
PROXY_TP_PENALTY_PER_DOUBLING = 0.05


def layout_key(layout: Layout) -> Layout:
    """Normalised layouts are their own keys (frozen, hashable)."""
    return layout


@dataclass(frozen=True)
class Scored:
    layout: Layout
    tokens_per_s_per_gpu: float
    step_time_s: float
    peak_bytes: int
    breakdown: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {"parallel": self.layout.as_parallel(), "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
                "step_time_s": self.step_time_s, "peak_bytes": self.peak_bytes}


class TuneSpace:
    """Legal layouts of a job under a rule set, and their projected scores."""

    def __init__(self, job: Job, projector: Projector, *, rule_texts: Sequence[str] = (),
                 rule_files: Sequence[str] = (), without: Sequence[str] = (), extra_rules: Sequence[Rule] = (),
                 rules: Sequence[Rule] | None = None) -> None:
        """`rules`, when given, is the exact rule set in force instead of the one assembled from the job
        and the rule arguments: a recorded run's (`inputs/rules.yaml`), as `primus audit verify` re-runs it."""
        self.job = job
        self.projector = projector
        self.rule_args = {"rule_texts": tuple(rule_texts), "rule_files": tuple(rule_files),
                          "without": tuple(without)}
        self.extra_rules = tuple(extra_rules)
        self.rules = None if rules is None else tuple(rules)
        self.question = Question(job, pins={}, extra_rules=self.extra_rules, **self.rule_args)
        if self.rules is not None:
            self.question.ruleset = RuleSet((*self.rules, *self.extra_rules))

    def with_rules(self, extra: Sequence[Rule]) -> TuneSpace:
        """The same job with more rules (e.g. an LLM's hypothesis), sharing the projector."""
        return TuneSpace(self.job, self.projector, extra_rules=(*self.extra_rules, *extra), rules=self.rules,
                         **self.rule_args)

    @cached_property
    def layouts(self) -> list[Layout]:
        c = self.question.candidates
        return [c.layout(i) for i in range(c.n)]

    @cached_property
    def peaks(self) -> list[int]:
        return [int(v) for v in self.question.candidates.cols["peak_bytes"].tolist()]

    @cached_property
    def index(self) -> dict[Layout, int]:
        return {lay: i for i, lay in enumerate(self.layouts)}

    @property
    def count(self) -> int:
        return self.question.candidates.n

    def find(self, layout: Layout) -> int | None:
        return self.index.get(normalise(layout, is_moe=self.job.model.is_moe))

    def why_not(self, layout: Layout) -> list[str]:
        return violated_rules(self.question, layout) or ["not-in-legal-set"]

    def score(self, i: int) -> Scored:
        p = self.projector.project(self.layouts[i], "fast", peak=(self.peaks[i], True), explain=False)
        return Scored(self.layouts[i], p.tokens_per_s_per_gpu, p.step_time_s, self.peaks[i], dict(p.breakdown))

    def score_many(self, indices: Sequence[int], workers: int) -> list[Scored]:
        """Scores of many layouts, in the order given. With several workers the indices are split in
        contiguous slices scored by forked processes (each with its own warm caches) and merged back in
        order, so the result does not depend on the number of workers."""
        if workers <= 1 or len(indices) < PARALLEL_MIN:
            return [self.score(i) for i in indices]
        import multiprocessing

        ctx = multiprocessing.get_context("fork")
        size = -(-len(indices) // workers)
        chunks = [list(indices[k * size:(k + 1) * size]) for k in range(workers)]
        with ctx.Pool(workers, initializer=_set_worker_space, initargs=(self,)) as pool:
            parts = pool.map(_score_slice, chunks)
        out: list[Scored] = []
        for chunk, part in zip(chunks, parts, strict=True):
            for i, (tok, step, breakdown) in zip(chunk, part, strict=True):
                out.append(Scored(self.layouts[i], tok, step, self.peaks[i], breakdown))
        return out

    def explain(self, layout: Layout, method: str = "auto") -> Projection:
        i = self.find(layout)
        peak = (self.peaks[i], True) if i is not None else None
        return self.projector.project(layout, method, peak=peak)

    def neighbours(self, i: int, radius: int = 2) -> list[int]:
        """Legal layouts differing from layout i in at most `radius` axes (canonical order)."""
        c = self.question.candidates.cols
        diff = np.zeros(self.count, dtype=np.int64)
        for axis in AXES:
            diff += c[axis] != c[axis][i]
        return [int(j) for j in np.flatnonzero((diff > 0) & (diff <= radius))]

    def compute_bound_s(self, i: int) -> float:
        """A lower bound on the step time: the model FLOPs per GPU (plus recomputed forward) at the dense
        peak, with no communication, bubble or inefficiency."""
        p = self.projector
        lay = self.layouts[i]
        tokens = self.job.spec.global_batch_size * self.job.spec.seq_len
        factor = 4 / 3 if lay.recompute == "full" else 1.0
        return tokens * p.model_flops_per_token * factor / (self.job.num_gpus * p.peak_flops)

    def proxy_order(self) -> list[int]:
        """Legal layouts ordered by a cheap throughput proxy (compute bound × pipeline bubble × a TP
        penalty): where guided search looks first."""
        c = self.question.candidates.cols
        m = c["num_microbatches"].astype(float)
        bubble = 1 + (c["pp"] - 1) / (m * c["vp"])
        recompute = np.where(c["recompute"] == 2, 4 / 3, 1.0)
        tp_cost = 1 + PROXY_TP_PENALTY_PER_DOUBLING * np.log2(c["tp"] * c["cp"])
        proxy = bubble * recompute * tp_cost
        return [int(j) for j in np.lexsort((np.arange(self.count), proxy))]
