"""Error bars: derived from leave-one-source-out residuals, shipped as data, shown wherever a projection
is (`project`, `enumerate --rank`), wider and stated for spec-derived profiles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from primus.cli.project_cmd import project_cmd
from primus.cli.solver_cmds import enumerate_cmd
from primus.fidelity import ErrorBar, error_bar
from primus.fidelity.errorbars import DATA, MIN_RUNS


def _data() -> dict[str, Any]:
    return yaml.safe_load(DATA.read_text())


def test_fitted_accelerators_get_their_leave_one_source_out_bar() -> None:
    bar = error_bar("h100-80gb", False)
    assert isinstance(bar, ErrorBar) and bar.fitted
    entry = _data()["accelerators"]["h100-80gb"]["dense"]
    assert entry["n"] >= MIN_RUNS and bar.pct == entry["pct"] > 0
    assert "leave-one-source-out" in bar.basis and "dense h100-80gb" in bar.basis
    assert error_bar("h100-80gb+custom", True) == error_bar("h100-80gb", True)
    assert bar.text() == f"± {bar.pct:.0f}%"


def test_few_held_out_runs_fall_back_to_the_pooled_bar() -> None:
    bar = error_bar("h200", False)
    assert bar.fitted and "pooled" in bar.basis
    assert bar.pct == _data()["pooled"]["dense"]["pct"]


def test_spec_derived_profiles_get_the_wider_stated_bar() -> None:
    bar = error_bar("mi300x", False)
    assert not bar.fitted and "spec-derived" in bar.basis
    assert bar.pct == _data()["spec_derived"]["dense"]["pct"]
    assert bar.pct > error_bar("h100-80gb", False).pct


def test_the_shipped_leave_one_source_out_median_meets_the_target() -> None:
    data = _data()
    assert data["loso"]["overall"]["median_abs_pct"] <= 15.0
    assert data["loso"]["overall"]["n"] == len(data["held_out"]) == 191


JOB = {"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 4096, "global_batch_size": 16,
       "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "sp": False, "recompute": "none", "sharding": "dist_opt"}}


def _write(tmp_path: Path, data: dict[str, Any]) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_project_shows_the_error_bar(tmp_path: Path) -> None:
    job = _write(tmp_path, JOB)
    doc = json.loads(CliRunner().invoke(project_cmd, [job, "--format", "json"]).output)
    bar = error_bar("h100-80gb", False)
    assert doc["uncertainty_pct"] == bar.pct and doc["uncertainty_basis"] == bar.basis
    text = CliRunner().invoke(project_cmd, [job]).output
    assert f"tokens/s/GPU {bar.text()}" in text


def test_enumerate_rank_shows_the_error_bar(tmp_path: Path) -> None:
    job = _write(tmp_path, {**JOB, "parallel": {"tp": 1, "pp": 1, "cp": 1, "sp": False, "sharding": "dist_opt"}})
    result = CliRunner().invoke(enumerate_cmd, [job, "--rank", "--top", "3", "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    bar = error_bar("h100-80gb", False)
    assert doc["uncertainty_pct"] == bar.pct and all(r["uncertainty_pct"] == bar.pct for r in doc["layouts"])
    table = CliRunner().invoke(enumerate_cmd, [job, "--rank", "--top", "3"]).output
    assert bar.text() in table
