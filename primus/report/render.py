"""Rendering a run directory's report: `report.html` (self-contained: inline CSS and SVG, no script, no
network), `report.md` (the same sections, for review in a pull request) and `charts/*.svg` (the charts
the Markdown shows). Templates are jinja2 files shipped in the package (`primus/report/templates`).

Rendering is a pure function of the directory: `primus tune` renders from the files it has just
written, `primus report DIR` re-renders from the same files and gets the same bytes.
"""

from __future__ import annotations

import os
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
from markupsafe import Markup

from primus.errors import InputError
from primus.report.context import build_context
from primus.report.rundir import RunDir

CHARTS = ("memory", "timeline", "scatter", "progress")


def md_cell(value: Any) -> str:
    """Text safe inside a Markdown table cell (no pipes, no line breaks, no raw HTML)."""
    text = " ".join(str(value).split())
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def md_code(value: Any) -> str:
    """Inline code that survives backticks in the text."""
    text = " ".join(str(value).split()).replace("|", "\\|")
    fence = "``" if "`" in text else "`"
    return f"{fence} {text} {fence}" if fence == "``" else f"`{text}`"


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("primus.report", "templates"),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html",), default_for_string=False),
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["md"] = md_cell
    env.filters["code"] = md_code
    return env


def render(run: RunDir) -> dict[str, str]:
    """Every report file of a run directory, by relative path. A directory whose files are not what
    `primus tune` writes (hand-edited, truncated) is refused as input, never a traceback."""
    try:
        ctx = build_context(run)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise InputError(str(run.root), None, f"result.json or audit.jsonl is not as `primus tune` writes it "
                         f"({type(exc).__name__}: {exc})") from None
    env = _env()
    html_ctx = {**ctx, "svg": {k: Markup(v["svg"]) for k, v in ctx["charts"].items()}}
    out = {
        "report.html": env.get_template("report.html.j2").render(html_ctx),
        "report.md": env.get_template("report.md.j2").render(ctx),
    }
    for name, chart in sorted(ctx["charts"].items()):
        out[f"charts/{name}.svg"] = chart["svg"]
    return out


def write_report(root: Path, entries: list[dict[str, Any]] | None = None) -> list[Path]:
    """Render the report of the run directory `root` into it. Each file is written to a temporary name
    and renamed, so a reader never sees half a file; returns the paths written. `entries`, when given,
    are the audit lines just written there (saves reading them back; JSON round-trips them exactly)."""
    run = RunDir.open(root)
    if entries is not None:
        run._entries = entries
    files = render(run)
    written = []
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the report from other readers
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        written.append(path)
    return written
