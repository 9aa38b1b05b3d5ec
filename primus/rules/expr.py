"""The rule language: a tiny, total, side-effect-free expression language over parallelism axes.

Rules come from users and from an LLM, so their text is untrusted. It is read with Python's `ast`
parser (never compiled or evaluated) and translated through a whitelist into the frozen IR below;
anything outside the grammar is refused with a one-line `RuleError`. Every size that could make the
process hang or blow the stack (text length, bracket nesting, tree depth, literal size, `in` tuple
length) is bounded *before* the work that depends on it. `check` then types every node as int or
bool and bounds it by interval arithmetic, so the CP-SAT compilation (see `cpsat.py`) never
overflows 64 bits and never divides by zero, and `evaluate` agrees exactly with the solver.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

MAX_TEXT = 1000
MAX_DEPTH = 32
MAX_MEMBERS = 4096
LIMIT = 2**62
FUNCTIONS = ("implies", "min", "max", "abs")

UnaryOp = Literal["-", "not", "abs"]
ArithOp = Literal["+", "-", "*", "//", "%"]
CmpOp = Literal["<", "<=", ">", ">=", "==", "!="]
Value = int | bool


class RuleError(Exception):
    """A rule was refused; `.reason` is one line meant for the person (or LLM) who wrote it."""

    def __init__(self, reason: str) -> None:
        self.reason = " ".join(str(reason).split())
        super().__init__(self.reason)


@dataclass(frozen=True)
class Domain:
    """Type and interval bound of a value: ints in [lo, hi], or a bool (lo, hi within 0..1)."""

    lo: int
    hi: int
    is_bool: bool = False

    def __post_init__(self) -> None:
        if self.lo > self.hi:
            raise ValueError(f"empty domain [{self.lo}, {self.hi}]")
        if self.is_bool and not 0 <= self.lo <= self.hi <= 1:
            raise ValueError(f"a bool domain must lie within [0, 1], got [{self.lo}, {self.hi}]")

    @classmethod
    def integer(cls, lo: int, hi: int) -> Domain:
        return cls(lo, hi, False)

    @classmethod
    def boolean(cls) -> Domain:
        return cls(0, 1, True)

    @property
    def is_point(self) -> bool:
        return self.lo == self.hi


# --------------------------------------------------------------------------------------------- IR


@dataclass(frozen=True)
class Expr:
    """Base of the IR. Nodes are frozen and hashable, so identical subtrees can share work."""


@dataclass(frozen=True)
class IntLit(Expr):
    value: int


@dataclass(frozen=True)
class BoolLit(Expr):
    value: bool


@dataclass(frozen=True)
class Name(Expr):
    id: str


@dataclass(frozen=True)
class Unary(Expr):
    """`-x`, `not x` or `abs(x)`."""

    op: UnaryOp
    operand: Expr


@dataclass(frozen=True)
class Arith(Expr):
    op: ArithOp
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Compare(Expr):
    op: CmpOp
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Implies(Expr):
    antecedent: Expr
    consequent: Expr


@dataclass(frozen=True)
class Logic(Expr):
    """`and` / `or` over two or more operands (Python's `a and b and c` is one node)."""

    op: Literal["and", "or"]
    operands: tuple[Expr, ...]

    def __post_init__(self) -> None:
        if len(self.operands) < 2:
            raise ValueError("'and'/'or' need at least two operands")


@dataclass(frozen=True)
class Extremum(Expr):
    fn: Literal["min", "max"]
    args: tuple[Expr, ...]

    def __post_init__(self) -> None:
        if len(self.args) < 2:
            raise ValueError("min/max need at least two arguments")


@dataclass(frozen=True)
class Member(Expr):
    """`operand in values` (`not in` when negated); the parser sorts and dedups the values."""

    operand: Expr
    values: tuple[int, ...]
    negated: bool = False

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError("'in' needs at least one value")


def children(e: Expr) -> tuple[Expr, ...]:
    """Direct sub-expressions, in source order."""
    if isinstance(e, Unary | Member):
        return (e.operand,)
    if isinstance(e, Arith | Compare):
        return (e.left, e.right)
    if isinstance(e, Logic):
        return e.operands
    if isinstance(e, Extremum):
        return e.args
    if isinstance(e, Implies):
        return (e.antecedent, e.consequent)
    return ()


def walk(e: Expr) -> Iterator[Expr]:
    """Every node, without recursion (IR built by hand may be deeper than parsed IR)."""
    stack = [e]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(children(node)))


