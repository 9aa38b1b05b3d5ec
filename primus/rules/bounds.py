"""Types and interval bounds of rule expressions: what `check` refuses and what CP-SAT sizes from.

Every node gets a type (int or bool) and an interval; a divisor that may be zero or negative, an
operand outside the solver's 64-bit range, an unknown name or a type mismatch is refused with a
one-line reason. Split from `expr` so each module has one job; `expr` re-exports `check` and
`annotate`.
"""

from __future__ import annotations

from collections.abc import Mapping

from primus.errors import did_you_mean
from primus.rules.expr import (
    _BINARY,
    LIMIT,
    Arith,
    BoolLit,
    Compare,
    Domain,
    Expr,
    Extremum,
    Implies,
    IntLit,
    Logic,
    Member,
    Name,
    RuleError,
    Unary,
    children,
    walk,
)
from primus.rules.unparse import unparse


def _snippet(e: Expr) -> str:
    text = unparse(e)
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _mismatch(e: Expr, want: str, got: str) -> RuleError:
    article = {"int": "an int", "bool": "a bool"}
    return RuleError(f"{_snippet(e)} is {article[got]}, but {article[want]} is needed here")


def _kind(e: Expr) -> str | None:
    """The type a node has whatever the names mean (None for a bare name)."""
    if isinstance(e, Name):
        return None
    if isinstance(e, Unary):
        return "bool" if e.op == "not" else "int"
    return "int" if isinstance(e, IntLit | Arith | Extremum) else "bool"


def _operand_kind(e: Expr) -> str | None:
    """The type a node needs its operands to have (None: either, as for `==`)."""
    if isinstance(e, Unary):
        return "bool" if e.op == "not" else "int"
    if isinstance(e, Logic | Implies):
        return "bool"
    if isinstance(e, Compare):
        return None if e.op in ("==", "!=") else "int"
    return "int" if isinstance(e, Arith | Extremum | Member) else None


def _check_kinds(expr: Expr) -> None:
    """Type errors visible before names are known (`1 and 2`, `tp + (cp > 1)`), so a rule file
    fails at load time rather than when a job uses it; `check` repeats this with the names' types."""
    for node in walk(expr):
        want = _operand_kind(node)
        if want is None:
            if isinstance(node, Compare) and {_kind(node.left), _kind(node.right)} == {"int", "bool"}:
                raise RuleError(f"{_snippet(node)} compares an int with a bool")
            continue
        for child in children(node):
            got = _kind(child)
            if got is not None and got != want:
                raise _mismatch(child, want, got)


def check(expr: Expr, domains: Mapping[str, Domain], *, expect_bool: bool = True) -> Domain:
    """Type and bound the expression against the known names; the bound of the whole expression.

    Refuses unknown names, type errors, divisors that may be zero or negative, dividends that may
    be negative and any intermediate value that may leave ±2^62 (CP-SAT works in 64 bits)."""
    return annotate(expr, domains, expect_bool=expect_bool)[expr]


def annotate(expr: Expr, domains: Mapping[str, Domain], *, expect_bool: bool = True) -> dict[Expr, Domain]:
    """`check`, keeping the bound of every node (the CP-SAT compiler sizes its variables from it).

    A bool node's bound is a single point when the intervals decide it, so callers may fold it."""
    spans: dict[Expr, Domain] = {}
    root = _Checker(domains, spans).visit(expr)
    if expect_bool and not root.is_bool:
        raise RuleError(f"a rule must be a condition, but {_snippet(expr)} is an int")
    if not expect_bool and root.is_bool:
        raise _mismatch(expr, "int", "bool")
    return spans


def _known(value: bool | None) -> Domain:
    return Domain.boolean() if value is None else Domain(int(value), int(value), True)


