"""Shared helpers for the specification tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from primus.cli.main import cli

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"


@pytest.fixture()
def run_cli():
    """Run the CLI in-process; returns (exit_code, stdout, stderr)."""

    def _run(*args: str) -> tuple[int, str, str]:
        runner = CliRunner()
        result = runner.invoke(cli, list(args), catch_exceptions=False)
        return result.exit_code, result.stdout, result.stderr

    return _run


@pytest.fixture()
def write_job(tmp_path: Path):
    """Write a job mapping to a YAML file and return its path."""

    def _write(job: dict[str, Any], name: str = "job.yaml") -> str:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(job, sort_keys=False))
        return str(path)

    return _write


def as_json(text: str) -> Any:
    return json.loads(text)