def names(e: Expr) -> frozenset[str]:
    """The variable names a rule reads."""
    return frozenset(n.id for n in walk(e) if isinstance(n, Name))


# ---------------------------------------------------------------------------------------- parsing

_ARITH: dict[type[ast.operator], ArithOp] = {
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%",
}
_CMP: dict[type[ast.cmpop], CmpOp] = {
    ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!=",
}
_REFUSED: dict[type[ast.AST], str] = {
    ast.Pow: "'**' (power) is not allowed", ast.MatMult: "'@' is not allowed",
    ast.Div: "'/' is not allowed; use '//' for integer division",
    ast.BitAnd: "bitwise '&' is not allowed; use 'and'", ast.BitOr: "bitwise '|' is not allowed; use 'or'",
    ast.BitXor: "bitwise '^' is not allowed", ast.Invert: "bitwise '~' is not allowed; use 'not'",
    ast.LShift: "'<<' is not allowed", ast.RShift: "'>>' is not allowed",
    ast.UAdd: "unary '+' is not allowed",
    ast.Is: "'is' is not allowed; use '=='", ast.IsNot: "'is not' is not allowed; use '!='",
    ast.Attribute: "attribute access is not allowed", ast.Subscript: "subscripts are not allowed",
    ast.Slice: "slices are not allowed", ast.Lambda: "lambda is not allowed",
    ast.IfExp: "conditional expressions (x if c else y) are not allowed; use implies()",
    ast.NamedExpr: "assignment expressions (:=) are not allowed",
    ast.JoinedStr: "f-strings are not allowed", ast.FormattedValue: "f-strings are not allowed",
    ast.Starred: "starred expressions are not allowed",
    ast.Dict: "dict literals are not allowed", ast.Set: "set literals are not allowed",
    ast.Tuple: "tuples are only allowed on the right of 'in'",
    ast.List: "lists are only allowed on the right of 'in'",
    ast.Await: "'await' is not allowed", ast.Yield: "'yield' is not allowed",
    ast.YieldFrom: "'yield' is not allowed",
    **dict.fromkeys((ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp),
                    "comprehensions are not allowed"),
}
_LITERALS: tuple[tuple[type | tuple[type, ...], str], ...] = (
    ((str, bytes), "string literals are not allowed"),
    (float, "float literals are not allowed (integers only)"),
    (complex, "complex literals are not allowed"),
)


def _refused(node: ast.AST) -> RuleError:
    return RuleError(_REFUSED.get(type(node), f"{type(node).__name__} is not allowed"))


def parse_rule(text: str) -> Expr:
    """Parse a rule: an expression whose value is a bool (a condition every layout must meet)."""
    expr = parse_expr(text)
    if _kind(expr) == "int":
        raise RuleError(f"a rule must be a condition, but {_snippet(expr)} is an int")
    return expr


