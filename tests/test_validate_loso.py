"""`primus validate` reports the leave-one-source-out figures issue 19 asks of it (held-out median and p90,
the error bars' coverage) from the runs file it is given, computed, not read from what primus ships."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from primus.fidelity.runs import bundled_runs_path
from tests.helpers.runs_csv import read_rows, write_rows

# The seven A100 runs of Korthikanti et al. 2022 and BLOOM-176B (bigscience tr11): two sources on one
# accelerator, so each is predicted by a profile fitted to the other alone.
SOURCES = ("korthikanti2022", "bloom-tr11")


def _runs(count: int | None = None) -> tuple[list[str], list[dict[str, str]]]:
    """The header and the rows of the two sources, from the bundled dev set."""
    fields, rows = read_rows(bundled_runs_path(), lambda r: r["source"] in SOURCES)
    return fields, rows[:count]


@pytest.fixture(scope="module")
def two_sources(tmp_path_factory: pytest.TempPathFactory) -> Path:
    fields, rows = _runs()
    assert len(rows) == 8
    return write_rows(tmp_path_factory.mktemp("runs") / "two_sources.csv", fields, rows)


@pytest.fixture(scope="module")
def doc(two_sources: Path) -> dict:  # type: ignore[type-arg]
    from click.testing import CliRunner

    from primus.cli.main import cli

    result = CliRunner().invoke(cli, ["validate", str(two_sources), "--no-fit-check", "--format", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_every_row_is_predicted_by_a_profile_fitted_without_its_source(doc: dict) -> None:  # type: ignore[type-arg]
    held = doc["summary"]["leave_one_source_out"]
    rows = {r["run_id"]: r for r in held["rows"]}
    assert set(rows) == {r["run_id"] for r in doc["rows"]}
    # Korthikanti's runs are predicted from BLOOM's one run, BLOOM's from Korthikanti's seven
    assert {r["fitted_on"] for r in rows.values() if r["source"] == "korthikanti2022"} == {1}
    assert {r["fitted_on"] for r in rows.values() if r["source"] == "bloom-tr11"} == {7}
    assert held["overall"]["n"] == 8 and held["overall"]["median_abs_pct"] >= 0


def test_the_held_out_errors_differ_from_the_in_sample_ones(doc: dict) -> None:  # type: ignore[type-arg]
    in_sample = {r["run_id"]: r["error_pct"] for r in doc["rows"]}
    held = {r["run_id"]: r["held_out_error_pct"] for r in doc["summary"]["leave_one_source_out"]["rows"]}
    assert any(abs(held[k] - in_sample[k]) > 0.1 for k in held)


def test_coverage_is_reported_overall_and_by_group(doc: dict) -> None:  # type: ignore[type-arg]
    held = doc["summary"]["leave_one_source_out"]
    assert held["coverage_band_pct"] == [60.0, 80.0]
    overall = held["coverage"]["overall"]
    assert overall["n"] == 8 and 0 <= overall["inside"] <= 8
    assert "a100-80gb dense" in held["coverage"]


def test_no_loso_skips_the_refits(two_sources: Path) -> None:
    from click.testing import CliRunner

    from primus.cli.main import cli

    result = CliRunner().invoke(cli, ["validate", str(two_sources), "--no-fit-check", "--no-loso", "--format",
                                      "json"])
    assert result.exit_code == 0
    assert "leave_one_source_out" not in json.loads(result.stdout)["summary"]


def _one_row_changed(tmp_path: Path, **cells: str) -> Path:
    fields, rows = _runs(2)
    rows[0].update(cells)
    return write_rows(tmp_path / "runs.csv", fields, rows)


@pytest.mark.parametrize("cell", ["inf", "nan", "abc", "-5"])
def test_a_measurement_that_is_not_a_finite_positive_number_is_named_not_fitted(run_cli, tmp_path: Path,
                                                                                 cell: str) -> None:  # type: ignore[no-untyped-def]
    path = _one_row_changed(tmp_path, tokens_per_s_per_gpu=cell)
    code, out, _ = run_cli("validate", str(path), "--no-fit-check", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and len(doc["rows"]) == 1
    (bad,) = doc["unprojected"]
    assert bad["reason"] == f"column 'tokens_per_s_per_gpu' must be a finite positive number, got '{cell}'"


def test_a_row_with_an_empty_source_is_listed_not_grouped(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = _one_row_changed(tmp_path, source="")
    code, out, _ = run_cli("validate", str(path), "--no-fit-check", "--format", "json")
    (bad,) = json.loads(out)["unprojected"]
    assert code == 0 and bad["reason"].startswith("column 'source' is empty")


def test_a_truncated_row_is_bad_input(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = _one_row_changed(tmp_path)
    path.write_text(path.read_text(encoding="utf-8") + "a,b,c\n", encoding="utf-8")
    code, out, err = run_cli("validate", str(path), "--format", "json")
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert "line 4: fewer fields than the header's" in err


def test_the_progress_spinner_shows_text_from_the_runs_file_as_text() -> None:
    # a source name is input: on a terminal the spinner must neither run its escape codes nor read its
    # brackets as markup (rich's Status reads a str as markup past the console's own render_str)
    import io
    import re
    import time

    from primus.cli.output import SafeConsole

    buf = io.StringIO()
    console = SafeConsole(file=buf, force_terminal=True, width=120)
    with console.status("start") as status:
        status.update("leave-one-source-out: [link=http://x]\x1b[31mEVIL\x1b]0;t\x07 on a100-80gb")
        time.sleep(0.2)
    out = buf.getvalue()
    assert "\x1b[31mEVIL" not in out and "\x1b]0;t" not in out and "\x1b]8;" not in out
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", out)  # rich's own styling of the spinner line
    assert "\\x1b[31mEVIL" in shown and "[link=http://x]" in shown
