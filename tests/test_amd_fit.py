"""Whether AMD's published runs allow a fitted Instinct profile (issue 19): a fit ships only when, refitted
without each source, it predicts that source better than the spec-derived profile does on the same rows.

Rows: ground_truth/amd_runs_dev.csv, complete rows: DeepSeek-V2-Lite on 8 MI355X (ROCm blog "MoE Training
Best Practices on AMD GPUs", Dec 2025), DeepSeek-V3 on 256 MI355X and Qwen3-30B-A3B on 8 (Primus MoE package
2.0 draft), Llama 3.1 8B FP8 on 64 MI325X (AMD performance results)."""

from __future__ import annotations

from typing import Any

import pytest

from primus.fidelity.amd_fit import fit_check, ships_fitted
from primus.fidelity.runs import bundled_amd_runs_path, read_runs
from primus.fidelity.validate import prepare
from primus.projection import load_profile


def _check(held: float, spec: float) -> dict[str, Any]:
    return {"held_out_summary": {"median_abs_pct": held}, "spec_summary": {"median_abs_pct": spec}}


def test_a_fit_ships_only_when_it_predicts_an_unseen_source_better() -> None:
    assert ships_fitted(_check(held=8.0, spec=11.0))
    assert not ships_fitted(_check(held=16.0, spec=11.0))
    assert not ships_fitted(_check(held=11.0, spec=11.0))  # a tie keeps the datasheet profile


@pytest.fixture(scope="module")
def check() -> dict[str, Any]:
    return fit_check(prepare(read_runs(bundled_amd_runs_path()))[0])


def test_the_two_mi355x_sources_do_not_support_a_shared_fit(check: dict[str, Any]) -> None:
    mi355x = check["accelerators"]["mi355x"]
    assert mi355x["runs"] == 10 and mi355x["sources"] == 2 and "factors" in mi355x
    assert "factors" not in check["accelerators"]["mi325x"]  # one row: nothing to fit and still check
    assert not ships_fitted(check)
    assert set(check["held_out"]) == {r.run_id for r in read_runs(bundled_amd_runs_path()) if r.complete}


def test_the_shipped_instinct_profiles_follow_the_rule(check: dict[str, Any]) -> None:
    from primus.catalog.hardware import resolve_hardware

    for hw in ("mi300x", "mi325x", "mi355x"):
        assert load_profile(resolve_hardware(hw, "test")).fitted is ships_fitted(check)
