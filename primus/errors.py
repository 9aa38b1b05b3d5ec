"""Errors that the CLI turns into one line on stderr and an exit status.

Bad input must never surface as a traceback: every loader raises `InputError` naming where the
problem is (file, field) and why, and the CLI prints `InputError.line()` and exits 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from primus.safe_text import one_line


class InputError(Exception):
    """Bad or refused input: one line, exit status 2."""

    def __init__(self, where: str, field: str | None, reason: str) -> None:
        # input may be quoted in any part: each is one safe line, a huge value cut to an excerpt
        self.where = one_line(str(where))
        self.field = one_line(str(field)) if field is not None else None
        self.reason = one_line(" ".join(str(reason).split()))
        super().__init__(self.line())

    def line(self) -> str:
        parts = [p for p in (self.where, self.field) if p]
        prefix = ": ".join(parts)
        return f"{prefix}: {self.reason}" if prefix else self.reason

    def at(self, where: str) -> InputError:
        """The same error re-anchored to an enclosing file (keeps the field and reason)."""
        return InputError(where, self.field, self.reason)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' suffix when a close match exists, else ''."""
    matches = difflib.get_close_matches(word, sorted(choices), n=1, cutoff=0.6)
    return f" (did you mean {matches[0]!r}?)" if matches else ""
