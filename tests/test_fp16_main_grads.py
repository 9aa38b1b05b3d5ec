"""Megatron keeps fp16 gradients under --fp16: it accumulates and reduces them in fp32 only for --bf16
(NVIDIA/Megatron-LM core_v0.15.0 megatron/training/arguments.py lines 733-745 set accumulate_allreduce_grads_in_fp32
under args.bf16 alone; megatron/core/distributed/distributed_data_parallel.py line 168: grad_dtype = torch.float
if grad_reduce_in_fp32 else param.dtype), unless --accumulate-allreduce-grads-in-fp32 is given.

Mixtral 8x7B at TP2 PP4 VP2 EP4 on 64 H100: stage 0 holds 3,052,208,128 parameters, so its main gradients are
6,104,416,256 B in fp16 (12,208,832,512 B in fp32)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MIXTRAL_FP16: dict[str, Any] = {
    "model": "mixtral-8x7b", "hardware": "h100-80gb", "gpus": 64, "seq_len": 4096, "global_batch_size": 256,
    "precision": "fp16",
    "parallel": {"tp": 2, "pp": 4, "vp": 2, "cp": 1, "ep": 4, "etp": 1, "mbs": 1, "sp": True,
                 "recompute": "selective", "sharding": "dist_opt"}}


def _stage0(run_cli, write_job, job: dict[str, Any]) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("memory", write_job(job), "--format", "json")
    assert code in (0, 1), err
    doc = json.loads(out)
    return next(s for s in doc["stages"] if s["stage"] == 0)


def test_fp16_gradients_are_two_bytes_a_parameter(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    stage = _stage0(run_cli, write_job, MIXTRAL_FP16)
    assert stage["params"] == 3_052_208_128
    assert stage["terms"]["gradients.main_grads"] == 6_104_416_256


def test_fp32_accumulation_is_four_bytes_when_the_job_asks(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    stage = _stage0(run_cli, write_job, {**MIXTRAL_FP16, "optimizer": {"main_grads_dtype": "fp32"}})
    assert stage["terms"]["gradients.main_grads"] == 12_208_832_512


def test_import_and_export_carry_the_accumulation_flag(run_cli, write_job, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    for grads, flag in (("fp16", False), ("fp32", True)):
        code, out, err = run_cli("export", write_job({**MIXTRAL_FP16, "optimizer": {"main_grads_dtype": grads}}),
                                 "--to", "megatron")
        assert code == 0, err
        assert ("--accumulate-allreduce-grads-in-fp32" in out.split()) is flag and "--fp16" in out.split()
        script = tmp_path / f"{grads}.sh"
        script.write_text(out)
        back = tmp_path / f"{grads}.yaml"
        code, _, err = run_cli("import", "--from", "megatron", str(script), "--out", str(back))
        assert code == 0, err
        assert f"main_grads_dtype: {grads}" in back.read_text()


def test_bf16_gradients_under_fp16_are_refused_on_export(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    path = write_job({**MIXTRAL_FP16, "optimizer": {"main_grads_dtype": "bf16"}})
    code, out, err = run_cli("export", path, "--to", "megatron")
    assert (code, out) == (2, "")
    assert "optimizer.main_grads_dtype: bf16 with precision fp16 is not a Megatron-LM choice" in err


def test_the_2022_papers_stack_keeps_their_fp32_all_reduce(run_cli, write_job) -> None:  # type: ignore[no-untyped-def]
    # stacks/megatron-lm.yaml 2022.05: arXiv:2104.04473's fp16 runs all-reduce gradients in fp32
    # (--accumulate-allreduce-grads-in-fp32), the setting main_grads_dtype_fp16 states
    old = _stage0(run_cli, write_job, {**MIXTRAL_FP16, "stack": "megatron-lm@2022.05"})
    assert old["terms"]["gradients.main_grads"] == 2 * 6_104_416_256
