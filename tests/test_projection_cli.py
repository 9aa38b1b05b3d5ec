"""Specification of `primus project JOB.yaml`: the JSON contract, the table, and the exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from primus.cli.project_cmd import project_cmd
from primus.projection.profile import profile_path

JOB = {
    "model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 4096, "global_batch_size": 32,
    "precision": "bf16", "parallel": {"tp": 2, "pp": 1, "cp": 1, "sp": True, "sharding": "dist_opt"},
}


def write(tmp_path: Path, data: dict[str, object]) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_json_output_carries_the_contract(tmp_path: Path) -> None:
    result = CliRunner().invoke(project_cmd, [write(tmp_path, JOB), "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    for key in ("parallel", "step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "peak_bytes",
                "breakdown", "hidden", "sources", "assumptions", "completion"):
        assert key in doc
    assert doc["parallel"]["tp"] == 2 and "mbs" in doc["parallel"] and "recompute" in doc["parallel"]
    assert sum(doc["breakdown"].values()) == doc["step_time_s"] or \
        abs(sum(doc["breakdown"].values()) - doc["step_time_s"]) < 1e-9 * doc["step_time_s"]
    assert set(doc["sources"].values()) <= {"modelled", "measured"}
    assert "completed" in doc["completion"]


def test_table_output_explains_itself(tmp_path: Path) -> None:
    result = CliRunner().invoke(project_cmd, [write(tmp_path, JOB)])
    assert result.exit_code == 0, result.output
    for text in ("step time", "tokens/s/GPU", "MFU", "gemm", "bubble", "total", "assumptions", "completion",
                 "recompute not counted"):
        assert text in result.output


def test_nothing_fits_exits_1_with_the_reason(tmp_path: Path) -> None:
    data = dict(JOB, model="llama3.1-405b", parallel={"tp": 8, "pp": 1, "cp": 1, "mbs": 1, "sp": True,
                                                       "recompute": "none", "sharding": "none"})
    result = CliRunner().invoke(project_cmd, [write(tmp_path, data), "--format", "json"])
    assert result.exit_code == 1
    doc = json.loads(result.output)
    assert doc["fits"] is False and "GiB" in doc["reason"]


def test_a_profile_for_other_hardware_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(project_cmd, [write(tmp_path, JOB), "--profile", str(profile_path("mi300x"))])
    assert result.exit_code == 2
    assert "profile is for 'mi300x'" in result.output


def test_an_explicit_profile_is_used(tmp_path: Path) -> None:
    prof = yaml.safe_load(Path(profile_path("h100-80gb")).read_text())
    prof["gemm"]["bf16"]["efficiency"]["value"] = 0.4
    path = tmp_path / "slow.yaml"
    path.write_text(yaml.safe_dump(prof))
    job = write(tmp_path, JOB)
    fast = json.loads(CliRunner().invoke(project_cmd, [job, "--format", "json"]).output)
    slow = json.loads(CliRunner().invoke(project_cmd, [job, "--format", "json", "--profile", str(path)]).output)
    assert slow["step_time_s"] > fast["step_time_s"]


def test_a_pinned_layout_that_does_not_fit_is_still_projected_with_exit_1(tmp_path: Path) -> None:
    """The DGX Cloud Llama 3 70B FP8 recipe as published (the ledger finds it above capacity)."""
    from tests.test_projection_project import DGX_JOB, DGX_STEP_S

    result = CliRunner().invoke(project_cmd, [write(tmp_path, DGX_JOB), "--format", "json"])
    assert result.exit_code == 1
    doc = json.loads(result.output)
    assert doc["fits"] is False and "capacity" in doc["reason"]
    assert abs(doc["step_time_s"] / DGX_STEP_S - 1) < 0.25
