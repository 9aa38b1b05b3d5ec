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


# An offending value is quoted up to this many characters: enough to recognise it, and a 5,000-digit
# number or a pasted file stays one readable line.
MAX_SHOWN_CHARS = 60


def shown(value: object) -> str:
    """`repr(value)`, cut to MAX_SHOWN_CHARS with '...' (for "got X" in a one-line error)."""
    text = repr(value)
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS - 3] + "..."


# At most this many names are offered; a prefix shorter than MIN_PREFIX (or a substring shorter than
# MIN_SUBSTRING) matches too much to be a hint.
MAX_SUGGESTIONS = 3
MIN_PREFIX = 2
MIN_SUBSTRING = 3


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """A ' (did you mean X?)' suffix when a close match exists, else ''.

    Names that begin with the word, then names that contain it, come before spelling distance: `h100`
    is short for `h100-80gb` and `h100-96gb-500w`, not a misspelling of `h800`."""
    ordered = sorted(choices)
    w = word.strip().lower()
    same = [c for c in ordered if c.lower() == w and c != word]  # only the case differs: `LLAMA3.1-8B`
    if same:
        return f" (did you mean {same[0]!r}?)"
    starts = [c for c in ordered if len(w) >= MIN_PREFIX and c.lower().startswith(w) and c.lower() != w]
    contains = [c for c in ordered if len(w) >= MIN_SUBSTRING and w in c.lower() and c.lower() != w
                and c not in starts]
    matches = (starts + contains)[:MAX_SUGGESTIONS] or difflib.get_close_matches(word, ordered, n=1, cutoff=0.6)
    if not matches:
        return ""
    if len(matches) == 1:
        return f" (did you mean {matches[0]!r}?)"
    return f" (did you mean {', '.join(repr(m) for m in matches[:-1])} or {matches[-1]!r}?)"
