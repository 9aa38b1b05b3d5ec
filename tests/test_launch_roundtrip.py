"""Issue 9, parts 2-3: export then import gives the same job, for all three launch formats.

"Same" is the strongest check available: the validated JobSpec (every default applied) is equal
field by field, so the model, hardware, GPU count, convergence settings (sequence, global batch,
precision) and the complete parallel mapping all come back. Each case is also re-imported with the
`# primus-job:` header stripped (hardware and size given on the command line, as for a file written
by hand): then the architecture options alone must lead back to the same model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from primus.cli.launch_cmds import export_cmd, import_cmd
from primus.job import Job, job_from_mapping, load_job
from primus.launch import export_job, import_launch
from primus.launch.api import launchable
from primus.launch.arch import differences

FULL = {"recompute": "full"}

MEGATRON_JOBS: dict[str, dict[str, Any]] = {
    # dense, interleaved (VP 5), sequence parallel, TP comm overlap
    "dense-vp-sp": {"model": "llama3.1-70b", "hardware": "h100-80gb", "nodes": 8, "seq_len": 8192,
                    "global_batch_size": 128,
                    "parallel": {"tp": 8, "pp": 4, "vp": 5, "cp": 1, "ep": 1, "etp": 1, "dp": 2, "mbs": 1,
                                 "sp": True, "recompute": "selective", "sharding": "dist_opt"},
                    "overlap": {"tp_comm": True}},
    # MoE with EP and ETP folding, capacity factor, fp8, block recompute of 4 layers
    "moe-ep-etp": {"model": "mixtral-8x7b", "hardware": "h100-80gb", "nodes": 4, "seq_len": 4096,
                   "global_batch_size": 256, "precision": "fp8", "fp8_recipe": "blockwise",
                   "parallel": {"tp": 2, "pp": 2, "vp": 1, "cp": 1, "ep": 8, "etp": 1, "dp": 8, "mbs": 1,
                                "sp": True, **FULL, "recompute_method": "block", "recompute_num_layers": 4,
                                "sharding": "dist_opt"},
                   "moe": {"token_dispatcher": "alltoall", "capacity_factor": 1.25, "imbalance": 1.5}},
    # MLA + MTP + first-k-dense MoE, uneven pipeline, precision-aware optimizer, flex dispatcher, gpus:
    "mla-uneven-pp": {"model": "deepseek-v3", "hardware": "h100-80gb", "gpus": 1024, "seq_len": 4096,
                      "global_batch_size": 8192,
                      "parallel": {"tp": 2, "pp": 8, "vp": 1, "cp": 1, "ep": 64, "etp": 1, "dp": 64, "mbs": 1,
                                   "sp": True, **FULL, "recompute_method": "uniform", "recompute_num_layers": 1,
                                   "sharding": "dist_opt"},
                      "pipeline": {"decoder_first_pipeline_num_layers": 5, "decoder_last_pipeline_num_layers": 8},
                      "optimizer": {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"},
                      "moe": {"token_dispatcher": "flex"}},
    # full recompute in groups of 2 layers, CP, unfused attention, bf16 gradients, no sharding
    "full-recompute-n": {"model": "llama3.1-8b", "hardware": "mi300x", "nodes": 2, "seq_len": 8192,
                         "global_batch_size": 64,
                         "parallel": {"tp": 1, "pp": 2, "vp": 1, "cp": 2, "ep": 1, "etp": 1, "dp": 4, "mbs": 2,
                                      "sp": False, **FULL, "recompute_method": "uniform",
                                      "recompute_num_layers": 2, "sharding": "none"},
                         "kernels": {"flash_attention": False, "cross_entropy_fusion": True},
                         "optimizer": {"main_grads_dtype": "bf16"}},
    # FSDP (Megatron FSDP in the line, torch FSDP2 in Primus, as Primus's published configs do)
    "fsdp": {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 8192, "global_batch_size": 32,
             "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "dp": 8, "mbs": 1, "sp": False,
                          "recompute": "selective", "sharding": "fsdp"}},
    # ZeRO-2 and a pipeline layout string
    "zero2-layout": {"model": "llama3-8b", "hardware": "b200", "nodes": 2, "seq_len": 4096, "global_batch_size": 64,
                     "parallel": {"tp": 2, "pp": 4, "vp": 2, "cp": 1, "ep": 1, "etp": 1, "dp": 2, "mbs": 1,
                                  "sp": True, "recompute": "none", "sharding": "zero2"},
                     "pipeline": {"layout": "Ettt|(tttt|)*6tttttL"}},
}

TORCHTITAN_JOBS: dict[str, dict[str, Any]] = {
    "fsdp": {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 8192, "global_batch_size": 64,
             "framework": "torchtitan",
             "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "dp": 16, "mbs": 2, "sp": False,
                          "recompute": "selective", "sharding": "fsdp"}},
    "tp-pp-vp-fp8": {"model": "llama3-70b", "hardware": "h100-80gb", "nodes": 8, "seq_len": 8192,
                     "global_batch_size": 128, "framework": "torchtitan", "precision": "fp8",
                     "fp8_recipe": "tensorwise",
                     "parallel": {"tp": 8, "pp": 4, "vp": 2, "cp": 1, "ep": 1, "etp": 1, "dp": 2, "mbs": 1,
                                  "sp": True, **FULL, "sharding": "fsdp"}},
    "pp-accounted-bf16-state": {"model": "llama3-8b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 8192,
                                "global_batch_size": 64, "framework": "torchtitan",
                                "optimizer": {k: "bf16" for k in ("main_grads_dtype", "main_params_dtype",
                                                                  "exp_avg_dtype", "exp_avg_sq_dtype")},
                                "parallel": {"tp": 2, "pp": 2, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "dp": 4,
                                             "mbs": 2, "sp": True, "recompute": "none", "sharding": "fsdp"},
                                "pipeline": {"account_for_embedding_in_pipeline_split": True,
                                             "account_for_loss_in_pipeline_split": True}},
    "moe-ep-block": {"model": "qwen3-30b-a3b", "hardware": "h100-80gb", "nodes": 4, "seq_len": 4096,
                     "global_batch_size": 128, "framework": "torchtitan",
                     "parallel": {"tp": 2, "pp": 1, "vp": 1, "cp": 2, "ep": 8, "etp": 1, "dp": 8, "mbs": 1,
                                  "sp": True, **FULL, "recompute_method": "block", "recompute_num_layers": 24,
                                  "sharding": "fsdp"},
                     "moe": {"imbalance": 1.2}},
}

CASES = [(kind, name) for kind in ("megatron", "primus") for name in MEGATRON_JOBS] + \
    [("torchtitan", name) for name in TORCHTITAN_JOBS]


def _job(kind: str, name: str) -> Job:
    data = (TORCHTITAN_JOBS if kind == "torchtitan" else MEGATRON_JOBS)[name]
    return job_from_mapping(data, f"{kind}:{name}")


def _assert_same(original: Job, back: Job) -> None:
    a, b = original.spec.model_dump(exclude={"stack"}), back.spec.model_dump(exclude={"stack"})
    assert {k: (a[k], b[k]) for k in a if a[k] != b[k]} == {}
    assert original.resolved_stack.label == back.resolved_stack.label  # the stack travels too
    assert back.num_gpus == original.num_gpus
    assert back.cluster == original.cluster
    assert differences(back.model, original.model) == []


@pytest.mark.parametrize(("kind", "name"), CASES)
def test_export_then_import_gives_the_same_job(kind: str, name: str, tmp_path: Path) -> None:
    job = launchable(_job(kind, name), kind)[0]  # on the target's stack: the job the file runs
    exported = export_job(job, kind)
    path = tmp_path / f"{name}.cfg"
    path.write_text(exported.text)
    config = import_launch(kind, path)
    assert config.unmodelled == ()  # nothing primus wrote is foreign to it
    if kind == "primus" and job.spec.parallel.sharding == "fsdp" and job.spec.overlap.param_gather:
        # Primus writes torch FSDP2, with which its Megatron refuses overlap_param_gather ("only supported
        # with distributed optimizer, megatron fsdp, or dist_muon"): the export drops it, with a note
        assert any("overlap.param_gather dropped" in n for n in exported.notes)
        data = job.spec.model_dump(mode="json", exclude_none=True)
        data["overlap"]["param_gather"] = False
        job = job_from_mapping(data, job.where)
    _assert_same(job, job_from_mapping(config.job, str(path), tmp_path))


@pytest.mark.parametrize(("kind", "name"), CASES)
def test_the_options_alone_lead_back_to_the_model(kind: str, name: str, tmp_path: Path) -> None:
    job = _job(kind, name)
    text = "\n".join(line for line in export_job(job, kind).text.splitlines() if "primus-job" not in line)
    path = tmp_path / f"{name}.cfg"
    path.write_text(text)
    config = import_launch(kind, path, hardware=str(job.spec.hardware), gpus=job.num_gpus)
    back = job_from_mapping(config.job, str(path), tmp_path)
    assert differences(back.model, job.model) == []
    assert back.num_gpus == job.num_gpus
    assert back.spec.parallel.pinned() == {**job.spec.parallel.pinned()}
    assert (back.spec.seq_len, back.spec.global_batch_size, back.spec.precision) == \
        (job.spec.seq_len, job.spec.global_batch_size, job.spec.precision)


def test_catalog_models_round_trip_by_name_through_megatron_options(tmp_path: Path) -> None:
    # llama3-8b and llama3.1-8b differ only in max_position_embeddings: the options must tell them apart
    for model in ("llama3-8b", "llama3.1-8b", "gpt3-175b", "qwen3-235b-a22b", "kimi-k2", "nemotron4-340b"):
        job = job_from_mapping({"model": model, "hardware": "h100-80gb", "nodes": 64, "seq_len": 2048,
                                "global_batch_size": 2048,
                                "parallel": {"tp": 8, "pp": 8, "vp": 1, "cp": 1, "ep": 8, "etp": 1, "mbs": 1,
                                             "sp": True, "recompute": "full", "sharding": "dist_opt"}}, model)
        text = "\n".join(line for line in export_job(job, "megatron").text.splitlines() if "primus-job" not in line)
        path = tmp_path / f"{model}.sh"
        path.write_text(text)
        assert import_launch("megatron", path, hardware="h100-80gb").job["model"] == model


def test_cli_export_then_import_round_trips(tmp_path: Path, write_job: Any) -> None:
    runner = CliRunner()
    job_file = write_job(MEGATRON_JOBS["dense-vp-sp"])
    for kind in ("megatron", "primus"):
        out = tmp_path / f"launch.{kind}"
        result = runner.invoke(export_cmd, [job_file, "--to", kind, "--out", str(out)])
        assert result.exit_code == 0, result.output
        job_out = tmp_path / f"job-{kind}.yaml"
        result = runner.invoke(import_cmd, ["--from", kind, str(out), "--out", str(job_out)])
        assert result.exit_code == 0, result.output
        _assert_same(launchable(load_job(job_file), kind)[0], load_job(job_out))
        assert yaml.safe_load(job_out.read_text())["parallel"]["vp"] == 5


@pytest.mark.parametrize(("kind", "runner"), [("megatron", "megatron-lm@core_v0.12.0"), ("primus", "primus@26.1")])
def test_what_the_stack_supplied_stays_with_the_stack_the_file_runs_on(kind: str, runner: str, tmp_path: Path) -> None:
    # nemo@25.04 supplies its optimizer, overlap, kernels and MoE settings and the rule `stack-sharding`;
    # the exported file runs on Megatron-LM (the core_v0.12.0 NeMo v2.3.0 pins, stacks/nemo.yaml) or AMD Primus,
    # so its header names that stack, and nemo's settings come back neither as the user's own keys nor as the
    # stack's
    data = {"stack": "nemo@25.04", "model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 8192,
            "global_batch_size": 128, "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "recompute": "full",
                                                   "sharding": "dist_opt"}}
    job = job_from_mapping(data, "job.yaml")
    exported = export_job(job, kind)
    header = next(line for line in exported.text.splitlines() if "primus-job:" in line)
    assert f'"stack": "{runner}"' in header
    assert "stack-sharding" not in header and '"moe"' not in header
    path = tmp_path / "launch.cfg"
    path.write_text(exported.text)
    back = job_from_mapping(import_launch(kind, path).job, str(path), tmp_path)
    assert back.resolved_stack.asked == runner
    assert "stack-sharding" not in [r["id"] for r in back.spec.rules]
