"""Megatron's `--attention-backend` on the user's path: flash and fused (Transformer Engine's flash-attn and
cuDNN backends) are timed as any flash attention, and kept so that the line exports back as it was written.

Sources: NVIDIA/Megatron-LM core_v0.11.0 arguments.py adds `--attention-backend` (choices from
megatron/core/transformer/enums.py AttnBackend: flash, fused, unfused, local, auto); before it the
argument does not exist (`primus.stacks.megatron_release.OPTION_WINDOWS`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from primus.errors import InputError
from primus.job import job_from_mapping
from primus.launch import import_launch
from primus.launch.megatron import export_megatron
from primus.launch.target import on_target_stack
from primus.memory.evaluate import pinned_layout

LINE = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
        "--group-query-attention --num-query-groups 8 --kv-channels 128 --max-position-embeddings 8192 "
        "--position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights "
        "--disable-bias-linear --attention-dropout 0.0 --hidden-dropout 0.0 --vocab-size 128256 --bf16 "
        "--seq-length 8192 --micro-batch-size 1 --global-batch-size 64 --tensor-model-parallel-size 1 "
        "--pipeline-model-parallel-size 1 --use-distributed-optimizer")


def _import(tmp_path: Path, extra: str) -> dict[str, object]:
    path = tmp_path / "train.sh"
    path.write_text(LINE + extra + "\n")
    return import_launch("megatron", path, hardware="h100-80gb", gpus=8).job


@pytest.mark.parametrize("backend", ["flash", "fused"])
def test_a_stated_flash_backend_round_trips(tmp_path: Path, backend: str) -> None:
    job_map = _import(tmp_path, f" --attention-backend {backend}")
    assert job_map["kernels"]["flash_attention"] is True  # type: ignore[index]
    assert job_map["kernels"]["attention_backend"] == backend  # type: ignore[index]
    job = job_from_mapping(job_map, "train.sh")
    assert f"--attention-backend {backend}" in export_megatron(job, pinned_layout(job)).text


def test_auto_and_use_flash_attn_leave_the_choice_to_megatron(tmp_path: Path) -> None:
    assert "attention_backend" not in _import(tmp_path, "")["kernels"]  # type: ignore[operator]
    assert "attention_backend" not in _import(tmp_path, " --use-flash-attn")["kernels"]  # type: ignore[operator]


def test_a_backend_without_flash_attention_is_bad_input() -> None:
    with pytest.raises(InputError, match="attention_backend fused is a flash attention backend"):
        job_from_mapping({"model": "llama3-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 8192,
                          "global_batch_size": 64,
                          "kernels": {"flash_attention": False, "attention_backend": "fused"}}, "job.yaml")


def test_a_release_before_the_argument_refuses_the_backend_naming_the_field(tmp_path: Path) -> None:
    job_map = {**_import(tmp_path, " --attention-backend fused"), "stack": "megatron-lm@core_v0.10.0"}
    job = job_from_mapping(job_map, "job.yaml")
    with pytest.raises(InputError) as exc:
        export_megatron(job, pinned_layout(job))
    assert exc.value.field == "kernels.attention_backend"


def test_torchtitan_drops_megatrons_backend_with_a_note(tmp_path: Path) -> None:
    job = job_from_mapping(_import(tmp_path, " --attention-backend fused"), "train.sh")
    moved, notes = on_target_stack(job, "torchtitan")
    assert moved.spec.kernels.attention_backend == "auto"
    assert any("kernels.attention_backend dropped" in n for n in notes)


def test_a_backend_on_a_framework_other_than_megatron_is_bad_input() -> None:
    with pytest.raises(InputError, match="Megatron's --attention-backend") as exc:
        job_from_mapping({"stack": "torchtitan", "model": "llama3-8b", "hardware": "h100-80gb", "gpus": 8,
                          "seq_len": 8192, "global_batch_size": 64, "kernels": {"attention_backend": "flash"}},
                         "job.yaml")
    assert exc.value.field == "kernels.attention_backend"
