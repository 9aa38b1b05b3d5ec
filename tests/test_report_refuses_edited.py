"""`primus report DIR` renders only from the files the run's SHA256SUMS records (review 48, finding 6):
a result.json edited after the run (a `nan` step time, a negative tokens/s) is refused with one line and
exit 2, and nothing is written, SHA256SUMS included."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from primus.cli.report_cmds import report_cmd
from tests.test_report_files import tune


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("refuse") / "run"
    code, _, err = tune(out)
    assert code == 0, err
    return out


def test_an_edited_result_is_refused_and_nothing_is_written(fresh: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(fresh, run)
    doc = json.loads((run / "result.json").read_text())
    doc["best"]["step_time_s"], doc["best"]["tokens_per_s_per_gpu"] = float("nan"), -5
    (run / "result.json").write_text(json.dumps(doc))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    result = CliRunner().invoke(report_cmd, [str(run)])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1
    assert "result.json differs from its sha256 in SHA256SUMS (edited since the run)" in result.stderr
    assert "nothing was written" in result.stderr
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_an_unedited_run_is_rendered(fresh: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(fresh, run)
    result = CliRunner().invoke(report_cmd, [str(run)])
    assert result.exit_code == 0, result.output
    assert str(run / "report.html") in result.stdout


def test_a_layout_with_room_renders_the_proof_of_fit_as_before(fresh: Path) -> None:
    """The tight sentence (review 48, finding 2) is absent and takes no line with it: a run's report.md
    from before it still matches a fresh render."""
    text = (fresh / "report.md").read_text()
    assert "TIGHT" not in text
    assert "(it is a member of the enumerated legal set).\n\n![Memory per pipeline stage](charts/memory.svg)" in text


@pytest.mark.parametrize(("damage", "said"), [
    ("garbled", "SHA256SUMS line 1: not"),
    ("deleted", "SHA256SUMS is missing, though the run's marker lists it (deleted since the run)"),
])
def test_a_damaged_or_deleted_list_does_not_let_an_edited_result_through(fresh: Path, tmp_path: Path, damage: str,
                                                                          said: str) -> None:
    # review of 2026-12-06: with SHA256SUMS garbled or deleted, an edited result.json was re-rendered
    run = tmp_path / "run"
    shutil.copytree(fresh, run)
    doc = json.loads((run / "result.json").read_text())
    doc["best"]["tokens_per_s_per_gpu"] = 999999.0
    (run / "result.json").write_text(json.dumps(doc))
    if damage == "garbled":
        (run / "SHA256SUMS").write_text("not a checksum line\n")
    else:
        (run / "SHA256SUMS").unlink()
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    result = CliRunner().invoke(report_cmd, [str(run)])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert said in result.stderr
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
