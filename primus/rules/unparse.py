"""Canonical text of a rule expression: minimal parentheses, chains spelled out; parsing the text
gives the same IR back (tested). Used in error messages, prompts and reports."""

from __future__ import annotations

from primus.rules.expr import (
    Arith,
    BoolLit,
    Compare,
    Expr,
    Extremum,
    Implies,
    IntLit,
    Logic,
    Member,
    Name,
    RuleError,
    Unary,
)

_ATOM, _NEG, _MUL, _ADD, _CMP_P, _NOT, _AND, _OR = 8, 7, 6, 5, 4, 3, 2, 1


def unparse(expr: Expr) -> str:
    """Canonical text: minimal parentheses, chains spelled out; `parse_expr` gives the IR back."""
    return _unparse(expr)[0]


def _wrap(e: Expr, need_above: int) -> str:
    text, prec = _unparse(e)
    return text if prec > need_above else f"({text})"


def _unparse(e: Expr) -> tuple[str, int]:
    if isinstance(e, IntLit):
        return (str(e.value), _ATOM) if e.value >= 0 else (f"({e.value})", _ATOM)
    if isinstance(e, BoolLit):
        return ("True" if e.value else "False"), _ATOM
    if isinstance(e, Name):
        return e.id, _ATOM
    if isinstance(e, Unary):
        if e.op == "abs":
            return f"abs({unparse(e.operand)})", _ATOM
        if e.op == "not":
            return f"not {_wrap(e.operand, _NOT - 1)}", _NOT
        return f"-{_wrap(e.operand, _NEG - 1)}", _NEG
    if isinstance(e, Arith):
        prec = _ADD if e.op in ("+", "-") else _MUL
        return f"{_wrap(e.left, prec - 1)} {e.op} {_wrap(e.right, prec)}", prec
    if isinstance(e, Compare):
        return f"{_wrap(e.left, _CMP_P)} {e.op} {_wrap(e.right, _CMP_P)}", _CMP_P
    if isinstance(e, Member):
        items = ", ".join(str(v) for v in e.values) + ("," if len(e.values) == 1 else "")
        return f"{_wrap(e.operand, _CMP_P)} {'not in' if e.negated else 'in'} ({items})", _CMP_P
    if isinstance(e, Logic):
        prec = _AND if e.op == "and" else _OR
        return f" {e.op} ".join(_wrap(o, prec) for o in e.operands), prec
    if isinstance(e, Implies):
        return f"implies({unparse(e.antecedent)}, {unparse(e.consequent)})", _ATOM
    if isinstance(e, Extremum):
        return f"{e.fn}({', '.join(unparse(a) for a in e.args)})", _ATOM
    raise RuleError(f"unsupported expression node {type(e).__name__}")
