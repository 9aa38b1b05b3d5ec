"""Specification: `project` and `tune` state the tight verdict `fit` and `memory` give (docs/memory.md).

Llama 3.1 8B on 8 x H100 80GB, TP1 DP8 MBS2 ZeRO-2, GBS 32 x seq 4096 (review 48, finding 2): the
ledger's peak is 70.47 GiB of 73.50 GiB usable, so the headroom (3.03 GiB) is less than the allocator
reserve (6% of 78.19 GiB = 4.69 GiB) and `fit` says TIGHT; `project` and `tune` used to say "fits"."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from click.testing import CliRunner

from primus import api
from primus.cli.project_cmd import project_cmd
from primus.cli.solver_cmds import fit_cmd
from primus.report.context import _tight
from primus.tuning.result import _entry

JOB = {
    "model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 32,
    "precision": "bf16",
    "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "mbs": 2, "sp": False, "recompute": "none",
                 "sharding": "zero2"},
}
VERDICT_KEYS = ("verdict", "tight", "tight_by_bytes", "allocator_reserve_bytes", "over_hbm")


def _job(tmp_path: Path) -> str:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(JOB))
    return str(path)


def test_project_json_carries_fits_verdict_fields(tmp_path: Path) -> None:
    job = _job(tmp_path)
    proj = json.loads(CliRunner().invoke(project_cmd, [job, "--format", "json"]).output)
    fit = json.loads(CliRunner().invoke(fit_cmd, [job, "--format", "json"]).output)
    assert proj["verdict"] == "tight" and proj["tight"] is True
    assert {k: proj[k] for k in VERDICT_KEYS} == {k: fit[k] for k in VERDICT_KEYS}


def test_project_table_says_tight_in_fits_words(tmp_path: Path) -> None:
    out = CliRunner().invoke(project_cmd, [_job(tmp_path)]).output
    assert ("peak memory 70.47 GiB of 73.50 GiB capacity: fits, but TIGHT: headroom 3.03 GiB is less than the "
            "allocator reserve 4.69 GiB") in out


def test_tune_result_entry_and_report_say_tight() -> None:
    p = api.project(JOB).projection
    assert p is not None
    entry = _entry(p, None, True, [])
    assert entry["verdict"] == "tight" and entry["tight_by_bytes"] == p.verdict_fields["tight_by_bytes"] > 0
    assert _tight(entry) == "headroom 3.03 GiB is less than the allocator reserve 4.69 GiB"


def test_roomy_layout_is_not_tight() -> None:
    p = api.project({**JOB, "parallel": {**JOB["parallel"], "mbs": 1}}).projection  # type: ignore[dict-item]
    assert p is not None and p.verdict_fields["verdict"] == "fits" and not p.tight
    assert _tight(_entry(p, None, True, [])) is None
