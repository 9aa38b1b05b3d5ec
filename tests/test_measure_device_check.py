"""The device check's dry run (CPU, tiny shapes) completes end to end, and the CPU comparison script
writes its table only between the markers of a document."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _load(name: str) -> object:
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_device_rows_are_complete_hopper_rows_with_the_ground_truth_columns() -> None:
    with (REPO / "benchmarks" / "device_rows.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert {r["gpu"] for r in rows} == {"h100-80gb", "h200"}
    assert all(r["complete"] == "true" for r in rows)
    assert any(r["model"] == "llama3.1-8b" and r["gpu"] == "h200" for r in rows)
    assert all(r["step_time_s"] or r["tokens_per_s_per_gpu"] for r in rows)
    from primus.fidelity.runs import REQUIRED

    assert set(REQUIRED) <= set(rows[0])


@pytest.mark.measure
def test_device_check_dry_run_completes(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    env = dict(os.environ, PYTHON=sys.executable, OUT=str(tmp_path))
    result = subprocess.run(["bash", str(REPO / "benchmarks" / "device_check.sh"), "--dry-run"], capture_output=True,
                            text=True, timeout=1800, env=env, cwd=tmp_path)  # a hang guard only
    assert result.returncode == 0, result.stderr[-2000:]
    assert "DRY RUN" in result.stdout and "median |error|" in result.stdout
    doc = json.loads((tmp_path / "device_check.json").read_text())
    assert doc["dry_run"] and len(doc["rows"]) >= 20
    assert any(r["gpu"] == "h100-80gb" for r in doc["rows"]) and any(r["gpu"] == "h200" for r in doc["rows"])
    assert all("gemm" in r["measured_terms"] for r in doc["rows"])  # every row took its GEMMs from the profile
    assert (tmp_path / "profile.json").exists() and (tmp_path / "device_check.md").exists()


def test_device_check_refuses_unknown_arguments() -> None:
    result = subprocess.run(["bash", str(REPO / "benchmarks" / "device_check.sh"), "--bogus"], capture_output=True,
                            text=True, timeout=30)
    assert result.returncode == 2 and "unknown argument" in result.stderr


def test_the_comparison_table_goes_only_between_the_markers(tmp_path: Path) -> None:
    mod = _load("cpu_measure_compare")
    doc = tmp_path / "accuracy.md"
    doc.write_text("# Accuracy\nbefore\n<!-- measured:start -->\nold table\n<!-- measured:end -->\nafter\n")
    assert mod.replace_between_markers(doc, "| new | table |")  # type: ignore[attr-defined]
    assert doc.read_text() == ("# Accuracy\nbefore\n<!-- measured:start -->\n| new | table |\n"
                               "<!-- measured:end -->\nafter\n")
    bare = tmp_path / "other.md"
    bare.write_text("no markers here\n")
    assert not mod.replace_between_markers(bare, "x")  # type: ignore[attr-defined]
    assert bare.read_text() == "no markers here\n"
    assert not mod.replace_between_markers(tmp_path / "missing.md", "x")  # type: ignore[attr-defined]
