"""`primus audit verify` re-checks what `result.json` claims beside the candidates (review 46, M1): the
certificate's scope, the list of layouts other pipeline options make faster (whole: an entry dropped is
named) and the per-option-set numbers `tune --allow pipeline` records.

Each forgery here is consistent: `result.json` edited, the report re-rendered from it and the list of
files (`SHA256SUMS`) rewritten, as someone hiding the edit would; only the recomputation can catch it.
The case is tests/test_tune_pipeline_options.py's: Llama 3.1 8B on 2 H100 nodes with first and last stages
of 3 layers, whose own options leave no PP 1 (6,300 tokens/s/GPU), while unsetting them, or counting the
embedding and the loss in the split instead, gives TP1 PP1 DP16 at 9,924."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from primus.cli.main import cli
from primus.parallel import parallel_text as layout_text
from primus.report.manifest import write_manifest
from primus.report.render import write_report
from primus.tuning.variants import changes_text

L8_FIRST_LAST_3 = {
    "model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 8192, "global_batch_size": 32,
    "precision": "bf16", "parallel": {"tp": 8},
    "pipeline": {"decoder_first_pipeline_num_layers": 3, "decoder_last_pipeline_num_layers": 3},
}


def _tune(root: Path, *extra: str) -> Path:
    job = root / "job.yaml"
    job.write_text(yaml.safe_dump(L8_FIRST_LAST_3, sort_keys=False))
    out = root / "run"
    result = CliRunner().invoke(cli, ["tune", str(job), "--llm", "none", "--out", str(out), "--format", "json",
                                      "--workers", "1", *extra], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def own(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job tuned under its own pipeline options: faster layouts under other options are listed."""
    return _tune(tmp_path_factory.mktemp("own"))


@pytest.fixture(scope="module")
def allowed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The job tuned with `--allow pipeline`: the option sets tried are recorded with their best."""
    return _tune(tmp_path_factory.mktemp("allowed"), "--allow", "pipeline")


def verify(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["audit", "verify", str(path), "--workers", "1"], catch_exceptions=False)
    return result.exit_code, result.stdout


def forged(run: Path, tmp_path: Path, edit: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of `run` with result.json edited, its report re-rendered and its list of files rewritten."""
    copy = tmp_path / "forged"
    shutil.copytree(run, copy)
    doc = json.loads((copy / "result.json").read_text())
    edit(doc)
    (copy / "result.json").write_text(json.dumps(doc, indent=1) + "\n")
    write_report(copy)
    write_manifest(copy)
    return copy


def test_an_untouched_run_with_faster_variants_verifies(own: Path) -> None:
    assert json.loads((own / "result.json").read_text())["faster_with_changed_options"]
    code, out = verify(own)
    assert code == 0, out
    assert "no difference" in out


def test_an_untouched_allow_pipeline_run_verifies(allowed: Path) -> None:
    trials = json.loads((allowed / "result.json").read_text())["allowed_changes"]["pipeline"]["per_option_set"]
    assert [round(t["tokens_per_s_per_gpu"]) for t in trials] == [6313, 9955, 9955]
    code, out = verify(allowed)
    assert code == 0, out


