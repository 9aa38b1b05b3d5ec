"""`primus calibrate` says which rows it could not use and refuses options that name nothing (review 48,
findings 3 and 4): a row validate lists as unprojected is listed by calibrate too, with the same reason;
a rate over the dense peak is not a measurement; `--exclude-source`, `--hardware` and `--date` are
checked before anything is fitted or written."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from click.testing import CliRunner

from primus.cli.fidelity_cmds import calibrate_cmd
from primus.fidelity import bundled_runs_path, read_runs
from primus.fidelity.validate import prepare

RUNS = bundled_runs_path()
# Korthikanti et al. 2022 (arXiv 2205.05198), GPT 175B on A100 with full recompute: 33 complete a100 rows.
KORTHIKANTI = "Korthikanti22-A100-175B-fullrecompute"


def _runs_with(tmp_path: Path, run_id: str, tokens: str) -> Path:
    """The bundled runs with one row's tokens/s/GPU replaced."""
    with open(RUNS, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        rows, fields = list(reader), reader.fieldnames
    assert fields is not None and any(r["run_id"] == run_id for r in rows)
    for r in rows:
        if r["run_id"] == run_id:
            r["tokens_per_s_per_gpu"] = tokens
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


def _calibrate(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(calibrate_cmd, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_a_row_with_a_nan_rate_is_listed_as_not_used(tmp_path: Path) -> None:
    b200 = next(r for r in read_runs(RUNS) if r["gpu"].lower() == "b200" and r.complete)
    runs = _runs_with(tmp_path, b200.run_id, "nan")
    code, out, err = _calibrate("--runs", str(runs), "--hardware", "b200", "--out", str(tmp_path / "b.yaml"),
                                "--date", "2026-01-02", "--format", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["unused"] == [{"run_id": b200.run_id, "source": b200.source,
                              "reason": "column 'tokens_per_s_per_gpu' must be a finite positive number, got 'nan'"}]
    assert b200.run_id not in doc["runs"] and "(1 not usable: listed with the reason)" in " ".join(err.split())


def test_a_rate_over_the_dense_peak_is_not_a_measurement(tmp_path: Path) -> None:
    # GPT 175B at seq 2048 on an A100 (312 TFLOP/s dense bf16): 100% MFU is 294 tokens/s/GPU (model FLOPs with
    # causal attention over S/2 keys, as Megatron-LM counts them from core_v0.12.0; 290 over the whole sequence)
    rows = [r for r in read_runs(_runs_with(tmp_path, KORTHIKANTI, "1e308")) if r.run_id == KORTHIKANTI]
    ok, bad = prepare(rows)
    assert ok == [] and [b.reason for b in bad] == [
        "measured 1e+308 tokens/s/GPU is more than the 294 the accelerator's dense peak allows (MFU 100%): "
        "not a measurement"]


def test_a_rate_far_below_any_training_run_is_not_a_measurement(tmp_path: Path) -> None:
    # 1e-310 tokens/s/GPU made the error overflow to infinity, which `--format json` cannot hold; 0.01% MFU of
    # GPT 175B on an A100 is 0.0294 tokens/s/GPU (the slowest published run shipped is at 4.8% MFU)
    rows = [r for r in read_runs(_runs_with(tmp_path, KORTHIKANTI, "1e-310")) if r.run_id == KORTHIKANTI]
    ok, bad = prepare(rows)
    assert ok == [] and [b.reason for b in bad] == [
        "measured 1e-310 tokens/s/GPU is less than 0.0294, an MFU of 0.01% on the accelerator's dense peak: "
        "not a training measurement"]


def test_every_bundled_run_is_under_the_dense_peak() -> None:
    ok, bad = prepare(read_runs(RUNS))
    assert not [b for b in bad if "dense peak" in b.reason] and ok


def test_an_unknown_source_to_exclude_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    out = tmp_path / "a.yaml"
    code, _, err = _calibrate("--runs", str(RUNS), "--hardware", "a100-80gb", "--out", str(out),
                              "--exclude-source", "korthikanti22")
    assert code == 2 and err.count("\n") == 1
    assert "--exclude-source: no run of" in err and "(did you mean 'korthikanti2022'?)" in err
    assert "its sources: " in err and not out.exists()


def test_a_hardware_prefix_gets_a_suggestion() -> None:
    code, _, err = _calibrate("--runs", str(RUNS), "--hardware", "h100")
    assert code == 2
    assert "unknown hardware 'h100' (did you mean 'h100-80gb' or 'h100-96gb-500w'?)" in err


def test_a_date_must_be_an_iso_calendar_day(tmp_path: Path) -> None:
    for bad in ("2026-13-45", "<script>", "2026-1-2"):
        code, _, err = _calibrate("--runs", str(RUNS), "--hardware", "b200", "--out", str(tmp_path / "b.yaml"),
                                  "--date", bad)
        assert code == 2 and "is not a calendar date in ISO form (YYYY-MM-DD)" in err, bad
    assert not (tmp_path / "b.yaml").exists()
