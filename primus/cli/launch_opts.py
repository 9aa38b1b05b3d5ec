"""The ``--from KIND FILE`` option of fit, memory and project, and the job it names.

Kept apart from `primus.cli.launch_cmds` (export and import) so that those commands do not load the
importers and exporters unless ``--from`` is given: a job file is read without them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from primus.cli.common import read_job, say_stack_note, stack_option
from primus.errors import InputError
from primus.job import Job
from primus.launch.common import KINDS, LaunchConfig
from primus.projection.profile import require_precision
from primus.specs.job import MAX_GPUS, MAX_NODES

F = TypeVar("F", bound=Callable[..., Any])
NODES = click.IntRange(1, MAX_NODES)
GPUS = click.IntRange(1, MAX_GPUS)

ROOT_KEY = "primus.launch.primus_root"
ROOT_HELP = ("The AMD Primus checkout whose primus/configs/models/megatron/ holds the experiment's model file "
             "(default: found above the experiment file).")


def _keep_root(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    ctx.meta[ROOT_KEY] = value


def launch_options(fn: F) -> F:
    """``--from KIND FILE`` with ``--hardware`` and ``--nodes``/``--gpus`` for what the file leaves out,
    and ``--primus-root`` for a Primus experiment's model file (kept in the click context, so the
    commands need no parameter for it)."""
    fn = click.option("--primus-root", type=click.Path(file_okay=False), default=None, expose_value=False,
                      callback=_keep_root, help="With --from primus: " + ROOT_HELP)(fn)
    fn = stack_option(fn)
    fn = click.option("--gpus", "launch_gpus", type=GPUS, default=None,
                      help="With --from: the world size in GPUs, when the file does not give it.")(fn)
    fn = click.option("--nodes", "launch_nodes", type=NODES, default=None,
                      help="With --from: the number of nodes, when the file does not give it.")(fn)
    fn = click.option("--hardware", "launch_hardware", default=None, metavar="HW",
                      help="With --from: the accelerator (catalog name or file), when the file does not name it.")(fn)
    fn = click.option("--from", "launch_from", nargs=2, type=(click.Choice(KINDS), click.Path(dir_okay=False)),
                      default=None, metavar="KIND FILE",
                      help="Read the job from a launch config: megatron (argument line), primus (experiment "
                           "YAML) or torchtitan (TOML). Unmodelled options are listed on stderr.")(fn)
    return fn


def job_or_launch(job_file: str | None, launch_from: tuple[str, str] | None, hardware: str | None,
                  nodes: int | None, gpus: int | None, stack: str | None = None) -> tuple[Job, LaunchConfig | None]:
    """The job of a JOB_FILE argument or of ``--from KIND FILE`` (exactly one), and the import record of
    the latter. The caller prints the record (`report_import`) once its answer is computed, so that bad
    input found on the way (a precision the hardware cannot run, a layout the command needs pinned)
    stays the one line on stderr."""
    if (job_file is None) == (launch_from is None):
        raise InputError("command line", None, "give a job file or --from KIND FILE (exactly one)")
    ctx = click.get_current_context(silent=True)
    root = ctx.meta.get(ROOT_KEY) if ctx is not None else None
    if root is not None and (launch_from is None or launch_from[0] != "primus"):
        raise InputError("command line", "--primus-root", "goes with --from primus only")
    config: LaunchConfig | None = None
    if job_file is not None:
        if hardware is not None or nodes is not None or gpus is not None:
            raise InputError("command line", None, "--hardware, --nodes and --gpus go with --from only")
        job = read_job(job_file, stack)
    else:
        from primus.launch import load_launch_job

        assert launch_from is not None
        job, config = load_launch_job(launch_from[0], launch_from[1], hardware=hardware, nodes=nodes, gpus=gpus,
                                      primus_root=root, stack=stack)
        say_stack_note(job.resolved_stack.note)
    require_precision(job)
    return job, config


def report_import(config: LaunchConfig | None) -> None:
    """Print the import record of ``--from`` (nothing for a job file); `primus.cli.launch_cmds.report`."""
    if config is not None:
        from primus.cli.launch_cmds import report

        report(config)
