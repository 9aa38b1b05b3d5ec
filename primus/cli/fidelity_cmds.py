"""`primus validate RUNS.csv` and `primus calibrate --runs RUNS.csv --hardware H`."""

from __future__ import annotations

import datetime
import math
import re
from pathlib import Path
from typing import Any

import click

from primus.cli.common import format_option, guarded
from primus.cli.output import emit_csv, emit_json, stderr_console, stdout_console, table
from primus.errors import InputError, did_you_mean, shown
from primus.processes import WORKERS_RANGE, default_workers
from primus.report.owned import check_replaceable, replace_file

# The first line of every profile `primus calibrate` writes; an existing --out is replaced only with it.
CALIBRATED_HEADER = "# Calibration profile for "


def _calibrated(head: str) -> bool:
    return head.startswith(CALIBRATED_HEADER)


def _pct(x: float | None) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:+.1f}%"


def _abs(x: float | None) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.1f}%"


def _stat_rows(groups: dict[str, dict[str, Any]]) -> list[tuple[Any, ...]]:
    return [(k, v["n"], _abs(v["median_abs_pct"]), _abs(v["p90_abs_pct"]), _abs(v["max_abs_pct"]),
             _pct(v["mean_signed_pct"])) for k, v in groups.items()]


def _unstated(r: dict[str, Any]) -> str:
    """The error range over the legal completions of the row's unstated axes, e.g. "-6.2%..-1.7% (vp)"."""
    if "range_error_pct" not in r:
        return ""
    lo, hi = r["range_error_pct"]
    return f"{_pct(lo)}..{_pct(hi)} ({', '.join(r['unstated_axes'])})"


def print_validation(doc: dict[str, Any]) -> None:
    con = stdout_console()
    rows = [(r["run_id"], r["source"], r["accelerator"], r["precision"], f"{r['predicted_tokens_per_s_per_gpu']:,.0f}",
             f"{r['measured_tokens_per_s_per_gpu']:,.0f}", _pct(r["error_pct"]),
             "-" if r.get("error_bar_pct") is None else f"±{r['error_bar_pct']:.0f}%", _unstated(r),
             "-" if r["fits"] is None else ("yes" if r["fits"] else "NO"),
             f"{r['predicted_peak_gib']:.1f}", f"{r['measured_peak_gib']:.1f}" if "measured_peak_gib" in r else "-")
            for r in doc["rows"]]
    con.print(table(f"{len(rows)} projected runs ({doc['runs_file']})",
                    ["run", "source", "accelerator", "precision", "predicted tok/s/GPU", "measured", "error",
                     "bar", "unstated axes: error range", "fits", "peak GiB", "measured GiB"], rows,
                    justify_right=["predicted tok/s/GPU", "measured", "error", "bar", "peak GiB", "measured GiB"]))
    s = doc["summary"]
    t = s["tokens_per_s_per_gpu"]
    con.print(f"tokens/s/GPU: median |error| {_abs(t['median_abs_pct'])}, p90 {_abs(t['p90_abs_pct'])}, max "
              f"{_abs(t['max_abs_pct'])}, mean signed {_pct(t['mean_signed_pct'])} over {t['n']} runs; coverage "
              f"{s['projected_rows']}/{s['complete_rows']} complete rows ({_abs(s['coverage_pct'])})")
    m = s["peak_memory"]
    con.print(f"peak memory: median |error| {_abs(m['median_abs_pct'])} over {m['n']} runs; false out-of-memory "
              f"verdicts at the stacks' settings {s['false_oom']} of {s['fit_checked_rows']} checked "
              f"({len(s['false_oom_self_contradictory'])} more from a source that contradicts itself; as typed, "
              f"unstated axes free: {s['false_oom_as_typed']}); recompute "
              f"escalated beyond the stack's in {s['escalated_rows']} runs ({_abs(s['escalated_pct'])}); "
              f"Korthikanti et al. 2022 A100 mean |error| {_abs(s['korthikanti2022_a100_mean_abs_pct'])}")
    held = s.get("leave_one_source_out")
    if held is not None:
        from primus.fidelity.loso import AGGREGATES, is_large_group

        o = held["overall"]
        cover = ", ".join(f"{k} {v['pct']:.1f}% of {v['n']}" for k, v in held["coverage"].items()
                          if k in AGGREGATES or is_large_group(k, v))
        con.print(f"leave one source out: median |error| {_abs(o['median_abs_pct'])}, p90 {_abs(o['p90_abs_pct'])} "
                  f"over {o['n']} runs; error-bar coverage {cover or 'n/a (one source: no bar without it)'}")
    cols = ["group", "runs", "median |err|", "p90", "max", "mean signed"]
    right = cols[1:]
    for key, title in (("by_source", "by source"), ("by_accelerator", "by accelerator"),
                       ("by_precision", "by precision"), ("by_kind", "dense vs MoE")):
        con.print(table(title, cols, _stat_rows(s[key]), justify_right=right))
    if doc["unprojected"]:
        con.print(table("rows that could not be projected", ["run", "source", "reason"],
                        [(u["run_id"], u["source"], u["reason"]) for u in doc["unprojected"]]))


