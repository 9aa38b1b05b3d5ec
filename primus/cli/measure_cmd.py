"""`primus measure JOB.yaml`: time the target's kernels and in-node collectives on the local device and
write a measured profile for `primus project --profile` (needs the `measure` extra, not ortools)."""

from __future__ import annotations

import importlib.util
import sys
from typing import TYPE_CHECKING, Any

import click

from primus.cli.common import EXIT_INPUT, FiniteRange, format_option, guarded, read_job, stack_option
from primus.cli.output import emit_json, lit, stderr_console, stdout_console, table
from primus.errors import InputError
from primus.job import Job
from primus.parallel import Layout

if TYPE_CHECKING:  # torch is optional: only the types, never the modules, at import time
    from primus.measure.campaign import MeasureResult

MEASURE_HINT = "primus measure needs the measure extra: pip install 'primus-projection[measure]'"


def target_layout(job: Job) -> tuple[Layout, str]:
    """The job's layout when every axis is pinned, else the fastest legal completion (said so)."""
    from primus.memory.evaluate import pinned_layout

    try:
        return pinned_layout(job), "every axis pinned"
    except InputError:
        from primus.projection import NothingFits, complete_and_project

        try:
            p = complete_and_project(job)
        except NothingFits as exc:
            raise InputError(job.where, "parallel", f"no legal layout to measure: {exc.reason}") from None
        return p.layout, p.completion or "completed"


def _comparison(job: Job, layout: Layout, out: str) -> dict[str, Any] | None:
    """The target projected with the analytic model and with the profile just written."""
    from primus.measure.measured_profile import base_hardware, load_measured_profile
    from primus.projection import load_profile, project

    prof = load_measured_profile(out)
    if prof.device.hardware != base_hardware(job.cluster.name):
        return None
    calib = load_profile(job.cluster)
    modelled = project(job, layout, calib)
    measured = project(job, layout, calib, timer=prof.timer(job.cluster, calib))
    return {"modelled_step_s": modelled.step_time_s, "measured_step_s": measured.step_time_s,
            "sources": measured.sources, "breakdown": measured.breakdown}


@click.command("measure")
@click.argument("job_file", type=click.Path(dir_okay=False))
@stack_option
@format_option("table", "json")
@click.option("--device", type=click.Choice(["auto", "cuda", "cpu"]), default="auto", show_default=True,
              help="Where to measure: cuda (NCCL for collectives) or cpu (gloo, one thread per process).")
@click.option("--procs", type=click.IntRange(1, 64), default=1, show_default=True,
              help="Local processes (one per device) for the in-node collectives.")
@click.option("--out", "out", type=click.Path(dir_okay=False), default="measured_profile.json", show_default=True,
              help="Profile to write; an existing one (same device) is extended, shapes it holds are not re-measured.")
@click.option("--budget-s", "budget_s", type=FiniteRange(1, 86_400), default=60.0, show_default=True,
              help="Wall-clock budget; what is not measured by then stays modelled (the profile says so).")
@click.option("--no-budget", is_flag=True,
              help="No wall-clock budget: measure every call, however long it takes (overrides --budget-s).")
@click.option("--dtype", type=click.Choice(["auto", "bf16", "fp16", "fp32"]), default="auto", show_default=True,
              help="Kernel dtype: auto is the job's bf16/fp16 on GPUs and fp32 on CPU (bf16 is emulated there).")
@click.option("--hardware", default=None, help="The hardware entry this device is (default: detected from its name).")
@click.option("--colocate", is_flag=True,
              help="On CPU with --procs N: time every kernel in all N processes at once (a profile for N ranks "
                   "sharing this host's caches and memory bandwidth).")