class _Checker:
    """Bottom-up interval analysis; memoized per node so shared subtrees are visited once."""

    def __init__(self, domains: Mapping[str, Domain], spans: dict[Expr, Domain]) -> None:
        self.domains = domains
        self.spans = spans

    def visit(self, e: Expr, want: str | None = None) -> Domain:
        if e not in self.spans:
            d = self._visit(e)
            if d.lo < -LIMIT or d.hi > LIMIT:
                raise RuleError(f"{_snippet(e)} may reach {d.lo if d.lo < -LIMIT else d.hi}, "
                                "beyond the solver's range (±2^62)")
            self.spans[e] = d
        d = self.spans[e]
        if want is not None and d.is_bool != (want == "bool"):
            raise _mismatch(e, want, "bool" if d.is_bool else "int")
        return d

    def _visit(self, e: Expr) -> Domain:
        if isinstance(e, IntLit | BoolLit):
            return Domain(int(e.value), int(e.value), isinstance(e, BoolLit))
        if isinstance(e, Name):
            if e.id not in self.domains:
                raise RuleError(f"unknown name {e.id!r}{did_you_mean(e.id, self.domains)}")
            return self.domains[e.id]
        want = _operand_kind(e)
        ds = [self.visit(c, want) for c in children(e)]
        if isinstance(e, Unary):
            d = ds[0]
            if e.op == "not":
                return Domain(1 - d.hi, 1 - d.lo, True)
            if e.op == "-" or d.hi <= 0:  # -x, or abs(x) of a never-positive x
                return Domain(-d.hi, -d.lo)
            return d if d.lo >= 0 else Domain(0, max(-d.lo, d.hi))
        if isinstance(e, Extremum | Logic):  # and = min, or = max over 0/1
            smallest = e.fn == "min" if isinstance(e, Extremum) else e.op == "and"
            pick = min if smallest else max
            return Domain(pick(d.lo for d in ds), pick(d.hi for d in ds), isinstance(e, Logic))
        if isinstance(e, Implies):
            a, b = ds
            return Domain(max(1 - a.hi, b.lo), max(1 - a.lo, b.hi), True)
        if isinstance(e, Member):
            d = ds[0]
            inside = sum(1 for v in e.values if d.lo <= v <= d.hi)
            known = False if not inside else (True if inside == d.hi - d.lo + 1 else None)
            return _known(None if known is None else known != e.negated)
        if isinstance(e, Arith):
            return self._arith(e, ds[0], ds[1])
        if isinstance(e, Compare):
            return self._compare(e, ds[0], ds[1])
        raise RuleError(f"unsupported expression node {type(e).__name__}")

    def _arith(self, e: Arith, a: Domain, b: Domain) -> Domain:
        if e.op == "+":
            return Domain(a.lo + b.lo, a.hi + b.hi)
        if e.op == "-":
            return Domain(a.lo - b.hi, a.hi - b.lo)
        if e.op == "*":
            corners = (a.lo * b.lo, a.lo * b.hi, a.hi * b.lo, a.hi * b.hi)
            return Domain(min(corners), max(corners))
        if b.is_point and b.lo == 0:
            raise RuleError(f"division by zero in {_snippet(e)}")
        if b.lo < 1:
            raise RuleError(f"divisor {_snippet(e.right)} may be zero or negative (it ranges over "
                            f"[{b.lo}, {b.hi}])")
        if a.lo < 0:
            raise RuleError(f"{_snippet(e.left)} may be negative; '{e.op}' is defined here for "
                            "non-negative operands only")
        if e.op == "//":
            return Domain(a.lo // b.hi, a.hi // b.lo)
        return a if a.hi < b.lo else Domain(0, min(a.hi, b.hi - 1))

    def _compare(self, e: Compare, a: Domain, b: Domain) -> Domain:
        if a.is_bool != b.is_bool:
            raise RuleError(f"{_snippet(e)} compares an int with a bool")
        if a.lo - b.hi < -LIMIT or a.hi - b.lo > LIMIT:
            raise RuleError(f"{_snippet(e)} compares values too far apart for the solver (±2^62)")
        if e.op in ("==", "!="):
            same = True if a.is_point and a == b else (False if a.hi < b.lo or b.hi < a.lo else None)
            return _known(None if same is None else same == (e.op == "=="))
        holds = _BINARY[e.op]  # decided when the op holds for every pair, or for none
        if holds(a.lo, b.hi) and holds(a.hi, b.lo) and holds(a.lo, b.lo) and holds(a.hi, b.hi):
            return _known(True)
        never = not any(holds(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi))
        return _known(False if never else None)

