"""Markdown from untrusted text: what `report.md` (and any other generated Markdown) places between its
own markup.

Rule files, LLM replies, model and hardware files and job comments are written by other people and by
a model, and a Markdown renderer (a pull-request view, a wiki) turns `<script>`, `[text](url)`,
`![img](url)`, `|` in a table row or `# ` at the start of a line into markup. So every value the
Markdown template prints goes through `md_text` (the template environment's `finalize`), unless a filter
built it as Markdown on purpose (`md_code`, `md_fence`), which is marked `MdSafe` and left alone:

- control characters are shown escaped (ESC as `\\x1b`, as on the terminal: `cat report.md` must not
  run an escape sequence from an LLM reply), in code spans and fenced blocks too;
- whitespace runs, line breaks included, become one space (a value is always inline: a line break
  followed by `# ` would start a heading);
- `\\ ` * [ ] | ~ #` are escaped with a backslash (CommonMark's escape for ASCII punctuation; GitHub's
  tables honour `\\|`; a `#` ending a heading would be taken for its closing sequence), and so is `_`
  unless it stands between two letters or digits, where it cannot start emphasis; `& < >` become
  entities; so no tag, link, image, emphasis, code span or table cell can start inside the value;
- a value that would start a block where it stands first on a line (`=`, a `-` or `+` list marker,
  `1.` / `1)`) has that character escaped. Signed numbers (`-0.123`, `+1.5`) are left as
  they are: they start no block.
"""

from __future__ import annotations

import re
from typing import Any

from primus.safe_text import escape_controls

_INLINE = str.maketrans({"\\": "\\\\", "`": "\\`", "*": "\\*", "[": "\\[", "]": "\\]", "|": "\\|", "~": "\\~",
                         "#": "\\#", "&": "&amp;", "<": "&lt;", ">": "&gt;"})
# "_" between two letters or digits can neither open nor close emphasis (CommonMark: an intraword `_` is not
# a delimiter), so names like tp_comm stay readable in the raw file; every other "_" is escaped.
_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")
# The block starts a line of text could open once inline markup is escaped (">" is "&gt;", "#" is "\#").
_LEAD = re.compile(r"^( ?)(?:(=)|([-+])(?![\d.])|(\d{1,9})([.)])(?= |$))")
_SPACE = re.compile(r"\s+")
_TICKS = re.compile(r"`+")


class MdSafe(str):
    """Text that is already Markdown: escaped by `md_text` or built by `md_code` / `md_fence`."""

    __slots__ = ()


def _lead(m: re.Match[str]) -> str:
    space, mark, sign, digits, dot = m.groups()
    if mark or sign:
        return f"{space}\\{mark or sign}"
    return f"{space}{digits}\\{dot}"


def md_text(value: Any) -> MdSafe:
    """`value` as inline Markdown text that renders as exactly its characters (whitespace collapsed)."""
    if isinstance(value, MdSafe):
        return value
    text = _UNDERSCORE.sub(r"\\_", escape_controls(_SPACE.sub(" ", str(value))).translate(_INLINE))
    return MdSafe(_LEAD.sub(_lead, text, count=1))


def _fence_for(text: str, shortest: int) -> str:
    longest = max((len(run) for run in _TICKS.findall(text)), default=0)
    return "`" * max(shortest, longest + 1)


def md_code(value: Any) -> MdSafe:
    """`value` as an inline code span on one line: the span's backtick fence is longer than any run of
    backticks inside it, and `|` is escaped so the span can sit in a table cell."""
    text = escape_controls(_SPACE.sub(" ", str(value)).strip()).replace("|", "\\|")
    if not text:
        return MdSafe("")
    fence = _fence_for(text, 1)
    return MdSafe(f"{fence} {text} {fence}" if "`" in text else f"{fence}{text}{fence}")


def md_fence(value: Any, info: str = "") -> MdSafe:
    """`value` verbatim in a fenced code block whose fence no line of it can close (nothing inside a
    fenced block is markup)."""
    text = escape_controls(str(value).rstrip("\n"), keep_layout=True)
    fence = _fence_for(text, 3)
    return MdSafe(f"{fence}{info}\n{text}\n{fence}")


__all__ = ["MdSafe", "md_code", "md_fence", "md_text"]
