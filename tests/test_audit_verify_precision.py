"""`primus audit verify` re-runs the precision trials `tune --allow precision` records
(`allowed_changes.precision`) through the function tune used (`primus.tuning.run.precision_trials`), and
names a changed number, a dropped precision, a wrong chosen one, and an `inputs/job.yaml` that is not the
requested job with the chosen change.

Each forgery is consistent, as in tests/test_audit_verify_claims.py: the edited file, the report re-rendered
and the lists of files (`inputs/SHA256SUMS`, `SHA256SUMS`) rewritten; only the re-run can catch it. The
case: Llama 3.1 8B on one H100 node (seq 4,096, GBS 16) written without a precision (bf16): bf16's best is
10,333 tokens/s/GPU over 3,065 legal layouts, fp8's 12,580 over 3,066 (Megatron-LM's FP8 recipe keeps the
bf16 weights, `fp8_param_gather` off), so tune keeps fp8."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from primus.report.manifest import write_manifest
from primus.report.render import write_report
from primus.tuning.run import PIPELINE_CHANGED_NOTE, PRECISION_CHANGED_NOTE
from tests.test_audit_verify_claims import L8_FIRST_LAST_3, forged, verify

SMALL = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16}


def _tune(root: Path, job: dict[str, Any] | str, *extra: str) -> Path:
    from click.testing import CliRunner

    from primus.cli.main import cli

    path = root / "job.yaml"
    path.write_text(job if isinstance(job, str) else yaml.safe_dump(job, sort_keys=False))
    out = root / "run"
    result = CliRunner().invoke(cli, ["tune", str(path), "--llm", "none", "--out", str(out), "--format", "json",
                                      "--workers", "1", *extra], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return out


@pytest.fixture(scope="module")
def precision(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small job tuned with `--allow precision`: bf16 and fp8 tried, fp8 kept."""
    return _tune(tmp_path_factory.mktemp("precision"), SMALL, "--allow", "precision")


def record(run: Path) -> dict[str, Any]:
    return json.loads((run / "result.json").read_text())["allowed_changes"]["precision"]


def test_an_untouched_allow_precision_run_verifies(precision: Path) -> None:
    tried = record(precision)
    assert [(t["precision"], round(t["tokens_per_s_per_gpu"]), t["legal_count"]) for t in tried["per_precision"]] \
        == [("bf16", 10368, 3065), ("fp8", 12580, 3066)]
    assert (tried["requested"], tried["requested_settings"], tried["chosen"]) == ("bf16", {}, "fp8")
    code, out = verify(precision)
    assert code == 0, out


