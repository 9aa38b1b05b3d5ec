"""Input a hostile review of `primus fit` found misreported (review 01, items 8, 9, 15 and 19): through
the CLI, bad input is one line naming the job file and the field as the user wrote it (exit 2), and the
answers' wording holds for the model asked about."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from primus.job import job_from_mapping
from primus.solver.ruleset import largest_checked_world

BASE = {"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 4096, "global_batch_size": 64,
        "precision": "bf16"}


def _job(tmp_path: Path, data: dict, name: str = "job.yaml") -> str:  # type: ignore[type-arg]
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def _line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err[:2000]
    return lines[0]


def test_a_malformed_pipeline_layout_is_bad_input_naming_the_field_not_a_refused_split(run_cli, tmp_path):
    job = _job(tmp_path, {**BASE, "pipeline": {"layout": "E'$(id)'t|t"}, "parallel": {"pp": 2}}, "lay.yaml")
    code, out, err = run_cli("fit", job)
    assert code == 2 and out == ""
    assert _line(err).startswith(f"primus: {job}: pipeline.layout: unexpected character \"'\"")
    assert "pipeline-split" not in err


def test_a_gpu_count_past_the_solvers_integer_range_is_refused_on_gpus_with_the_size_that_is_answered(
        run_cli, tmp_path):
    job = _job(tmp_path, {**BASE, "gpus": 999_992}, "big.yaml")
    code, _, err = run_cli("fit", job)
    line = _line(err)
    assert code == 2
    assert line.startswith(f"primus: {job}: gpus: 999,992 GPUs is beyond the sizes the solver checks exactly")
    # 513,799³ × (32 layers + 2) ≤ 2^62 < 513,800³ × 34; 513,792 is the largest whole number of 8-GPU nodes
    assert line.endswith("any size up to 513,792 GPUs is within range")
    assert 513_799 ** 3 * 34 <= 2 ** 62 < 513_800 ** 3 * 34


def test_the_largest_checked_size_is_answered_not_refused(run_cli, tmp_path):
    job = job_from_mapping(BASE, "job.yaml")
    limit = largest_checked_world(job) // 8 * 8
    path = _job(tmp_path, {**BASE, "gpus": limit}, "edge.yaml")
    code, out, err = run_cli("fit", path, "--format", "json")
    assert code in (0, 1) and err == ""
    assert "fits" in json.loads(out)


def test_a_dense_models_distributed_optimizer_names_no_expert_data_parallel_group(run_cli, tmp_path):
    job = _job(tmp_path, {"model": "llama3.1-70b", "hardware": "h100-80gb", "nodes": 8, "seq_len": 8192,
                          "global_batch_size": 128, "precision": "bf16",
                          "parallel": {"tp": 8, "pp": 4, "vp": 1, "cp": 1, "dp": 2, "mbs": 1, "sp": True,
                                       "recompute": "none", "sharding": "dist_opt"}})
    _, out, _ = run_cli("memory", job)
    line = next(x for x in out.splitlines() if "distributed optimizer" in x)
    assert "sharded over DP×CP = 2" in line and "expert" not in line


def test_a_moe_models_distributed_optimizer_names_both_groups(run_cli, tmp_path):
    job = _job(tmp_path, {"model": "mixtral-8x7b", "hardware": "h100-80gb", "nodes": 4, "seq_len": 4096,
                          "global_batch_size": 256, "precision": "bf16",
                          "parallel": {"tp": 2, "pp": 4, "vp": 1, "cp": 1, "ep": 4, "etp": 1, "mbs": 1, "sp": True,
                                       "recompute": "full", "sharding": "dist_opt"}})
    _, out, _ = run_cli("memory", job)
    line = next(x for x in out.splitlines() if "distributed optimizer" in x)
    assert "DP×CP = 4 (dense) and expert-DP = 2 (experts)" in line


def test_a_model_given_as_a_list_names_the_model_field_and_what_it_accepts(run_cli, tmp_path):
    job = _job(tmp_path, {**BASE, "model": [1, 2]}, "mlist.yaml")
    code, _, err = run_cli("fit", job)
    assert code == 2
    assert _line(err) == f"primus: {job}: model: must be a string or a mapping, got a list"


def test_a_hugging_face_config_value_is_refused_under_the_files_own_key(run_cli, tmp_path):
    config = tmp_path / "zero.json"
    config.write_text(json.dumps({"model_type": "llama", "hidden_size": 512, "intermediate_size": 1376,
                                  "num_hidden_layers": 0, "num_attention_heads": 8, "num_key_value_heads": 2,
                                  "vocab_size": 32000, "max_position_embeddings": 2048}))
    job = _job(tmp_path, {**BASE, "model": str(config)})
    code, _, err = run_cli("fit", job)
    assert code == 2
    assert _line(err) == f"primus: {config}: num_hidden_layers: Input should be greater than or equal to 1 (got 0)"


def test_a_vp_of_a_million_is_refused_by_the_split_without_building_its_schedule(run_cli, tmp_path, monkeypatch):
    # review 49, H1: `parallel: {vp: 1048576}` built a pipeline schedule of PP x VP x M operations (7.8 GB,
    # MemoryError) before any rule refused it. Megatron needs at least one layer per virtual stage, so the
    # ledger's estimate of a split Megatron refuses never has more chunks than layers.
    import primus.schedule.pipeline as pipeline

    built = pipeline._cached_schedule

    def guarded(pp: int, vp: int, m: int, kind: str):  # type: ignore[no-untyped-def]
        assert pp * vp <= 32, (pp, vp)  # llama3.1-8b has 32 layers
        return built(pp, vp, m, kind)

    monkeypatch.setattr(pipeline, "_cached_schedule", guarded)
    job = _job(tmp_path, {**BASE, "parallel": {"vp": 1048576}}, "vp.yaml")
    code, out, err = run_cli("fit", job, "--format", "json")
    doc = json.loads(out)
    assert code == 1 and doc["fits"] is False and doc["violated_rules"] == ["pipeline-split", "pin:vp"], err[:2000]
