"""The `primus` command."""

from __future__ import annotations

import sys
from typing import Any

import click

from primus import __version__
from primus.cli.catalog_cmds import hardware_group, job_group, models_group, schema_group
from primus.cli.common import EXIT_INPUT
from primus.cli.fidelity_cmds import calibrate_cmd, validate_cmd
from primus.cli.launch_cmds import export_cmd, import_cmd
from primus.cli.measure_cmd import measure_cmd
from primus.cli.memory_cmd import memory_cmd
from primus.cli.project_cmd import project_cmd
from primus.cli.report_cmds import audit_group, report_cmd
from primus.cli.solver_cmds import enumerate_cmd, fit_cmd, schema_rule
from primus.cli.stacks_cmd import stacks_group
from primus.cli.trace_cmd import trace_cmd
from primus.cli.tune_cmd import tune_cmd
from primus.safe_text import one_line


class PrimusGroup(click.Group):
    """The command group, with click's usage errors as the one line every other refusal is: the
    command, the reason and where to look, exit 2 (click's own form is three lines: usage, hint, error)."""

    def main(self, *args: Any, standalone_mode: bool = True, **kwargs: Any) -> Any:
        run: Any = click.Group.main  # click types main per standalone_mode; both forms are called here
        if not standalone_mode:
            return run(self, *args, standalone_mode=False, **kwargs)
        try:
            rv = run(self, *args, standalone_mode=False, **kwargs)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "primus"
            click.echo(f"{where}: {one_line(exc.format_message())} (see '{where} --help')", err=True)
            sys.exit(EXIT_INPUT)
        except click.ClickException as exc:
            click.echo(f"primus: {one_line(exc.format_message())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("primus: aborted", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(name="primus", cls=PrimusGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
@click.version_option(__version__, prog_name="primus")
def cli() -> None:
    """primus: does this training layout fit, which layouts are legal, how fast is each, which to launch.

    Example: primus models show llama3.1-70b
    """


cli.add_command(models_group)
cli.add_command(hardware_group)
cli.add_command(job_group)
cli.add_command(stacks_group)
cli.add_command(schema_group)
cli.add_command(memory_cmd)
cli.add_command(fit_cmd)
cli.add_command(enumerate_cmd)
schema_group.add_command(schema_rule)
cli.add_command(trace_cmd)
cli.add_command(project_cmd)
cli.add_command(measure_cmd)
cli.add_command(tune_cmd)
cli.add_command(export_cmd)
cli.add_command(import_cmd)
cli.add_command(report_cmd)
cli.add_command(audit_group)
cli.add_command(validate_cmd)
cli.add_command(calibrate_cmd)


def main() -> None:
    cli(prog_name="primus")


if __name__ == "__main__":
    main()
