"""`primus project JOB.yaml`: projected step time, throughput, MFU and where the time goes."""

from __future__ import annotations

from typing import Any

import click

from primus import api
from primus.cli.common import Negative, format_option, guarded
from primus.cli.launch_opts import job_or_launch, launch_options, report_import
from primus.cli.output import emit_json, gib, lit, stdout_console, table, tight_text
from primus.fidelity.errorbars import ErrorBar, range_text
from primus.measure.measured_profile import MeasuredProfile
from primus.projection import BREAKDOWN_ORDER, Projection
from primus.projection.report import FLOP_CONVENTION, tflops_text

ALWAYS = ("gemm", "attention", "memory_bound", "bubble", "optimizer")


def measured_lines(note: dict[str, Any] | None, prof: MeasuredProfile | None) -> tuple[str, ...]:
    """What the table output says of a measured profile: its device, and a warning when it is another."""
    if note is None or prof is None:
        return ()
    warning = (f"warning: {note['mismatch']} (--allow-device-mismatch)",) if note["mismatch"] else ()
    return (prof.describe(), *warning)


def print_projection(p: Projection, title: str, bar: ErrorBar | None = None, notes: tuple[str, ...] = ()) -> None:
    con = stdout_console()
    par = p.layout.as_parallel()
    con.print(f"[bold]{lit(title)}[/bold]", markup=True)
    con.print("layout: " + " ".join(f"{k}={v}" for k, v in par.items()) + f" schedule={p.layout.schedule}")
    if p.completion:
        con.print(f"completion: {p.completion}")
    pm = f" {bar.text()}" if bar is not None else ""
    con.print(f"step time {p.step_time_s:,.3f} s | {p.tokens_per_s_per_gpu:,.0f} tokens/s/GPU{pm} | "
              f"{tflops_text(p.model_tflops_per_gpu)} model TFLOP/s/GPU | MFU {p.mfu * 100:.1f}%")
    if bar is not None:
        con.print(f"uncertainty {bar.text()} (a measured {range_text(p.tokens_per_s_per_gpu, bar.pct)}): {bar.basis}")
    for line in notes:
        con.print(line)
    verdict = "fits" if p.fits else "DOES NOT FIT"
    if p.tight and p.reserves is not None:
        verdict = "fits, but TIGHT: " + tight_text(p.capacity_bytes - p.peak_bytes, p.reserves.tight_band_bytes)
    con.print(f"peak memory {gib(p.peak_bytes)} of {gib(p.capacity_bytes)} capacity: {verdict}")
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
@click.argument("job_file", required=False, type=click.Path(dir_okay=False))
@launch_options
@format_option("table", "json")
@click.option("--profile", "profile_file", type=click.Path(dir_okay=False), default=None,
              help="Calibration profile YAML (default: hardware/profiles/<hardware>.yaml), or a measured "
                   "profile JSON written by `primus measure` (measured times where it has them).")
@click.option("--allow-device-mismatch", "allow_device_mismatch", is_flag=True,
              help="Use a measured profile taken on another device than the job's accelerator.")
@guarded
def project_cmd(job_file: str | None, launch_from: tuple[str, str] | None, launch_hardware: str | None,
                launch_nodes: int | None, launch_gpus: int | None, stack: str | None, fmt: str,
                profile_file: str | None,
                allow_device_mismatch: bool) -> None:
    """Projected step time, tokens/s/GPU, model TFLOP/s/GPU, MFU and an exposed-time breakdown.

    Free parallel axes are completed with the fastest legal layout that fits (the output says which).
    Exit 1, with the reason, when no legal layout fits (a fully pinned layout is still projected).

    With a measured profile (primus measure), the breakdown's source column says which terms are
    measured and which are modelled (inter-node collectives, the pipeline schedule at the target).

    JOB_FILE, or --from KIND FILE (megatron | primus | torchtitan launch config).

    Example: primus project examples/llama3.1-70b-mi300x.yaml --format json
    """
    job, imported = job_or_launch(job_file, launch_from, launch_hardware, launch_nodes, launch_gpus, stack)
    answer = api.project(job, profile=profile_file, allow_device_mismatch=allow_device_mismatch)
    report_import(imported)
    title = (f"{job.model.name} on {job.num_gpus} x {job.cluster.name}, {job.spec.precision}, "
             f"GBS {job.spec.global_batch_size} x seq {job.spec.seq_len}")
    if fmt == "json":
        emit_json(answer.to_json())
    elif answer.projection is not None:
        print_projection(answer.projection, title, answer.uncertainty, measured_lines(answer.measured_note,
                                                                                     answer.measured))
    if answer.negative:
        if fmt != "json":
            stdout_console().print(f"nothing fits: {answer.reason}")
        raise Negative()
