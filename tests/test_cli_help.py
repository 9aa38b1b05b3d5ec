"""Every command has --help with an example (issue 2's CLI contract)."""

from __future__ import annotations

import click
import pytest

from primus.cli.main import cli


def _commands(group: click.Group, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for name, cmd in sorted(group.commands.items()):
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
