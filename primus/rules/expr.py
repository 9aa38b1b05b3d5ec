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

from primus.errors import did_you_mean

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


# ------------------------------------------------------------------------------------ typing


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


# ------------------------------------------------------------------------------------- unparse

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
