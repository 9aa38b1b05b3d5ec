"""Issue 9, part 3: published Megatron-LM launch lines, imported and proved by `fit`; the argument-line
reader (shell words, launchers, variables) and its one-line refusals."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from primus.cli.launch_cmds import import_cmd
from primus.cli.launch_opts import job_or_launch
from primus.errors import InputError
from primus.launch import import_launch, load_launch_job
from primus.solver.api import Question
from primus.solver.fit import fit

DATA = Path(__file__).resolve().parent / "data" / "launch"
H200_BF16 = DATA / "llama3_8b_h200_bf16.sh"  # NVIDIA/Megatron-LM examples/llama, commit 0c0185b
H100_FP8 = DATA / "llama3_8b_h100_fp8.sh"  # NVIDIA/Megatron-LM examples/llama, commit 157006d
GPT3_175B = DATA / "gpt3_175b_distributed.sh"  # NVIDIA/Megatron-LM examples/gpt3, commit 157006d


def test_published_llama3_8b_h200_recipe_imports_and_fit_proves_it() -> None:
    # https://github.com/NVIDIA/Megatron-LM/blob/0c0185b16dc7e98c9f2adfbf476fd52f58894644/examples/llama/
    # train_llama3_8b_h200_bf16.sh: TP1 CP1 PP1, MBS 1, GBS 128, seq 8192, distributed optimizer, 8 x H200.
    job, config = load_launch_job("megatron", H200_BF16, hardware="h200")
    assert job.num_gpus == 8  # from `python -m torch.distributed.run --nnodes 1 --nproc-per-node 8`
    par = config.job["parallel"]
    assert (par["tp"], par["pp"], par["cp"], par["dp"], par["mbs"]) == (1, 1, 1, 8, 1)
    assert (par["sp"], par["recompute"], par["sharding"]) == (False, "none", "dist_opt")  # SP off at TP 1
    assert (job.spec.seq_len, job.spec.global_batch_size, job.spec.precision) == (8192, 128, "bf16")
    assert job.spec.optimizer.main_grads_dtype == "bf16"  # --grad-reduce-in-bf16
    assert job.spec.kernels.cross_entropy_fusion
    # no --normalization: Megatron's LayerNorm, so the nearest catalog model with that one change
    # (and the RoPE base the file states, 1,000,000 where Llama 3's is 500,000: kept, so an export writes it back)
    assert config.job["model"] == {"base": "llama3-8b", "name": "llama3_8b_h200_bf16", "normalization": "LayerNorm",
                                   "rotary_base": 1000000}
    for option in ("--lr 0.00015", "--apply-layernorm-1p", "--tokenizer-type "
                   "HuggingFaceTokenizer", "torchrun --master-port 6000"):
        assert option in config.unmodelled
    # the recipe's RoPE base is read, and said to differ from Llama 3's (HF rope_theta 500000): no byte or second
    # depends on it, but a run of the file trains it
    assert "--rotary-base 1000000" not in config.unmodelled
    assert any("rotary_base 1000000 (the model's 500000)" in n for n in config.notes)
    result = fit(Question(job))
    assert result.fits
    assert result.layout is not None and result.layout.as_parallel() == {**par, "recompute": "none"}
    assert result.report is not None and result.report.peak_bytes < result.report.capacity_bytes


def test_published_gpt3_175b_script_imports_and_fit_proves_it_on_16_nodes() -> None:
    # https://github.com/NVIDIA/Megatron-LM/blob/157006d6d9bf4f55c0d4d7dacbd2b65e7bd84dc9/examples/gpt3/
    # train_gpt3_175b_distributed.sh: TP 8 x PP 16, fp16; its NUM_NODES=1 placeholder is overridden.
    job, config = load_launch_job("megatron", GPT3_175B, hardware="a100-80gb", nodes=16)
    assert config.job["model"] == "gpt3-175b"  # no --vocab-size: the only catalog match supplies it
    assert any("vocabulary 51200" in n for n in config.notes)
    assert any("torchrun asks for 8 GPUs" in n for n in config.notes)
    assert (job.num_gpus, job.spec.precision, job.spec.global_batch_size) == (128, "fp16", 1536)
    assert "--rampup-batch-size 16 16 5859375" in config.unmodelled
    assert "--data-path $DATA_PATH" in config.unmodelled  # never set in the script: left as written
    assert fit(Question(job)).fits


def test_published_fp8_line_keeps_its_weights_in_fp8() -> None:
    # https://github.com/NVIDIA/Megatron-LM/blob/157006d6d9bf4f55c0d4d7dacbd2b65e7bd84dc9/examples/llama/
    # train_llama3_8b_h100_fp8.sh
    job, config = load_launch_job("megatron", H100_FP8, hardware="h100-80gb")
    assert (job.spec.precision, job.spec.effective_fp8_recipe) == ("fp8", "delayed")
    assert job.spec.fp8_param_gather  # FP8 primary weights: no bf16 copy in the ledger
    assert "--fp8-param-gather" not in config.unmodelled
    assert "--fp8-amax-history-len 1024" in config.unmodelled


def _write(tmp_path: Path, text: str, name: str = "train.sh") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


BASE = ("--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
        "--group-query-attention --num-query-groups 8 --kv-channels 128 --max-position-embeddings 8192 "
        "--position-embedding-type rope --normalization RMSNorm --swiglu --untie-embeddings-and-output-weights "
        "--disable-bias-linear --attention-dropout 0.0 --hidden-dropout 0.0 --vocab-size 128256 --bf16 "
        "--seq-length 8192 --micro-batch-size 1 --global-batch-size 64")


def test_shell_words_variables_comments_and_continuations(tmp_path: Path) -> None:
    text = ("#!/bin/bash\nexport NCCL_IB_TIMEOUT=19\nTP=4\nPP=${PP_SIZE:-2}\n"
            "mkdir -p logs\n"
            "NVTE_FLAG=1 torchrun --nnodes=2 --nproc_per_node 8 pretrain_gpt.py \\\n"
            f"   {BASE} \\\n"
            "   --tensor-model-parallel-size $TP --pipeline-model-parallel-size ${PP} \\\n"
            "   --num-layers-per-virtual-pipeline-stage 4 --sequence-parallel  # a comment\n")
    config = import_launch("megatron", _write(tmp_path, text), hardware="h100-80gb")
    assert config.job["model"] == "llama3-8b"
    assert config.job["nodes"] == 2
    par = config.job["parallel"]
    assert (par["tp"], par["pp"], par["vp"], par["dp"], par["sp"]) == (4, 2, 4, 2, True)  # 32/2/4 = VP 4
    assert "env NCCL_IB_TIMEOUT=19" in config.unmodelled and "env NVTE_FLAG=1" in config.unmodelled
    assert any("1 other shell line" in n for n in config.notes)


def test_vp_from_a_layout_string_and_the_legacy_option(tmp_path: Path) -> None:
    layout = import_launch("megatron", _write(tmp_path, BASE + " --pipeline-model-parallel-size 4 "
                                              "--pipeline-model-parallel-layout 'Ettt|(tttt|)*6tttttL'"),
                           hardware="h100-80gb", gpus=16)
    assert layout.job["parallel"]["vp"] == 2 and layout.job["pipeline"]["layout"] == "Ettt|(tttt|)*6tttttL"
    legacy = import_launch("megatron", _write(tmp_path, BASE + " --pipeline-model-parallel-size 4 "
                                              "--virtual-pipeline-model-parallel-size 2"), hardware="h100-80gb",
                           gpus=16)
    assert legacy.job["parallel"]["vp"] == 2


def test_moe_and_mla_options_build_the_model(tmp_path: Path) -> None:
    text = ("--num-layers 61 --hidden-size 7168 --ffn-hidden-size 18432 --num-attention-heads 128 "
            "--multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 "
            "--qk-pos-emb-head-dim 64 --v-head-dim 128 --num-experts 256 --moe-router-topk 8 "
            "--moe-ffn-hidden-size 2048 --moe-shared-expert-intermediate-size 2048 --moe-layer-freq '([0]*3+[1]*58)' "
            "--mtp-num-layers 1 --vocab-size 129280 --max-position-embeddings 163840 --position-embedding-type rope "
            "--normalization RMSNorm --swiglu --untie-embeddings-and-output-weights --disable-bias-linear "
            "--attention-dropout 0.0 --hidden-dropout 0.0 --bf16 --seq-length 4096 --micro-batch-size 1 "
            "--global-batch-size 8192 --tensor-model-parallel-size 2 --pipeline-model-parallel-size 8 "
            "--decoder-first-pipeline-num-layers 5 --decoder-last-pipeline-num-layers 8 "
            "--expert-model-parallel-size 64 --moe-token-dispatcher-type alltoall --use-distributed-optimizer")
    config = import_launch("megatron", _write(tmp_path, text), hardware="h100-80gb", gpus=1024)
    assert config.job["model"] == "deepseek-v3"
    assert config.job["parallel"]["etp"] == 2  # Megatron: ETP defaults to TP
    # no --moe-permute-fusion: Megatron-LM permutes unfused (transformer_config.py moe_permute_fusion = False);
    # no --moe-grouped-gemm: SequentialMLP (transformer_engine_spec_provider.py `grouped_mlp_modules`)
    assert config.job["moe"] == {"token_dispatcher": "alltoall", "grouped_gemm": "sequential",
                                 "permute_fusion": False}
    legacy = import_launch("megatron", _write(tmp_path, text + " --moe-grouped-gemm --moe-use-legacy-grouped-gemm",
                                              "l.sh"), hardware="h100-80gb", gpus=1024)
    assert legacy.job["moe"] == {"token_dispatcher": "alltoall", "grouped_gemm": "legacy",  # bf16 grouped GEMMs
                                 "permute_fusion": False}
    ignored = import_launch("megatron", _write(tmp_path, text + " --moe-use-legacy-grouped-gemm", "i.sh"),
                            hardware="h100-80gb", gpus=1024)
    assert ignored.job["moe"]["grouped_gemm"] == "sequential"  # the legacy flag picks among grouped MLPs only
    assert any("has no effect without it" in n for n in ignored.notes)
    pattern = text.replace("'([0]*3+[1]*58)'", "'([1]*3+[0]*1)*15+[1]'")  # Megatron's grouped form
    grouped = import_launch("megatron", _write(tmp_path, pattern, "b.sh"), hardware="h100-80gb", gpus=1024)
    assert isinstance(grouped.job["model"], dict) and len(grouped.job["model"]["moe_layer_freq"]) == 61


@pytest.mark.parametrize(("text", "kwargs", "message"), [
    (BASE, {}, "give --hardware"),
    (BASE, {"hardware": "h100-80gb"}, "give --nodes or --gpus"),
    (BASE.replace("--micro-batch-size 1", ""), {"hardware": "h100-80gb", "gpus": 8}, "--micro-batch-size"),
    (BASE + " --tensor-model-parallel-size $TP", {"hardware": "h100-80gb", "gpus": 8}, "shell text left unexpanded"),
    (BASE.replace("--bf16", ""), {"hardware": "h100-80gb", "gpus": 8}, "fp32 training is not modelled"),
    (BASE + " --tensor-model-parallel-size 3", {"hardware": "h100-80gb", "gpus": 8}, "does not divide"),
    (BASE + " --bf16=1", {"hardware": "h100-80gb", "gpus": 8}, "takes no value"),
    ("echo hello", {"hardware": "h100-80gb", "gpus": 8}, "no command with -- options"),
    ("torchrun --nnodes 1:4 x.py " + BASE, {"hardware": "h100-80gb"}, "elastic ranges"),
    (BASE.replace("--vocab-size 128256", "--hidden-size 4000"), {"hardware": "h100-80gb", "gpus": 8},
     "matches no catalog model"),
])
def test_bad_lines_are_one_line_input_errors(tmp_path: Path, text: str, kwargs: dict[str, object],
                                             message: str) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(InputError) as err:
        import_launch("megatron", path, **kwargs)  # type: ignore[arg-type]
    assert message in err.value.line() and "\n" not in err.value.line()
    options = [part for k, v in kwargs.items() for part in ("--" + k, str(v))]
    result = CliRunner().invoke(import_cmd, ["--from", "megatron", str(path), *options])
    assert result.exit_code == 2
    assert result.stderr.startswith("primus: ") and len(result.stderr.strip().splitlines()) == 1


def test_import_cli_yaml_on_stdout_unmodelled_on_stderr_and_json(tmp_path: Path) -> None:
    runner = CliRunner()
    result = runner.invoke(import_cmd, ["--from", "megatron", str(H200_BF16), "--hardware", "h200"])
    assert result.exit_code == 0
    assert "unmodelled: --lr 0.00015" in result.stderr
    assert "parallel:" in result.stdout and "primus:" not in result.stdout
    result = runner.invoke(import_cmd, ["--from", "megatron", str(H200_BF16), "--hardware", "h200",
                                        "--format", "json"])
    import json

    doc = json.loads(result.stdout)
    assert doc["job"]["parallel"]["dp"] == 8 and "--lr 0.00015" in doc["unmodelled"]
    assert "Megatron-LM argument names of releases core_v0.8.0 to core_v0.19.0" in doc["release"]


def test_job_or_launch_is_what_fit_memory_project_use() -> None:
    job, config = job_or_launch(None, ("megatron", str(GPT3_175B)), "a100-80gb", 16, None)
    assert job.model.name == "gpt3-175b" and config is not None and config.kind == "megatron"
    with pytest.raises(InputError, match="exactly one"):
        job_or_launch(None, None, None, None, None)
    with pytest.raises(InputError, match="go with --from only"):
        job_or_launch("job.yaml", None, "h100-80gb", None, None)


def test_project_takes_a_published_launch_line() -> None:
    # the same published H200 recipe as above (8 x H200, TP1 PP1 CP1, MBS 1, GBS 128, seq 8192), projected
    # straight from its launch line: every axis is pinned by the script, so nothing is completed
    import json

    from primus.cli.project_cmd import project_cmd

    result = CliRunner().invoke(project_cmd, ["--from", "megatron", str(H200_BF16), "--hardware", "h200",
                                              "--format", "json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["parallel"]["tp"] == 1 and doc["parallel"]["dp"] == 8 and doc["fits"]
    assert doc["tokens_per_s_per_gpu"] > 0
