"""The error bar follows the profile a projection used (review 48): the shipped fit gets its held-out bar,
a spec-derived `--profile` the spec-derived bar, a profile no held-out run measures (a calibration of the
user's own, a measured profile) the widest bar with evidence behind it; an accelerator whose shipped
profile carries a sibling's factors takes the bar of the runs *that sibling's* factors predicted.

Figures from primus/fidelity/data/error_bars.yaml (docs/accuracy.md §Error bars): spec-derived ± 29.4%
dense / ± 47.2% MoE; H100 dense fitted ± 7.0%; B200's 3 MoE runs predicted with GB200's factors ± 133.3%;
the 8 dense torchtitan runs on H200 and the 500 W H100 96GB predicted with H100's factors ± 26.1%."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from click.testing import CliRunner

from primus import api
from primus.catalog.hardware import resolve_hardware
from primus.cli.project_cmd import project_cmd
from primus.fidelity import error_bar
from primus.fidelity.calibrate import load_spec_profile
from primus.fidelity.errorbars import DATA
from primus.fidelity.loso import held_from_rows, sibling_bar
from primus.fidelity.runs import bundled_runs_path, read_runs
from primus.fidelity.validate import validate
from primus.job import job_from_mapping
from primus.measure.measured_profile import DeviceInfo, Entry, MeasuredProfile
from primus.projection import load_profile
from primus.projection.profile import profile_path
from primus.projection.timer import GemmCall
from primus.tuning.agent import Tuner, TuneSettings
from primus.tuning.result import error_bar as tune_error_bar

ROOT = Path(__file__).resolve().parent.parent
JOB = {"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 4096, "global_batch_size": 32,
       "precision": "bf16", "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "mbs": 2,
                                         "sp": False, "recompute": "none", "sharding": "zero2"}}


def _data() -> dict[str, Any]:
    return yaml.safe_load(DATA.read_text())


def _job(tmp_path: Path, **changes: Any) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({**JOB, **changes}))
    return str(path)


def test_a_spec_derived_profile_gets_the_spec_derived_bar(tmp_path: Path) -> None:
    # review 48: `project --profile hardware/profiles/spec/h100-80gb.yaml` printed the fitted ± 6%
    spec = ROOT / "hardware" / "profiles" / "spec" / "h100-80gb.yaml"
    doc = json.loads(CliRunner().invoke(project_cmd, [_job(tmp_path), "--profile", str(spec), "--format",
                                                      "json"]).output)
    assert doc["uncertainty_pct"] == _data()["spec_derived"]["dense"]["pct"] == 29.4
    assert doc["uncertainty_fitted"] is False and "the profile given is spec-derived" in doc["uncertainty_basis"]


def test_the_shipped_profile_passed_explicitly_keeps_its_fitted_bar(tmp_path: Path) -> None:
    shipped = api.project(_job(tmp_path), profile=profile_path("h100-80gb")).uncertainty
    assert shipped == api.project(_job(tmp_path)).uncertainty == error_bar("h100-80gb", False, precision="bf16")
    assert shipped.fitted and shipped.pct < 10  # the 16-bit H100 dense bar


def test_a_calibration_of_ones_own_gets_the_widest_bar_and_says_so(tmp_path: Path) -> None:
    mine = load_profile(resolve_hardware("h100-80gb", "t"))
    mine = mine.with_parameters({"hbm.efficiency": mine.value("hbm.efficiency") * 0.9}, source="my own fit")
    bar = error_bar("h100-80gb", False, precision="bf16", profile=mine)
    # widest of spec-derived 29.4, pooled 10.7 and H100's own 7.0: never the fitted bar, silently
    assert bar.pct == 29.4 and not bar.fitted
    assert "calibration of its own" in bar.basis and "no held-out run measures its error" in bar.basis


def test_a_measured_profile_gets_the_widest_bar_and_names_the_other_device(tmp_path: Path) -> None:
    prof = MeasuredProfile(DeviceInfo("cpu", "test CPU", "cpu", "2.x", "float32", 1, 1), "2026-01-01")
    prof.add(Entry(GemmCall("bf16", 4096, 4096, 4096, 1, 2, 2), 1e-3, ({"op": "test", "samples": [1e-3]},), "now"))
    path = tmp_path / "p.json"
    prof.save(path)
    bar = api.project(_job(tmp_path), profile=path, allow_device_mismatch=True).uncertainty
    assert bar.pct == 29.4 and not bar.fitted  # was the fitted ± 6% (review 48)
    assert "measured profile (measured on cpu as cpu, not the job's h100-80gb" in bar.basis


def test_h800_takes_the_bar_of_runs_its_siblings_factors_predicted() -> None:
    dense = error_bar("h800", False)
    assert dense.pct == 25.6 and not dense.fitted
    assert "8 dense runs on h100-96gb-500w, h200 predicted by h100-80gb's fitted factors" in dense.basis


def test_h800_moe_without_runs_predicted_by_h100s_factors_gets_the_spec_derived_bar_not_b200s() -> None:
    # review 48: ± 148% from 3 B200 runs predicted with GB200's factors
    moe = error_bar("h800", True)
    assert moe.pct == _data()["spec_derived"]["moe"]["pct"] == 35.6
    assert "no held-out moe run was predicted with h100-80gb's factors" in moe.basis and "b200" not in moe.basis


def test_b300_whose_sibling_predicted_no_held_out_run_gets_the_spec_derived_bars() -> None:
    assert (error_bar("b300", False).pct, error_bar("b300", True).pct) == (29.4, 35.6)
    assert "gb300's factors" in error_bar("b300", True).basis


def test_per_sibling_bars_use_the_same_weighting_as_the_pooled_transferred_bar() -> None:
    held = held_from_rows(_data()["held_out"])
    gb200 = sibling_bar(held, "gb200", True)
    assert gb200 is not None and gb200["pct"] == _data()["transferred"]["moe"]["pct"] == 121.2
    assert gb200["n"] == 3 and sibling_bar(held, "gb300", False) is None


def test_validate_rows_carry_the_bar_of_the_profile_they_were_projected_with() -> None:
    rows = [r for r in read_runs(bundled_runs_path()) if r.source == "korthikanti2022"]
    spec = validate(rows, profile_for=lambda jobs: load_spec_profile("a100-80gb"), check_fit=False)
    shipped = validate(rows, check_fit=False)
    assert spec.rows and {r.error_bar_pct for r in spec.rows} == {29.4}
    assert {r.error_bar_pct for r in shipped.rows} == {_data()["accelerators"]["a100-80gb"]["dense"]["pct"]} == {9.7}


def test_tune_reports_the_bar_of_the_profile_it_tunes_with() -> None:
    job = job_from_mapping({k: v for k, v in JOB.items() if k != "parallel"}, "job")
    shipped = tune_error_bar(Tuner(job, TuneSettings()))  # the shipped fit, seen through the job's stack
    assert shipped["fitted"] and shipped["pct"] == error_bar("h100-80gb", False, precision="bf16").pct
    spec = tune_error_bar(Tuner(job, TuneSettings(), profile=load_spec_profile("h100-80gb")))
    assert (spec["pct"], spec["fitted"]) == (29.4, False)