@click.option("--no-memory-check", is_flag=True, help="Skip the activation-memory check of the measured layers.")
@guarded
def measure_cmd(job_file: str, stack: str | None, fmt: str, device: str, procs: int, out: str, budget_s: float,
                no_budget: bool, dtype: str, hardware: str | None, colocate: bool, no_memory_check: bool) -> None:
    """Measure the target's kernels (GEMMs, grouped expert GEMMs, attention, norms, activations, the
    optimizer step) and in-node collectives on this machine, within a time budget; write a profile.

    The target is the job's layout (free axes: the fastest legal completion). Each unique kernel shape
    of one rank is timed once, forward and backward (warm-up, repetitions, median), collectives at the
    target's message sizes on up to --procs local processes; on CPU, one thread per process (with
    --colocate, every kernel runs in all --procs processes at once). What the local devices cannot
    run (inter-node collectives, groups larger than --procs, the pipeline schedule) is left to the
    analytic model at projection time: primus project JOB.yaml --profile PROFILE.

    Example: primus measure job.yaml --device cpu --procs 2 --budget-s 60 --out cpu.profile.json
    """
    if importlib.util.find_spec("torch") is None:
        click.echo(MEASURE_HINT, err=True)
        sys.exit(EXIT_INPUT)
    from primus.measure.campaign import MeasureOptions, run_measure

    job = read_job(job_file, stack)
    layout, how = target_layout(job)
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    opt = MeasureOptions(device=device, procs=procs, budget_s=None if no_budget else budget_s, dtype=dtype,
                         hardware=hardware, memory_check=not no_memory_check, colocate=colocate)
    err = stderr_console()
    res = run_measure(job, layout, out, opt, log=lambda s: err.print(f"[dim]{lit(s)}[/dim]", markup=True))
    comparison = _comparison(job, res.plan.layout, out)
    if fmt == "json":
        emit_json({"profile": out, "layout": res.plan.layout.as_parallel(), "layout_from": how,
                   "run": res.profile.runs[-1], "device": res.profile.device.to_json(),
                   "memory": res.memory_rows, "projection": comparison})
        return
    _print(res, out, how, comparison)


def _spent(elapsed_s: float, budget_s: float | None) -> str:
    return f"{elapsed_s:.1f} s" + (" (no budget)" if budget_s is None else f" of the {budget_s:g} s budget")


def _print(res: MeasureResult, out: str, how: str, comparison: dict[str, Any] | None) -> None:
    con = stdout_console()
    d = res.profile.device
    job = res.plan.job
    con.print("[bold]" + lit(f"{job.model.name}: measured on {d.name} ({d.kind}, as {d.hardware}), torch {d.torch}, "
                             f"{d.dtype}" + (f", {d.threads} thread per process" if d.threads else "")
                             + (f", kernels timed in {d.colocated} processes at once" if d.colocated > 1 else ""))
              + "[/bold]", markup=True)
    con.print("target layout: " + " ".join(f"{k}={v}" for k, v in res.plan.layout.as_parallel().items())
              + f" ({how})")
    con.print(f"local devices: {res.downscale.devices}")
    for line in res.downscale.describe():
        con.print(f"  - {line}")
    con.print(f"{res.items} calls: {res.measured} measured, {res.reused} reused from the profile, "
              f"{res.exact_zero} exact zeros, {sum(res.left.values())} left modelled; "
              + _spent(res.elapsed_s, res.profile.runs[-1]["budget_s"])
              + ("" if res.complete else " (budget spent: the rest is modelled)"))
    if res.left:
        con.print(table("left modelled", ["reason", "calls"], sorted(res.left.items(), key=lambda kv: -kv[1])))
    for note in res.notes:
        con.print(f"note: {note}")
    if res.memory_rows:
        rows = [(r["kind"], r["ledger_bytes"], r["measured_bytes"], f"{100 * r['error']:+.2f}%", r["method"])
                for r in res.memory_rows]
        con.print(table("activation memory of the measured layers", ["layer", "ledger B", "measured B", "diff",
                                                                     "how"], rows,
                        justify_right=["ledger B", "measured B", "diff"]))
    for line in res.memory_skipped:
        con.print(f"memory check skipped: {line}")
    if comparison:
        measured = sorted(k for k, v in comparison["sources"].items() if v == "measured")
        con.print(f"target step time: {comparison['modelled_step_s']:.4g} s modelled, "
                  f"{comparison['measured_step_s']:.4g} s with this profile (measured: {', '.join(measured)})")
    con.print(f"profile written to {out}; use it with: primus project {job.where} --profile {out}")
