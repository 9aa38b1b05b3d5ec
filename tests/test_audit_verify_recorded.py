"""`primus audit verify` re-checks every claim of `result.json` the report shows (review 49, H2, H3, M1-M4):
the job, the error bar, the best's every field, the reference's numbers, origin and claim, the speed-up, why
the best wins and the mode; and it names what it does not re-check.

Each forgery is consistent (result.json edited, the report re-rendered, both lists of sums rewritten), as
someone hiding the edit would make it. The case: Llama 3.1 8B on 1 node of H100, seq 8192, global batch 64,
its own pins (TP2 with SP, ZeRO-2) the reference: 2,537 legal layouts, all scored (exhaustive)."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from primus.cli.main import cli
from primus.report.manifest import write_manifest
from primus.report.render import write_report

JOB = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 8192, "global_batch_size": 64,
       "precision": "bf16", "parallel": {"tp": 2, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "mbs": 1, "sp": True,
                                         "recompute": "none", "sharding": "zero2"}}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("recorded")
    job = root / "job.yaml"
    job.write_text(yaml.safe_dump(JOB, sort_keys=False))
    out = root / "run"
    result = CliRunner().invoke(cli, ["tune", str(job), "--llm", "none", "--out", str(out), "--format", "json",
                                      "--workers", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return out


def verify(path: Path) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["audit", "verify", str(path), "--workers", "1"], catch_exceptions=False)
    return result.exit_code, result.stdout


def forged(run: Path, tmp_path: Path, edit: Callable[[dict[str, Any]], None],
           inputs: Callable[[Path], None] | None = None) -> Path:
    """A copy of `run` with result.json (and, given `inputs`, files of inputs/) edited, its report re-rendered
    and both lists of sums rewritten."""
    copy = tmp_path / "forged"
    shutil.copytree(run, copy)
    doc = json.loads((copy / "result.json").read_text())
    edit(doc)
    (copy / "result.json").write_text(json.dumps(doc, indent=1) + "\n")
    if inputs is not None:
        inputs(copy / "inputs")
        sums = copy / "inputs" / "SHA256SUMS"
        names = [line.split()[1] for line in sums.read_text().splitlines()]
        sums.write_text("".join(f"{hashlib.sha256((copy / 'inputs' / n).read_bytes()).hexdigest()}  {n}\n"
                                for n in names))
    write_report(copy)
    write_manifest(copy)
    return copy


def test_an_untouched_run_verifies_and_names_what_it_does_not_recheck(run: Path) -> None:
    code, out = verify(run)
    assert code == 0, out
    assert "verified: 2,544 candidates and the claims of result.json" in out
    assert "not re-checked: the events' texts" in out


@pytest.mark.parametrize(("field", "value", "named"), [
    (("speedup_vs_reference",), 1.27, "result.json: speedup_vs_reference recorded 1.27"),
    (("reference", "tokens_per_s_per_gpu"), 3000.0, "result.json: reference.tokens_per_s_per_gpu recorded 3000.0"),
    (("reference", "origin"), "measured on our cluster", "result.json: reference.origin recorded"),
    (("reference", "claim"), {"gain_pct": 27, "source": "a paper"}, "result.json: reference.claim recorded"),
    (("best", "model_tflops_per_gpu"), 1500.0, "result.json: best.model_tflops_per_gpu recorded 1500.0"),
    (("best", "tight"), False, "result.json: best.tight recorded False"),
    (("uncertainty_pct",), 0.05, "result.json: uncertainty_pct recorded 0.05"),
    (("assumptions",), [], "result.json: assumptions recorded []"),
    (("job", "model"), "llama3.1-405b", "result.json: job.model recorded 'llama3.1-405b'"),
    (("job_spec", "global_batch_size"), 32, "result.json: job_spec.global_batch_size recorded 32"),
    (("mode",), "guided", "result.json: mode recorded 'guided', but 2,537 legal layouts"),
    (("exhaustive_limit",), None, "result.json: exhaustive_limit recorded None, not an integer"),
    (("llm", "calls"), 3, "result.json: llm.calls recorded 3, but llm/ holds 0"),
])
def test_a_forged_claim_fails_naming_the_field(run: Path, tmp_path: Path, field: tuple[str, ...], value: Any,
                                               named: str) -> None:
    def edit(doc: dict[str, Any]) -> None:
        where = doc
        for key in field[:-1]:
            where = where[key]
        where[field[-1]] = value

    code, out = verify(forged(run, tmp_path, edit))
    assert code == 1
    assert named in out


def test_a_forged_why_row_fails(run: Path, tmp_path: Path) -> None:
    def edit(doc: dict[str, Any]) -> None:
        doc["why"][0]["reference_s"] = 9.0

    code, out = verify(forged(run, tmp_path, edit))
    assert code == 1
    assert "result.json: why recorded" in out


def test_the_reports_question_comes_from_the_recorded_inputs(run: Path, tmp_path: Path) -> None:
    copy = forged(run, tmp_path, lambda doc: doc["job"].update(model="llama3.1-405b", gpus=1024))
    text = (copy / "report.md").read_text()
    assert "llama3.1-405b" not in text
    assert "llama3.1-8b" in text


def test_export_refuses_a_job_spec_that_differs_from_the_inputs(run: Path, tmp_path: Path) -> None:
    copy = forged(run, tmp_path, lambda doc: doc["job_spec"].update(global_batch_size=32))
    result = CliRunner().invoke(cli, ["export", "--from-tune", str(copy / "result.json"), "--to", "megatron"])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "job_spec.global_batch_size recorded 32" in result.stderr


def test_a_relabelled_built_in_rule_fails(run: Path, tmp_path: Path) -> None:
    def weaken(inputs: Path) -> None:
        doc = yaml.safe_load((inputs / "rules.yaml").read_text())
        memory = next(r for r in doc["rules"] if r["id"] == "memory")
        memory["require"] = "peak_bytes <= hbm_bytes"
        (inputs / "rules.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))

    code, out = verify(forged(run, tmp_path, lambda doc: None, weaken))
    assert code == 1
    assert "inputs/rules.yaml: built-in rule 'memory' require recorded 'peak_bytes <= hbm_bytes'" in out


def test_hardware_differing_from_the_catalog_entry_it_is_named_after_fails(run: Path, tmp_path: Path) -> None:
    def bigger(inputs: Path) -> None:
        doc = yaml.safe_load((inputs / "hardware.yaml").read_text())
        doc["accelerator"]["hbm_bytes"] = 200 * 10**9
        (inputs / "hardware.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))

    code, out = verify(forged(run, tmp_path, lambda doc: None, bigger))
    assert code == 1
    assert ("inputs/hardware.yaml: accelerator.hbm_bytes recorded 200000000000, the catalog's 'h100-80gb' has "
            "85029158912") in out


def test_a_precision_changed_by_allow_precision_is_said_on_stdout_and_in_the_report(tmp_path: Path) -> None:
    """Review 49, M7: bf16 → fp8 changes numerics (Megatron --fp8-format), so it is said in words, with the
    best of each precision tried, and the question no longer says the precision is fixed."""
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({k: v for k, v in JOB.items() if k != "parallel"}, sort_keys=False))
    result = CliRunner().invoke(cli, ["tune", str(job), "--llm", "none", "--allow", "precision", "--out",
                                      str(tmp_path / "run"), "--workers", "1"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    said = "precision changed by --allow precision: bf16 → fp8 (numerics change); best tokens/s/GPU of each"
    assert said in result.stdout
    report = (tmp_path / "run" / "report.md").read_text()
    assert said in report
    assert "precision are fixed" not in report
