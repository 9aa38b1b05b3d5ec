"""Text from input, made safe to show on a terminal and short enough to quote in one line.

Model files, launch files, rule files and LLM replies are untrusted: a name can carry an escape
sequence (ESC [ ... that recolours, moves the cursor or retitles the terminal), a carriage return that
overwrites what was printed, bidirectional overrides that reorder what is read, or a megabyte of
text. Everything the CLI prints passes through `escape_controls` (the consoles of `primus.cli.output`
apply it to every string they render); error messages quote input through `excerpt`.
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls, and the Unicode format characters that reorder or break lines
# (bidirectional marks, embeddings, overrides and isolates; line and paragraph separators).
_FORMAT = "\x7f-\x9f\u200e\u200f\u2028-\u202e\u2066-\u2069"
_ANY = re.compile(f"[\x00-\x1f{_FORMAT}]")
_BUT_LAYOUT = re.compile(f"[\x00-\x08\x0b-\x1f{_FORMAT}]")  # keeps tab (\x09) and newline (\x0a)

# The longest excerpt of an input value quoted in a message; the longest run without a space kept in a
# message line (longer than any file path a user types, far shorter than a megabyte-long name); and
# the longest message line.
EXCERPT_CHARS = 80
RUN_CHARS = 240
LINE_CHARS = 2_000


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape_controls(text: str, *, keep_layout: bool = False) -> str:
    """`text` with every control character shown as an escape (ESC as \\x1b); with `keep_layout`,
    newlines and tabs are kept (for multi-line output the program itself lays out)."""
    return (_BUT_LAYOUT if keep_layout else _ANY).sub(_escaped, text)


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """At most `limit` characters of `text`, control characters escaped, saying how much was left out."""
    if len(text) > limit:
        text = f"{text[:limit]}...[{len(text) - limit:,} more characters]"
    return escape_controls(text)


_LONG_RUN = re.compile(rf"\S{{{RUN_CHARS + 1},}}")


def one_line(text: str, limit: int = LINE_CHARS) -> str:
    """A message as one safe line: each run of more than RUN_CHARS characters without a space (a huge
    name) cut to an excerpt of EXCERPT_CHARS, the whole cut to `limit` characters, control characters
    escaped."""
    text = _LONG_RUN.sub(lambda m: f"{m.group(0)[:EXCERPT_CHARS]}...[{len(m.group(0)) - EXCERPT_CHARS:,} more "
                                   "characters]", text)
    if len(text) > limit:
        text = f"{text[:limit]}...[{len(text) - limit:,} more characters]"
    return escape_controls(text)
