"""The ``[ ]`` / ``[[ ]]`` tests of a bash ``if``, decided statically where they can be.

String and integer comparisons, ``-z``/``-n``, ``!``, ``&&`` and ``||`` (left to right, equal
precedence, as bash evaluates a list) are decided; a test on the file system (``-f``, ``-d``, ...)
cannot be, and is None — the reader then takes the first branch and says so.
"""

from __future__ import annotations

import operator
import re


def _test(words: list[str]) -> bool | None:
    """A ``[ ]``/``[[ ]]`` expression's value; None when it cannot be decided statically."""
    if words and words[0] == "!":
        inner = _test(words[1:])
        return None if inner is None else not inner
    if len(words) == 0:
        return False
    if len(words) == 1:
        return words[0] != ""
    if len(words) == 2:
        op, arg = words
        if op == "-z":
            return arg == ""
        if op == "-n":
            return arg != ""
        return None  # -f, -d, -e, ...: the file system is not read
    if len(words) == 3:
        a, op, b = words
        if op in ("=", "=="):
            return a == b
        if op == "!=":
            return a != b
        ints = {"-eq": operator.eq, "-ne": operator.ne, "-gt": operator.gt, "-lt": operator.lt,
                "-ge": operator.ge, "-le": operator.le}
        if op in ints and re.fullmatch(r"-?\d+", a) and re.fullmatch(r"-?\d+", b):
            return bool(ints[op](int(a), int(b)))
    return None


def condition(words: list[str]) -> bool | None:
    """``[ a ] || [[ b ]] && ! [ c ]`` (bash evaluates && and || left to right with equal precedence)."""
    result: bool | None = None
    pending = ""
    i = 0
    while i < len(words):
        negate = False
        if words[i] == "!":
            negate, i = True, i + 1
        if i >= len(words) or words[i] not in ("[", "[["):
            return None
        close = "]" if words[i] == "[" else "]]"
        try:
            end = words.index(close, i + 1)
        except ValueError:
            return None
        value = _test(words[i + 1:end])
        if value is not None and negate:
            value = not value
        if pending == "":
            result = value
        elif pending == "&&":
            result = _and(result, value)
        else:
            result = _or(result, value)
        i = end + 1
        if i < len(words):
            if words[i] not in ("&&", "||"):
                return None
            pending, i = words[i], i + 1
    return result


def _and(a: bool | None, b: bool | None) -> bool | None:
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or(a: bool | None, b: bool | None) -> bool | None:
    if a is True or b is True:
        return True
    return None if a is None or b is None else False
