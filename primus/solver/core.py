"""Why a question has no answer: the violation matrix, minimal cores, nearest legal layouts.

Every structurally possible layout (world size, batch and MoE folding hold by construction) is
evaluated once against every hard rule and every pin, giving a boolean matrix: row = layout, column =
constraint, True = violated. A set of constraints is feasible iff some row violates none of them, so a
minimal core is found by deletion in microseconds per test, and the nearest legal layouts are the rows
that violate no rule and the fewest pins. `certify` re-checks a core with CP-SAT's assumption
literals (`SufficientAssumptionsForInfeasibility`), the engine the rules also compile to.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from primus.rules.vector import evaluate_vector
from primus.solver.api import Question
from primus.solver.pins import PIN_AXES, pin_mask
from primus.solver.ruleset import DEFINITIONAL, RuleSet
from primus.solver.space import divisors
from primus.solver.vector import Candidates, Enumerator, add_memory_columns

T = TypeVar("T")


@dataclass
class Violations:
    """The violation matrix. Memory-reading columns are filled lazily: the ledger is evaluated only for
    rows that pass every other constraint of a test, which keeps explaining a refusal cheap even when
    the structurally possible space has millions of rows."""

    names: list[str]  # rule ids, then pin:<axis>
    matrix: np.ndarray  # (rows, constraints) True where violated (memory columns valid where `known`)
    cands: Candidates
    question: Question
    memory_columns: list[int]
    known: np.ndarray
    peak: np.ndarray

    def ensure_memory(self, rows: np.ndarray) -> None:
        todo = rows[~self.known[rows]]
        if len(todo) == 0 or not self.memory_columns:
            self.known[todo] = True
            return
        sub = self.cands.take(todo)
        add_memory_columns(self.question.tables, sub)
        env = {**_facts(self.question), **sub.cols}
        hard = self.question.ruleset.hard()
        for col in self.memory_columns:
            expr = hard[col][1]
            self.matrix[todo, col] = ~evaluate_vector(expr, env, sub.n)
        self.peak[todo] = sub.cols["peak_bytes"]
        self.known[todo] = True

    def passing(self, active: list[int]) -> np.ndarray:
        """Rows violating none of the active constraints."""
        plain = [a for a in active if a not in self.memory_columns]
        mem = [a for a in active if a in self.memory_columns]
        ok = ~self.matrix[:, plain].any(axis=1) if plain else np.ones(self.cands.n, dtype=bool)
        rows = np.flatnonzero(ok)
        if mem and len(rows):
            self.ensure_memory(rows)
            rows = rows[~self.matrix[rows][:, mem].any(axis=1)]
        return rows

    def feasible(self, active: list[int]) -> bool:
        return len(self.passing(active)) > 0


def _facts(question: Question) -> dict[str, np.generic]:
    return {k: (np.bool_(v) if isinstance(v, bool) else np.int64(v)) for k, v in question.space.facts.items()}


def violations(question: Question) -> Violations:
    base = RuleSet(tuple(r for r in question.ruleset.rules if r.id in DEFINITIONAL))
    cands = Enumerator(question.tables, base, {}).run(with_memory=False)
    n = cands.n
    env = {**_facts(question), **cands.cols}
    names: list[str] = []
    columns: list[np.ndarray] = []
    memory_columns: list[int] = []
    for rule, expr in question.ruleset.hard():
        names.append(rule.id)
        if question.ruleset.uses_memory(expr):
            memory_columns.append(len(columns))
            columns.append(np.zeros(n, dtype=bool))
        else:
            columns.append(~evaluate_vector(expr, env, n))
    for axis in PIN_AXES:
        if axis in question.pins:
            names.append(f"pin:{axis}")
            columns.append(~pin_mask(cands.cols, axis, question.pins[axis], question.job.model.is_moe, n))
    matrix = np.stack(columns, axis=1) if columns else np.zeros((n, 0), dtype=bool)
    return Violations(names, matrix, cands, question, memory_columns, np.zeros(n, dtype=bool),
                      np.zeros(n, dtype=np.int64))


def deletion_order(name: str) -> tuple[int, str]:
    """Try to drop non-memory rules first, then pins, the memory rule last: cores then explain a refusal
    with the memory rule and the guilty pins whenever that is a valid explanation."""
    if name == "memory":
        return (2, name)
    return (1, name) if name.startswith("pin:") else (0, name)


def deletion_filter(members: Sequence[T], feasible: Callable[[list[T]], bool]) -> list[T]:
    """Drop each member in turn while the rest stays infeasible: what remains is infeasible and minimal
    (no member can be removed). `members` must be infeasible together; their order decides which of
    several minimal subsets is found."""
    current = list(members)
    for m in list(current):
        trial = [x for x in current if x != m]
        if not feasible(trial):
            current = trial
    return current


def minimal_core(v: Violations) -> tuple[str, ...]:
    """A subset of constraints with no satisfying layout, from which no member can be removed."""
    all_idx = list(range(len(v.names)))
    if v.feasible(all_idx):
        return ()
    current = deletion_filter(sorted(all_idx, key=lambda i: deletion_order(v.names[i])), v.feasible)
    return tuple(sorted((v.names[i] for i in current), key=deletion_order))


# The definition a pin breaks when no structurally possible layout has that value at all (the last
# resort of `broken_definitions`, when none of its arithmetic applies).
DEFINED_BY = {"tp": "world-size", "cp": "world-size", "pp": "world-size", "dp": "world-size",
              "ep": "moe-folding", "etp": "moe-folding", "mbs": "batch-divisible"}
_DENSE_FOLD = ("tp", "cp", "pp", "dp")
_MOE_FOLD = ("etp", "ep", "pp")


def broken_definitions(question: Question, pin_names: tuple[str, ...]) -> dict[str, str]:
    """The definitions a conflicting set of pins breaks, each with the arithmetic that shows it.

    Only a definition the pins break is named: TP2 × CP1 × PP1 on 8 GPUs folds into the world (DP4),
    so with a global batch of 63 sequences, which no DP4 × MBS divides, the pins break
    `batch-divisible`, not `world-size`."""
    pins = {n[4:]: question.pins[n[4:]] for n in pin_names if n[4:] in question.pins}
    world = question.space.world
    out: dict[str, str] = {}

    def fold(axes: tuple[str, ...], rule: str, formula: str) -> None:
        held = [(a, int(pins[a])) for a in axes if a in pins]
        if not held:
            return
        product = 1
        for _, value in held:
            product *= value
        complete = len(held) == len(axes)
        if (complete and product != world) or world % product:
            text = " × ".join(f"{a.upper()}{value}" for a, value in held)
            relation = "≠" if complete else "does not divide"
            out[rule] = f"{formula}: pinned {text} = {product:,} {relation} {world:,} GPUs"

    fold(_DENSE_FOLD, "world-size", "TP × CP × DP × PP = world size")
    if question.job.model.is_moe:
        fold(_MOE_FOLD, "moe-folding", "ETP × EP × EDP × PP = world size")
    if "world-size" not in out:
        batch = batch_break(question, pins)
        if batch:
            out["batch-divisible"] = batch
    if int(pins.get("vp") or 1) > 1 and pins.get("pp") == 1:
        out["interleaving-needs-pipeline"] = (f"Megatron-LM refuses a virtual pipeline without a pipeline: "
                                              f"pinned VP{pins['vp']} with PP1")
    if int(pins.get("ep") or 1) > 1 and not question.job.model.is_moe:
        out["ep-needs-experts"] = (f"Megatron-LM refuses expert parallelism without experts: pinned EP{pins['ep']} "
                                   f"for {question.job.model.name}, a dense model")
    if not out:  # none of the arithmetic above applies: name the definition by axis
        for name in pin_names:
            rule = DEFINED_BY.get(name[4:])
            if rule and rule not in out:
                out[rule] = f"no layout of {question.space.world:,} GPUs holds these pins together"
    return out


def batch_break(question: Question, pins: dict[str, Any]) -> str | None:
    """Why `pins` leave no whole number of microbatches per step, or None when some DP and MBS they
    allow make one (or when no DP folds the world at all, which is `world-size`'s to say). DP is what
    the world leaves of the TP, CP and PP sizes the pins allow; MBS is the pin, else any divisor of the
    global batch (Megatron-LM's num_microbatches_calculator: GBS % (MBS × DP) == 0)."""
    s = question.space
    world, gbs = s.world, question.job.spec.global_batch_size
    dense: dict[int, tuple[int, int, int]] = {}
    for tp in [int(pins["tp"])] if "tp" in pins else s.tp_values:
        for cp in [int(pins["cp"])] if "cp" in pins else s.cp_values:
            for pp in [int(pins["pp"])] if "pp" in pins else s.pp_values:
                dp, rest = divmod(world, tp * cp * pp)
                if rest == 0 and int(pins.get("dp", dp)) == dp:
                    dense.setdefault(dp, (tp, cp, pp))
    if not dense:
        return None
    mbs_values = [int(pins["mbs"])] if "mbs" in pins else divisors(gbs)
    if any(gbs % (m * dp) == 0 for dp in dense for m in mbs_values):
        return None
    mbs = f"MBS{pins['mbs']} × " if "mbs" in pins else ""
    head = f"global batch = whole microbatches on every DP rank: {gbs:,} is not a multiple of {mbs}"
    if "dp" in pins:
        return head + f"the pinned DP{pins['dp']}"
    if all(a in pins for a in ("tp", "cp", "pp")):
        dp, (tp, cp, pp) = next(iter(dense.items()))
        return head + f"DP{dp} (= {world:,} GPUs / (TP{tp} × CP{cp} × PP{pp}))"
    return head + f"DP for any DP the pins leave ({', '.join(str(d) for d in sorted(dense))})"


def certify(question: Question, core: tuple[str, ...]) -> bool:
    """CP-SAT agrees that the core's rules and pins admit no layout (INFEASIBLE under those assumptions)."""
    from ortools.sat.python import cp_model

    from primus.solver.cpsat import ModelBuilder, new_solver

    built = ModelBuilder(question.tables, question.ruleset, question.pins).build()
    lits = {**built.rule_lits, **built.pin_lits}
    built.model.clear_assumptions()
    built.model.add_assumptions([lits[name] for name in core if name in lits])
    solver = new_solver(120.0)
    return solver.solve(built.model) == cp_model.INFEASIBLE


def rule_columns(v: Violations) -> list[int]:
    return [i for i, name in enumerate(v.names) if not name.startswith("pin:")]


def pin_columns_idx(v: Violations) -> list[int]:
    return [i for i, name in enumerate(v.names) if name.startswith("pin:")]


def nearest_groups(v: Violations, limit: int) -> list[tuple[list[int], list[str]]]:
    """The legal rows grouped by their assignment of the pinned axes, at most `limit` groups: fewest pins
    violated first, then the group's least memory, then canonical. Each group lists every legal
    completion of the free axes for that assignment (least memory first) and the pins it changes."""
    rules = rule_columns(v)
    pins = pin_columns_idx(v)
    idx = v.passing(rules)
    if len(idx) == 0:
        return []
    distance = v.matrix[idx][:, pins].sum(axis=1) if pins else np.zeros(len(idx), dtype=np.int64)
    peak = v.peak[idx]
    canon = np.empty(v.cands.n, dtype=np.int64)
    canon[v.cands.canonical_order()] = np.arange(v.cands.n)
    order = np.lexsort((canon[idx], peak, distance))
    rows = idx[order]
    pinned_axes = [v.names[i][4:] for i in pins if v.names[i][4:] in v.cands.cols]
    if pinned_axes:
        keys = np.stack([np.asarray(v.cands.cols[a])[rows] for a in pinned_axes], axis=1)
        _, first, group_of = np.unique(keys, axis=0, return_index=True, return_inverse=True)
        group_of = group_of.reshape(-1)
    else:
        first, group_of = np.zeros(1, dtype=np.int64), np.zeros(len(rows), dtype=np.int64)
    out: list[tuple[list[int], list[str]]] = []
    for g in np.argsort(first, kind="stable")[:limit]:  # groups in the order their best row comes
        members = [int(r) for r in rows[group_of == g]]
        out.append((members, [v.names[i] for i in pins if v.matrix[members[0], i]]))
    return out


def closest_request_row(v: Violations) -> int | None:
    """The row satisfying every pin (rules aside) with the least memory: what was asked for, evaluated."""
    idx = v.passing(pin_columns_idx(v))
    if len(idx) == 0:
        return None
    v.ensure_memory(idx)
    return int(idx[np.argmin(v.peak[idx])])
