"""Bounds on what a launch script's static reading may build (`primus.launch.shell`).

A 1 KB script that doubles a variable per line (``A="$A$A"``) reaches gigabytes in a few dozen lines; bash
would too, and then fail. A real launch script's longest variable, an argument list, holds a few kilobytes,
so a variable past `MAX_VALUE_CHARS`, or one statement whose references expand past `MAX_STATEMENT_CHARS`,
is bad input: one line naming the file and the line, never a MemoryError.
"""

from __future__ import annotations

from typing import Final

from primus.errors import InputError

#: a shell variable's value: a string, or an array's items (`primus.launch.shell`)
Value = str | list[str]

MAX_VALUE_CHARS: Final = 1_000_000
MAX_STATEMENT_CHARS: Final = 4 * MAX_VALUE_CHARS


def size(value: Value) -> int:
    """Characters a value holds (an array: its items and one separator each)."""
    return sum(len(v) + 1 for v in value) if isinstance(value, list) else len(value)


def bounded(name: str, value: Value, where: str, line: int) -> Value:
    """`value`, assigned to `name` on `line`; InputError past `MAX_VALUE_CHARS`."""
    if size(value) > MAX_VALUE_CHARS:
        raise InputError(where, f"line {line}", f"{name} grows past {MAX_VALUE_CHARS:,} characters (a launch "
                         "script's variables hold a few kilobytes); not expanded further")
    return value


def check_statement(expanded: int, name: str, where: str, line: int) -> None:
    """InputError once one statement's variable references have expanded past `MAX_STATEMENT_CHARS`."""
    if expanded > MAX_STATEMENT_CHARS:
        raise InputError(where, f"line {line}", f"expands past {MAX_STATEMENT_CHARS:,} characters at ${name} (a "
                         "launch script's statements hold a few kilobytes); not expanded further")