def parse_expr(text: str) -> Expr:
    """Parse an int or bool expression of the rule grammar (refusing everything else)."""
    if not isinstance(text, str):
        raise RuleError("rule text must be a string")
    if len(text) > MAX_TEXT:
        raise RuleError(f"rule text longer than {MAX_TEXT} characters")
    _screen_text(text)
    flat = " ".join(text.split())  # YAML block scalars may span lines; no whitespace is significant
    if not flat:
        raise RuleError("rule text is empty")
    try:
        tree = ast.parse(flat, mode="eval")
    except SyntaxError as exc:
        raise RuleError(f"invalid syntax: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise RuleError("rule text cannot be parsed (too complex)") from None
    _check_depth(tree)
    expr = _translate(tree.body)
    _check_kinds(expr)
    return expr


def _screen_text(text: str) -> None:
    """Refuse, before the parser sees it, text the grammar can never accept or that nests deeply.
    Comments are refused because joining lines would let a `#` silently swallow the rest."""
    depth = 0
    for ch in text:
        if not ch.isascii():
            raise RuleError(f"non-ASCII character {ch!r} is not allowed")
        if ch == "#":
            raise RuleError("comments ('#') are not allowed in rule text")
        if not ch.isprintable() and not ch.isspace():
            raise RuleError(f"control character {ch!r} is not allowed")
        depth += (ch in "([{") - (ch in ")]}")
        if depth > MAX_DEPTH:
            raise RuleError(f"expression nested deeper than {MAX_DEPTH} levels")


def _check_depth(tree: ast.AST) -> None:
    """Bound the expression tree depth iteratively, so translation below may recurse safely."""
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise RuleError(f"expression nested deeper than {MAX_DEPTH} levels")
        for child in ast.iter_child_nodes(node):
            stack.append((child, depth + 1 if isinstance(child, ast.expr) else depth))


def _int_literal(value: int) -> int:
    if not -LIMIT <= value <= LIMIT:
        raise RuleError("integer literal out of range ±2^62")
    return value


def _translate(node: ast.expr) -> Expr:
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool):
            return BoolLit(node.value)
        if isinstance(node.value, int):
            return IntLit(_int_literal(node.value))
        why = next((msg for kind, msg in _LITERALS if isinstance(node.value, kind)), None)
        raise RuleError(why or f"{node.value!r} is not allowed")
    if isinstance(node, ast.Name):
        if node.id.startswith("_"):
            raise RuleError(f"names starting with '_' are not allowed ({node.id!r})")
        if node.id in FUNCTIONS:
            raise RuleError(f"{node.id!r} is a function and must be called")
        return Name(node.id)
    if isinstance(node, ast.UnaryOp):
        if not isinstance(node.op, ast.USub | ast.Not):
            raise _refused(node.op)
        return Unary("-" if isinstance(node.op, ast.USub) else "not", _translate(node.operand))
    if isinstance(node, ast.BinOp):
        if type(node.op) not in _ARITH:
            raise _refused(node.op)
        return Arith(_ARITH[type(node.op)], _translate(node.left), _translate(node.right))
    if isinstance(node, ast.BoolOp):
        kind: Literal["and", "or"] = "and" if isinstance(node.op, ast.And) else "or"
        return Logic(kind, tuple(_translate(v) for v in node.values))
    if isinstance(node, ast.Compare):
        return _compare(node)
    if isinstance(node, ast.Call):
        return _call(node)
    raise _refused(node)


def _compare(node: ast.Compare) -> Expr:
    for op in node.ops:
        if isinstance(op, ast.Is | ast.IsNot):
            raise _refused(op)
    if any(isinstance(op, ast.In | ast.NotIn) for op in node.ops):
        if len(node.ops) != 1:
            raise RuleError("'in' / 'not in' cannot be chained with other comparisons")
        negated = isinstance(node.ops[0], ast.NotIn)
        return Member(_translate(node.left), _members(node.comparators[0]), negated)
    parts = [_translate(node.left), *(_translate(c) for c in node.comparators)]
    pairs = tuple(Compare(_CMP[type(op)], parts[i], parts[i + 1]) for i, op in enumerate(node.ops))
    return pairs[0] if len(pairs) == 1 else Logic("and", pairs)  # 1 <= tp <= 8 means both hold


