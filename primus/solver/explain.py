"""Why a question has no answer, without materialising the structural space.

The violation matrix (`primus.solver.core`) holds every structurally possible layout: 34 million rows
for DeepSeek-V3 on 1,024 GPUs, a minute and gigabytes before the first answer. Here every question is
asked of the staged enumerator instead, which applies each active rule and pin as soon as the axes it
reads are bound, so a trial with the pins in force never builds the layouts the pins exclude:

- `exists(active rules, active pins)`: the enumeration grown from a few (TP, CP, PP) seeds at a time,
  stopping at the first batch that has a layout (`Enumerator.first`);
- the minimal core: the same deletion as the matrix's (non-memory rules, then pins, memory last), so
  the same core, each test one `exists`;
- the nearest legal layouts: the legal layouts with k pins released, k = 1, 2, ... (every rule in
  force), grouped by the pinned axes' values; a group found with k pins released that breaks only j < k
  of them was already found at level j.

The definitions (world size, MoE folding, whole microbatches) hold in every enumeration by
construction, as they hold in every row of the matrix, so both answer the same questions.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import combinations
from typing import Any

import numpy as np

from primus.rules.vector import evaluate_vector
from primus.solver.api import Question
from primus.solver.core import DEFINED_BY, deletion_filter, deletion_order
from primus.solver.pins import PIN_AXES, pin_mask
from primus.solver.ruleset import DEFINITIONAL, RuleSet
from primus.solver.vector import Candidates, Enumerator


class Asker:
    """Answers feasibility questions about one Question's rules and pins, memoised."""

    def __init__(self, question: Question) -> None:
        self.q = question
        self.rules = {r.id: r for r in question.ruleset.rules}
        self.hard = [r.id for r, _ in question.ruleset.hard()]
        self.memory_ids = {r.id for r, e in question.ruleset.hard() if question.ruleset.uses_memory(e)}
        self.pins = {a: question.pins[a] for a in PIN_AXES if a in question.pins}
        self.names = [*self.hard, *(f"pin:{a}" for a in self.pins)]
        self._memo: dict[frozenset[str], bool] = {}

    def _ruleset(self, rule_ids: Iterable[str]) -> RuleSet:
        keep = set(rule_ids) | set(DEFINITIONAL)
        return RuleSet(tuple(r for r in self.q.ruleset.rules if r.id in keep))

    def enumerate(self, rule_ids: Iterable[str], pins: dict[str, Any], memory: bool) -> Candidates:
        """Layouts passing the rules and pins (memory columns when `memory`), one pipeline size at a time."""
        ruleset = self._ruleset(rule_ids)
        pps = [pins["pp"]] if "pp" in pins else self.q.space.pp_values
        parts = []
        for pp in pps:
            c = Enumerator(self.q.tables, ruleset, {**pins, "pp": pp}).run(with_memory=memory)
            if c.n:
                parts.append(c)
        if not parts:
            return Enumerator(self.q.tables, ruleset, {**pins, "pp": pps[0]}).run(with_memory=memory)
        return Candidates({k: np.concatenate([p.cols[k] for p in parts]) for k in parts[0].cols})

    def feasible(self, active: Iterable[str]) -> bool:
        """Whether some layout passes every active rule and pin. Answers are monotone (more rules and
        pins, fewer layouts), so a subset of a feasible set is feasible and a superset of an
        infeasible one is not: those are answered from the memo without enumerating."""
        key = frozenset(active)
        if key not in self._memo:
            for known, value in self._memo.items():
                if (value and key <= known) or (not value and known <= key):
                    return value
            rules = [n for n in key if not n.startswith("pin:")]
            pins = {n[4:]: self.pins[n[4:]] for n in key if n.startswith("pin:")}
            memory = bool(self.memory_ids & set(rules))
            self._memo[key] = Enumerator(self.q.tables, self._ruleset(rules), pins).first(memory).n > 0
        return self._memo[key]


def minimal_core(asker: Asker) -> tuple[str, ...]:
    """A subset of rules and pins with no layout, from which no member can be removed (deletion in the
    matrix's order: non-memory rules, then pins, memory last)."""
    if asker.feasible(asker.names):
        return ()
    current = deletion_filter(sorted(asker.names, key=deletion_order), asker.feasible)
    return tuple(sorted(current, key=deletion_order))


#: How many more conflicts `further_cores` looks for after the first: enough for the usual two or three
#: independent mistakes in one job file, few enough to keep a refusal quick.
MAX_FURTHER_CORES = 3


