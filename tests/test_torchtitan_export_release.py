"""`export --to torchtitan` writes the keys of the job's torchtitan release (review item 10): a job on
`torchtitan@2024.12` gets the JobConfig of pytorch/torchtitan 9dec370 (2024-12-26, the commit that
release describes): `training.batch_size` (renamed by #1238, 2025-06-05), the degrees under
`[training]`/`[experimental]` (moved by #980, 2025-03-18), `training.compile` (#1608 made it `[compile]`)
and `[float8] enable_float8_linear` (#823 replaced it, 2025-02-15). Exported and imported again, with or
without the `# primus-job:` header, the job is the same, on the same release."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import pytest

from primus.job import job_from_mapping
from primus.launch import export_job, import_launch
from primus.launch.arch import differences

BASE: dict[str, Any] = {"stack": "torchtitan@2024.12", "model": "llama3.1-8b", "hardware": "h100-80gb",
                        "seq_len": 8192, "framework": "torchtitan"}
JOBS: dict[str, dict[str, Any]] = {
    # the review's job: FSDP over 8, micro-batch 2, full recompute
    "fsdp": {**BASE, "gpus": 8, "global_batch_size": 16,
             "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "dp": 8, "mbs": 2, "sp": False,
                          "recompute": "full", "sharding": "fsdp"}},
    # TP 2 with sequence parallel and async TP, float8 with delayed scaling, op-level selective checkpointing
    "tp-fp8-delayed": {**BASE, "gpus": 16, "global_batch_size": 8, "precision": "fp8", "fp8_recipe": "delayed",
                       "overlap": {"tp_comm": True},
                       "parallel": {"tp": 2, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "dp": 8, "mbs": 1,
                                    "sp": True, "recompute": "selective", "sharding": "fsdp"}},
    # PP 2 interleaved (2 stages per rank: the default split points), 4 microbatches, float8 tensorwise
    "pp-interleaved": {**BASE, "gpus": 16, "global_batch_size": 32, "precision": "fp8", "fp8_recipe": "tensorwise",
                       "parallel": {"tp": 1, "pp": 2, "vp": 2, "cp": 1, "ep": 1, "etp": 1, "dp": 8, "mbs": 1,
                                    "sp": False, "recompute": "full", "sharding": "fsdp"}},
}


def _export(name: str) -> tuple[Any, str]:
    job = job_from_mapping(JOBS[name], name)
    return job, export_job(job, "torchtitan").text


def test_a_2024_job_is_written_in_the_keys_of_december_2024() -> None:
    _, text = _export("fsdp")
    doc = tomllib.loads(text)
    assert doc["training"] == {"batch_size": 2, "seq_len": 8192, "data_parallel_replicate_degree": 1,
                               "data_parallel_shard_degree": 8, "tensor_parallel_degree": 1, "compile": True}
    assert doc["experimental"] == {"pipeline_parallel_degree": 1, "context_parallel_degree": 1}
    assert "compile" not in doc and "parallelism" not in doc  # [compile]: #1608; [parallelism]: #980
    assert "pytorch/torchtitan 9dec370" in text and "v0.2" not in text
    assert "train.py --job.config_file" in text  # run_llama_train.sh at 9dec370


def test_2024_float8_is_the_enable_switch_with_its_scaling() -> None:
    doc = tomllib.loads(_export("tp-fp8-delayed")[1])
    assert doc["float8"] == {"enable_float8_linear": True, "scaling_type_input": "delayed",
                             "scaling_type_weight": "delayed", "scaling_type_grad_output": "delayed"}
    assert "converters" not in doc["model"] and doc["experimental"]["enable_async_tensor_parallel"] is True


def test_2024_pipeline_is_a_microbatch_count_under_experimental() -> None:
    doc = tomllib.loads(_export("pp-interleaved")[1])
    assert doc["training"]["batch_size"] == 4  # global 32 over DP 8
    assert doc["experimental"] == {"pipeline_parallel_degree": 2, "context_parallel_degree": 1,
                                   "pipeline_parallel_schedule": "Interleaved1F1B",
                                   "pipeline_parallel_microbatches": 4}


@pytest.mark.parametrize("name", list(JOBS))
@pytest.mark.parametrize("header", [True, False])
def test_a_2024_export_imports_back_as_the_same_job_on_the_same_release(name: str, header: bool,
                                                                        tmp_path: Path) -> None:
    job, text = _export(name)
    if not header:
        text = "\n".join(line for line in text.splitlines() if "primus-job" not in line)
    path = tmp_path / "train.toml"
    path.write_text(text)
    config = import_launch("torchtitan", path, **({} if header else {"hardware": "h100-80gb",
                                                                       "gpus": job.num_gpus}))
    assert config.unmodelled == ()
    back = job_from_mapping(config.job, str(path), tmp_path)
    assert back.resolved_stack.label == "torchtitan@2024.12"  # the keys date the file, header or not
    a, b = job.spec.model_dump(exclude={"stack", "model"}), back.spec.model_dump(exclude={"stack", "model"})
    assert {k: (a[k], b[k]) for k in a if a[k] != b[k]} == {}
    assert differences(back.model, job.model) == []


@pytest.mark.parametrize(("over", "message"), [
    ({"global_batch_size": 64}, "has no gradient accumulation"),  # micro-batch 2 x DP 8 is 16
    ({"model": "qwen3-30b-a3b", "gpus": 64, "global_batch_size": 128, "parallel": {
        **JOBS["fsdp"]["parallel"], "dp": 64, "ep": 8}}, "has no expert parallelism"),
    ({"precision": "fp8", "fp8_recipe": "blockwise"}, "rowwise came with pytorch/torchtitan #808"),
])
def test_what_torchtitan_2024_could_not_run_is_one_line_and_exit_2(run_cli, write_job, over: dict[str, Any],
                                                                  message: str) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("export", write_job({**JOBS["fsdp"], **over}), "--to", "torchtitan")
    assert (code, out, err.count("\n")) == (2, "", 1) and message in err


def test_a_later_release_keeps_the_v0_2_keys(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("export", write_job({**JOBS["fsdp"], "stack": "torchtitan@2025.04"}), "--to",
                           "torchtitan")
    doc = tomllib.loads(out)
    assert code == 0 and doc["training"]["local_batch_size"] == 2 and doc["compile"]["enable"] is True
