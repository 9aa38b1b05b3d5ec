"""CP-SAT compilation of rules: the compiled literal means exactly what `evaluate` says.

The property tests generate random well-typed IR over tp in [1, 8], cp in [1, 4], pp in [1, 16] and
a bool sp, and enumerate *all* solutions of the compiled model with the inputs free. The projection
of those solutions onto (inputs, result) must be exactly {(a, evaluate(e, a))} over all 1,024
assignments: every assignment with the right result is feasible, and none with the wrong result is
(that is, the literal is fully reified in both directions).
"""

from __future__ import annotations

import functools
import itertools

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ortools.sat.python import cp_model

from primus.rules.cpsat import compile_bool, compile_int
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
    Unary,
    annotate,
    check,
    evaluate,
    parse_expr,
    parse_rule,
    unparse,
    walk,
)

INTS = {"tp": (1, 8), "cp": (1, 4), "pp": (1, 16)}
DOMAINS = {name: Domain.integer(lo, hi) for name, (lo, hi) in INTS.items()} | {"sp": Domain.boolean()}
ASSIGNMENTS = [
    {"tp": tp, "cp": cp, "pp": pp, "sp": sp}
    for tp, cp, pp, sp in itertools.product(range(1, 9), range(1, 5), range(1, 17), (False, True))
]
ORDER = ("tp", "cp", "pp", "sp")
PROPERTY = settings(max_examples=60, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def new_env(model: cp_model.CpModel) -> dict[str, cp_model.IntVar]:
    env = {name: model.new_int_var(lo, hi, name) for name, (lo, hi) in INTS.items()}
    env["sp"] = model.new_bool_var("sp")
    return env


def solver() -> cp_model.CpSolver:
    s = cp_model.CpSolver()
    s.parameters.num_workers = 1
    s.parameters.random_seed = 7
    s.parameters.max_time_in_seconds = 30
    return s


class _Collector(cp_model.CpSolverSolutionCallback):
    def __init__(self, env: dict[str, cp_model.IntVar], out: cp_model.IntVar | cp_model.BoolVarT,
                 is_bool: bool) -> None:
        super().__init__()
        self.env, self.out, self.is_bool = env, out, is_bool
        self.seen: set[tuple[int | bool, ...]] = set()

    def on_solution_callback(self) -> None:
        ints = (self.value(self.env[n]) for n in ORDER[:3])
        result = self.boolean_value(self.out) if self.is_bool else self.value(self.out)
        self.seen.add((*ints, self.boolean_value(self.env["sp"]), result))


def enumerate_model(expr: Expr, *, is_bool: bool) -> set[tuple[int | bool, ...]]:
    """Every (tp, cp, pp, sp, result) the compiled model admits, inputs left free."""
    model = cp_model.CpModel()
    env = new_env(model)
    out: cp_model.IntVar | cp_model.BoolVarT
    if is_bool:
        out = compile_bool(expr, model, env, DOMAINS)
    else:
        span = check(expr, DOMAINS, expect_bool=False)
        out = model.new_int_var(span.lo, span.hi, "out")
        model.add(out == compile_int(expr, model, env, DOMAINS))
    s = solver()
    s.parameters.enumerate_all_solutions = True
    collector = _Collector(env, out, is_bool)
    assert s.solve(model, collector) == cp_model.OPTIMAL
    return collector.seen


def expected(expr: Expr) -> set[tuple[int | bool, ...]]:
    return {(*(a[n] for n in ORDER), evaluate(expr, a)) for a in ASSIGNMENTS}


# ------------------------------------------------------------------------ random well-typed IR

_NAMES = st.sampled_from([Name("tp"), Name("cp"), Name("pp")])


def tuples(sub: st.SearchStrategy[Expr]) -> st.SearchStrategy[tuple[Expr, ...]]:
    """Two or three operands, as `and`/`or`/`min`/`max` take."""
    return st.lists(sub, min_size=2, max_size=3).map(tuple)


@functools.cache
def ints(depth: int) -> st.SearchStrategy[Expr]:
    leaves = st.one_of(_NAMES, st.integers(0, 6).map(IntLit))
    if depth == 0:
        return leaves
    sub = ints(depth - 1)
    nonneg = st.one_of(_NAMES, st.integers(0, 6).map(IntLit), sub.map(lambda e: Unary("abs", e)))
    positive = st.one_of(_NAMES, st.integers(1, 5).map(IntLit),
                         sub.map(lambda e: Arith("+", Unary("abs", e), IntLit(1))))
    return st.one_of(
        leaves,
        st.builds(Unary, st.sampled_from(["-", "abs"]), sub),
        st.builds(Arith, st.sampled_from(["+", "-", "*"]), sub, sub),
        st.builds(Arith, st.sampled_from(["//", "%"]), nonneg, positive),
        st.builds(Extremum, st.sampled_from(["min", "max"]), tuples(sub)),
    )


@functools.cache
def bools(depth: int) -> st.SearchStrategy[Expr]:
    leaves = st.one_of(st.just(Name("sp")), st.booleans().map(BoolLit))
    if depth == 0:
        return leaves
    sub, num = bools(depth - 1), ints(depth - 1)
    members = st.lists(st.integers(-3, 20), min_size=1, max_size=5, unique=True).map(sorted).map(tuple)
    return st.one_of(
        leaves,
        st.builds(Unary, st.just("not"), sub),
        st.builds(Compare, st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), num, num),
        st.builds(Compare, st.sampled_from(["==", "!="]), sub, sub),
        st.builds(Logic, st.sampled_from(["and", "or"]), tuples(sub)),
        st.builds(Implies, sub, sub),
        st.builds(Member, num, members, st.booleans()),
    )


