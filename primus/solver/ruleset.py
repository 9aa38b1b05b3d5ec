"""The rules in force for a question: built-in, the job's own, files, inline, minus `--without`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from primus.errors import InputError, did_you_mean
from primus.job import Job
from primus.paths import data_dir
from primus.rules.expr import LIMIT, Domain, Expr, names
from primus.rules.model import Rule, check_rule, inline_rules, inline_where, load_rule_file, rules_from_mappings

# Definitions rather than preferences: dp, edp and num_microbatches are derived from them, so a
# layout that breaks them cannot even be described. They cannot be removed with --without.
DEFINITIONAL = ("world-size", "moe-folding", "batch-divisible")
# How a pin Megatron-LM refuses is refused (`primus.solver.pins`): a VP without a pipeline builds no chunks and
# an EP without experts splits nothing, so no layout holds such a pin, with the rule or without it; the
# unsatisfiable core names them (`primus.solver.core.broken_definitions`). They cannot be removed either.
PIN_REFUSALS = ("interleaving-needs-pipeline", "ep-needs-experts")


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
        if rid in PIN_REFUSALS:
            raise InputError("--without", rid, "this rule is how a pin Megatron-LM refuses is refused (no layout "
                             "describes it) and cannot be removed")
    kept = tuple(r for r in rules if r.id not in set(without))
    for r in kept:
        try:
            check_rule(r, domains, where_of[r.id])
        except InputError as exc:
            if r.origin == "built-in" and "beyond the solver's range" in exc.reason:
                raise size_beyond_range(job, r.id, exc.reason) from None
            raise
    return RuleSet(kept)


def largest_checked_world(job: Job) -> int:
    """The largest world size W at which the built-in rules' products stay within the solver's 64-bit
    range (`primus.rules.expr.LIMIT`) whatever divides W: TP, CP and DP (or ETP, EP and EDP) are each at
    most W and PP at most num_layers + 2, so `tp * cp * dp * pp` is at most W³ × (num_layers + 2)."""
    pp_max = job.model.num_layers + 2
    lo, hi = 1, 1 << 21
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if mid ** 3 * pp_max <= LIMIT:
            lo = mid
        else:
            hi = mid - 1
    return lo


def size_beyond_range(job: Job, rule_id: str, reason: str) -> InputError:
    """A job too large for the built-in rules to be checked exactly: refused on the job's size field
    (`gpus` or `nodes`), with the size that would be answered, not as a fault of the rule file."""
    gpn = job.cluster.gpus_per_node
    limit = largest_checked_world(job) // gpn * gpn  # a job larger than a node takes whole nodes
    field, size = ("gpus", f"{limit:,} GPUs") if job.spec.gpus is not None else (
        "nodes", f"{limit // gpn:,} nodes of {gpn}")
    return InputError(job.where, field, f"{job.num_gpus:,} GPUs is beyond the sizes the solver checks exactly: "
                      f"in rule {rule_id}, {reason}; for {job.model.name} ({job.model.num_layers} layers) "
                      f"any size up to {size} is within range")
