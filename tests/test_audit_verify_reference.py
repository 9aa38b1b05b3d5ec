"""The reference's fit is recomputed from the run directory alone: `tune` records the pins it asked `fit`
about (`reference.pins`) and asks under the run's rules and profile, so `primus audit verify` recomputes the
verdict and the nearest legal fix (`reference.nearest_legal`) with the recorded rules and profile
(`primus.tuning.reference.reference_fit`), not the verifying machine's catalog and default rules.

The case is tests/test_tune.py's illegal reference: Llama 3.1 8B on one H100 node at seq 8,192, TP1 PP1 CP1
MBS 2 without recompute pinned, over 80 GB. Its nearest legal fix is CP 8 (9,336 tokens/s/GPU) under the
built-in rules; under the user's `--rule "cp <= 4"` it is TP 4 (7,906), where the fit before this change,
asked under the built-in rules only, named CP 8, a layout the run's own rules refuse."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from primus.cli.main import cli
from primus.parallel import parallel_text as layout_text
from tests.test_audit_verify_claims import forged, verify

PINNED = {"tp": 1, "pp": 1, "cp": 1, "mbs": 2, "sp": False, "recompute": "none", "sharding": "dist_opt"}
OVER = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 8192, "global_batch_size": 16,
        "parallel": PINNED}


@pytest.fixture(scope="module")
def ruled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("ruled")
    path = root / "job.yaml"
    path.write_text(yaml.safe_dump(OVER, sort_keys=False))
    out = root / "run"
    result = CliRunner().invoke(cli, ["tune", str(path), "--llm", "none", "--rule", "cp <= 4", "--out", str(out),
                                      "--format", "json", "--workers", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return out


def reference(run: Path) -> dict[str, Any]:
    return dict(json.loads((run / "result.json").read_text())["reference"])


def test_the_nearest_fix_obeys_the_runs_rules_and_the_pins_are_recorded(ruled: Path) -> None:
    ref = reference(ruled)
    assert (ref["origin"], ref["pins"], ref["fits"]) == ("job", PINNED, False)
    near = ref["nearest_legal"]
    assert near["parallel"]["cp"] <= 4 and (near["parallel"]["tp"], near["changed"]) == (4, ["tp"])
    assert round(near["tokens_per_s_per_gpu"]) == 7927


def test_an_untouched_run_with_a_nearest_fix_verifies(ruled: Path) -> None:
    code, out = verify(ruled)
    assert code == 0, out


def test_another_legal_layout_passed_off_as_the_nearest_fix_fails(ruled: Path, tmp_path: Path) -> None:
    # the best is legal and its numbers are real: only recomputing the reference's fit names the swap
    ref = reference(ruled)

    def edit(doc: dict[str, Any]) -> None:
        best = doc["best"]
        doc["reference"]["nearest_legal"].update(parallel=best["parallel"], peak_bytes=best["peak_bytes"],
                                                 tokens_per_s_per_gpu=best["tokens_per_s_per_gpu"],
                                                 step_time_s=best["step_time_s"])

    copy = forged(ruled, tmp_path, edit)
    best = json.loads((copy / "result.json").read_text())["best"]["parallel"]
    code, out = verify(copy)
    assert code == 1
    assert (f"result.json: reference.nearest_legal: parallel recorded {layout_text(best)}, recomputed "
            f"{layout_text(ref['nearest_legal']['parallel'])}") in out


def test_edited_pins_fail_naming_the_jobs(ruled: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["reference"]["pins"]["mbs"] = 1

    code, out = verify(forged(ruled, tmp_path, edit))
    assert code == 1
    assert f"result.json: reference.pins recorded {({**PINNED, 'mbs': 1})!r}, but the job pins {PINNED!r}" in out


def test_a_reference_without_its_pins_cannot_be_recomputed(ruled: Path, tmp_path: Path) -> None:
    code, out = verify(forged(ruled, tmp_path, lambda doc: doc["reference"].pop("pins")))
    assert code == 1
    assert ("result.json: reference: pins recorded None and origin 'job', not a mapping and a text (a run written "
            "before primus recorded the pins: the nearest legal fix cannot be recomputed)") in out
