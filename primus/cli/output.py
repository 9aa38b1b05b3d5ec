"""Rendering for the CLI: rich tables for people, json/jsonl/csv documents for scripts.

With a machine format, stdout carries only the document; progress and logs go to stderr.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NoReturn

import click
from rich.console import Console, RenderableType
from rich.errors import MarkupError
from rich.markup import escape as markup_escape
from rich.status import Status
from rich.table import Table
from rich.text import Text

from primus.safe_text import escape_controls

#: 128 + SIGPIPE, what a shell reports for a program stopped by a closed pipe (git, coreutils).
EXIT_BROKEN_PIPE = 141


def exit_broken_pipe() -> NoReturn:
    """The reader closed the pipe (`primus ... | head`): its choice, not an error here. Stop quietly with the
    shell's status for it, stdout pointed at /dev/null so the interpreter's final flush does not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    raise SystemExit(EXIT_BROKEN_PIPE)


class SafeConsole(Console):
    """A rich console that never writes a control character it was given: every string it renders
    (printed text, table cells and titles) has its control characters shown escaped (ESC as \\x1b)
    before markup is parsed; newlines and tabs are kept.

    Markup and emoji codes are off unless a call asks for markup (`print(..., markup=True)`): text from
    input (a rule's why, a model name, a path) would otherwise be read as rich markup, and
    `[link=URL]...[/link]` makes rich itself write a hidden terminal hyperlink, `[bold red]` restyles the
    line, `:x:` becomes an emoji. A call that styles its own words passes every value from input
    through `lit`."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("markup", False)
        kwargs.setdefault("emoji", False)
        super().__init__(*args, **kwargs)

    def render_str(self, text: str, **kwargs: Any) -> Text:
        safe = escape_controls(text, keep_layout=True)
        try:
            return super().render_str(safe, **kwargs)
        except MarkupError:  # brackets from input that read as a broken tag: show the text as it is
            return super().render_str(safe, **{**kwargs, "markup": False})


    def on_broken_pipe(self) -> None:
        """The reader closed the pipe (`primus fit ... | head`): stop quietly with the shell's status for a
        closed pipe, as the CLI does for every other write (`guarded`), not rich's exit 1, which reads as a
        negative answer."""
        self.quiet = True
        exit_broken_pipe()

    def status(self, status: RenderableType, **kwargs: Any) -> Status:
        """A spinner whose text, also on every `update`, is rendered as this console renders strings:
        rich's Status reads a str as markup on its own, past `render_str`."""
        return _SafeStatus(self, self.render_str(status) if isinstance(status, str) else status, **kwargs)


class _SafeStatus(Status):
    def __init__(self, console: SafeConsole, status: RenderableType, **kwargs: Any) -> None:
        self._safe = console
        super().__init__(status, console=console, **kwargs)

    def update(self, status: RenderableType | None = None, **kwargs: Any) -> None:
        super().update(self._safe.render_str(status) if isinstance(status, str) else status, **kwargs)


def lit(value: Any) -> str:
    """`value` as literal text inside a markup string (its `[` cannot open a tag)."""
    return markup_escape(str(value))


def stdout_console() -> Console:
    """Tables for people: the terminal's width, or 160 columns when piped (so files diff well)."""
    width = Console().width if sys.stdout.isatty() else 160
    return SafeConsole(file=sys.stdout, soft_wrap=True, width=max(100, width))


def stderr_console() -> Console:
    return SafeConsole(file=sys.stderr, stderr=True)


def echo(text: str, *, err: bool = False, nl: bool = True) -> None:
    """click.echo for text that may hold input: control characters shown escaped (newlines and tabs
    kept)."""
    click.echo(escape_controls(text, keep_layout=True), err=err, nl=nl)


def emit_json(doc: Any) -> None:
    _write_lines(json.dumps(doc, indent=2, sort_keys=False, default=_default) + "\n")


def _write_lines(text: str) -> None:
    """Write a document line by line: one large write that a closing reader (`| head -1`) cuts short can
    return as if it had all been written (CPython's buffered writer after a partial write), so the
    truncated document would exit 0; a later line's write raises BrokenPipeError (exit 141, as jsonl)."""
    out = sys.stdout
    for line in text.splitlines(keepends=True):
        out.write(line)
    out.flush()


def emit_jsonl(rows: Iterable[Mapping[str, Any]]) -> None:
    out = sys.stdout
    for row in rows:
        out.write(json.dumps(row, default=_default, separators=(",", ":")) + "\n")
    out.flush()


def emit_csv(rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None = None) -> None:
    cols = list(columns or (rows[0].keys() if rows else []))
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row.get(k)) for k in cols})
    _write_lines(buf.getvalue())


#: What a spreadsheet reads as the start of a formula (OWASP "CSV Injection": = + - @, and a tab or carriage
#: return before one): a text cell that begins so gets a leading apostrophe, which shows it as text.
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: Any) -> Any:
    """A CSV cell: text from input (a run id, a source, a model name) with its control characters shown
    escaped, as every other format shows them (an ESC written raw would restyle the reader's terminal), and
    never read as a formula (`FORMULA_START`). Numbers stay numbers: only text is guarded."""
    if isinstance(value, str):
        text = escape_controls(value, keep_layout=True)
        return "'" + text if text.startswith(FORMULA_START) else text
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"), default=_default)
    return value


def _default(obj: Any) -> Any:
    if hasattr(obj, "model_dump"):
        return obj.model_dump()
    if hasattr(obj, "__dataclass_fields__"):
        from dataclasses import asdict

        return asdict(obj)
    if isinstance(obj, (set, frozenset, tuple)):
        return list(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def table(title: str | None, columns: Sequence[str], rows: Iterable[Sequence[Any]],
          justify_right: Sequence[str] = ()) -> Table:
    t = Table(title=title, show_lines=False, header_style="bold")
    for col in columns:  # a long word (an option path) folds onto the next line rather than being cut
        t.add_column(col, justify="right" if col in justify_right else "left", overflow="fold")
    for row in rows:
        t.add_row(*[Text(escape_controls(_fmt(v), keep_layout=True)) for v in row])  # data, never markup
    return t


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def gib(n: int | float) -> str:
    return f"{n / 2**30:,.2f} GiB"


def tight_text(headroom_bytes: int, band_bytes: int) -> str:
    """The tight verdict's words, as `fit`, `project` and `tune` print them (docs/memory.md)."""
    return f"headroom {gib(headroom_bytes)} is less than the allocator reserve {gib(band_bytes)}"


def human_params(n: int) -> str:
    for unit, div in (("T", 1e12), ("B", 1e9), ("M", 1e6)):
        if n >= div:
            return f"{n / div:.2f}{unit}"
    return str(n)
