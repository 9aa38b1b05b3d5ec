"""The rule language: what it accepts, what it means, and what it refuses (without running it)."""

from __future__ import annotations

import builtins
from pathlib import Path

import pytest

from primus.rules.expr import (
    LIMIT,
    Compare,
    Domain,
    IntLit,
    Logic,
    Member,
    Name,
    RuleError,
    Unary,
    check,
    evaluate,
    names,
    parse_expr,
    parse_rule,
    unparse,
)

DOMAINS = {
    "tp": Domain.integer(1, 8),
    "cp": Domain.integer(1, 4),
    "pp": Domain.integer(1, 16),
    "ep": Domain.integer(1, 64),
    "sp": Domain.boolean(),
    "seq_len": Domain.integer(1, 1 << 20),
    "scaleup_domain_size": Domain.integer(8, 8),
    "peak_bytes": Domain.integer(0, 1 << 40),
    "hbm_bytes": Domain.integer(1 << 30, 1 << 38),
    "reserve_bytes": Domain.integer(0, 1 << 30),
}
LAYOUT = {"tp": 4, "cp": 2, "pp": 8, "ep": 8, "sp": True, "seq_len": 8192, "scaleup_domain_size": 8,
          "peak_bytes": 60 << 30, "hbm_bytes": 80 << 30, "reserve_bytes": 2 << 30}


def refuse(text: str) -> str:
    """Parse and check `text`, which must be refused; the one-line reason. (How fast refusals are is
    measured in benchmarks/bench_hostile_inputs.py, not asserted here.)"""
    with pytest.raises(RuleError) as info:
        check(parse_rule(text), DOMAINS)
    assert "\n" not in info.value.reason
    return info.value.reason


# ------------------------------------------------------------------------------------ accepted

@pytest.mark.parametrize(("text", "expected"), [
    ("tp * cp <= scaleup_domain_size", True),
    ("implies(sp, tp > 1)", True),
    ("implies(sp, tp > 4)", False),
    ("seq_len % (2 * cp) == 0", True),
    ("peak_bytes <= hbm_bytes - reserve_bytes", True),
    ("ep in (1, 2, 4, 8)", True),
    ("ep not in (1, 2, 4, 8)", False),
    ("1 <= tp <= 8", True),
    ("1 <= tp < 4", False),
    ("min(tp, cp, pp) == 2 and max(tp, cp) == 4", True),
    ("abs(cp - tp) == 2", True),
    ("-tp < -3", True),
    ("not sp or tp == 1", False),
    ("sp == (tp > 1)", True),
    ("pp // tp == 2 and pp % 3 == 2", True),
    ("True", True),
])
def test_accepted_rules_evaluate_to_their_meaning(text: str, expected: bool) -> None:
    expr = parse_rule(text)
    assert check(expr, DOMAINS).is_bool
    assert evaluate(expr, LAYOUT) is expected


@pytest.mark.parametrize("text", [
    "tp * cp <= scaleup_domain_size",
    "implies(sp, tp > 1)",
    "seq_len % (2 * cp) == 0",
    "ep in (1, 2, 4, 8)",
    "ep not in (8,)",
    "1 <= tp <= 8",
    "-(tp + 1) * 2 < 0",
    "tp - -3 > 0",
    "tp - (cp - pp) > 0",
    "(tp < cp) == sp",
    "not (sp and tp > 1)",
    "not not sp",
    "a or b and c",
    "(a or b) and c",
    "max(tp, cp, pp) - min(tp, cp) >= abs(tp - pp)",
])
def test_unparse_gives_text_that_parses_back_to_the_same_tree(text: str) -> None:
    expr = parse_expr(text)
    assert parse_expr(unparse(expr)) == expr
    assert unparse(parse_expr(unparse(expr))) == unparse(expr)


def test_a_chained_comparison_means_each_link_holds() -> None:
    assert parse_rule("1 <= tp <= 8") == Logic("and", (
        Compare("<=", IntLit(1), Name("tp")), Compare("<=", Name("tp"), IntLit(8))))


def test_membership_values_are_sorted_and_deduplicated_and_may_be_negative() -> None:
    assert parse_rule("tp in [8, -1, 2, 8]") == Member(Name("tp"), (-1, 2, 8), False)