#: `validate --format csv`: one line per projected row (the JSON rows' scalar fields; `parallel`, `assumed`
#: and `escalated` as JSON cells). The summary is the JSON document's.
VALIDATE_CSV_COLUMNS = ("run_id", "source", "accelerator", "precision", "moe", "model", "num_gpus",
                        "measured_tokens_per_s_per_gpu", "predicted_tokens_per_s_per_gpu", "error_pct",
                        "error_bar_pct", "step_time_s", "fits", "fits_as_typed", "measured_peak_gib",
                        "predicted_peak_gib", "stack", "parallel", "assumed", "escalated")


@click.command("validate")
@click.argument("runs_file", type=click.Path(dir_okay=False))
@format_option("table", "json", "csv")
@click.option("--no-fit-check", is_flag=True, help="Skip the per-row `primus fit` check (faster; fits is null).")
@click.option("--loso/--no-loso", "loso", default=True, show_default=True,
              help="Refit each accelerator without each source in turn and report the held-out errors and the "
                   "error bars' coverage (summary.leave_one_source_out; about 70 CPU seconds for the dev set).")
@click.option("--workers", type=click.IntRange(*WORKERS_RANGE), default=None,
              help="Processes holding sources out in parallel (default: the CPU count, at most 8); the answer "
                   "does not depend on it.")
@guarded
def validate_cmd(runs_file: str, fmt: str, no_fit_check: bool, loso: bool, workers: int | None) -> None:
    """Project every complete published run of RUNS_FILE and compare with what it measured.

    RUNS_FILE has the columns of ground_truth/runs_dev.csv. Per row: predicted vs measured tokens/s/GPU
    (error_pct = 100 x (predicted / measured - 1)), peak memory where measured, and whether `primus fit`
    finds the published config legal (as the job file a user would type: stated settings and its
    source's stack, unstated axes free), and `escalated`, the settings changed from the stack's to make
    the run fit. Then median, p90 and max |error| by source, accelerator, precision and dense vs MoE,
    and (unless --no-loso) the same errors leave-one-source-out, with the coverage of the error bars.
    Unstated settings follow one stack per source (`stacks/`, recorded per row). Rows that cannot be
    projected are listed with the reason. Exit 0 whenever the report prints. `--format csv` writes one
    line per projected row and nothing else (no summary, no held-out section).

    Example: primus validate ../shared/ground_truth/runs_dev.csv --format json
    """
    from primus.fidelity import read_runs, validate

    rows = read_runs(runs_file)
    report = validate(rows, runs_file, check_fit=not no_fit_check)
    doc = report.to_json()
    if fmt == "csv":  # the rows only: the held-out section is a summary, not rows
        emit_csv(doc["rows"], VALIDATE_CSV_COLUMNS)
        return
    if loso:
        from primus.fidelity.held_out import held_out_section
        from primus.fidelity.validate import prepare

        err = stderr_console()
        with err.status("leave-one-source-out: refitting each accelerator without each source") as status:
            held = held_out_section(prepare(rows)[0], workers=workers or default_workers(),
                                    progress=lambda msg: status.update(f"leave-one-source-out: {msg}"))
        doc["summary"]["leave_one_source_out"] = held
    if fmt == "json":
        emit_json(doc)
    else:
        print_validation(doc)


def _iso_date(text: str) -> bool:
    """A real calendar day written YYYY-MM-DD (what the provenance's `date` records)."""
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return False
    try:
        datetime.date.fromisoformat(text)
    except ValueError:
        return False
    return True


@click.command("calibrate")
@click.option("--runs", "runs_file", required=True, type=click.Path(dir_okay=False),
              help="Published runs (the runs_dev.csv schema).")
@click.option("--hardware", "hardware", required=True, help="Accelerator to fit (a hardware catalog name).")
@click.option("--out", "out", type=click.Path(dir_okay=False), default=None,
              help="Where to write the fitted profile (default: ./<hardware>.yaml).")
@click.option("--start", "start", type=click.Path(dir_okay=False), default=None,
              help="Starting profile (default: the spec-derived hardware/profiles/spec/<hardware>.yaml).")
