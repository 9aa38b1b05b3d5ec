"""The rules in force for a question: built-in, the job's own, files, inline, minus `--without`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from primus.errors import InputError, did_you_mean
from primus.job import Job
from primus.paths import data_dir
from primus.rules.expr import Domain, Expr, names
from primus.rules.model import Rule, check_rule, inline_rules, inline_where, load_rule_file, rules_from_mappings

# Definitions rather than preferences: dp, edp and num_microbatches are derived from them, so a
# layout that breaks them cannot even be described. They cannot be removed with --without.
DEFINITIONAL = ("world-size", "moe-folding", "batch-divisible")


def builtin_rules() -> tuple[Rule, ...]:
    out: list[Rule] = []
    for path in sorted(data_dir("constraints").glob("*.yaml")):
        out.extend(load_rule_file(path, "built-in"))
    return tuple(out)


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]

    @cached_property
    def parsed(self) -> tuple[tuple[Rule, Expr], ...]:
        return tuple((r, r.parsed) for r in self.rules)

    def hard(self) -> tuple[tuple[Rule, Expr], ...]:
        return tuple(p for p in self.parsed if p[0].severity == "hard")

    def soft(self) -> tuple[tuple[Rule, Expr], ...]:
        return tuple(p for p in self.parsed if p[0].severity == "soft")

    def by_id(self, rule_id: str) -> Rule:
        for r in self.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)

    def uses_memory(self, expr: Expr) -> bool:
        from primus.solver.space import MEMORY_DOCS

        return bool(names(expr) & set(MEMORY_DOCS))


def assemble_rules(job: Job, domains: dict[str, Domain], *, rule_texts: Sequence[str] = (),
                   rule_files: Sequence[str] = (), without: Sequence[str] = (),
                   extra: Sequence[Rule] = ()) -> RuleSet:
    """All rules for a job, checked against the names and bounds of its space (exit 2 on any problem)."""
    located: list[tuple[Rule, str]] = [(r, f"constraints/{r.id}") for r in builtin_rules()]
    if job.spec.rules:
        located += [(r, job.where) for r in rules_from_mappings(job.spec.rules, job.where, "job")]
    for f in rule_files:
        located += [(r, f) for r in load_rule_file(Path(f), "user")]
    located += [(r, inline_where(r.require)) for r in inline_rules(list(rule_texts))]
    located += [(r, r.origin) for r in extra]
    seen: dict[str, Rule] = {}
    where_of: dict[str, str] = {}
    for r, where in located:
        if r.id in seen:
            raise InputError(where, f"rule {r.id}", f"id already defined in {where_of[r.id]}")
        seen[r.id] = r
        where_of[r.id] = where
    rules = [r for r, _ in located]
    for rid in without:
        if rid not in seen:
            raise InputError("--without", rid, f"no rule with this id{did_you_mean(rid, seen)}")
        if rid in DEFINITIONAL:
            raise InputError("--without", rid, "this rule defines dp / edp / num_microbatches and cannot be removed")
    kept = tuple(r for r in rules if r.id not in set(without))
    for r in kept:
        check_rule(r, domains, where_of[r.id])
    return RuleSet(kept)