def test_a_negative_literal_is_negation_of_a_literal() -> None:
    assert parse_expr("-5") == Unary("-", IntLit(5))


def test_rule_text_may_span_lines() -> None:
    assert parse_rule("tp * cp\n  <= 8") == parse_rule("tp * cp <= 8")


def test_names_lists_every_name_read() -> None:
    assert names(parse_rule("implies(sp, tp * cp <= 8) and ep in (1, 2)")) == {"sp", "tp", "cp", "ep"}


def test_literals_at_the_limit_are_accepted() -> None:
    expr = parse_rule(f"tp < {LIMIT} and -tp > -{LIMIT}")
    assert check(expr, DOMAINS) == Domain(1, 1, True)


def test_text_of_exactly_1000_characters_is_accepted() -> None:
    text = "tp >= 1" + " " * 987 + "and sp"
    assert len(text) == 1000
    assert evaluate(parse_rule(text), LAYOUT) is True


def test_evaluate_floors_division() -> None:
    assert evaluate(parse_expr("7 // 2"), {}) == 3
    assert evaluate(parse_expr("7 % 4"), {}) == 3


def test_evaluate_names_a_missing_value() -> None:
    with pytest.raises(RuleError, match="no value for 'tp'"):
        evaluate(parse_rule("tp > 1"), {})


# ---------------------------------------------------------------------------------- check


def test_check_bounds_a_rule_the_intervals_decide_to_a_point() -> None:
    assert check(parse_rule("tp >= 1"), DOMAINS) == Domain(1, 1, True)
    assert check(parse_rule("tp > 8"), DOMAINS) == Domain(0, 0, True)
    assert check(parse_rule("tp > 4"), DOMAINS) == Domain(0, 1, True)


def test_check_bounds_int_expressions_by_interval_arithmetic() -> None:
    assert check(parse_expr("tp * (cp - 3)"), DOMAINS, expect_bool=False) == Domain(-16, 8)
    assert check(parse_expr("pp // cp"), DOMAINS, expect_bool=False) == Domain(0, 16)
    assert check(parse_expr("pp % cp"), DOMAINS, expect_bool=False) == Domain(0, 3)
    assert check(parse_expr("abs(tp - pp)"), DOMAINS, expect_bool=False) == Domain(0, 15)


def test_unknown_name_is_refused_with_did_you_mean() -> None:
    assert refuse("tpp > 1") == "unknown name 'tpp' (did you mean 'tp'?)"


def test_unknown_name_without_a_close_match_is_refused_plainly() -> None:
    assert refuse("foo > 1") == "unknown name 'foo'"


def test_an_int_used_as_a_bool_is_refused() -> None:
    assert refuse("tp and sp") == "'tp' is an int, but a bool is needed here"


def test_a_bool_used_as_an_int_is_refused() -> None:
    assert refuse("sp + 1 > 1") == "'sp' is a bool, but an int is needed here"


def test_comparing_an_int_with_a_bool_is_refused() -> None:
    assert "compares an int with a bool" in refuse("tp == sp")


def test_a_rule_must_be_a_condition() -> None:
    assert "must be a condition" in refuse("tp + 1")
    assert "must be a condition" in refuse("tp")


def test_type_errors_visible_without_names_are_caught_at_parse_time() -> None:
    with pytest.raises(RuleError, match="'1' is an int, but a bool is needed"):
        parse_rule("1 and 2")


def test_a_dividend_that_may_be_negative_is_refused() -> None:
    assert "may be negative" in refuse("(tp - 5) // 2 > 0")


def test_a_comparison_whose_difference_overflows_is_refused() -> None:
    assert "too far apart" in refuse(f"{LIMIT} > -{LIMIT}")


# ------------------------------------------------------------------------------ hostile corpus