@click.option("--exclude-source", "exclude", multiple=True, metavar="SOURCE",
              help="Leave a source's runs out of the fit (repeatable).")
@click.option("--date", "date", default=None, help="Date recorded in the provenance (default: today, UTC).")
@click.option("--force", is_flag=True, help="Replace the --out profile even if it was edited since primus wrote "
              "it (without it, an edited profile is refused and kept).")
@format_option("table", "json")
@guarded
def calibrate_cmd(runs_file: str, hardware: str, out: str | None, start: str | None, exclude: tuple[str, ...],
                  date: str | None, force: bool, fmt: str) -> None:
    """Fit the named parameters of one accelerator's profile to published runs and write it.

    Fits a few parameter groups the runs can identify (GEMM plateau per format, attention, MoE host and
    all-to-all, memory-bound efficiency, per software stack) by a deterministic robust fit (Huber on log
    error, prior towards the spec-derived values) and writes the profile with its provenance: runs used,
    date, residuals.

    Example: primus calibrate --runs runs_dev.csv --hardware a100-80gb --out a100-80gb.yaml
    """
    from primus.catalog.hardware import catalog_hardware
    from primus.fidelity import read_runs
    from primus.fidelity.calibrate import calibrate, load_spec_profile, profile_yaml
    from primus.fidelity.validate import prepare

    names = catalog_hardware()
    if hardware not in names:
        raise InputError("--hardware", None, f"unknown hardware {hardware!r}{did_you_mean(hardware, names)}; see "
                         "`primus hardware list`")
    if date is not None and not _iso_date(date):
        raise InputError("--date", None, f"{shown(date)} is not a calendar date in ISO form (YYYY-MM-DD)")
    target = Path(out or f"{hardware}.yaml")
    inputs = (runs_file, *([start] if start else []))  # a --start profile is an input, never replaced
    check_replaceable(target, written_by=_calibrated, command="calibrate", inputs=inputs, force=force)
    every = read_runs(runs_file)
    known = {r.source for r in every if r.source}
    for name in exclude:
        if name not in known:
            raise InputError("--exclude-source", None, f"no run of {runs_file} has source {shown(name)}"
                             f"{did_you_mean(name, known)}; its sources: {', '.join(sorted(known))}")
    # this accelerator's rows (`gpu`, as the job builder reads it); the ones that cannot be used are listed
    mine, unused = prepare(r for r in every if r.source not in exclude and r["gpu"].lower() == hardware)
    initial = load_spec_profile(hardware, start)  # read before any progress line: a refusal is the only line
    if not mine:  # refused before the progress line, so the refusal is the only line
        raise InputError(Path(runs_file).name, None, f"no complete, projectable runs on {hardware!r} to fit")
    skipped = f" ({len(unused)} not usable: listed with the reason)" if unused else ""
    stderr_console().print(f"fitting {hardware} to {len(mine)} complete runs of {runs_file}{skipped} ...")
    result = calibrate(initial, mine, runs_file=Path(runs_file).name, date=date)
    header = (CALIBRATED_HEADER.removeprefix("# ") + f"{hardware}, fitted by `primus calibrate` (see "
              "calibration: for the runs, date and residuals).\n"
              "Every number not fitted keeps its spec-derived value and source.")
    replace_file(target, profile_yaml(result.profile, header), written_by=_calibrated, command="calibrate",
                 inputs=inputs, force=force)
    rec = result.profile.calibration
    assert rec is not None
    if fmt == "json":
        emit_json({"hardware": hardware, "out": str(target), "factors": result.factors, "runs": rec.runs,
                   "residuals_pct": rec.residuals_pct, "summary": rec.summary, "date": rec.date,
                   "unused": [u.to_json() for u in unused]})
        return
    con = stdout_console()
    if unused:  # as `validate` lists its unprojected rows
        con.print(table(f"not used ({len(unused)}): complete {hardware} rows that cannot be fitted",
                        ["run", "source", "reason"], [(u.run_id, u.source, u.reason) for u in unused]))
    con.print(table(f"{hardware}: fitted parameter groups (factor on the spec-derived value)", ["group", "factor"],
                    [(k, f"x{v:.3f}") for k, v in result.factors.items()]))
    con.print(table("residuals", ["run", "error"], [(k, _pct(v)) for k, v in rec.residuals_pct.items()],
                    justify_right=["error"]))
    con.print(f"median |error| {rec.summary['median_abs_pct']:.1f}%, p90 {rec.summary['p90_abs_pct']:.1f}% over "
              f"{len(rec.runs)} runs; written to {target}")