# ------------------------------------------------------------------------------ property tests


@PROPERTY
@given(bools(4))
def test_compiled_rule_literal_is_true_exactly_when_evaluate_says_so(expr: Expr) -> None:
    assert enumerate_model(expr, is_bool=True) == expected(expr)


@settings(PROPERTY, max_examples=50)
@given(ints(3))
def test_compiled_int_expression_equals_evaluate(expr: Expr) -> None:
    assert enumerate_model(expr, is_bool=False) == expected(expr)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(st.one_of(bools(3).map(lambda e: (e, True)), ints(3).map(lambda e: (e, False))))
def test_every_node_stays_within_the_bounds_check_computed(typed: tuple[Expr, bool]) -> None:
    expr, is_bool = typed
    spans = annotate(expr, DOMAINS, expect_bool=is_bool)
    nodes = set(walk(expr))
    for a in ASSIGNMENTS[::7]:
        for node in nodes:
            assert spans[node].lo <= int(evaluate(node, a)) <= spans[node].hi, unparse(node)


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.one_of(bools(3), ints(3)))
def test_unparse_round_trips_random_trees(expr: Expr) -> None:
    assert parse_expr(unparse(expr)) == expr


# ------------------------------------------------------------------------- hand-written rules

RULES = [
    "tp * cp <= 8",
    "implies(sp, tp > 1)",
    "pp % (2 * cp) == 0",
    "tp in (1, 2, 4, 8)",
    "tp not in (3, 5)",
    "1 <= tp * cp <= 8",
    "tp != cp",
    "sp != (tp == 2)",
    "pp // cp >= tp and not sp or max(tp, cp) == abs(cp - pp)",
]


def fixed_status(expr: Expr, assignment: dict[str, int | bool], result: bool) -> bool:
    """Is the model with every input fixed and the rule literal forced to `result` feasible?"""
    model = cp_model.CpModel()
    env = new_env(model)
    lit = compile_bool(expr, model, env, DOMAINS)
    for name, value in assignment.items():
        model.add(env[name] == int(value))
    model.add_bool_or([lit if result else ~lit])
    status = solver().solve(model)
    assert status in (cp_model.OPTIMAL, cp_model.INFEASIBLE)
    return status == cp_model.OPTIMAL


