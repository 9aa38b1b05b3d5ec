"""The `primus` command."""

from __future__ import annotations

import click

from primus import __version__
from primus.cli.catalog_cmds import hardware_group, job_group, models_group, schema_group
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


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
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
