"""`import --from torchtitan` dates a TOML by the keys it uses and sets the `torchtitan@YYYY.MM` stack
release it ran on (issue 15). The fixtures are written here in the shape of each JobConfig era; the
dates are the pytorch/torchtitan merges that renamed, removed or added the keys (#980 2025-03-18,
#1238 2025-06-05, #1608 2025-08-20, #1701 2025-09-26, #1763 2025-09-30)."""

from __future__ import annotations

import json
from pathlib import Path

from primus.job import job_from_mapping

MODEL = '[model]\nname = "llama3"\nflavor = "8B"\n'
# early 2025: batch size and parallel degrees under [training], the loss compiled with the model flag
EARLY_2025 = MODEL + """
[training]
batch_size = 2
seq_len = 8192
tensor_parallel_degree = 1
data_parallel_shard_degree = -1
compile = true
"""
# mid 2025 (v0.1 line): [parallelism] and local/global batch, still training.compile and [float8]
MID_2025 = MODEL + """
[training]
local_batch_size = 2
seq_len = 8192
compile = true

[parallelism]
data_parallel_shard_degree = -1

[float8]
enable_fsdp_float8_all_gather = true
"""
# v0.2 line: [compile] with components, [quantize.linear.float8]
V02 = MODEL + """
[training]
local_batch_size = 2
seq_len = 8192

[parallelism]
data_parallel_shard_degree = -1

[compile]
enable = true
components = ["model", "loss"]

[quantize.linear.float8]
recipe_name = "tensorwise"
"""
UNDATED = MODEL + "\n[training]\nseq_len = 8192\n"
CONTRADICTORY = MODEL + '\n[training]\nbatch_size = 2\nseq_len = 8192\n\n[compile]\nenable = true\n'


def _import(run_cli, tmp_path: Path, text: str) -> tuple[int, dict, str]:  # type: ignore[no-untyped-def]
    path = tmp_path / "train.toml"
    path.write_text(text)
    code, out, err = run_cli("import", "--from", "torchtitan", str(path), "--hardware", "h100-80gb", "--nodes", "1",
                             "--format", "json")
    return code, (json.loads(out) if code == 0 else {}), err