def _members(node: ast.expr) -> tuple[int, ...]:
    if not isinstance(node, ast.Tuple | ast.List):
        raise RuleError("the right side of 'in' must be a tuple of integer literals, e.g. (1, 2, 4)")
    if not node.elts:
        raise RuleError("the tuple after 'in' is empty")
    if len(node.elts) > MAX_MEMBERS:
        raise RuleError(f"the tuple after 'in' has more than {MAX_MEMBERS} values")
    values: set[int] = set()
    for elt in node.elts:
        sign = 1
        if isinstance(elt, ast.UnaryOp) and isinstance(elt.op, ast.USub):
            sign, elt = -1, elt.operand
        if not (isinstance(elt, ast.Constant) and type(elt.value) is int):
            raise RuleError("the tuple after 'in' may hold integer literals only")
        values.add(_int_literal(sign * elt.value))
    return tuple(sorted(values))


def _call(node: ast.Call) -> Expr:
    if isinstance(node.func, ast.Attribute):
        raise _refused(node.func)
    if not isinstance(node.func, ast.Name):
        raise RuleError("only implies(), min(), max() and abs() may be called")
    fn = node.func.id
    if fn not in FUNCTIONS:
        raise RuleError(f"call to {fn!r} is not allowed (only implies, min, max, abs)")
    if node.keywords:
        raise RuleError(f"keyword arguments are not allowed in {fn}()")
    if any(isinstance(a, ast.Starred) for a in node.args):
        raise RuleError(f"starred arguments are not allowed in {fn}()")
    least, most = {"implies": (2, 2), "abs": (1, 1)}.get(fn, (2, MAX_TEXT))
    if not least <= len(node.args) <= most:
        count = f"exactly {least}" if least == most else f"at least {least}"
        raise RuleError(f"{fn}() takes {count} argument(s), got {len(node.args)}")
    args = tuple(_translate(a) for a in node.args)
    if fn == "implies":
        return Implies(args[0], args[1])
    if fn == "abs":
        return Unary("abs", args[0])
    return Extremum("min" if fn == "min" else "max", args)


# ----------------------------------------------------------------------------------- evaluation

_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv, "%": operator.mod,
    "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
    "!=": operator.ne,
}
_UNARY_FN: dict[str, Callable[[Any], Any]] = {"-": operator.neg, "not": operator.not_, "abs": abs}


def evaluate(expr: Expr, values: Mapping[str, Value]) -> Value:
    """The value of an expression for one assignment: the reference the solver must match.

    Division floors; on the non-negative operands `check` guarantees this equals CP-SAT's
    truncating division, so `evaluate` and the compiled model agree exactly. Pure: it only reads
    `values` and builds ints and bools."""
    e = expr
    result: Value
    if isinstance(e, IntLit | BoolLit):
        return e.value
    if isinstance(e, Name):
        if e.id not in values:
            raise RuleError(f"no value for {e.id!r}")
        return values[e.id]
    if isinstance(e, Arith | Compare):
        left, right = evaluate(e.left, values), evaluate(e.right, values)
        if e.op in ("//", "%") and right == 0:
            raise RuleError("division by zero")
        result = _BINARY[e.op](left, right)
        return result
    if isinstance(e, Unary):
        result = _UNARY_FN[e.op](evaluate(e.operand, values))
        return result
    if isinstance(e, Logic):
        test = all if e.op == "and" else any
        return test(evaluate(o, values) for o in e.operands)
    if isinstance(e, Implies):
        return not evaluate(e.antecedent, values) or bool(evaluate(e.consequent, values))
    if isinstance(e, Extremum):
        return (min if e.fn == "min" else max)(evaluate(a, values) for a in e.args)
    if isinstance(e, Member):
        return (evaluate(e.operand, values) in e.values) != e.negated
    raise RuleError(f"unsupported expression node {type(e).__name__}")


# checking and unparsing live in their own modules; re-exported here for callers of `expr`
from primus.rules.bounds import _check_kinds, _kind, _snippet, annotate, check  # noqa: E402, F401
from primus.rules.unparse import unparse  # noqa: E402, F401
