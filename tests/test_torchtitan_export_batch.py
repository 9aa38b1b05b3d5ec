"""The torchtitan@2026.08 launch line runs the job's global batch, micro-batch and pipeline microbatching.

pytorch/torchtitan b5bcd76 (the commit torchtitan@2026.08 describes) counts the batch in tokens since
#4121 (73aed7f, "fold batch dim"): torchtitan/trainer.py takes one accumulation step as
num_tokens_per_microbatch_per_dp_rank × num_pp_microbatches (PP only) × DP tokens, the step as
num_tokens_per_train_step (default: one accumulation step), and gradient accumulation as their ratio.
#4121 removed parallelism.pipeline_parallel_microbatch_size; tests/unit_tests/test_no_new_cli_options.py
lists the options b5bcd76's command line accepts.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from primus.cli.main import cli
from primus.launch.torchtitan import import_torchtitan_registry
from primus.launch.torchtitan_cli import CLI_OPTIONS

REGISTRY = Path(__file__).parent / "data" / "launch" / "torchtitan_registry"
JOB = """stack: torchtitan
model: llama3.1-70b
hardware: h100-80gb
nodes: 8
seq_len: 8192
global_batch_size: 256
precision: bf16
parallel: {{tp: 8, pp: {pp}, vp: {vp}, cp: 1, mbs: {mbs}, sp: true, recompute: selective, sharding: fsdp}}
"""


def _launch(tmp_path: Path, pp: int, vp: int = 1, mbs: int = 1, stack: str = "torchtitan") -> list[str]:
    """What a user types: `primus export job.yaml --to torchtitan`; the launch line's tokens after --config."""
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(pp=pp, vp=vp, mbs=mbs).replace("stack: torchtitan", f"stack: {stack}"))
    result = CliRunner().invoke(cli, ["export", str(job), "--to", "torchtitan"])
    assert result.exit_code == 0, result.output
    line = next(x for x in result.stdout.splitlines() if "-m torchtitan.train --module" in x)
    tokens = shlex.split(line.split(": ", 1)[1])
    return tokens[tokens.index("--config") + 2:]


def _options(tokens: list[str]) -> dict[str, str | bool]:
    out: dict[str, str | bool] = {}
    for i, token in enumerate(tokens):
        if token.startswith("--"):
            following = tokens[i + 1] if i + 1 < len(tokens) else "--"
            out[token[2:]] = True if following.startswith("--") else following
    return out


def test_without_pipeline_the_step_holds_the_global_batch(tmp_path: Path) -> None:
    # GBS 256 at DP 8, MBS 1: the step is 256 x 8192 tokens; trainer.py then accumulates 256 / 8 = 32 steps
    # (without num_tokens_per_train_step it would run one, a global batch of 8)
    options = _options(_launch(tmp_path, pp=1))
    assert options["training.num_tokens_per_microbatch_per_dp_rank"] == "8192"
    assert options["training.num_tokens_per_train_step"] == str(256 * 8192)
    assert "parallelism.num_pp_microbatches" not in options


def test_under_pipeline_all_microbatches_run_in_one_schedule(tmp_path: Path) -> None:
    # PP 2, DP 4, MBS 2: M = 256 / (2 x 4) = 32 microbatches of 2 x 8192 tokens, one accumulation step
    options = _options(_launch(tmp_path, pp=2, mbs=2))
    assert options["training.num_tokens_per_microbatch_per_dp_rank"] == str(2 * 8192)
    assert options["parallelism.num_pp_microbatches"] == "32"
    assert options["training.num_tokens_per_train_step"] == str(256 * 8192)


def test_the_removed_microbatch_size_option_is_not_written(tmp_path: Path) -> None:
    # #4121 (73aed7f) replaced parallelism.pipeline_parallel_microbatch_size by num_pp_microbatches
    options = _options(_launch(tmp_path, pp=2, vp=2))
    assert "parallelism.pipeline_parallel_microbatch_size" not in options


def test_every_option_written_is_one_torchtitan_b5bcd76_accepts(tmp_path: Path) -> None:
    # b5bcd76 tests/unit_tests/test_no_new_cli_options.py: the frozen command line
    options = _options(_launch(tmp_path, pp=2, vp=2))
    assert set(options) <= CLI_OPTIONS


@pytest.mark.parametrize(("pp", "vp", "mbs"), [(1, 1, 1), (1, 1, 2), (2, 1, 1), (2, 2, 2)])
def test_the_launch_line_imports_back_as_the_same_job(tmp_path: Path, pp: int, vp: int, mbs: int) -> None:
    # the overrides applied to the registry's llama3_70b, as tyro applies --section.option over the config
    # function's Trainer.Config (torchtitan/config/manager.py), read back by `import --config-registry`
    tokens = _launch(tmp_path, pp=pp, vp=vp, mbs=mbs)
    tree = tmp_path / "torchtitan_registry"
    shutil.copytree(REGISTRY, tree)
    registry = tree / "torchtitan" / "models" / "llama3" / "config_registry.py"
    body = "".join(f"    config.{k} = {_typed(v)!r}\n" for k, v in _options(tokens).items())
    with registry.open("a") as f:
        f.write(f"\n\ndef exported() -> Trainer.Config:\n    config = llama3_70b()\n{body}    return config\n")
    job = import_torchtitan_registry(registry, "exported", hardware="h100-80gb", nodes=8).job
    par = job["parallel"]
    assert (job["global_batch_size"], job["seq_len"]) == (256, 8192)
    assert (par["mbs"], par["pp"], par["vp"], par["dp"], par["tp"]) == (mbs, pp, vp, 64 // (8 * pp), 8)


def _typed(value: str | bool) -> object:
    if isinstance(value, bool):
        return value
    return int(value) if value.isdigit() else value


def test_an_older_release_keeps_its_toml_batch(tmp_path: Path) -> None:
    # torchtitan@2025.04 (v0.2 TOML): local_batch_size is the DP rank's batch, split under PP into
    # pipeline_parallel_microbatch_size microbatches; the registry form is a comment at b5bcd76
    job = tmp_path / "job.yaml"
    job.write_text(JOB.format(pp=2, vp=1, mbs=2).replace("stack: torchtitan", "stack: torchtitan@2025.04"))
    result = CliRunner().invoke(cli, ["export", str(job), "--to", "torchtitan"])
    assert result.exit_code == 0, result.output
    assert "local_batch_size = 64" in result.stdout and "pipeline_parallel_microbatch_size = 2" in result.stdout
    assert "#   at b5bcd76: -m torchtitan.train" in result.stdout
