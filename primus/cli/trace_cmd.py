"""`primus trace-memory JOB.yaml`: the ledger's activation bytes beside a MemTracker trace of a torch
reference layer that saves what Megatron-Core + Transformer Engine save (needs the `measure` extra)."""

from __future__ import annotations

import importlib.util
import sys
from typing import TYPE_CHECKING

import click

from primus.cli.common import EXIT_INPUT, Negative, format_option, guarded, read_job, stack_option
from primus.cli.output import emit_json, stdout_console, table
from primus.errors import InputError

if TYPE_CHECKING:  # torch is optional: only the type, never the module, at import time
    from primus.measure.trace import TraceResult

MEASURE_HINT = "primus trace-memory needs the measure extra: pip install 'primus-projection[measure]'"
TOLERANCE = 0.03  # the agreement the ledger promises against the trace (issue 3)
KINDS = ("dense", "moe")


def _kinds(option: str | None, has_dense: bool, has_moe: bool, where: str) -> list[str]:
    """The layer kinds to trace: those named in --kinds, else every kind the model has."""
    if option is None:
        return [k for k, present in (("dense", has_dense), ("moe", has_moe)) if present]
    kinds = [k.strip() for k in option.split(",") if k.strip()]
    for k in kinds:
        if k not in KINDS:
            raise InputError(where, "--kinds", f"unknown layer kind {k!r}; choose from {', '.join(KINDS)}")
        if (k == "dense" and not has_dense) or (k == "moe" and not has_moe):
            raise InputError(where, "--kinds", f"the model has no {k} layers")
    if not kinds:
        raise InputError(where, "--kinds", "no layer kind given")
    return list(dict.fromkeys(kinds))


@click.command("trace-memory")
@click.argument("job_file", type=click.Path(dir_okay=False))
@stack_option
@format_option("table", "json")
@click.option("--kinds", default=None, metavar="dense,moe",
              help="Layer kinds to trace (comma-separated); default: every kind the model has.")
@click.option("--moe-probs", type=click.Choice(["unpermute", "activation"]), default="activation",
              show_default=True,
              help="Where the reference MoE layer applies routing probabilities: inside the experts' SwiGLU "
                   "(current Megatron-Core, what the ledger models) or in the unpermute (older releases).")
@guarded
def trace_cmd(job_file: str, stack: str | None, fmt: str, kinds: str | None, moe_probs: str) -> None:
    """Check the ledger's per-layer activation bytes against a trace of a torch reference layer.

    One forward of a reference layer (fused norm+linear, flash attention keeping q, k, v, output and
    log-sum-exp, fused SwiGLU, 1-byte dropout masks, MoE routing) runs under FakeTensorMode with
    torch's MemTracker at the job's seq_len and pinned mbs (default 1), TP 1, bf16; the activations
    still held by the autograd graph are compared with the ledger's bytes for the same layer.

    Exit 0 when every layer kind agrees within 3%, 1 when one does not.

    Example: primus trace-memory examples/llama3.1-70b-mi300x.yaml --format json
    """
    if importlib.util.find_spec("torch") is None:
        click.echo(MEASURE_HINT, err=True)
        sys.exit(EXIT_INPUT)
    try:
        from primus.measure.trace import trace_activation_bytes
    except ImportError as exc:  # e.g. a torch build without torch.distributed (MemTracker lives there)
        click.echo(f"primus trace-memory: this torch build has no MemTracker: {exc}", err=True)
        sys.exit(EXIT_INPUT)

    job = read_job(job_file, stack)
    model = job.model
    selected = _kinds(kinds, model.has_dense_layers, model.num_moe_layers > 0, job.where)
    seq, mbs = job.spec.seq_len, job.spec.parallel.mbs or 1
    results = []
    for kind in selected:
        try:
            results.append(trace_activation_bytes(model, seq, mbs, kind, moe_probs=moe_probs))
        except ValueError as exc:
            raise InputError(job.where, "model", str(exc)) from None
    agree = all(abs(r.error) <= TOLERANCE for r in results)
    if fmt == "json":
        emit_json({"model": model.name, "seq_len": seq, "mbs": mbs, "tolerance": TOLERANCE, "agree": agree,
                   "layers": [r.to_json() for r in results]})
    else:
        _print_table(results, f"{model.name}: seq {seq} × mbs {mbs}, TP 1, bf16, flash attention")
    if not agree:
        raise Negative()


def _print_table(results: list[TraceResult], title: str) -> None:
    con = stdout_console()
    rows = []
    for r in results:
        differ = ", ".join(d.name for d in r.diffs()) or "-"
        rows.append((r.kind, r.ledger_bytes, r.traced_bytes, f"{100 * r.error:+.2f}%", differ))
    con.print(table(title, ["layer", "ledger B", "traced B", "diff", "tensors that differ"], rows,
                    justify_right=["ledger B", "traced B", "diff"]))
    detail = [(r.kind, d.name, d.ledger_bytes, d.traced_bytes, d.ledger_bytes - d.traced_bytes)
              for r in results for d in r.diffs()]
    if detail:
        con.print(table("per tensor", ["layer", "tensor", "ledger B", "traced B", "ledger − traced"], detail,
                        justify_right=["ledger B", "traced B", "ledger − traced"]))
    con.print("traced = bytes MemTracker still counts as activations once only the autograd graph holds them "
              "(layer input included, output and parameters excluded); diff = (ledger − traced) / traced")
