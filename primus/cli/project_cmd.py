"""`primus project JOB.yaml`: projected step time, throughput, MFU and where the time goes."""

from __future__ import annotations

from typing import Any

import click

from primus.cli.common import Negative, format_option, guarded
from primus.cli.output import emit_json, gib, stdout_console, table
from primus.fidelity.errorbars import ErrorBar, error_bar
from primus.job import Job, load_job
from primus.projection import BREAKDOWN_ORDER, NothingFits, Projection, complete_and_project, load_profile
from primus.projection.report import FLOP_CONVENTION

ALWAYS = ("gemm", "attention", "memory_bound", "bubble", "optimizer")


def uncertainty(job: Job) -> ErrorBar:
    """The projection's error bar for this job's accelerator and model kind (primus.fidelity.errorbars)."""
    return error_bar(job.cluster.name, job.model.is_moe)


def with_uncertainty(doc: dict[str, Any], bar: ErrorBar) -> dict[str, Any]:
    return {**doc, "uncertainty_pct": bar.pct, "uncertainty_basis": bar.basis, "uncertainty_fitted": bar.fitted}


def print_projection(p: Projection, title: str, bar: ErrorBar | None = None) -> None:
    con = stdout_console()
    par = p.layout.as_parallel()
    con.print(f"[bold]{title}[/bold]")
    con.print("layout: " + " ".join(f"{k}={v}" for k, v in par.items()) + f" schedule={p.layout.schedule}")
    if p.completion:
        con.print(f"completion: {p.completion}")
    pm = f" {bar.text()}" if bar is not None else ""
    con.print(f"step time {p.step_time_s:,.3f} s | {p.tokens_per_s_per_gpu:,.0f} tokens/s/GPU{pm} | "
              f"{p.model_tflops_per_gpu:,.0f} model TFLOP/s/GPU | MFU {p.mfu * 100:.1f}%")
    if bar is not None:
        con.print(f"uncertainty {bar.text()}: {bar.basis}")
    con.print(f"peak memory {gib(p.peak_bytes)} of {gib(p.capacity_bytes)} capacity: "
              f"{'fits' if p.fits else 'DOES NOT FIT'}")
    rows = []
    for name in BREAKDOWN_ORDER:
        exposed = p.breakdown[name]
        hidden = p.hidden.get(name)
        if exposed == 0 and not hidden and name not in ALWAYS:
            continue
        rows.append((name, f"{exposed:,.4f}", f"{exposed / p.step_time_s * 100:5.1f}%",
                     "-" if hidden is None else f"{hidden:,.4f}", p.sources[name]))
    rows.append(("total", f"{sum(p.breakdown.values()):,.4f}", "100.0%", "", ""))
    con.print(table(f"where the step goes (pipeline rank {p.breakdown_rank}, timed by {p.timing})",
                    ["component", "exposed s", "share", "hidden s", "source"], rows,
                    justify_right=["exposed s", "share", "hidden s"]))
    con.print(f"MFU and TFLOP/s use {FLOP_CONVENTION}.")
    con.print("assumptions:")
    for a in p.assumptions:
        con.print(f"  - {a}")


@click.command("project")
@click.argument("job_file", type=click.Path(dir_okay=False))
@format_option("table", "json")
@click.option("--profile", "profile_file", type=click.Path(dir_okay=False), default=None,
              help="Calibration profile YAML (default: hardware/profiles/<hardware>.yaml).")
@guarded
def project_cmd(job_file: str, fmt: str, profile_file: str | None) -> None:
    """Projected step time, tokens/s/GPU, model TFLOP/s/GPU, MFU and an exposed-time breakdown.

    Free parallel axes are completed with the fastest legal layout that fits (the output says which).
    Exit 1, with the reason, when no legal layout fits (a fully pinned layout is still projected).

    Example: primus project examples/llama3.1-70b-mi300x.yaml --format json
    """
    job = load_job(job_file)
    profile = load_profile(job.cluster, profile_file)
    title = (f"{job.model.name} on {job.num_gpus} x {job.cluster.name}, {job.spec.precision}, "
             f"GBS {job.spec.global_batch_size} x seq {job.spec.seq_len}")
    bar = uncertainty(job)
    try:
        p = complete_and_project(job, profile)
    except NothingFits as exc:
        pinned = exc.projection
        if fmt == "json":
            doc = with_uncertainty(pinned.to_json(), bar) if pinned is not None else {}
            emit_json({**doc, "fits": False, "reason": exc.reason})
        else:
            if pinned is not None:
                print_projection(pinned, title, bar)
            stdout_console().print(f"nothing fits: {exc.reason}")
        raise Negative() from None
    if fmt == "json":
        emit_json(with_uncertainty(p.to_json(), bar))
    else:
        print_projection(p, title, bar)
