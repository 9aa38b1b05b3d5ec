"""Rendering a run directory's report: `report.html` (self-contained: inline CSS and SVG, no script, no
network), `report.md` (the same sections, for review in a pull request) and `charts/*.svg` (the charts
the Markdown shows). Templates are jinja2 files shipped in the package (`primus/report/templates`).

Much of what a report shows is text from input (rule files, LLM replies, model and hardware files, the
job file with its comments), so nothing a template prints is trusted: the HTML environment escapes
every value, the Markdown one escapes every value as Markdown (`primus.report.markdown`), and the SVG
writer escapes every text it draws. `report.html` also carries a Content-Security-Policy that allows
no script, no fetch and no form, so markup that escaped all of that still could not run.

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
from primus.report.manifest import update_manifest
from primus.report.markdown import md_code, md_fence, md_text
from primus.report.owned import check_inside
from primus.report.rundir import RunDir
from primus.safe_text import escape_controls

CHARTS = ("memory", "timeline", "scatter", "progress")


def _html_text(value: Any) -> Any:
    """A value's control characters shown escaped (ESC as \\x1b) before it is escaped as HTML: `cat
    report.html` must not run an escape sequence from an LLM reply, and XML-style tools refuse NUL.
    Markup the renderer built (the charts) is left as is; newlines and tabs are kept."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return escape_controls(value, keep_layout=True)
    return value


@lru_cache(maxsize=1)
def _html_env() -> jinja2.Environment:
    """Every value escaped as HTML, whatever the template's name: autoescape is on for the whole
    environment (choosing by extension would miss `report.html.j2`). The charts are the only markup
    placed as is, and `Svg` escapes every text it draws; control characters are shown escaped first."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("primus.report", "templates"), autoescape=True, finalize=_html_text,
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


@lru_cache(maxsize=1)
def _md_env() -> jinja2.Environment:
    """Every value escaped as Markdown (`finalize`), except what the `code` and `fence` filters build."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("primus.report", "templates"), autoescape=False, finalize=md_text,
        undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["md"] = md_text
    env.filters["code"] = md_code
    env.filters["fence"] = md_fence
    return env


def render(run: RunDir) -> dict[str, str]:
    """Every report file of a run directory, by relative path. A directory whose files are not what
    `primus tune` writes (hand-edited, truncated) is refused as input, never a traceback."""
    try:
        ctx = build_context(run)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise InputError(str(run.root), None, f"result.json or audit.jsonl is not as `primus tune` writes it "
                         f"({type(exc).__name__}: {exc})") from None
    html_ctx = {**ctx, "svg": {k: Markup(v["svg"]) for k, v in ctx["charts"].items()}}
    out = {
        "report.html": _html_env().get_template("report.html.j2").render(html_ctx),
        "report.md": _md_env().get_template("report.md.j2").render(ctx),
    }
    for name, chart in sorted(ctx["charts"].items()):
        out[f"charts/{name}.svg"] = chart["svg"]
    return out


def is_rendered(rel: str) -> bool:
    """A file `render` writes (the report and its charts), as opposed to one it reads."""
    return rel in ("report.html", "report.md") or (rel.startswith("charts/") and rel.endswith(".svg"))


def write_report(root: Path, entries: list[dict[str, Any]] | None = None) -> list[Path]:
    """Render the report of the run directory `root` into it. Each file is written to a temporary name
    and renamed, so a reader never sees half a file; returns the paths written. `entries`, when given,
    are the audit lines just written there (saves reading them back; JSON round-trips them exactly).
    The run's list of files (`SHA256SUMS`), when there is one, records the new files' sha256."""
    run = RunDir.open(root)
    if entries is not None:
        run._entries = entries
    files = render(run)
    check_inside(root, files)
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
    update_manifest(root, files)
    return written
