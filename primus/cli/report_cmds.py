"""`primus report DIR` (re-render a tune run's report) and `primus audit verify DIR` (re-check it)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from primus.cli.common import Negative, format_option, guarded
from primus.cli.output import emit_json, lit, stderr_console, stdout_console
from primus.errors import InputError
from primus.processes import WORKERS_RANGE, default_workers

# Differences printed in the table format; the JSON document always carries all of them.
SHOWN = 100


@click.command("report")
@click.argument("run_dir", type=click.Path(file_okay=False))
@guarded
def report_cmd(run_dir: str) -> None:
    """Re-render report.html, report.md and charts/*.svg of a `primus tune --out DIR` directory from
    the files in it (result.json, audit.jsonl, inputs/, llm/, versions.json); the other files are
    not touched. DIR must carry the marker `primus tune` writes (primus-run.json): a directory it
    did not write is refused, and so is one whose result, log, inputs or versions differ from the
    sha256 its SHA256SUMS records (edited since the run): nothing is written (exit 2).

    Example: primus report primus-tune
    """
    from primus.report.manifest import MANIFEST, edited_sources, update_manifest
    from primus.report.owned import MARKER, owned_files, read_marker, write_marker
    from primus.report.render import is_rendered, write_report

    root = Path(run_dir)
    if root.is_dir() and read_marker(root, "run") is None:
        raise InputError(run_dir, None, f"not a run directory written by `primus tune` ({MARKER} is missing "
                         "or not its marker); nothing was written")
    edited = edited_sources(root, lambda rel: is_rendered(rel) or rel == MARKER,
                            listed=MANIFEST in owned_files(root, "run"))
    if edited:
        raise InputError(run_dir, None, f"{edited[0]}" + (f" (and {len(edited) - 1} more)" if len(edited) > 1 else "")
                         + f"; the report is rendered only from the files {MANIFEST} records, so nothing was "
                         f"written (`primus audit verify {run_dir}` lists every difference)")
    written = write_report(root)
    write_marker(root, "run", set(owned_files(root, "run")) | {p.relative_to(root).as_posix() for p in written})
    update_manifest(root, [MARKER])
    for path in written:
        click.echo(str(path))


@click.group("audit")
def audit_group() -> None:
    """Re-check what a `primus tune` run directory claims.

    Example: primus audit verify primus-tune
    """


@audit_group.command("verify")
@click.argument("run_dir", type=click.Path(file_okay=False))
@click.option("--workers", type=click.IntRange(*WORKERS_RANGE), default=None,
              help="Processes recomputing in parallel (default: the CPU count, at most 8).")
@format_option("table", "json")
@guarded
def audit_verify_cmd(run_dir: str, workers: int | None, fmt: str) -> None:
    """Check every file of DIR against its list (DIR/SHA256SUMS), then recompute every candidate in
    DIR/audit.jsonl from the recorded inputs (checked first against inputs/SHA256SUMS): legality and
    the rules broken, the ledger peak, the projected throughput, step time and breakdown; then
    result.json's best layout and runner-ups (re-picked from the log), its certificate (scope, counts,
    margin), the reference's fit (from its recorded pins), its whole list of faster layouts under
    other pipeline options, the precisions `tune --allow precision` and the option sets `tune --allow
    pipeline` tried (each search run again); and the report against a fresh render by this primus.
    Each difference names the file and field or the candidate (seq and layout); exit 1 if there
    is any.

    Example: primus audit verify primus-tune
    """
    from primus.report.verify import verify_run

    err = stderr_console()
    started = time.monotonic()
    outcome = verify_run(Path(run_dir), workers or default_workers(), progress=lambda m: err.print(m))
    elapsed = time.monotonic() - started
    if fmt == "json":
        emit_json({"ok": outcome.ok, "checked": outcome.checked, "seconds": round(elapsed, 1),
                   "differences": [{"seq": d.seq, "parallel": d.parallel, "what": d.what, "line": d.line()}
                                   for d in outcome.differences], "notes": outcome.notes,
                   "not_rechecked": outcome.not_rechecked})
    else:
        con = stdout_console()
        for note in outcome.notes:
            con.print(f"note: {note}", highlight=False, markup=False)  # notes name user files
        for what in outcome.not_rechecked:
            con.print(f"not re-checked: {what}", highlight=False, markup=False)
        if outcome.ok:
            con.print(f"[bold green]verified[/]: {outcome.checked:,} candidates and the claims of result.json "
                      f"recomputed from the recorded inputs with no difference ({elapsed:.1f} s)",
                      highlight=False, markup=True)
        else:
            n = len(outcome.differences)
            con.print(f"[bold red]{n:,} difference(s)[/] in {lit(run_dir)} ({outcome.checked:,} candidates checked):",
                      highlight=False, markup=True)
            for d in outcome.differences[:SHOWN]:
                con.print(f"  {d.line()}", highlight=False, markup=False)
            if n > SHOWN:
                con.print(f"  ... and {n - SHOWN:,} more (--format json lists them all)", highlight=False)
    if not outcome.ok:
        raise Negative()
