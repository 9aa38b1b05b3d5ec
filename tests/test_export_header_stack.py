"""An exported file's `# primus-job:` header describes the job the file runs, and its import proves that job.

A Megatron-LM argument line is run by Megatron-LM's pretrain_gpt.py, a Primus experiment by AMD Primus and
a torchtitan config by torchtitan, whatever stack the job was written for; settings a framework does not
have (AMD Primus-Turbo's sync-free MoE, turbo_sync_free_moe_stage; torchtitan's eager loss) are not run
by another, and each change is said on stderr. Jobs are the review's (llama3.1-70b on torchtitan with
selective recompute; DeepSeek-V2-Lite on AMD Primus with sync-free MoE).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from primus.cli.main import cli

TORCHTITAN_JOB = """stack: torchtitan
model: llama3.1-70b
hardware: h100-80gb
nodes: 8
seq_len: 8192
global_batch_size: 256
precision: fp8
fp8_recipe: tensorwise
parallel: {tp: 8, pp: 2, vp: 2, cp: 1, mbs: 1, sp: true, recompute: selective, sharding: fsdp}
"""
SYNC_FREE_JOB = """stack: primus
model: deepseek-v2-lite
hardware: mi300x
nodes: 1
seq_len: 4096
global_batch_size: 256
precision: bf16
parallel: {tp: 1, pp: 1, vp: 1, cp: 1, ep: 8, etp: 1, mbs: 4, sp: false, recompute: none, sharding: dist_opt}
moe: {sync_free: true}
"""


def _export(tmp_path: Path, job: str, kind: str) -> tuple[Path, dict[str, object], str]:
    """`primus export job.yaml --to KIND --out FILE`: the file, its header and stderr."""
    (tmp_path / "job.yaml").write_text(job)
    out = tmp_path / f"launch.{kind}"
    result = CliRunner().invoke(cli, ["export", str(tmp_path / "job.yaml"), "--to", kind, "--out", str(out)])
    assert result.exit_code == 0, result.output
    line = next(x for x in out.read_text().splitlines() if "primus-job:" in x)
    return out, json.loads(line.split("primus-job:", 1)[1]), result.stderr


def _peak(args: list[str]) -> str:
    result = CliRunner().invoke(cli, ["fit", *args, "--format", "json"])
    assert result.exit_code == 0, result.output
    return str(json.loads(result.stdout)["peak_bytes"])


@pytest.mark.parametrize(("kind", "runner"), [("megatron", "megatron-lm"), ("primus", "primus")])
def test_a_torchtitan_job_exported_to_megatron_is_headed_as_the_framework_that_runs_it(
        tmp_path: Path, kind: str, runner: str) -> None:
    _, header, stderr = _export(tmp_path, TORCHTITAN_JOB, kind)
    assert str(header["stack"]).split("@")[0] == runner
    assert "not torchtitan@2026.08" in stderr


def test_the_megatron_file_proves_as_megatron_lm(tmp_path: Path) -> None:
    # the review: `fit --from megatron` gave torchtitan's activations (30.90 GiB) from the header's stack,
    # while the same file on megatron-lm gives 40.07 GiB; the header now names megatron-lm itself
    path, _, _ = _export(tmp_path, TORCHTITAN_JOB, "megatron")
    as_headed = _peak(["--from", "megatron", str(path)])
    assert as_headed == _peak(["--from", "megatron", str(path), "--stack", "megatron-lm"])


def test_a_megatron_export_drops_sync_free_moe_from_the_launched_job(tmp_path: Path) -> None:
    # Megatron-LM has no sync-free MoE: the header must not ask `project --from megatron` to model it
    _, header, stderr = _export(tmp_path, SYNC_FREE_JOB, "megatron")
    assert "moe" not in header
    assert "moe.sync_free dropped" in stderr


def test_a_primus_export_keeps_sync_free_moe_as_its_stage(tmp_path: Path) -> None:
    # AMD Primus launches it (turbo_sync_free_moe_stage 2): nothing is dropped, the stack stays primus
    path, header, stderr = _export(tmp_path, SYNC_FREE_JOB.replace("sync_free: true",
                                                                  "sync_free: true, token_dispatcher: flex"), "primus")
    assert "turbo_sync_free_moe_stage: 2" in path.read_text()
    assert str(header["stack"]).startswith("primus@") and "dropped" not in stderr


def test_a_torchtitan_export_of_a_megatron_job_is_headed_torchtitan(tmp_path: Path) -> None:
    job = TORCHTITAN_JOB.replace("stack: torchtitan", "stack: megatron-lm")
    path, header, _ = _export(tmp_path, job, "torchtitan")
    assert str(header["stack"]).startswith("torchtitan@")
    result = CliRunner().invoke(cli, ["import", "--from", "torchtitan", str(path)])
    assert result.exit_code == 0, result.output
    assert "stack: torchtitan@" in result.stdout


def test_a_megatron_export_drops_torchtitans_eager_loss(tmp_path: Path) -> None:
    # torchtitan@2024.12 ran the loss eagerly over fp32 logits (stacks/torchtitan.yaml, before pytorch/torchtitan
    # #1033); Megatron-LM runs its vocab-parallel cross-entropy, so the launched job has no eager loss
    job = TORCHTITAN_JOB.replace("stack: torchtitan", "stack: torchtitan@2024.12").replace(
        "precision: fp8\nfp8_recipe: tensorwise", "precision: bf16").replace("pp: 2, vp: 2", "pp: 1, vp: 1")
    path, _, stderr = _export(tmp_path, job, "megatron")
    assert "kernels.eager_cross_entropy dropped" in stderr
    result = CliRunner().invoke(cli, ["import", "--from", "megatron", str(path)])
    assert result.exit_code == 0, result.output
    assert "eager_cross_entropy" not in result.stdout and "stack: megatron-lm@" in result.stdout