@pytest.mark.parametrize("text", RULES)
def test_fixed_inputs_are_feasible_with_the_true_value_and_infeasible_with_the_false_one(text: str) -> None:
    expr = parse_rule(text)
    for a in ASSIGNMENTS[::37]:
        truth = bool(evaluate(expr, a))
        assert fixed_status(expr, a, truth), (text, a)
        assert not fixed_status(expr, a, not truth), (text, a)


def test_a_rule_can_be_enforced_under_an_assumption_to_explain_infeasibility() -> None:
    model = cp_model.CpModel()
    env = new_env(model)
    rules = {"big-tp": parse_rule("tp >= 4"), "small-product": parse_rule("tp * cp <= 2")}
    guards = {}
    for rid, expr in rules.items():
        guards[rid] = model.new_bool_var(rid)
        model.add_implication(guards[rid], compile_bool(expr, model, env, DOMAINS))
    model.add_assumptions(list(guards.values()))
    s = solver()
    assert s.solve(model) == cp_model.INFEASIBLE
    core = {model.proto.variables[i].name for i in s.sufficient_assumptions_for_infeasibility()}
    assert core == {"big-tp", "small-product"}


def test_a_soft_rule_literal_can_be_rewarded_in_the_objective() -> None:
    model = cp_model.CpModel()
    env = new_env(model)
    model.add(env["tp"] >= 4)
    soft = compile_bool(parse_rule("tp * cp <= 4"), model, env, DOMAINS)
    model.maximize(10 * soft - env["cp"])
    s = solver()
    assert s.solve(model) == cp_model.OPTIMAL
    assert s.boolean_value(soft) and s.value(env["tp"]) * s.value(env["cp"]) <= 4


def test_a_rule_the_domains_decide_compiles_to_a_constant_literal() -> None:
    model = cp_model.CpModel()
    env = new_env(model)
    before = len(model.proto.constraints)
    lit = compile_bool(parse_rule("tp >= 1 and cp <= 4"), model, env, DOMAINS)
    assert len(model.proto.constraints) == before
    model.add_bool_or([~lit])
    assert solver().solve(model) == cp_model.INFEASIBLE


def test_python_constants_in_env_are_folded() -> None:
    model = cp_model.CpModel()
    env: dict[str, cp_model.IntVar | int | bool] = {"tp": model.new_int_var(1, 8, "tp"), "cp": 4, "sp": True}
    domains = {"tp": Domain.integer(1, 8), "cp": Domain.integer(4, 4), "sp": Domain(1, 1, True)}
    lit = compile_bool(parse_rule("implies(sp, tp * cp <= 8)"), model, env, domains)
    model.add_bool_or([lit])
    model.maximize(env["tp"])
    s = solver()
    assert s.solve(model) == cp_model.OPTIMAL
    assert s.value(env["tp"]) == 2


def test_an_env_variable_wider_than_its_domain_is_refused() -> None:
    model = cp_model.CpModel()
    env = new_env(model) | {"tp": model.new_int_var(0, 100, "tp")}
    with pytest.raises(ValueError, match="outside its Domain"):
        compile_bool(parse_rule("tp > 1"), model, env, DOMAINS)


def test_a_negated_bool_literal_may_stand_for_a_bool_name() -> None:
    model = cp_model.CpModel()
    env = new_env(model)
    flag = model.new_bool_var("flag")
    lit = compile_bool(parse_rule("sp and tp == 3"), model, env | {"sp": ~flag}, DOMAINS)
    model.add_bool_or([lit])
    s = solver()
    assert s.solve(model) == cp_model.OPTIMAL
    assert not s.boolean_value(flag) and s.value(env["tp"]) == 3


def test_an_env_expression_must_first_be_bound_to_a_variable() -> None:
    model = cp_model.CpModel()
    env = new_env(model)
    with pytest.raises(TypeError, match="must be an IntVar"):
        compile_bool(parse_rule("tp > 1"), model, env | {"tp": env["cp"] + 1}, DOMAINS)
