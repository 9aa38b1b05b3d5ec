"""`primus fit`, `primus enumerate`, `primus schema rule`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from primus import api
from primus.cli.common import Negative, format_option, guarded, read_job, stack_option
from primus.cli.launch_opts import job_or_launch, launch_options, report_import
from primus.cli.memory_cmd import print_memory_table
from primus.cli.output import (
    emit_csv,
    emit_json,
    emit_jsonl,
    gib,
    lit,
    stderr_console,
    stdout_console,
    table,
    tight_text,
)
from primus.projection.complete import RESIMULATE
from primus.rules.expr import MAX_TEXT
from primus.solver.api import Question
from primus.solver.fit import FitResult, sizes_text
from primus.solver.pins import PIN_AXES
from primus.solver.space import rule_names_doc
from primus.solver.suggest import Alternative, changed_name, option_text

F = TypeVar("F", bound=Callable[..., Any])

#: `enumerate --rank` times most rows by the fast path: where the pipeline's stages differ, its busiest-stage
#: estimate (`primus.projection.timing`, within 2% of the simulation: tests/test_projection_timing.py), which
#: `project` of the same layout replaces by the simulation, as rank does for its leaders
BOUND_TIMING = "bottleneck"
BOUND_NOTE = ("rows whose timing (a column of --format csv/json) is 'bottleneck' are the fast path's busiest-stage "
              "estimate, within 2% of the simulation that `primus project` of the layout runs; the first "
              f"{RESIMULATE} rows are re-timed by it")


def rule_options(fn: F) -> F:
    fn = click.option("--without", "without", multiple=True, metavar="RULE_ID",
                      help="Drop a rule by id (repeatable).")(fn)
    fn = click.option("--rules", "rule_files", multiple=True, type=click.Path(dir_okay=False), metavar="FILE",
                      help="Add the rules of a YAML file (repeatable).")(fn)
    fn = click.option("--rule", "rule_texts", multiple=True, metavar="EXPR",
                      help="Add an inline hard rule, e.g. 'tp >= 2' (repeatable; ids inline-1, inline-2, ...).")(fn)
    return fn


def _print_fit(q: Question, result: FitResult) -> None:
    con = stdout_console()
    capacity = q.space.reserves.capacity_bytes
    title = f"{q.job.model.name} on {q.job.num_gpus} x {q.job.cluster.name}"
    reserves = q.space.reserves
    if result.fits:
        assert result.report is not None and result.layout is not None
        con.print(f"[bold green]FITS[/]: {lit(result.layout.text())}", markup=True)
        headroom = capacity - result.report.peak_bytes
        if reserves.verdict(result.report.peak_bytes) == "tight":
            con.print("[bold yellow]TIGHT[/]: " + lit(tight_text(headroom, reserves.tight_band_bytes)
                                                      + f" ({reserves.allocator} allocator, bounded by runs that "
                                                      "ran, not measured for this job)"), markup=True)
        if result.completed_axes:
            con.print(f"free axes completed with the most headroom: {', '.join(result.completed_axes)}")
        for note in result.notes:
            con.print(f"note: {note}")
        print_memory_table(result.report, title)
        con.print(f"rules satisfied ({len(result.satisfied_rules)}): {', '.join(result.satisfied_rules)}")
        return
    con.print("[bold red]DOES NOT FIT[/]", markup=True)
    if result.report is not None and result.report.peak_bytes > reserves.hbm_bytes:
        con.print(f"the peak {gib(result.report.peak_bytes)} is over the device's raw memory "
                  f"{gib(reserves.hbm_bytes)} as well")
    con.print(f"minimal conflicting rules and pins: {', '.join(result.violated_rules) or '(none found)'}")
    for rid in result.violated_rules:
        if not rid.startswith("pin:"):
            rule = q.ruleset.by_id(rid)
            con.print(f"  - {rid}: {rule.require}   ({rule.why or rule.origin})")
            if rid in result.core_details:
                con.print(f"    {result.core_details[rid]}")
        else:
            con.print(f"  - {rid} = {q.pins.get(rid[4:])!r}")
    for other in result.further_cores:
        con.print(f"and once those pins change, still conflicting: {', '.join(other)}")
    if result.report is not None and result.layout is not None:
        breaks = f" (breaks {', '.join(result.request_breaks)})" if result.request_breaks else ""
        con.print(f"closest evaluation of the request{breaks}: {result.layout.text()}")
        for note in result.notes:
            con.print(f"  note: {note}")
        for s in result.report.stages:
            over = s.bytes - capacity
            if over > 0:
                top = sorted(s.terms.items(), key=lambda kv: -kv[1])[:3]
                con.print(f"  stage {s.stage}: {gib(s.bytes)} is {gib(over)} over capacity {gib(capacity)}; "
                          f"largest: " + ", ".join(f"{k} {gib(v)}" for k, v in top))
    if result.alternatives:
        ranked = all(a.tokens_per_s_per_gpu is not None for a in result.alternatives)
        rows = [(i + 1, a.layout.text(), changed_text(a), ", ".join(a.pins_changed) or "none",
                 gib(a.peak_bytes), gib(a.headroom_bytes) + (" (tight)" if a.tight else ""),
                 *([f"{a.tokens_per_s_per_gpu:,.0f}"] if ranked else []))
                for i, a in enumerate(result.alternatives)]
        how = "free axes completed by projected throughput" if ranked else "free axes completed by least memory"
        con.print(table(f"nearest legal layouts ({how})",
                        ["#", "parallel", "changed", "pins changed", "peak", "headroom",
                         *(["tokens/s/GPU"] if ranked else [])], rows))
    if result.sizes_searched:
        con.print(sizes_text(result, q.job.num_gpus, q.job.cluster.gpus_per_node))
    con.print("assumptions:")
    for a in result.assumptions:
        con.print(f"  - {a}")


def changed_text(a: Alternative) -> str:
    """What a fix changes, every option with the value it sets (`recompute=full, parallel.recompute_method=
    block, ...`) or `unset` where it removes the job's own (first-stage sizes under a last-stage fix); an
    axis change by its name (the parallel column holds its value)."""
    values = {changed_name(path, PIN_AXES): value for path, value in a.options.items()}
    return ", ".join(option_text(c, values[c]) if c in values else c for c in a.changed) or "-"


@click.command("fit")
@click.argument("job_file", required=False, type=click.Path(dir_okay=False))
@launch_options
@rule_options
@format_option("table", "json")
@guarded
def fit_cmd(job_file: str | None, launch_from: tuple[str, str] | None, launch_hardware: str | None,
            launch_nodes: int | None, launch_gpus: int | None, stack: str | None, rule_texts: tuple[str, ...],
            rule_files: tuple[str, ...], without: tuple[str, ...], fmt: str) -> None:
    """Prove that a job fits (or complete its free axes with the most headroom), or explain why not.

    On failure: a minimal set of conflicting rules and pins, the bytes over capacity per stage, the
    nearest legal layouts and, when nothing fits at all, the nearest sizes below and above that would.
    Exit 0 fits, 1 does not fit.

    JOB_FILE, or --from KIND FILE to read a Megatron-LM argument line, a Primus experiment YAML or a
    torchtitan TOML (options primus does not model are listed on stderr).

    Example: primus fit examples/llama3.1-70b-mi300x.yaml --rule 'tp <= 4'
    """
    job, imported = job_or_launch(job_file, launch_from, launch_hardware, launch_nodes, launch_gpus, stack)
    answer = api.fit(job, rules=rule_texts, rule_files=rule_files, without=without)
    report_import(imported)
    if fmt == "json":
        emit_json(answer.to_json())
    else:
        _print_fit(answer.question, answer.result)
    if answer.negative:
        raise Negative()


@click.command("enumerate")
@click.argument("job_file", type=click.Path(dir_okay=False))
@rule_options
@stack_option
@click.option("--count", "count_only", is_flag=True, help="Print only the number of legal layouts (exit 1 if zero).")
@click.option("--top", type=click.IntRange(1, 10_000_000), default=None,
              help="Only the first N (by headroom, or by projected throughput with --rank).")
@click.option("--rank", is_flag=True, help="Sort by projected tokens/s/GPU (fastest first) and show it.")
@format_option("table", "csv", "jsonl", "json")
@guarded
def enumerate_cmd(job_file: str, rule_texts: tuple[str, ...], rule_files: tuple[str, ...], without: tuple[str, ...],
                  stack: str | None, count_only: bool, top: int | None, rank: bool, fmt: str) -> None:
    """Every legal layout over the job's free axes, in canonical order (or --top N by headroom, or
    --rank by projected throughput).

    A layout is a distinct (tp, pp, vp, cp, ep, etp, mbs, sp, recompute, sharding); settings that mean
    nothing (vp at PP 1, ep/etp of dense models, sp at TP 1) are counted once.

    Example: primus enumerate examples/llama3.1-70b-mi300x.yaml --count
    """
    found = api.enumerate_layouts(read_job(job_file, stack), rules=rule_texts, rule_files=rule_files,
                                  without=without, top=top, rank=rank, count_only=count_only)
    n, bar = found.count, found.uncertainty
    if count_only:
        if fmt == "json":
            emit_json(found.to_json())
        elif fmt == "jsonl":
            emit_jsonl([{"count": n}])
        elif fmt == "csv":
            emit_csv([{"count": n}])
        else:
            click.echo(n)
        if found.negative:
            raise Negative()
        return
    rows = [dict(r) for r in found.rows]
    if fmt == "jsonl":
        emit_jsonl(rows)
    elif fmt == "json":
        emit_json(found.to_json())
    elif fmt == "csv":
        flat = [{**r["parallel"], **{k: v for k, v in r.items() if k != "parallel"}} for r in rows]
        cols = ["tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "sp", "recompute", "sharding", "peak_bytes",
                "headroom_bytes"] + (["tokens_per_s_per_gpu", "step_time_s", "uncertainty_pct", "timing"] if rank
                                     else [])
        if any("recompute_num_layers" in r for r in flat):
            cols.insert(11, "recompute_num_layers")
        emit_csv(flat, cols)
    else:
        con = stdout_console()
        shown = rows[:200]
        extra = [f"tokens/s/GPU {bar.text()}" if bar else "tokens/s/GPU", "step s"] if rank else []
        how = " by projected throughput" if rank else " by headroom" if top else ""
        con.print(table(f"{n:,} legal layouts" + (f" (first {len(rows)}{how})" if top or rank else ""),
                        ["tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "sp", "recompute", "sharding", "peak",
                         "headroom", *extra],
                        [(p["tp"], p["pp"], p["vp"], p["cp"], p["ep"], p["etp"], p["dp"], p["mbs"], p["sp"],
                          p["recompute"], p["sharding"], gib(r["peak_bytes"]), gib(r["headroom_bytes"]),
                          *([f"{r['tokens_per_s_per_gpu']:,.0f}", f"{r['step_time_s']:.3f}"] if rank else []))
                         for r in shown for p in [r["parallel"]]]))
        if bar is not None:
            con.print(f"projected throughput uncertainty {bar.text()}: {bar.basis}")
        if rank and any(r["timing"] == BOUND_TIMING for r in rows):
            con.print(BOUND_NOTE)
        con.print("assumptions:")
        for a in found.assumptions:
            con.print(f"  - {a}")
        if len(rows) > len(shown):
            stderr_console().print(f"(showing {len(shown)} of {len(rows)}; use --format csv or jsonl for all)")
    if found.negative:
        raise Negative()


@click.command("rule")
@format_option("table", "json")
@guarded
def schema_rule(fmt: str) -> None:
    """The names a rule may use (axes, derived, facts, memory) and the grammar.

    Example: primus schema rule --format json
    """
    doc: dict[str, Any] = {
        "grammar": {
            "max_chars": MAX_TEXT,
            "max_depth": 32,
            "integers": "literals within +-2^62; + - * // % (// and % need non-negative operands and a divisor "
                        "that cannot be 0)",
            "comparisons": "< <= > >= == != (chains allowed)",
            "logic": "and or not implies(a, b)",
            "membership": "x in (1, 2, 4), x not in (...) with integer literals",
            "functions": "min(a, b, ...), max(a, b, ...), abs(x)",
            "rule file keys": "id, why, source, severity (hard|soft), weight (soft only), require",
        },
        "names": rule_names_doc(),
    }
    if fmt == "json":
        emit_json(doc)
        return
    con = stdout_console()
    con.print(table("rule grammar", ["item", "allowed"], list(doc["grammar"].items())))
    con.print(table("names", ["name", "kind", "meaning"],
                    [(k, v["kind"], v["meaning"]) for k, v in doc["names"].items()]))