def test_an_edited_scope_line_fails_naming_the_field(own: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["certificate"]["scope"] = "the job's pipeline options (none set: Megatron's default split)"

    code, out = verify(forged(own, tmp_path, edit))
    assert code == 1
    assert ("result.json: certificate.scope recorded \"the job's pipeline options (none set: Megatron's default "
            "split)\", recomputed \"the job's pipeline options (pipeline.decoder_first_pipeline_num_layers=3, "
            "pipeline.decoder_last_pipeline_num_layers=3)\"") in out


def test_a_dropped_faster_variant_fails_naming_the_missing_one(own: Path, tmp_path: Path) -> None:
    listed = json.loads((own / "result.json").read_text())["faster_with_changed_options"]
    fastest = listed[0]  # the one a forger would hide: the layout most faster than the certified best

    def edit(doc: dict[str, Any]) -> None:
        doc["faster_with_changed_options"].pop(0)

    code, out = verify(forged(own, tmp_path, edit))
    assert code == 1
    missing = next(line.strip() for line in out.splitlines() if "faster_with_changed_options: missing" in line)
    assert missing.startswith(f"result.json: faster_with_changed_options: missing {layout_text(fastest['parallel'])} "
                              f"with {changes_text(fastest['options'])} at {fastest['tokens_per_s_per_gpu']!r} "
                              "tokens/s/GPU (recomputed [0] of")
    assert f"{len(listed) - 1} recorded)" in missing


def test_dropping_every_faster_variant_and_the_certificates_flag_fails(own: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["faster_with_changed_options"] = []
        doc["certificate"]["faster_with_changed_options"] = False

    code, out = verify(forged(own, tmp_path, edit))
    assert code == 1
    assert "result.json: faster_with_changed_options: missing" in out and "0 recorded)" in out
    assert "result.json: certificate.faster_with_changed_options recorded False, recomputed True" in out


def test_an_edited_per_option_set_number_fails_naming_it(allowed: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["allowed_changes"]["pipeline"]["per_option_set"][0]["tokens_per_s_per_gpu"] = 5000.0

    code, out = verify(forged(allowed, tmp_path, edit))
    assert code == 1
    assert ("result.json: allowed_changes.pipeline.per_option_set[0]: tokens_per_s_per_gpu recorded 5000.0, "
            "re-run 6313.") in out


def test_a_dropped_option_set_fails(allowed: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["allowed_changes"]["pipeline"]["per_option_set"].pop()

    code, out = verify(forged(allowed, tmp_path, edit))
    assert code == 1
    assert "result.json: allowed_changes.pipeline.per_option_set: 2 recorded, 3 re-run: missing [2]" in out


def test_a_deleted_record_of_the_trials_fails(allowed: Path, tmp_path: Path) -> None:
    code, out = verify(forged(allowed, tmp_path, lambda doc: doc.pop("allowed_changes")))
    assert code == 1
    assert ("result.json: allowed_changes.pipeline: missing, though inputs/job.yaml says `--allow pipeline` "
            "changed its pipeline options") in out


def test_a_malformed_record_is_a_difference_naming_the_field(allowed: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["allowed_changes"]["pipeline"]["per_option_set"] = "fast"

    code, out = verify(forged(allowed, tmp_path, edit))
    assert code == 1
    assert "result.json: allowed_changes.pipeline: per_option_set recorded 'fast', not a list of mappings" in out


def test_the_runner_up_passed_off_as_the_best_fails(own: Path, tmp_path: Path) -> None:
    # every number is a real simulation of a legal layout: only re-picking the best from the log catches it
    def edit(doc: dict[str, Any]) -> None:
        doc["top"][0], doc["top"][1] = doc["top"][1], doc["top"][0]
        doc["best"] = dict(doc["top"][0])

    code, out = verify(forged(own, tmp_path, edit))
    assert code == 1
    assert "result.json: best parallel recorded" in out and "but the fastest of the log's scores re-timed is" in out
    assert "result.json: certificate.margin_to_runner_up_pct recorded" not in out  # the margin was left as is


def test_an_inflated_margin_to_the_runner_up_fails(own: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["certificate"]["margin_to_runner_up_pct"] = 25.0
        doc["certificate"]["margin_exceeds_error_bar"] = True

    code, out = verify(forged(own, tmp_path, edit))
    assert code == 1
    assert "result.json: certificate.margin_to_runner_up_pct recorded 25.0, recomputed" in out
    assert "result.json: certificate.margin_exceeds_error_bar recorded True, recomputed False" in out


def test_an_edited_legal_count_fails(own: Path, tmp_path: Path) -> None:
    real = json.loads((own / "result.json").read_text())["legal_count"]

    def edit(doc: dict[str, Any]) -> None:
        doc["legal_count"] = real * 10

    code, out = verify(forged(own, tmp_path, edit))
    assert code == 1
    assert f"result.json: legal_count recorded {real * 10}, recomputed {real}" in out
