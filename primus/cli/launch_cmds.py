"""`primus export` and `primus import`, and the ``--from KIND FILE`` option of fit, memory and project.

Export writes a launch config for a job (a job file, a tune result, or axes on the command line) in
a framework's own option names; import reads one back as a job YAML and lists, on stderr, every
option primus does not model. Both follow the CLI contract: bad input is one line and exit 2.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar, get_args

import click
import yaml

from primus.cli.common import Negative, format_option, guarded, read_job, say_stack_note, stack_option
from primus.cli.launch_opts import GPUS, NODES, ROOT_HELP
from primus.cli.output import echo, emit_json
from primus.cli.solver_cmds import changed_text
from primus.errors import InputError
from primus.job import Job
from primus.launch import KINDS, LaunchConfig, axes_job, export_job, import_launch, tune_job
from primus.launch.api import hardware_beside, launchable, with_stack
from primus.launch.common import is_path
from primus.launch.export_check import SPLIT_NOTE, check_for_export
from primus.launch.torchtitan import import_torchtitan_registry
from primus.report.owned import check_replaceable, replace_file
from primus.safe_text import escape_controls
from primus.specs.job import Fp8Recipe, Precision, Recompute, Sharding

F = TypeVar("F", bound=Callable[..., Any])



def write_atomically(path: str, text: str, command: str, inputs: tuple[str | None, ...], force: bool = False) -> None:
    """Write `--out` atomically, sealed (`primus.report.owned.seal`). An existing file is replaced only when
    primus wrote it (the header its command puts on the first lines) and it was not edited since (its
    seal; `force` replaces an edited one), never when it is one of the inputs: anything else is refused."""
    replace_file(Path(path), text, written_by=_WRITTEN_BY[command], command=command,
                 inputs=[i for i in inputs if i], force=force)


def check_out(path: str | None, command: str, inputs: tuple[str | None, ...], force: bool = False) -> None:
    """Refuse a `--out` that `write_atomically` would refuse, before anything is read or said: the refusal
    is then the only line on stderr."""
    if path:
        check_replaceable(Path(path), written_by=_WRITTEN_BY[command], command=command,
                          inputs=[i for i in inputs if i], force=force)


#: `--force` on the commands that write a file primus may replace later (import, export, calibrate).
FORCE_HELP = ("Replace the --out file even if it was edited since primus wrote it (without it, an edited "
              "file is refused and kept).")


def _exported(head: str) -> bool:
    return "written by primus " in "\n".join(head.splitlines()[:2])


def _imported(head: str) -> bool:
    return head.startswith("# imported by primus from ") or (head.startswith('{\n  "kind": ') and '"release"' in head)


_WRITTEN_BY: dict[str, Callable[[str], bool]] = {"export": _exported, "import": _imported}


def report(config: LaunchConfig | None) -> None:
    """The import record on stderr: one line per unmodelled option, then the notes (none for a job file)."""
    if config is None:
        return
    if config.unmodelled:  # one line each: a line break in a file name or an option is shown escaped
        echo(escape_controls(f"primus: {len(config.unmodelled)} option(s) in {config.source} are not modelled:"),
             err=True)
        for item in config.unmodelled:
            echo(escape_controls(f"  unmodelled: {item}"), err=True)
    for note in config.notes:
        echo(escape_controls(f"  note: {note}"), err=True)


# ---- --from on fit / memory / project: primus.cli.launch_opts (light, so those commands load no importer)


# ---- primus import ---------------------------------------------------------------------------------


def job_yaml(config: LaunchConfig) -> str:
    what = "a model definition (put the model under `model:` of a job)" if config.model_only else "config"
    lines = [escape_controls(line) for line in (  # comments quote the file: one safe line each
        f"# imported by primus from {config.kind} {what} {config.source}", f"# option names: {config.release}",
        *[f"# unmodelled: {item}" for item in config.unmodelled], *[f"# note: {note}" for note in config.notes])]
    return "\n".join(lines) + "\n" + yaml.safe_dump(config.job, sort_keys=False, default_flow_style=None, width=110)


@click.command("import")
@click.option("--from", "kind", type=click.Choice(KINDS), required=True, help="The format of FILE.")
@click.argument("file", type=click.Path(dir_okay=False), required=False)
@click.option("--config-registry", "registry", type=click.Path(dir_okay=False), default=None,
              help="With --from torchtitan: a config_registry.py (torchtitan after #2386), read, never run.")
@click.option("--config", "config_name", default=None, help="With --config-registry: the config function's name.")
@click.option("--hardware", default=None, metavar="HW", help="The accelerator, when the file does not name it.")
@click.option("--nodes", type=NODES, default=None, help="Number of nodes, when the file does not give it.")
@click.option("--gpus", type=GPUS, default=None, help="Number of GPUs, when the file does not give it.")
@click.option("--primus-root", "primus_root", type=click.Path(file_okay=False), default=None, help=ROOT_HELP)
@click.option("--out", "out_file", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              callback=lambda _ctx, _param, value: None if value == "-" else value,
              help="Write the job here (atomically) instead of stdout ('-' is stdout).")
@format_option("yaml", "json", default="yaml")
@click.option("--stack", "stack", default=None, metavar="NAME[@RELEASE]",
              help="The framework and release the imported job runs on (replaces the stack the import chooses; "
                   "see `primus stacks list`).")
@click.option("--force", is_flag=True, help=FORCE_HELP)
@guarded
def import_cmd(kind: str, file: str | None, registry: str | None, config_name: str | None, hardware: str | None,
               nodes: int | None, gpus: int | None, primus_root: str | None, out_file: str | None, fmt: str,
               stack: str | None, force: bool) -> None:
    """Read a launch config as a primus job: the job YAML on stdout, unmodelled options on stderr
    (or, with --format json, a document with the job, `unmodelled`, `notes` and `release`).

    Example: primus import --from megatron train.sh --hardware h100-80gb --out job.yaml
    """
    if (file is None) == (registry is None):
        raise InputError("command line", None, "give a FILE or --config-registry PATH --config NAME (exactly one)")
    if config_name is not None and registry is None:
        raise InputError("command line", "--config", "goes with --config-registry only")
    if primus_root is not None and kind != "primus":
        raise InputError("command line", "--primus-root", "goes with --from primus only")
    check_out(out_file, "import", (file, registry), force)
    if registry is not None:
        if kind != "torchtitan" or not config_name:
            raise InputError("command line", "--config-registry", "goes with --from torchtitan and --config NAME")
        config = import_torchtitan_registry(Path(registry), config_name, nodes=nodes, gpus=gpus,
                                            hardware=hardware_beside(hardware, Path(registry).parent))
        if stack is not None:
            config = with_stack(config, stack, Path(registry).parent)
    else:
        assert file is not None
        config = import_launch(kind, file, hardware=hardware, nodes=nodes, gpus=gpus, primus_root=primus_root,
                               stack=stack)
    from primus.stacks.core import resolve_stack

    say_stack_note(resolve_stack(config.job.get("stack"), file or registry or "import").note)
    config = replace(config, job=_rebased(config.job, Path(file or registry or ".").parent,
                                          Path(out_file).parent if out_file else Path(".")))
    if fmt == "json":
        doc = {"kind": config.kind, "release": config.release, "job": config.job, "model_only": config.model_only,
               "unmodelled": list(config.unmodelled), "notes": list(config.notes)}
        if out_file:
            write_atomically(out_file, json.dumps(doc, indent=2) + "\n", "import", (file, registry), force)
        else:
            emit_json(doc)
        return
    report(config)
    text = job_yaml(config)
    if out_file:
        write_atomically(out_file, text, "import", (file, registry), force)
    else:
        click.echo(text, nl=False)


def _rebased(job: dict[str, Any], from_dir: Path, to_dir: Path) -> dict[str, Any]:
    """The imported job with its file paths (`model`, `hardware`: a model YAML or HF config.json, a hardware
    file), which name files from the launch file's directory, named from the directory the job is written to
    (the --out file's, else the current one), where a job file's relative paths are read from."""
    def moved(value: Any) -> Any:
        if isinstance(value, dict) and "base" in value:  # {base: path, overrides...}
            return {**value, "base": moved(value["base"])}
        if is_path(value) and not Path(value).is_absolute() \
                and (from_dir / value).is_file():
            return os.path.relpath(os.path.abspath(from_dir / value), os.path.abspath(to_dir))
        return value

    out = dict(job)
    for key in ("model", "hardware"):
        if key in out:
            out[key] = moved(out[key])
    return out


# ---- primus export ---------------------------------------------------------------------------------


#: how a refusal reads when the target runs the job differently from the file (`launchable`'s notes)
AS_LAUNCHED = " as the target runs it (the note above), not as the file is written"


def _check_fits(job: Job, as_launched: bool = False, say: Callable[[], None] = lambda: None) -> Job:
    """Export only what `primus fit` accepts (`primus.launch.export_check`); otherwise exit 1 with fit's
    reasons, through `echo` (rule names and notes may hold text from the user's files). `as_launched`: the
    job is the target's form of the user's (`launchable` changed it), and the refusal says so rather than
    blaming the job file; `say` prints the notes on what the target changed, before a refusal."""
    check = check_for_export(job)
    result = check.refused if check.split_added else check.result  # the job's pipeline options are the user's
    if result is None or result.fits:
        return check.job
    say()
    click.echo("primus: not exported: `primus fit` refuses this job" + (AS_LAUNCHED if as_launched else ""), err=True)
    if result.violated_rules:
        echo(f"  violated: {', '.join(result.violated_rules)}", err=True)
    if result.report is not None:
        click.echo(f"  peak {result.report.peak_bytes / 2**30:.2f} GiB on stage {result.report.peak.stage}", err=True)
    for alt in result.alternatives[:3]:
        echo(f"  fits instead: {alt.layout.text()} (changed: {changed_text(alt)})", err=True)
    for note in result.notes:
        echo(f"  note: {note}", err=True)
    if check.split_added:
        click.echo(f"  note: {SPLIT_NOTE}: the job does not set them; add them to its `pipeline:` or export "
                   "--fix N with fit's suggestion N that sets them", err=True)
    raise Negative()


def _fix(job: Any, n: int, say: Callable[[], None] = lambda: None) -> tuple[Any, Any]:
    """fit's N-th suggestion for a job that does not fit: the job with the suggestion's options set, and
    its complete layout (the same ranking `primus fit` prints, projected throughput included)."""
    from primus.projection.complete import speed_of
    from primus.solver.api import Question
    from primus.solver.fit import fit, nodes_text, sizes_text
    from primus.solver.options import apply_options

    result = fit(Question(job), speed=speed_of(job), speed_for=speed_of)
    if result.fits:
        raise InputError(job.where, None, "the job fits as written; --fix exports a suggestion for a job that does not")
    if not result.alternatives:  # a negative answer, not bad input: say what fit says instead (exit 1)
        gpn = job.cluster.gpus_per_node
        say()
        click.echo(f"primus: not exported: `primus fit` has no suggestion for this job (--fix {n}): no layout fits "
                   f"on {nodes_text(job.num_gpus, gpn)}", err=True)
        if result.sizes_searched:
            click.echo(f"  {sizes_text(result, job.num_gpus, gpn)}", err=True)
        raise Negative()
    if n > len(result.alternatives):
        raise InputError("--fix", str(n), f"fit has {len(result.alternatives)} suggestion(s) for this job")
    alt = result.alternatives[n - 1]
    click.echo(f"primus: suggestion {n} changes {changed_text(alt)}", err=True)
    return apply_options(job, alt.options), alt.layout



def _axis(name: str, help_text: str) -> Callable[[F], F]:
    return click.option(f"--{name}", name.replace("-", "_"), type=click.IntRange(1, 10**9), default=None,
                        help=help_text)


def _same_job_as_inputs(result: Path) -> None:
    """A result.json in a tune run directory exports the job its recorded inputs give: one whose `job` or
    `job_spec` differs from inputs/job.yaml is refused (`primus.report.verify_recorded.job_mismatch`)."""
    from primus.report.rundir import RunDir
    from primus.report.verify_recorded import job_mismatch

    root = result.parent
    if result.name != "result.json" or not (root / "inputs" / "job.yaml").is_file():
        return  # a result written elsewhere: only its own job_spec to go by
    try:
        run = RunDir.open(root)
    except InputError:
        return
    why = job_mismatch(run)
    if why is not None:
        raise InputError(str(result), "job_spec", f"differs from the run's recorded inputs ({why}); "
                         "`primus audit verify` lists every difference")


@click.command("export")
@click.argument("job_file", required=False, type=click.Path(dir_okay=False))
@click.option("--to", "kind", type=click.Choice(KINDS), required=True, help="The launch config format to write.")
@click.option("--from-tune", "tune_file", type=click.Path(dir_okay=False), default=None,
              help='A tune result JSON: {"job": {...}, "best": {"parallel": {...}}}.')
@click.option("--out", "out_file", type=click.Path(dir_okay=False, allow_dash=True), default=None,
              callback=lambda _ctx, _param, value: None if value == "-" else value,
              help="Write here (atomically) instead of stdout ('-' is stdout).")
@click.option("--complete", is_flag=True, help="Complete free axes with the legal layout of most headroom (fit).")
@click.option("--fix", "fix", type=click.IntRange(1, 100), default=None,
              help="Export fit's N-th nearest legal layout of a job that does not fit, with the job options it "
                   "sets (e.g. a pipeline layout string).")
@click.option("--model", default=None, help="Model (without a job file), or a replacement.")
@click.option("--hardware", default=None, help="Accelerator (without a job file), or a replacement.")
@click.option("--nodes", type=NODES, default=None)
@click.option("--gpus", type=GPUS, default=None)
@click.option("--seq-len", "seq_len", type=click.IntRange(1, 16_777_216), default=None)
@click.option("--global-batch-size", "global_batch_size", type=click.IntRange(1, 100_000_000), default=None)
@click.option("--precision", type=click.Choice(list(get_args(Precision))), default=None)
@click.option("--fp8-recipe", "fp8_recipe", type=click.Choice(list(get_args(Fp8Recipe))), default=None)
@_axis("tp", "Tensor parallel size.")
@_axis("pp", "Pipeline parallel size.")
@_axis("vp", "Virtual pipeline stages per rank.")
@_axis("cp", "Context parallel size.")
@_axis("ep", "Expert parallel size.")
@_axis("etp", "Expert tensor parallel size.")
@_axis("mbs", "Micro-batch size.")
@click.option("--sp/--no-sp", "sp", default=None, help="Sequence parallel.")
@click.option("--recompute", type=click.Choice(list(get_args(Recompute))), default=None)
@_axis("recompute-num-layers", "Layers per full-recompute unit (Megatron --recompute-num-layers).")
@click.option("--recompute-method", "recompute_method", type=click.Choice(["uniform", "block"]), default=None)
@click.option("--sharding", type=click.Choice(list(get_args(Sharding))), default=None)
@stack_option
@click.option("--force", is_flag=True, help=FORCE_HELP)
@guarded
def export_cmd(job_file: str | None, kind: str, tune_file: str | None, out_file: str | None, complete: bool,
               fix: int | None, stack: str | None, force: bool, **fields: Any) -> None:
    """Write a launch config: Megatron-LM arguments (--to megatron), an AMD Primus experiment YAML
    (--to primus) or a torchtitan TOML (--to torchtitan), for a job file, a tune result, or axes given
    here. Every parallel axis must be pinned (or use --complete). Notes on what the target cannot
    express go to stderr; keys it cannot hold travel in a `# primus-job:` comment so import gives the
    same job back.

    Example: primus export examples/llama3.1-70b-mi300x.yaml --to megatron --out train_args.sh
    """
    if job_file is not None and tune_file is not None:
        raise InputError("command line", None, "give a job file or --from-tune, not both")
    check_out(out_file, "export", (job_file, tune_file), force)
    if tune_file is not None:
        _same_job_as_inputs(Path(tune_file))
    base = read_job(job_file, stack) if job_file else tune_job(tune_file) if tune_file else None
    restack = stack if job_file is None else None  # a job file took --stack as it was read
    if base is not None and restack is None and all(v is None for v in fields.values()):
        job = base
    else:
        job = axes_job(fields, base, restack)
        if restack is not None:
            say_stack_note(job.resolved_stack.note)
    job, changed = launchable(job, kind)  # what the target runs is what fit checks
    pending = list(changed)

    def say() -> None:  # the notes on what the target changed: with an answer, never before a bad-input line
        while pending:
            echo(f"primus: note: {pending.pop(0)}", err=True)

    layout = None
    if fix is not None:
        job, layout = _fix(job, fix, say)
    elif complete:
        from primus.solver.api import Question
        from primus.solver.fit import fit

        result = fit(Question(job))
        if not result.fits or result.layout is None:
            say()
            click.echo("primus: no legal layout fits this job" + (AS_LAUNCHED if changed else "")
                       + "; nothing exported (see `primus fit`)", err=True)
            raise Negative()
        layout = result.layout
        click.echo(f"primus: completed {', '.join(result.completed_axes) or 'nothing'} with the most headroom",
                   err=True)
    if layout is None:
        job = _check_fits(job, as_launched=bool(changed), say=say)
    exported = export_job(job, kind, layout)
    say()
    text = escape_controls(exported.text, keep_layout=True)  # names from input files land in comments
    for note in exported.notes:
        echo(f"primus: note: {note}", err=True)
    if out_file:
        write_atomically(out_file, text, "export", (job_file, tune_file), force)
    else:
        click.echo(text, nl=False)