HOSTILE = [
    ("__import__('os').system('x')", "attribute access is not allowed"),
    ("__import__('os')", "call to '__import__' is not allowed"),
    ("open('/etc/passwd')", "call to 'open' is not allowed"),
    ("tp.__class__", "attribute access is not allowed"),
    ("().__class__.__bases__[0]", "subscripts are not allowed"),
    ("lambda: 1", "lambda is not allowed"),
    ("[x for x in range(10**9)]", "comprehensions are not allowed"),
    ("9**9**9", "'**' (power) is not allowed"),
    ("10**100 > tp", "'**' (power) is not allowed"),
    (f"{2**70} > tp", "integer literal out of range ±2^62"),
    ("tp in (1, 2, 1180591620717411303424)", "integer literal out of range ±2^62"),
    ("1 // 0 == 0", "division by zero"),
    ("tp // (cp - cp) > 0", "may be zero or negative"),
    ("tp % 0 == 1", "division by zero"),
    ("'a' == 'a'", "string literals are not allowed"),
    ("1.5 < tp", "float literals are not allowed"),
    ("(" * 200 + "tp" + ")" * 200 + " > 1", "nested deeper than 32 levels"),
    ("-" * 40 + "tp < 1", "nested deeper than 32 levels"),
    ("tp > 1 and " * 100 + "sp", "rule text longer than 1000 characters"),
    ("tp if sp else pp", "conditional expressions"),
    ("tp @ pp", "'@' is not allowed"),
    ("tp / pp > 1", "'/' is not allowed"),
    ("tp & pp", "bitwise '&' is not allowed"),
    ("tp < pp or exec('1')", "call to 'exec' is not allowed"),
    ("globals()", "call to 'globals' is not allowed"),
    ("min(tp, pp).bit_length() > 1", "attribute access is not allowed"),
    ("tp[0] > 1", "subscripts are not allowed"),
    ("(tp := 3) > 1", "assignment expressions (:=) are not allowed"),
    ("max(*tp) > 1", "starred arguments are not allowed"),
    ("min(a=1) > 1", "keyword arguments are not allowed"),
    ("f'{tp}' == 1", "f-strings are not allowed"),
    ("_secret > 1", "names starting with '_' are not allowed"),
    ("tp is 1", "'is' is not allowed"),
    ("implies(sp)", "implies() takes exactly 2 argument(s), got 1"),
    ("max(tp) > 1", "max() takes at least 2 argument(s), got 1"),
    ("tp in cp", "must be a tuple of integer literals"),
    ("tp in (cp, 2)", "integer literals only"),
    ("import os", "invalid syntax"),
    ("tp ≤ 8", "non-ASCII character '≤' is not allowed"),
    ("tp > 1 # and sp", "comments ('#') are not allowed"),
    ("tp > 1\x00", "control character"),
    ("tpp > 1", "unknown name 'tpp' (did you mean 'tp'?)"),
    ("tp and sp", "'tp' is an int, but a bool is needed here"),
    ("sp + 1 > 0", "'sp' is a bool, but an int is needed here"),
    ("tp * 4611686018427387904 > 0", "beyond the solver's range"),
    ("", "rule text is empty"),
]


@pytest.mark.parametrize(("text", "reason"), HOSTILE, ids=[t[:40] for t, _ in HOSTILE])
def test_hostile_or_malformed_text_is_refused_quickly_with_a_reason(text: str, reason: str) -> None:
    assert reason in refuse(text)


def test_a_1001_character_text_is_refused_before_parsing() -> None:
    text = "tp >= 1" + " " * 988 + "and sp"
    assert len(text) == 1001
    assert refuse(text) == "rule text longer than 1000 characters"


@pytest.mark.parametrize("template", [
    "__import__('os').system('touch {path}')",
    "open('{path}', 'w')",
    "exec(\"open('{path}', 'w')\")",
    "tp < pp or exec(\"open('{path}', 'w')\")",
    "eval(\"open('{path}', 'w')\") == 1",
    "[open('{path}', 'w') for _ in (1,)]",
    "(lambda: open('{path}', 'w'))()",
])
def test_code_in_a_rule_is_never_run(template: str, tmp_path: Path) -> None:
    sentinel = tmp_path / "sentinel"
    text = template.format(path=sentinel)
    refuse(text)
    assert not sentinel.exists()


@pytest.mark.parametrize("text", [
    "exec('import builtins; builtins.PRIMUS_PWNED = 1')",
    "setattr(__import__('builtins'), 'PRIMUS_PWNED', 1)",
    "globals().update(PRIMUS_PWNED=1)",
])
def test_a_rule_cannot_flip_a_global_flag(text: str) -> None:
    refuse(text)
    assert not hasattr(builtins, "PRIMUS_PWNED")
    assert "PRIMUS_PWNED" not in globals()
