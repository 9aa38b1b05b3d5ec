"""Launch lines Megatron-LM reads differently from what primus models, or refuses, found by a hostile review of
the import path: each is refused in one line (exit 2) naming the file and the option, or read as Megatron-LM
reads it. The model: Llama 3.1 8B (32 layers, hidden 4096, FFN 14336, 32 heads in 8 groups, vocabulary 128256;
meta-llama/Llama-3.1-8B config.json) at TP 2 on one node of H100."""

from __future__ import annotations

from pathlib import Path

import pytest

MODEL = ("--hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention "
         "--num-query-groups 8 --vocab-size 128256 --position-embedding-type rope --max-position-embeddings 131072 "
         "--untie-embeddings-and-output-weights --normalization RMSNorm --swiglu --disable-bias-linear --bf16 "
         "--use-distributed-optimizer --tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 1 "
         "--global-batch-size 64")


def launch(tmp_path: Path, extra: str, layers: str = "--num-layers 32", seq: str = "--seq-length 8192") -> str:
    path = tmp_path / "train.sh"
    path.write_text(f"torchrun --nproc_per_node 8 pretrain_gpt.py {layers} {seq} {MODEL} {extra}\n")
    return str(path)


def memory(run_cli, path: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    return run_cli("memory", "--from", "megatron", path, "--hardware", "h100-80gb", "--format", "json")


@pytest.mark.parametrize("impl", ["local", "inference_optimized"])
def test_the_local_transformer_spec_is_refused(run_cli, tmp_path: Path, impl: str) -> None:  # type: ignore[no-untyped-def]
    # core_v0.18.0 gpt_builders.py: use_te only for transformer_engine; the local spec's core attention is the
    # unfused DotProductAttention (megatron/core/models/backends.py LocalSpecProvider). It used to be listed as
    # unmodelled and proved with flash attention: 54.72 GiB, where the unfused ledger says 119.85 GiB
    path = launch(tmp_path, f"--transformer-impl {impl}")
    code, out, err = memory(run_cli, path)
    assert (code, out) == (2, "")
    assert err.strip() == (f"primus: {path}: --transformer-impl: '{impl}': Megatron-LM then builds its local spec "
                           "(unfused attention, no Transformer Engine kernels), which primus does not model; primus "
                           "models transformer_engine")


def test_the_legacy_models_are_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, _, err = memory(run_cli, launch(tmp_path, "--use-legacy-models"))
    assert code == 2 and "--use-legacy-models: builds Megatron-LM's legacy models" in err


def test_transformer_engine_stays_the_default(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, _, err = memory(run_cli, launch(tmp_path, "--transformer-impl transformer_engine"))
    assert code == 0, err


def test_param_gather_overlap_without_grad_reduce_overlap_is_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # every release: core_v0.8.0 arguments.py lines 279-283, core_v0.18.0 lines 1003-1008 ('Must use
    # --overlap-param-gather with --overlap-grad-reduce'); imported, it did not survive an export round trip
    path = launch(tmp_path, "--overlap-param-gather")
    code, _, err = memory(run_cli, path)
    assert code == 2
    assert err.strip() == (f"primus: {path}: --overlap-param-gather: without --overlap-grad-reduce is refused by "
                           "Megatron-LM (validate_args)")
    code, _, err = memory(run_cli, launch(tmp_path, "--overlap-param-gather --overlap-grad-reduce"))
    assert code == 0, err


def test_the_encoder_aliases_give_the_layers_and_the_sequence(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # validate_args copies --encoder-num-layers to --num-layers and --encoder-seq-length to --seq-length when
    # only the encoder's is given (core_v0.18.0 arguments.py lines 1255-1262 and 1292-1297)
    plain = memory(run_cli, launch(tmp_path, ""))
    aliased = memory(run_cli, launch(tmp_path, "", "--encoder-num-layers 32", "--encoder-seq-length 8192"))
    assert plain[0] == aliased[0] == 0
    assert plain[1] == aliased[1]


def test_both_spellings_of_the_layers_are_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, _, err = memory(run_cli, launch(tmp_path, "--encoder-num-layers 32"))
    assert code == 2 and "--encoder-num-layers: and --num-layers together are refused by Megatron-LM" in err


def test_param_gather_overlap_with_torch_fsdp2_is_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # a second review: torch FSDP2 is sharded, but core_v0.18.0 arguments.py lines 1003-1005 take only the
    # distributed optimizer, Megatron FSDP or dist_muon
    line = MODEL.replace("--use-distributed-optimizer", "--use-torch-fsdp2 --no-gradient-accumulation-fusion")
    path = tmp_path / "fsdp2.sh"
    path.write_text(f"torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --seq-length 8192 {line} "
                    "--overlap-param-gather --overlap-grad-reduce\n")
    code, _, err = memory(run_cli, str(path))
    assert code == 2 and "--overlap-param-gather: without the distributed optimizer or Megatron FSDP (torch FSDP2 " \
                         "is neither)" in err


@pytest.mark.parametrize("extra, option, value", [
    ("--fp8-format e5m2", "--fp8-format", "'e5m2'"),
    ("--fp8-format hybrid --fp8-recipe foo", "--fp8-recipe", "'foo'"),
])
def test_an_fp8_format_or_recipe_megatron_refuses_is_refused(run_cli, tmp_path: Path, extra: str, option: str,  # type: ignore[no-untyped-def]
                                                            value: str) -> None:
    # arguments.py --fp8-format choices ['e4m3', 'hybrid'] and --fp8-recipe choices; fp8_utils.get_fp8_recipe
    # raises for another format. Both used to import as precision fp8 with a note, and export as hybrid
    path = launch(tmp_path, extra)
    code, out, err = memory(run_cli, path)
    assert (code, out) == (2, "")
    assert err.strip().startswith(f"primus: {path}: {option}: {value} is not an FP8")