def test_an_edited_per_precision_number_fails_naming_it(precision: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["allowed_changes"]["precision"]["per_precision"][0]["tokens_per_s_per_gpu"] = 9000.0

    code, out = verify(forged(precision, tmp_path, edit))
    assert code == 1
    assert ("result.json: allowed_changes.precision.per_precision[0]: tokens_per_s_per_gpu recorded 9000.0, "
            "re-run 10367.") in out


def test_an_edited_per_precision_legal_count_fails_naming_it(precision: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["allowed_changes"]["precision"]["per_precision"][1]["legal_count"] = 4000

    code, out = verify(forged(precision, tmp_path, edit))
    assert code == 1
    assert "result.json: allowed_changes.precision.per_precision[1]: legal_count recorded 4000, re-run 3066" in out


def test_a_dropped_precision_fails_naming_it(precision: Path, tmp_path: Path) -> None:
    fp8 = record(precision)["per_precision"][1]["tokens_per_s_per_gpu"]

    def edit(doc: dict[str, Any]) -> None:
        doc["allowed_changes"]["precision"]["per_precision"].pop()

    code, out = verify(forged(precision, tmp_path, edit))
    assert code == 1
    assert (f"result.json: allowed_changes.precision.per_precision: 1 recorded, 2 re-run: missing [1] fp8 at "
            f"{fp8!r} tokens/s/GPU") in out


def test_a_slower_precision_recorded_as_chosen_fails(precision: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["allowed_changes"]["precision"]["chosen"] = "bf16"

    code, out = verify(forged(precision, tmp_path, edit))
    assert code == 1
    assert "result.json: allowed_changes.precision: chosen 'bf16', but the fastest precision re-run is 'fp8'" in out
    # and the job the search ran on is not the requested one with that (no) change
    assert ("result.json: allowed_changes.precision: inputs/job.yaml's precision settings {'precision': 'fp8'} are "
            "not the requested {} with the chosen 'bf16' ({})") in out


def test_a_job_file_that_is_not_the_requested_one_with_the_change_fails(precision: Path, tmp_path: Path) -> None:
    # fp8_recipe: delayed is what Megatron-LM's stack gives an fp8 job anyway, so every number re-checks; only
    # the comparison with the requested job at the chosen precision (its fp8 settings dropped) names it
    copy = forged(precision, tmp_path, lambda doc: None)
    inputs = copy / "inputs"
    text = (inputs / "job.yaml").read_text()
    (inputs / "job.yaml").write_text(text + "fp8_recipe: delayed\n")
    sums = [f"{hashlib.sha256((inputs / n).read_bytes()).hexdigest()}  {n}"
            for n in sorted(p.name for p in inputs.iterdir() if p.name != "SHA256SUMS")]
    (inputs / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    write_report(copy)
    write_manifest(copy)
    code, out = verify(copy)
    assert code == 1
    assert "1 difference(s)" in out
    assert ("result.json: allowed_changes.precision: inputs/job.yaml's precision settings {'precision': 'fp8', "
            "'fp8_recipe': 'delayed'} are not the requested {} with the chosen 'fp8' ({'precision': 'fp8'})") in out


def test_a_deleted_record_of_the_precision_trials_fails(precision: Path, tmp_path: Path) -> None:
    code, out = verify(forged(precision, tmp_path, lambda doc: doc.pop("allowed_changes")))
    assert code == 1
    assert ("result.json: allowed_changes.precision: missing, though inputs/job.yaml says `--allow precision` "
            "changed its precision") in out


def test_a_record_without_the_requested_settings_cannot_be_re_run(precision: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        del doc["allowed_changes"]["precision"]["requested_settings"]

    code, out = verify(forged(precision, tmp_path, edit))
    assert code == 1
    assert ("result.json: allowed_changes.precision: requested_settings recorded None, not a mapping of precision, "
            "fp8_recipe, fp8_param_gather (a run written before it was recorded cannot be re-run)") in out


def test_precision_and_pipeline_changes_both_keep_their_note_and_verify(tmp_path: Path) -> None:
    # with both allowed, fp8 is chosen under the job's own first/last 3 (6,300 -> 8,149), then both options
    # unset at fp8 (12,384); the job file says all three changes tune made
    run = _tune(tmp_path, L8_FIRST_LAST_3, "--allow", "precision", "--allow", "pipeline", "--stack", "megatron-lm")
    head = (run / "inputs" / "job.yaml").read_text().splitlines(keepends=True)[:3]
    assert head == ["# stack set by `primus tune --stack megatron-lm`\n", PRECISION_CHANGED_NOTE,
                    PIPELINE_CHANGED_NOTE]
    allowed = json.loads((run / "result.json").read_text())["allowed_changes"]
    assert allowed["precision"]["chosen"] == "fp8"
    assert [round(t["tokens_per_s_per_gpu"]) for t in allowed["pipeline"]["per_option_set"]] == [8149, 12382, 12382]
    code, out = verify(run)
    assert code == 0, out


def test_a_job_file_taken_from_a_run_drops_that_runs_notes(precision: Path, tmp_path: Path) -> None:
    # tuning the fp8 job file the run wrote, without --allow precision: nothing was changed this time, so the
    # note is not carried over (audit verify would ask for the record of trials that never ran)
    text = (precision / "inputs" / "job.yaml").read_text()
    assert text.startswith(PRECISION_CHANGED_NOTE)
    again = _tune(tmp_path, text)
    assert (again / "inputs" / "job.yaml").read_text() == text.removeprefix(PRECISION_CHANGED_NOTE)
    code, out = verify(again)
    assert code == 0, out
