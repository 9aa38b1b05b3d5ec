"""`primus import --stack NAME[@RELEASE]`: the imported job carries the stack the option names, as
`--stack` does on every command that reads a job; the stack the import chose (a torchtitan TOML's
dated release, a `# primus-job:` header's) is replaced, and a note says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from primus.errors import InputError
from primus.launch import import_launch

# A Megatron-LM launch line written here (Llama 3 8B on one node of 8)
SCRIPT = """#!/bin/bash
torchrun --nproc_per_node 8 --nnodes 1 pretrain_gpt.py \\
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \\
    --group-query-attention --num-query-groups 8 --vocab-size 128256 --swiglu --normalization RMSNorm \\
    --disable-bias-linear --position-embedding-type rope --untie-embeddings-and-output-weights \\
    --seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 128 --bf16 \\
    --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer
"""
TOML = '[model]\nname = "llama3"\nflavor = "8B"\n\n[training]\nbatch_size = 2\nseq_len = 8192\n' \
       'data_parallel_shard_degree = -1\n'


def _file(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_import_stack_sets_the_jobs_stack(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("import", "--from", "megatron", _file(tmp_path, "train.sh", SCRIPT), "--hardware",
                           "h100-80gb", "--stack", "nemo@25.04", "--format", "json")
    doc = json.loads(out)
    assert code == 0 and doc["job"]["stack"] == "nemo@25.04"
    assert "stack nemo@25.04 from --stack, replacing megatron-lm (the import's choice)" in doc["notes"]


def test_import_stack_replaces_the_release_a_toml_is_dated_to(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # without --stack: training.batch_size dates the file torchtitan@2024.12 (pytorch/torchtitan #1238)
    code, out, _ = run_cli("import", "--from", "torchtitan", _file(tmp_path, "t.toml", TOML), "--hardware",
                           "h100-80gb", "--gpus", "8", "--stack", "torchtitan@2025.04")
    assert code == 0 and "stack: torchtitan@2025.04" in out.splitlines()
    assert "replacing torchtitan@2024.12 (the import's choice)" in out


def test_import_stack_that_is_unknown_is_one_line_naming_the_option(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, err = run_cli("import", "--from", "megatron", _file(tmp_path, "train.sh", SCRIPT), "--hardware",
                             "h100-80gb", "--stack", "nemox")
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err.startswith("primus: --stack: unknown stack 'nemox' (did you mean 'nemo'?)")


def test_import_stack_on_a_model_definition_is_refused(tmp_path: Path) -> None:
    text = "MODEL_ARGS=\"--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 " \
           "--group-query-attention --num-query-groups 8 --vocab-size 128256 --swiglu --normalization RMSNorm " \
           "--disable-bias-linear --position-embedding-type rope --untie-embeddings-and-output-weights " \
           "--max-position-embeddings 8192\"\n"
    with pytest.raises(InputError, match="defines a model only; a stack goes with a job"):
        import_launch("megatron", _file(tmp_path, "model.sh", text), stack="nemo")


def test_fit_from_a_launch_file_takes_the_stack_too(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = run_cli("fit", "--from", "megatron", _file(tmp_path, "train.sh", SCRIPT), "--hardware",
                           "h100-80gb", "--stack", "nemo@25.04", "--format", "json")
    assert code in (0, 1) and any("nemo@25.04" in a for a in json.loads(out)["assumptions"])


@pytest.mark.parametrize(("kind", "name", "text", "stack"), [("torchtitan", "t.toml", TOML, "megatron-lm@2026.06"),
                                                              ("megatron", "train.sh", SCRIPT, "torchtitan@2024.12")])
def test_import_stack_of_another_framework_is_refused(run_cli, tmp_path: Path, kind: str, name: str, text: str,  # type: ignore[no-untyped-def]
                                                     stack: str) -> None:
    # a torchtitan TOML read with Megatron-LM's defaults (or a Megatron-LM line with torchtitan's) is neither run
    code, out, err = run_cli("import", "--from", kind, _file(tmp_path, name, text), "--hardware", "h100-80gb",
                             "--gpus", "8", "--stack", stack)
    assert (code, out, err.count("\n")) == (2, "", 1)
    assert err.startswith("primus: --stack: ") and "give a stack of the file's framework" in err
