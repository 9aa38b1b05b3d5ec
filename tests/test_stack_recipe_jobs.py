"""A job file that names a stack and pins a workload preset's split takes the preset's settings, as `validate`
takes them for the published run (DESIGN-NOTES §7: "the same data that `validate` uses").

gpt-oss-120b in BF16 on 64 GB200 at TP1 PP1 CP1 EP64 MBS4, GBS 1280, Megatron-Bridge 26.04: the preset
GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2 (v0.4.0 scripts/performance/configs/gpt_oss/
gpt_oss_workload_base_configs.py) recomputes ['layernorm', 'moe_act'], overlaps the MoE all-to-all and runs
HybridEP (the flex dispatcher); NVIDIA's table measures 15,938 tokens/s/GPU for it (MB26.04-DGX-GB200-GPT-OSS-
120B-BF16, docs/performance-summary-archive.md at 4ab94df)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from primus.fidelity.jobs import build, published_job
from primus.fidelity.runs import read_runs
from primus.job import job_from_mapping
from primus.memory.evaluate import pinned_layout
from primus.projection import project

ROOT = Path(__file__).resolve().parent.parent
HELDOUT = ROOT / "primus" / "fidelity" / "data" / "heldout_bridge.csv"
RUN = "MB26.04-DGX-GB200-GPT-OSS-120B-BF16"
JOB: dict[str, Any] = {"stack": "megatron-bridge@26.04", "model": "gpt-oss-120b", "hardware": "gb200", "gpus": 64,
                       "seq_len": 4096, "global_batch_size": 1280, "precision": "bf16",
                       "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": 64, "mbs": 4}}


def _job(**changes: Any) -> Any:
    return job_from_mapping({**JOB, **changes}, "job.yaml")


def test_a_job_pinning_the_presets_split_takes_its_settings() -> None:
    spec = _job().spec
    assert spec.overlap.moe_a2a and spec.moe.token_dispatcher == "flex"
    assert spec.parallel.recompute == "selective" and spec.parallel.recompute_modules == ("layernorm", "moe_act")


def test_each_setting_taken_is_named_with_the_recipe() -> None:
    assumed = _job().assumed
    assert "overlap.moe_a2a (True from the stack's recipe)" in assumed
    assert "moe.token_dispatcher (flex from the stack's recipe)" in assumed
    assert any(a.startswith("recipe (") and "GPT_OSS_120B_PRETRAIN_CONFIG_GB200_BF16_V2" in a for a in assumed)


def test_the_job_file_projects_what_validate_projects_for_the_run() -> None:
    row = next(r for r in read_runs(HELDOUT) if r.run_id == RUN)
    typed = job_from_mapping(published_job(row), RUN)
    harness = build(row).project
    layout = pinned_layout(harness)  # the job file leaves etp and sharding to the search; the run states them
    assert project(typed, layout).step_time_s == project(harness, layout).step_time_s


def test_what_the_job_states_wins_over_the_recipe() -> None:
    spec = _job(overlap={"moe_a2a": False}, moe={"token_dispatcher": "alltoall"},
                parallel={**JOB["parallel"], "recompute": "none"}).spec
    assert not spec.overlap.moe_a2a and spec.moe.token_dispatcher == "alltoall"
    assert spec.parallel.recompute == "none" and spec.parallel.recompute_modules is None


def test_a_job_that_leaves_the_split_free_takes_no_recipe() -> None:
    job = _job(parallel={"ep": 64, "mbs": 4})
    assert not any(a.startswith("recipe (") for a in job.assumed)
    assert not job.spec.overlap.moe_a2a and job.spec.moe.token_dispatcher == "alltoall"


def test_another_release_takes_its_own_preset() -> None:
    # 26.02 (v0.3.0): the same preset recomputes the same modules but neither overlaps nor applies HybridEP
    spec = _job(stack="megatron-bridge@26.02").spec
    assert spec.parallel.recompute_modules == ("layernorm", "moe_act")
    assert not spec.overlap.moe_a2a and spec.moe.token_dispatcher == "alltoall"


def test_job_show_lists_the_recipe(run_cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(JOB))
    code, out, _ = run_cli("job", "show", str(path), "--format", "json")
    assert code == 0
    assumed = json.loads(out)["assumed"]
    assert any("from the stack's recipe" in a for a in assumed)
