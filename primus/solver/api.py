"""The Python API under `fit`, `enumerate`, `project` and `tune`: one question = a job + rules + pins."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np

from primus.job import Job
from primus.parallel import Layout
from primus.rules.model import Rule
from primus.solver.ruleset import RuleSet, assemble_rules
from primus.solver.space import Space
from primus.solver.tables import LedgerTables
from primus.solver.vector import Candidates, Enumerator


@dataclass(frozen=True)
class LegalLayout:
    layout: Layout
    peak_bytes: int
    peak_stage: int


class Question:
    """A job with its rule set and pins: what is legal, what fits, what does not and why."""

    def __init__(self, job: Job, *, rule_texts: Sequence[str] = (), rule_files: Sequence[str] = (),
                 without: Sequence[str] = (), extra_rules: Sequence[Rule] = (),
                 pins: dict[str, Any] | None = None) -> None:
        self.job = job
        self.space = Space(job)
        self.ruleset: RuleSet = assemble_rules(job, self.space.name_domains(), rule_texts=rule_texts,
                                               rule_files=rule_files, without=without, extra=extra_rules)
        self.tables = LedgerTables(job, self.space)
        self.pins = dict(job.spec.parallel.pinned() if pins is None else pins)
        self.pins.pop("recompute_method", None)
        self.pins.pop("recompute_layer_ids", None)  # not an axis: the ledger tables read it from the job
        self.pins.pop("recompute_modules", None)  # likewise (the job's ActContext carries it)

    def with_pins(self, pins: dict[str, Any]) -> Question:
        q = object.__new__(Question)
        q.job, q.space, q.ruleset, q.tables = self.job, self.space, self.ruleset, self.tables
        q.pins = dict(pins)
        return q

    def with_job(self, job: Job) -> Question:
        """The same rules and pins for a variant of the job (an option changed)."""
        q = object.__new__(Question)
        q.job, q.ruleset, q.pins = job, self.ruleset, dict(self.pins)
        q.space = Space(job)
        q.tables = LedgerTables(job, q.space)
        return q

    @cached_property
    def candidates(self) -> Candidates:
        """Every legal layout (columns), in canonical order."""
        cands = Enumerator(self.tables, self.ruleset, self.pins).run()
        return cands.take(cands.canonical_order())

    def legal(self) -> list[LegalLayout]:
        c = self.candidates
        return [LegalLayout(c.layout(i), int(c.cols["peak_bytes"][i]), int(c.cols["peak_stage"][i]))
                for i in range(c.n)]

    def count(self) -> int:
        return self.candidates.n

    def most_headroom(self) -> LegalLayout | None:
        c = self.candidates
        if c.n == 0:
            return None
        i = int(np.argmin(c.cols["peak_bytes"]))  # first minimum in canonical order
        return LegalLayout(c.layout(i), int(c.cols["peak_bytes"][i]), int(c.cols["peak_stage"][i]))