def further_cores(asker: Asker, core: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """The conflicts a user meets after mending the first: with the pins of every core found so far released,
    another minimal core of what is left, while what is left has no layout and the last core released a pin
    (a user changes pins, not the built-in rules). A job with VP 2 that no layer split allows and EP 72 of 256
    experts names the VP pin first and the EP pin next, so fixing one is not met by the other."""
    out: list[tuple[str, ...]] = []
    released = {n for n in core if n.startswith("pin:")}
    while released and len(out) < MAX_FURTHER_CORES:
        rest = [n for n in asker.names if n not in released]
        if asker.feasible(rest):
            break
        found = tuple(sorted(deletion_filter(sorted(rest, key=deletion_order), asker.feasible), key=deletion_order))
        out.append(found)
        more = {n for n in found if n.startswith("pin:")}
        if not more:
            break
        released |= more
    return tuple(out)


def pins_core(asker: Asker) -> tuple[str, ...]:
    """A minimal subset of the pins that no layout holds together, rules aside; () if they can."""
    pins = [f"pin:{a}" for a in asker.pins]
    if not pins or asker.feasible(pins):
        return ()
    return tuple(deletion_filter(pins, asker.feasible))


def explain_structural(asker: Asker, core: tuple[str, ...]) -> tuple[str, ...]:
    """A pin no layout can hold on its own (TP 16 on 8 GPUs): name the definition it breaks first."""
    extra = [DEFINED_BY[n[4:]] for n in core
             if n.startswith("pin:") and n[4:] in DEFINED_BY and not asker.feasible([n])]
    return tuple(dict.fromkeys([*extra, *core]))


#: Rules a job option can make hold without changing the layout (`primus.solver.options`): the
#: pipeline split (split accounting, first/last stage layer counts, a layout string).
OPTION_RULES = ("pipeline-split",)


def closest_request(asker: Asker, core: Iterable[str] = ()) -> tuple[Candidates, int, tuple[str, ...]] | None:
    """The layout satisfying every pin with the least memory, and the rules it breaks (memory aside).
    Among the layouts that pass every other rule when some do (what was asked for, legal but too big);
    else among those that break as few of the `core`'s rules as possible (fewest first, in deletion
    order, a rule a job option can satisfy first: `OPTION_RULES`), so a structural rule no pin forces is
    kept (no CP 64 at sequence 4,096 for a pipeline split that fails); else, when the pins break a rule outside
    the core as well, among those that keep as many rules as the pins allow (added one at a time, the core's
    last); else among all that hold the pins."""
    others = [r for r in asker.hard if r not in asker.memory_ids]
    pins = [f"pin:{a}" for a in asker.pins]
    guilty = sorted((r for r in core if r in others and r not in DEFINITIONAL),
                    key=lambda r: (r not in OPTION_RULES, deletion_order(r)))
    tries: list[list[str]] = [others]
    for k in range(1, len(guilty) + 1):
        tries += [[r for r in others if r not in dropped] for dropped in combinations(guilty, k)]
    # the pins may break a rule outside the core too (EP 72 of 256 experts beside a core about VP): keep as many
    # rules as the pins allow, the core's last and the option-satisfiable ones last of all, one at a time
    kept: list[str] = []
    for rule in sorted(others, key=lambda r: (r in guilty, r in OPTION_RULES, deletion_order(r))):
        if asker.feasible([*kept, rule, *pins]):
            kept.append(rule)
    tries += [kept, []]
    for rules in tries:
        if rules and not asker.feasible([*rules, *pins]):
            continue
        c = asker.enumerate(rules, asker.pins, memory=True)
        if c.n:
            i = int(np.argmin(c.cols["peak_bytes"]))
            return c, i, broken_rules(asker, c, i, [r for r in others if r not in rules])
    return None


def broken_rules(asker: Asker, c: Candidates, i: int, rule_ids: Iterable[str]) -> tuple[str, ...]:
    """Which of `rule_ids` row `i` of `c` breaks (each rule evaluated on that row alone)."""
    row = c.take(np.array([i]))
    env = {**{k: (np.bool_(v) if isinstance(v, bool) else np.int64(v)) for k, v in asker.q.space.facts.items()},
           **row.cols}
    out = []
    for rid in rule_ids:
        rule = asker.rules[rid]
        if not bool(evaluate_vector(rule.parsed, env, 1)[0]):
            out.append(rid)
    return tuple(out)


def nearest_groups(asker: Asker, limit: int) -> list[tuple[Candidates, list[str]]]:
    """Legal layouts (every rule) grouped by their assignment of the pinned axes, at most `limit` groups:
    fewest pins changed first, then the group's least memory, then canonical order. Each group holds
    every legal completion of the free axes for that assignment (least memory first) and the pins it
    changes."""
    out: list[tuple[Candidates, list[str]]] = []
    for level in nearest_levels(asker):
        out.extend(level[: max(0, limit - len(out))])
        if len(out) >= limit:
            break
    return out


def nearest_levels(asker: Asker) -> Iterator[list[tuple[Candidates, list[str]]]]:
    """`nearest_groups` one level at a time (k = 1, 2, ... pins changed, each level ranked), so a caller
    that has enough suggestions after level k never enumerates level k + 1."""
    q = asker.q
    axes = list(asker.pins)
    is_moe = q.job.model.is_moe
    for k in range(1, len(axes) + 1):
        level: dict[tuple[int, ...], tuple[Candidates, list[str]]] = {}
        for released in combinations(axes, k):
            kept = {a: asker.pins[a] for a in axes if a not in released}
            c = asker.enumerate(asker.hard, kept, memory=True)
            if c.n == 0:
                continue
            broken = np.ones(c.n, dtype=bool)
            for a in released:
                broken &= ~pin_mask(c.cols, a, asker.pins[a], is_moe, c.n)
            c = c.take(broken)
            if c.n == 0:
                continue
            keys = np.stack([np.asarray(c.cols[a]) for a in axes if a in c.cols], axis=1)
            uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
            for g in range(len(uniq)):
                members = c.take(inverse.reshape(-1) == g)
                members = members.take(np.lexsort((members.canonical_order().argsort(), members.cols["peak_bytes"])))
                level[tuple(int(x) for x in uniq[g])] = (members, [f"pin:{a}" for a in released])
        if level:
            yield sorted(level.values(), key=lambda item: (int(item[0].cols["peak_bytes"][0]),
                                                           _canon_key(item[0], 0)))


def _canon_key(c: Candidates, i: int) -> tuple[int, ...]:
    from primus.solver.vector import AXIS_ORDER

    return tuple(int(c.cols[a][i]) for a in AXIS_ORDER)
