"""Compile checked rule expressions into CP-SAT constraints.

A rule compiles to one Boolean literal that is *fully reified*: in every solution it is true exactly
when the rule holds. That lets the caller decide what to do with it (enforce it outright, enforce it
under an assumption literal to explain infeasibility, or reward it in the objective as a soft rule)
without this module knowing. Every fresh integer variable is sized from the bounds `check` proved,
so nothing here can overflow, and a node whose bound is a single point is folded to a constant
instead of creating variables. Nothing here is random: the same rule and model give the same
constraints in the same order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeAlias

from ortools.sat.python import cp_model

from primus.rules.expr import (
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
    annotate,
    names,
)

Lit: TypeAlias = cp_model.BoolVarT  # a Boolean IntVar or its negation
IntTerm: TypeAlias = int | cp_model.LinearExpr  # IntVar is a LinearExpr
EnvValue: TypeAlias = cp_model.IntVar | cp_model.BoolVarT | int | bool
_BoolTerm: TypeAlias = bool | Lit


def compile_bool(
    expr: Expr,
    model: cp_model.CpModel,
    env: Mapping[str, EnvValue],
    domains: Mapping[str, Domain],
) -> Lit:
    """A literal equivalent to the rule in every solution (a constant literal if it is decided).

    `env` maps each name the rule reads to an IntVar / Boolean literal or a Python constant, and
    `domains` must bound it: bounds of helper variables and constant folding are derived from
    `domains`, so a variable wider than its Domain raises ValueError here rather than silently
    cutting solutions. Raises RuleError if the rule fails `check` against `domains`."""
    spans = annotate(expr, domains, expect_bool=True)
    result = _Compiler(model, env, domains, spans, expr).boolean(expr)
    if isinstance(result, bool):
        return model.new_constant(1 if result else 0)
    return result


def compile_int(
    expr: Expr,
    model: cp_model.CpModel,
    env: Mapping[str, EnvValue],
    domains: Mapping[str, Domain],
) -> IntTerm:
    """An int constant or linear expression equal to the int expression in every solution."""
    spans = annotate(expr, domains, expect_bool=False)
    return _Compiler(model, env, domains, spans, expr).integer(expr)


class _Compiler:
    """One compilation: memoized per node, so a chain like `1 <= tp * cp <= 8` multiplies once."""

    def __init__(
        self,
        model: cp_model.CpModel,
        env: Mapping[str, EnvValue],
        domains: Mapping[str, Domain],
        spans: dict[Expr, Domain],
        expr: Expr,
    ) -> None:
        self.model = model
        self.spans = spans
        self.env = {name: self._checked(name, env, domains[name]) for name in sorted(names(expr))}
        self.ints: dict[Expr, IntTerm] = {}
        self.bools: dict[Expr, _BoolTerm] = {}
        self.operands: dict[Expr, cp_model.IntVar] = {}

    def _checked(self, name: str, env: Mapping[str, EnvValue], dom: Domain) -> EnvValue:
        """Refuse an env value outside its declared Domain: folding from `domains` would be unsound."""
        if name not in env:
            raise ValueError(f"rule name {name!r} has a Domain but no entry in env")
        value = env[name]
        if not isinstance(value, int | cp_model.IntVar | cp_model.NotBooleanVariable):
            raise TypeError(f"env value for {name!r} must be an IntVar, a Boolean literal, an int or a "
                            f"bool (add an IntVar equal to an expression), got {type(value).__name__}")
        if isinstance(value, int):  # bool is an int
            lo = hi = int(value)
        else:
            index = value.index
            bounds = list(self.model.proto.variables[index if index >= 0 else -index - 1].domain)
            lo, hi = (bounds[0], bounds[-1]) if index >= 0 else (1 - bounds[-1], 1 - bounds[0])
        if not dom.lo <= lo <= hi <= dom.hi:
            raise ValueError(f"env value for {name!r} ranges over [{lo}, {hi}], outside its Domain "
                             f"[{dom.lo}, {dom.hi}]")
        return bool(value) if dom.is_bool and isinstance(value, int) else value

    def _fresh(self, e: Expr) -> cp_model.IntVar:
        d = self.spans[e]
        return self.model.new_int_var(d.lo, d.hi, "")

    def _operand(self, e: Expr) -> int | cp_model.IntVar:
        """The node as a constant or a single variable: nonlinear constraints get plain operands."""
        term = self.integer(e)
        if isinstance(term, int | cp_model.IntVar):
            return term
        if e not in self.operands:
            self.operands[e] = self._fresh(e)
            self.model.add(self.operands[e] == term)
        return self.operands[e]

    def _reify_in(self, x: IntTerm, inside: cp_model.Domain, span: Domain) -> Lit:
        """A literal b with b <=> x in `inside` (x ranges over `span`)."""
        outside = inside.complement().intersection_with(cp_model.Domain(span.lo, span.hi))
        b = self.model.new_bool_var("")
        self.model.add_linear_expression_in_domain(x, inside).only_enforce_if(b)
        self.model.add_linear_expression_in_domain(x, outside).only_enforce_if(~b)
        return b

    # ---- ints

    def integer(self, e: Expr) -> IntTerm:
        if e not in self.ints:
            d = self.spans[e]
            self.ints[e] = d.lo if d.is_point else self._integer(e)
        return self.ints[e]

    def _integer(self, e: Expr) -> IntTerm:
        if isinstance(e, IntLit):
            return e.value
        if isinstance(e, Name):
            value = self.env[e.id]
            if isinstance(value, int):
                return int(value)
            if not isinstance(value, cp_model.IntVar):
                raise ValueError(f"{e.id!r} is an int but env holds a negated literal")
            return value
        if isinstance(e, Unary) and e.op == "-":
            return -self.integer(e.operand)
        if isinstance(e, Arith) and e.op in ("+", "-"):
            left, right = self.integer(e.left), self.integer(e.right)
            return left + right if e.op == "+" else left - right
        if isinstance(e, Arith) and e.op == "*":
            a, b = self._operand(e.left), self._operand(e.right)
            if isinstance(a, int):  # scaling by a constant stays linear
                return b * a
            if isinstance(b, int):
                return a * b
        target = self._fresh(e)
        if isinstance(e, Arith):
            a, b = self._operand(e.left), self._operand(e.right)
            if e.op == "*":
                self.model.add_multiplication_equality(target, [a, b])
            elif e.op == "//":  # check(): divisor >= 1, dividend >= 0, so truncation == floor
                self.model.add_division_equality(target, a, b)
            else:
                self.model.add_modulo_equality(target, a, b)
        elif isinstance(e, Extremum):
            args = [self._operand(a) for a in e.args]
            if e.fn == "min":
                self.model.add_min_equality(target, args)
            else:
                self.model.add_max_equality(target, args)
        elif isinstance(e, Unary) and e.op == "abs":
            self.model.add_abs_equality(target, self._operand(e.operand))
        else:
            raise RuleError(f"{type(e).__name__} is not an int expression")
        return target

    # ---- bools

    def boolean(self, e: Expr) -> _BoolTerm:
        if e not in self.bools:
            d = self.spans[e]
            self.bools[e] = bool(d.lo) if d.is_point else self._boolean(e)
        return self.bools[e]

    def _boolean(self, e: Expr) -> _BoolTerm:
        if isinstance(e, BoolLit):
            return e.value
        if isinstance(e, Name):
            value = self.env[e.id]
            return bool(value) if isinstance(value, int) else value
        if isinstance(e, Unary) and e.op == "not":
            return _negate(self.boolean(e.operand))
        if isinstance(e, Logic):
            terms = [self.boolean(o) for o in e.operands]
            return self._all(terms) if e.op == "and" else self._any(terms)
        if isinstance(e, Implies):
            return self._any([_negate(self.boolean(e.antecedent)), self.boolean(e.consequent)])
        if isinstance(e, Member):
            span = self.spans[e.operand]
            inside = cp_model.Domain.from_values([v for v in e.values if span.lo <= v <= span.hi])
            b = self._reify_in(self.integer(e.operand), inside, span)
            return ~b if e.negated else b
        if isinstance(e, Compare) and self.spans[e.left].is_bool:
            same = self._same(self.boolean(e.left), self.boolean(e.right))
            return same if e.op == "==" else _negate(same)
        if isinstance(e, Compare):
            left, right = self.spans[e.left], self.spans[e.right]
            span = Domain(left.lo - right.hi, left.hi - right.lo)  # of left - right; check() bounded it
            holds = {
                "<": cp_model.Domain(span.lo, -1), "<=": cp_model.Domain(span.lo, 0),
                ">": cp_model.Domain(1, span.hi), ">=": cp_model.Domain(0, span.hi),
                "==": cp_model.Domain(0, 0),
                "!=": cp_model.Domain(0, 0).complement().intersection_with(cp_model.Domain(span.lo, span.hi)),
            }[e.op]
            return self._reify_in(self.integer(e.left) - self.integer(e.right), holds, span)
        raise RuleError(f"{type(e).__name__} is not a bool expression")

    def _all(self, terms: list[_BoolTerm]) -> _BoolTerm:
        """A literal for the conjunction, reified both ways (constants folded away)."""
        if any(t is False for t in terms):
            return False
        lits = [t for t in terms if not isinstance(t, bool)]
        if len(lits) <= 1:
            return lits[0] if lits else True
        r = self.model.new_bool_var("")
        self.model.add_bool_and(lits).only_enforce_if(r)  # r -> every term
        self.model.add_bool_or([*(~t for t in lits), r])  # every term -> r
        return r

    def _any(self, terms: list[_BoolTerm]) -> _BoolTerm:
        return _negate(self._all([_negate(t) for t in terms]))  # a or b == not(not a and not b)

    def _same(self, a: _BoolTerm, b: _BoolTerm) -> _BoolTerm:
        """A literal for a == b over bools: four clauses pin it in both directions."""
        if isinstance(a, bool) or isinstance(b, bool):
            const, other = (a, b) if isinstance(a, bool) else (b, a)
            return other if const else _negate(other)
        eq = self.model.new_bool_var("")
        self.model.add_bool_or([~eq, ~a, b])
        self.model.add_bool_or([~eq, a, ~b])
        self.model.add_bool_or([eq, a, b])
        self.model.add_bool_or([eq, ~a, ~b])
        return eq


def _negate(t: _BoolTerm) -> _BoolTerm:
    return (not t) if isinstance(t, bool) else ~t
