"""Every command has --help with an example (issue 2's CLI contract)."""

from __future__ import annotations

import subprocess
import sys

import click
import pytest

from primus.cli.main import cli


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):  # the top-level group imports a command's module on demand
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        path = (*prefix, name)
        if isinstance(cmd, click.Group):
            out += _commands(cmd, path)
        else:
            out.append(path)
    return out


@pytest.mark.parametrize("path", _commands(cli), ids=lambda p: " ".join(p))
def test_every_command_has_help_with_an_example(path, run_cli):
    code, out, _ = run_cli(*path, "--help")
    assert code == 0
    assert "Example" in out, f"primus {' '.join(path)} --help has no example"


def test_the_top_level_command_imports_no_command_module_until_one_is_asked_for():
    """`primus project` should not pay for importing `tune`, `report` or `measure` (issue 16: answers
    within seconds, interpreter start included)."""
    code = ("import sys, primus.cli.main\n"
            "print(sorted(m for m in sys.modules if m.startswith('primus.cli.') and m.endswith(('_cmd', '_cmds'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
