"""`fit`, `memory` and `project` with ``--from KIND FILE``: when the answer is bad input, stderr holds
exactly that one line (the import record, its unmodelled options and notes, is printed only with an
answer); with an answer, the record comes first, as before."""

from __future__ import annotations

from pathlib import Path

import pytest

# A Megatron-LM launch line written here: FP8 (hybrid, tensorwise), with one option primus does not model
SCRIPT = """#!/bin/bash
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \\
    --group-query-attention --num-query-groups 8 --vocab-size 128256 --swiglu --normalization RMSNorm \\
    --disable-bias-linear --position-embedding-type rope --untie-embeddings-and-output-weights \\
    --seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 128 \\
    --bf16 --fp8-format hybrid --fp8-recipe tensorwise --tensor-model-parallel-size 2 --sequence-parallel \\
    --use-distributed-optimizer --foo-bar 3
"""


@pytest.mark.parametrize("command", ["fit", "memory", "project"])
def test_an_fp8_launch_file_on_a100_is_one_line_and_exit_2(run_cli, tmp_path: Path, command: str) -> None:  # type: ignore[no-untyped-def]
    # the A100 has no fp8 peak in hardware/ (NVIDIA A100 datasheet: no FP8 Tensor Core format)
    path = tmp_path / "t5.sh"
    path.write_text(SCRIPT)
    code, out, err = run_cli(command, "--from", "megatron", str(path), "--hardware", "a100-80gb")
    assert (code, out) == (2, "") and len(err.splitlines()) == 1
    assert "precision: a100-80gb cannot run fp8 GEMMs" in err


def test_with_an_answer_the_import_record_is_still_printed(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "t5.sh"
    path.write_text(SCRIPT)
    code, _, err = run_cli("fit", "--from", "megatron", str(path), "--hardware", "h100-80gb")
    assert code in (0, 1) and "unmodelled: --foo-bar 3" in err