def test_an_early_2025_file_runs_on_the_release_with_the_eager_loss(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, doc, _ = _import(run_cli, tmp_path, EARLY_2025)
    assert code == 0 and doc["job"]["stack"] == "torchtitan@2024.12"
    assert any("training.tensor_parallel_degree" in n and "2025-03-18" in n for n in doc["notes"])
    # before pytorch/torchtitan PR #1033 only the blocks were compiled: the stack gives the eager loss
    job = job_from_mapping(doc["job"], "imported")
    assert "kernels" not in doc["job"] and "kernels" in job.assumed and job.spec.kernels.eager_cross_entropy


def test_a_file_that_still_uses_training_compile_is_dated_before_its_move(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # training.compile until 2025-08-20: the newest described release not after 2025.08 is 2025.04
    code, doc, _ = _import(run_cli, tmp_path, MID_2025)
    assert code == 0 and doc["job"]["stack"] == "torchtitan@2025.04"
    assert any("training.compile" in n and "2025-08-20" in n for n in doc["notes"])
    assert not job_from_mapping(doc["job"], "imported").spec.kernels.eager_cross_entropy


def test_a_v0_2_file_gets_the_newest_release_and_says_which_key_allows_it(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, doc, _ = _import(run_cli, tmp_path, V02)
    assert code == 0 and doc["job"]["stack"] == "torchtitan@2025.04"
    assert any("quantize.linear" in n and "since 2025-09-30" in n for n in doc["notes"])


def test_a_toml_no_key_dates_is_dated_before_torchtitan_dropped_tomls(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # pytorch/torchtitan #2386 (9810191, 2026-02-23) replaced the TOML files by Python config registries:
    # the newest described release before that is 2025.04, not 2026.08
    code, doc, _ = _import(run_cli, tmp_path, UNDATED)
    assert code == 0 and doc["job"]["stack"] == "torchtitan@2025.04"
    assert any("no key that dates it more closely" in n and "2026-02-23" in n for n in doc["notes"])


def test_a_registry_config_runs_on_the_newest_release() -> None:
    from primus.launch.torchtitan import import_torchtitan_registry

    registry = Path(__file__).parent / "data" / "launch" / "torchtitan_registry" / "torchtitan" / "models" / \
        "llama3" / "config_registry.py"
    config = import_torchtitan_registry(registry, "llama3_70b", hardware="h100-80gb", nodes=8)
    assert config.job["stack"] == "torchtitan@2026.08"
    assert any("config_registry.py function" in n and "#2386" in n for n in config.notes)


def test_keys_that_never_coexisted_are_one_line_and_exit_2(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, _, err = _import(run_cli, tmp_path, CONTRADICTORY)
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "training.batch_size" in err and "compile" in err and "never coexisted" in err


# late 2024 (the shape of train_configs/llama3_8b.toml at pytorch/torchtitan 9dec370): Float8 switched on by
# [float8] enable_float8_linear (#496, 2024-07-30, until #823 of 2025-02-15), parallel degrees under [training]
LATE_2024_FP8 = MODEL + """
[training]
batch_size = 2
seq_len = 8192
data_parallel_shard_degree = -1
tensor_parallel_degree = 1
compile = true

[float8]
enable_float8_linear = true
"""


def test_a_2024_float8_switch_imports_as_fp8_with_tensorwise_scaling(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # torchao's Float8Linear of that time scaled dynamically per tensor unless a scaling type said delayed
    code, doc, _ = _import(run_cli, tmp_path, LATE_2024_FP8)
    assert code == 0 and (doc["job"]["precision"], doc["job"]["fp8_recipe"]) == ("fp8", "tensorwise")
    assert not any("enable_float8_linear" in u for u in doc["unmodelled"])
    assert doc["job"]["stack"] == "torchtitan@2024.12"
    assert any("float8.enable_float8_linear" in n and "2025-02-15" in n for n in doc["notes"])


def test_a_2024_delayed_scaling_type_imports_as_the_delayed_recipe(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    text = LATE_2024_FP8 + 'scaling_type_input = "delayed"\nscaling_type_weight = "delayed"\n' \
        'scaling_type_grad_output = "delayed"\n'
    code, doc, _ = _import(run_cli, tmp_path, text)
    assert code == 0 and (doc["job"]["precision"], doc["job"]["fp8_recipe"]) == ("fp8", "delayed")
    # #812 (2025-01-31) deleted delayed scaling: the file is dated before it
    assert any("float8.scaling_type" in n and "2025-01-31" in n for n in doc["notes"])


def test_the_july_2024_training_switch_imports_as_fp8(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    text = EARLY_2025 + "enable_float8_linear = true\n"  # training.enable_float8_linear (#466 .. #496)
    code, doc, _ = _import(run_cli, tmp_path, text)
    assert code == 0 and doc["job"]["precision"] == "fp8" and doc["job"]["stack"] == "torchtitan@2024.12"
    # July 2024 is before every described release: the note says the oldest is used, not "not after"
    assert any("older than every described release, so the oldest, torchtitan@2024.12" in n for n in doc["notes"])


def test_a_float8_switch_that_is_off_imports_as_bf16(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, doc, _ = _import(run_cli, tmp_path, LATE_2024_FP8.replace("enable_float8_linear = true",
                                                                     "enable_float8_linear = false"))
    assert code == 0 and doc["job"]["precision"] == "bf16" and "fp8_recipe" not in doc["job"]


def test_a_float8_switch_beside_parallelism_is_one_line_and_exit_2(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # [parallelism] arrived with #980 (2025-03-18), a month after #823 removed enable_float8_linear
    text = MODEL + "\n[training]\nbatch_size = 2\nseq_len = 8192\n\n[parallelism]\ndata_parallel_shard_degree = -1\n" \
        "\n[float8]\nenable_float8_linear = true\n"
    code, _, err = _import(run_cli, tmp_path, text)
    assert code == 2 and len(err.strip().splitlines()) == 1 and "never coexisted" in err


def test_a_float8_switch_that_is_not_a_boolean_is_exit_2(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, _, err = _import(run_cli, tmp_path, LATE_2024_FP8.replace("enable_float8_linear = true",
                                                                     'enable_float8_linear = "yes"'))
    assert code == 2 and len(err.strip().splitlines()) == 1 and "float8.enable_float8_linear" in err
