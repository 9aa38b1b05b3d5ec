"""The `primus` command."""

from __future__ import annotations

import gc
import importlib
import sys
from typing import Any

import click

from primus import __version__
from primus.cli.common import EXIT_INPUT
from primus.safe_text import one_line

#: Every command, by name: the module that defines it and its attribute. A command's module is imported
#: when the command runs (or help lists it), so `primus project` does not pay for `tune`, `report` or
#: `measure` at start-up.
COMMANDS: dict[str, tuple[str, str]] = {
    "models": ("primus.cli.catalog_cmds", "models_group"),
    "hardware": ("primus.cli.catalog_cmds", "hardware_group"),
    "job": ("primus.cli.catalog_cmds", "job_group"),
    "stacks": ("primus.cli.stacks_cmd", "stacks_group"),
    "schema": ("primus.cli.catalog_cmds", "schema_group"),
    "memory": ("primus.cli.memory_cmd", "memory_cmd"),
    "fit": ("primus.cli.solver_cmds", "fit_cmd"),
    "enumerate": ("primus.cli.solver_cmds", "enumerate_cmd"),
    "trace-memory": ("primus.cli.trace_cmd", "trace_cmd"),
    "project": ("primus.cli.project_cmd", "project_cmd"),
    "measure": ("primus.cli.measure_cmd", "measure_cmd"),
    "tune": ("primus.cli.tune_cmd", "tune_cmd"),
    "export": ("primus.cli.launch_cmds", "export_cmd"),
    "import": ("primus.cli.launch_cmds", "import_cmd"),
    "report": ("primus.cli.report_cmds", "report_cmd"),
    "audit": ("primus.cli.report_cmds", "audit_group"),
    "validate": ("primus.cli.fidelity_cmds", "validate_cmd"),
    "calibrate": ("primus.cli.fidelity_cmds", "calibrate_cmd"),
}


def _load(name: str) -> click.Command:
    module, attr = COMMANDS[name]
    cmd: click.Command = getattr(importlib.import_module(module), attr)
    if name == "schema" and isinstance(cmd, click.Group) and "rule" not in cmd.commands:
        from primus.cli.solver_cmds import schema_rule
        cmd.add_command(schema_rule)
    return cmd


def _unlisted(message: str) -> str:
    """click lists a missing choice option's values one per tab-indented line ("Choose from:\\n\\ta,\\n\\tb");
    on the one line an error gets they read as a list, not as escaped newlines and tabs."""
    return message.replace(":\n\t", ": ").replace(",\n\t", ", ")


class PrimusGroup(click.Group):
    """The command group, with click's usage errors as the one line every other refusal is: the
    command, the reason and where to look, exit 2 (click's own form is three lines: usage, hint, error)."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        run: Any = click.Group.main  # click types main per standalone_mode; both forms are called here
        if not standalone_mode:
            return run(self, *args, standalone_mode=False, **kwargs)
        try:
            rv = run(self, *args, standalone_mode=False, **kwargs)
        except SystemExit as exc:
            # click answers a closed pipe (EPIPE while printing --help or --version) with exit 1, after pointing
            # sys.stdout at its _PacifyFlushWrapper; 1 is a negative answer here, a closed pipe 141 as elsewhere
            if exc.code == 1 and type(sys.stdout).__name__ == "_PacifyFlushWrapper":
                from primus.cli.output import exit_broken_pipe

                exit_broken_pipe()
            raise
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "primus"
            click.echo(f"{where}: {one_line(_unlisted(exc.format_message()))} (see '{where} --help')", err=True)
            sys.exit(EXIT_INPUT)
        except click.ClickException as exc:
            click.echo(f"primus: {one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("primus: aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            self.add_command(_load(cmd_name), cmd_name)
        return self.commands.get(cmd_name)


@click.group(name="primus", cls=PrimusGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="primus")
def cli() -> None:
    """primus: does this training layout fit, which layouts are legal, how fast is each, which to launch.

    Example: primus models show llama3.1-70b
    """


#: Commands that compute one answer from a job and exit: the process runs them with the cyclic garbage
#: collector off from start-up (`primus.gcpause`: their data is long-lived and acyclic, and the
#: collector's passes over it, including the imports' and the output's, only cost time). Commands that
#: run loops (tune, measure) keep it.
ONE_SHOT = frozenset({"fit", "enumerate", "project"})


def main() -> None:
    """The console entry point (one process per command; tests call `cli` in-process instead)."""
    command = next((arg for arg in sys.argv[1:] if not arg.startswith("-")), None)
    if command in ONE_SHOT:
        gc.disable()
    cli(prog_name="primus")


if __name__ == "__main__":
    main()
