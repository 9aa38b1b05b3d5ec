"""torchtitan splits the layers over its pipeline stages itself, and needs no divisibility (review of the
importers: a valid torchtitan PP 4 config was "DOES NOT FIT ... pipeline-split", because its
first/last_stage_less_layers were read as Megatron's embedding and loss accounting, which needs
(layers + 2) % (PP x VP) == 0).

- pytorch/torchtitan b5bcd76 torchtitan/distributed/pipeline_parallel.py `_generate_llm_fqn_per_model_part`
  (the algorithm of #1103, 2025-04-15): Llama 3 8B's 32 layers plus the embedding and the output (1 each)
  are 34 effective layers over 4 stages: 9, 9, 8, 8 of them, so 8, 9, 8 and 7 decoder layers;
- 9dec370 (2024-12-26) torchtitan/parallelisms/pipelining_utils.py `generate_split_points`: the decoder layers
  alone, L // S each and the middle stages one more while L % S lasts: 10 layers over 4 stages are 2, 3, 3, 2.
"""

from __future__ import annotations

from pathlib import Path

from primus.job import job_from_mapping
from primus.memory.evaluate import MemoryModel, pinned_layout
from primus.schedule.torchtitan_split import layers_per_stage, torchtitan_counts, torchtitan_layout

PP4 = """[model]
name = "llama3"
flavor = "8B"
[training]
local_batch_size = 8
global_batch_size = 32
seq_len = 8192
[parallelism]
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
pipeline_parallel_degree = 4
pipeline_parallel_schedule = "1F1B"
pipeline_parallel_microbatch_size = 1
pipeline_parallel_first_stage_less_layers = 1
pipeline_parallel_last_stage_less_layers = 1
[compile]
enable = true
components = ["model", "loss"]
[activation_checkpoint]
mode = "full"
"""


def test_the_weighted_split_gives_the_first_stages_the_remainder() -> None:
    assert torchtitan_counts("torchtitan_weighted", 32, 4) == [8, 9, 8, 7]
    assert torchtitan_layout("torchtitan_weighted", 32, 4, 1) == "Et*8|t*9|t*8|t*7L"


def test_the_2024_split_gives_the_middle_stages_the_remainder() -> None:
    assert torchtitan_counts("torchtitan_layers", 10, 4) == [2, 3, 3, 2]


def test_torchtitan_refuses_more_stages_than_layers_and_a_weight_above_the_share() -> None:
    assert torchtitan_counts("torchtitan_layers", 4, 8) is None
    assert torchtitan_counts("torchtitan_weighted", 2, 4, first=2) is None  # 6 effective, 1 each: weight 2


def test_a_torchtitan_pp4_config_fits_with_torchtitans_split(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "llama3_8b.toml"
    path.write_text(PP4)
    code, out, err = run_cli("fit", "--from", "torchtitan", str(path), "--hardware", "h100-80gb", "--nodes", "2")
    assert code == 0, err
    assert "FITS: TP1 PP4" in out


def test_the_ledger_holds_torchtitans_layers_per_stage() -> None:
    job = job_from_mapping({"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 8192,
                            "global_batch_size": 32, "framework": "torchtitan", "stack": "torchtitan@2026.08",
                            "pipeline": {"account_for_embedding_in_pipeline_split": True,
                                         "account_for_loss_in_pipeline_split": True},
                            "parallel": {"tp": 1, "pp": 4, "vp": 1, "cp": 1, "mbs": 1, "recompute": "full",
                                         "sharding": "fsdp"}}, "j")
    stages = MemoryModel(job).evaluate(pinned_layout(job), strict=False).stages
    layer = 218_112_000  # one Llama 3.1 8B decoder layer's parameters
    assert [s.params for s in stages][1:3] == [9 * layer, 8 * layer]


def test_an_interleaved_export_writes_layers_per_stage_only_beyond_two_stages_per_rank() -> None:
    assert layers_per_stage(34, 8) is None  # ceil(34 / 5) = 7 stages, not 8
    assert layers_per_stage(40, 8) == 5


def test_an_export_writes_the_weights_the_evaluated_split_used(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # review of the change: a torchtitan@2026.08 job with no `pipeline` section is split with torchtitan's defaults
    # (1 and 1: 8|9|8|7 at PP 4), but the export wrote 0 and 0, which torchtitan splits 8|8|8|8
    job = {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 8192, "global_batch_size": 32,
           "framework": "torchtitan", "stack": "torchtitan@2026.08",
           "parallel": {"tp": 1, "pp": 4, "vp": 1, "cp": 1, "mbs": 1, "recompute": "full", "sharding": "fsdp"}}
    code, out, _ = run_cli("export", write_job(job), "--to", "torchtitan")
    assert code == 0
    assert "pipeline_parallel_first_stage_less_layers = 1" in out
    assert "pipeline_parallel_last_stage_less_layers = 1" in out


def test_zero_weights_a_file_states_select_the_weighted_split(tmp_path: Path) -> None:
    # first/last_stage_less_layers exist only in the weighted split: 0 and 0 over 3 stages of 32 layers are
    # 11|11|10 (the first stages take the remainder), not the 2024 split's 10|11|11
    from primus.launch import load_launch_job

    path = tmp_path / "pp3.toml"
    path.write_text(PP4.replace("pipeline_parallel_degree = 4", "pipeline_parallel_degree = 3")
                    .replace("global_batch_size = 32", "global_batch_size = 64")
                    .replace("first_stage_less_layers = 1", "first_stage_less_layers = 0")
                    .replace("last_stage_less_layers = 1", "last_stage_less_layers = 0"))
    job, _ = load_launch_job("torchtitan", path, hardware="h100-80gb", gpus=24)
    assert job.pipeline_at(3, 1).layout == "Et*11|t*11|t*10L"
