"""Evaluate a rule over many candidate layouts at once (numpy), with `evaluate`'s exact semantics.

The enumerator filters millions of candidates; calling the scalar interpreter per row would be too
slow, so this mirrors it node for node on int64/bool arrays. A test checks both agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

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

_ARITH = {"+": np.add, "-": np.subtract, "*": np.multiply, "//": np.floor_divide, "%": np.mod}
_CMP = {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal, "==": np.equal,
        "!=": np.not_equal}


def evaluate_vector(expr: Expr, columns: Mapping[str, Any], n: int) -> np.ndarray:
    """The rule's value for each of `n` rows; `columns` maps names to arrays of length n or scalars."""
    value = _eval(expr, columns)
    return np.broadcast_to(np.asarray(value), (n,))


def _eval(e: Expr, cols: Mapping[str, Any]) -> Any:
    if isinstance(e, IntLit):
        return np.int64(e.value)
    if isinstance(e, BoolLit):
        return np.bool_(e.value)
    if isinstance(e, Name):
        if e.id not in cols:
            raise RuleError(f"no value for {e.id!r}")
        return cols[e.id]
    if isinstance(e, Arith):
        left, right = _eval(e.left, cols), _eval(e.right, cols)
        if e.op in ("//", "%"):
            right = np.asarray(right)
            if np.any(right == 0):
                raise RuleError("division by zero")
        return _ARITH[e.op](left, right)
    if isinstance(e, Compare):
        return _CMP[e.op](_eval(e.left, cols), _eval(e.right, cols))
    if isinstance(e, Unary):
        inner = _eval(e.operand, cols)
        if e.op == "not":
            return np.logical_not(inner)
        if e.op == "abs":
            return np.abs(inner)
        return np.negative(inner)
    if isinstance(e, Logic):
        fn = np.logical_and if e.op == "and" else np.logical_or
        out = _eval(e.operands[0], cols)
        for operand in e.operands[1:]:
            out = fn(out, _eval(operand, cols))
        return out
    if isinstance(e, Implies):
        return np.logical_or(np.logical_not(_eval(e.antecedent, cols)), _eval(e.consequent, cols))
    if isinstance(e, Extremum):
        pick: Any = np.minimum if e.fn == "min" else np.maximum
        out = _eval(e.args[0], cols)
        for arg in e.args[1:]:
            out = pick(out, _eval(arg, cols))
        return out
    if isinstance(e, Member):
        inside = np.isin(np.asarray(_eval(e.operand, cols)), np.array(e.values, dtype=np.int64))
        return np.logical_not(inside) if e.negated else inside
    raise RuleError(f"unsupported expression node {type(e).__name__}")
