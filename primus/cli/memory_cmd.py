"""`primus memory JOB.yaml`: the per-stage byte ledger of a fully pinned job."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import click

from primus.api import memory_ledger
from primus.cli.common import Negative, format_option, guarded
from primus.cli.launch_opts import job_or_launch, launch_options, report_import
from primus.cli.output import echo, emit_csv, emit_json, gib, stdout_console, table
from primus.memory.evaluate import MemoryReport
from primus.memory.ledger import BREAKDOWN_KEYS


def print_memory_table(report: MemoryReport, title: str, breaks: Mapping[str, str] | None = None,
                       assumptions: Sequence[str] | None = None) -> None:
    """The ledger table, the verdict and the assumptions. `breaks` (rule id -> why) are the rules the
    layout breaks: then it does not fit whatever its bytes, as `fit` says of the same pins."""
    con = stdout_console()
    rows = []
    for s in report.stages:
        rows.append((s.stage, f"{s.params:,}", *[gib(s.breakdown[k]) for k in BREAKDOWN_KEYS], gib(s.bytes),
                     gib(report.capacity_bytes - s.bytes)))
    con.print(table(title, ["stage", "params", *BREAKDOWN_KEYS, "total", "headroom"], rows,
                    justify_right=["params", *BREAKDOWN_KEYS, "total", "headroom"]))
    verdict = {"fits": "fits", "tight": "fits, but TIGHT (headroom under the allocator reserve "
               f"{gib(report.reserves.tight_band_bytes)})", "does not fit": "DOES NOT FIT"}[report.verdict]
    if not report.fits and report.peak_bytes > report.reserves.hbm_bytes:
        verdict += f", over the raw {gib(report.reserves.hbm_bytes)} of HBM as well"
    if breaks:
        verdict = (f"DOES NOT FIT: the layout breaks {', '.join(breaks)} (the bytes alone: "
                   f"{'fit' if report.fits else 'do not fit'})")
    con.print(f"peak {gib(report.peak_bytes)} ({report.peak_bytes:,} B) on stage {report.peak.stage}; capacity "
              f"{gib(report.capacity_bytes)} ({report.capacity_bytes:,} B): {verdict}")
    if breaks:
        for rid, why in breaks.items():
            con.print(f"  - {rid}: {why}")
        con.print("  `primus fit` on the same job names the nearest legal layouts")
    con.print("assumptions:")
    for a in (report.assumptions if assumptions is None else assumptions):
        con.print(f"  - {a}")


def print_no_ledger(title: str, breaks: Mapping[str, str], assumptions: Sequence[str]) -> None:
    """The answer for pins that describe no layout to count bytes for: the rules they break, as `fit`
    names them."""
    con = stdout_console()
    con.print(f"{title}: DOES NOT FIT: the pinned layout breaks {', '.join(breaks)}; Megatron-LM cannot "
              "build it, so it has no bytes to count")
    for rid, why in breaks.items():
        con.print(f"  - {rid}: {why}")
    con.print("  `primus fit` on the same job names the nearest legal layouts")
    con.print("assumptions:")
    for a in assumptions:
        con.print(f"  - {a}")


@click.command("memory")
@click.argument("job_file", required=False, type=click.Path(dir_okay=False))
@launch_options
@format_option("table", "json", "csv")
@guarded
def memory_cmd(job_file: str | None, launch_from: tuple[str, str] | None, launch_hardware: str | None,
               launch_nodes: int | None, launch_gpus: int | None, stack: str | None, fmt: str) -> None:
    """Exact bytes per rank at each pipeline stage's peak, for a job with every axis pinned.

    Exit 0 when the peak fits the capacity (HBM less named reserves), 1 when it does not or when the
    layout breaks a rule `fit` reads the same pins with (EP 2 for a dense model, VP 4 at PP 1): the
    ledger is still printed, with the rules it breaks.

    JOB_FILE, or --from KIND FILE (megatron | primus | torchtitan launch config).

    Example: primus memory examples/llama3.1-70b-mi300x.yaml --format json
    """
    job, imported = job_or_launch(job_file, launch_from, launch_hardware, launch_nodes, launch_gpus, stack)
    answer = memory_ledger(job)
    report = answer.report
    report_import(imported)
    title = f"{job.model.name} on {job.num_gpus} x {job.cluster.name}"
    if fmt == "json":
        emit_json(answer.to_json())
    elif report is None:
        if fmt == "csv":
            emit_csv([], ["stage", "params", "bytes", *BREAKDOWN_KEYS, "capacity_bytes"])
        else:
            print_no_ledger(title, answer.rule_details, answer.assumptions)
    elif fmt == "csv":
        emit_csv([{"stage": s.stage, "params": s.params, "bytes": s.bytes, **s.breakdown,
                   "capacity_bytes": report.capacity_bytes} for s in report.stages])
    else:
        print_memory_table(report, title, answer.rule_details, answer.assumptions)
    if fmt == "csv" and answer.rule_details:  # the table of stages has no place for the answer's reason
        for rid, why in answer.rule_details.items():
            echo(f"primus: does not fit: the pinned layout breaks {rid}: {why}", err=True)
    if answer.negative:
        raise Negative()
