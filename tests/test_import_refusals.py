"""What `primus import` refuses rather than silently changing the job (hostile review 50): a setting
Megatron-LM or torchtitan refuses, or one primus cannot model, is one line on stderr naming the file,
the option and the reason, exit status 2 and nothing on stdout."""

from __future__ import annotations

from pathlib import Path

LAUNCH = Path(__file__).parent / "data" / "launch"
PRIMUS_70B = LAUNCH / "primus_llama3.1_70B-BF16-pretrain.yaml"
TOML_70B = LAUNCH / "torchtitan_llama3_70b.toml"
# Llama 3.1 8B on one node: the review's hostile/*.sh line, without the option under test
LINE = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 "
        "--num-attention-heads 32 --group-query-attention --num-query-groups 8 --seq-length 4096 "
        "--max-position-embeddings 8192 --position-embedding-type rope --swiglu --normalization RMSNorm "
        "--untie-embeddings-and-output-weights --disable-bias-linear --vocab-size 128256 --micro-batch-size 1 "
        "--global-batch-size 64 --bf16 ")


def _import(run_cli, tmp_path: Path, options: str) -> tuple[int, str, str]:  # type: ignore[no-untyped-def]
    script = tmp_path / "train.sh"
    script.write_text(LINE + options + "\n")
    return run_cli("import", "--from", "megatron", str(script), "--hardware", "h100-80gb")  # type: ignore[no-any-return]


def _refused(result: tuple[int, str, str], *parts: str) -> bool:
    code, out, err = result
    return code == 2 and out == "" and err.count("\n") == 1 and all(p in err for p in parts)


# ---- H3: virtual pipeline stages at PP 1 (core_v0.18.0 arguments.py lines 980-983 assert PP > 1) ----------

def test_virtual_stages_per_rank_without_pipeline_parallelism_are_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = _import(run_cli, tmp_path, "--num-virtual-stages-per-pipeline-rank 2")
    assert _refused(result, "train.sh: --num-virtual-stages-per-pipeline-rank:", "2 virtual stages",
                    "pipeline-model-parallel size should be greater than 1")


def test_layers_per_virtual_stage_without_pipeline_parallelism_are_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # 32 layers at PP 1 in stages of 2: Megatron derives VP 16, then asserts
    result = _import(run_cli, tmp_path, "--num-layers-per-virtual-pipeline-stage 2")
    assert _refused(result, "--num-layers-per-virtual-pipeline-stage:", "16 virtual stages")


def test_one_virtual_stage_per_rank_at_pp_1_is_no_interleaving_and_is_read(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # Megatron sets a derived VP of 1 to None before the assert
    code, out, _ = _import(run_cli, tmp_path, "--num-virtual-stages-per-pipeline-rank 1")
    assert code == 0 and "vp: 1" in out


def test_a_primus_experiment_with_virtual_stages_at_pp_1_is_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "exp.yaml"
    path.write_text(PRIMUS_70B.read_text().replace(
        "      pipeline_model_parallel_size: 1\n",
        "      pipeline_model_parallel_size: 1\n      num_virtual_stages_per_pipeline_rank: 4\n"))
    result = run_cli("import", "--from", "primus", str(path), "--hardware", "mi300x", "--nodes", "1")
    assert _refused(result, "modules.pre_trainer.overrides.num_virtual_stages_per_pipeline_rank:",
                    "4 virtual stages")


# ---- L3: full recompute without a method (core_v0.18.0 transformer_config.py lines 1551-1560 raise) -------

def test_full_recompute_without_a_method_is_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = _import(run_cli, tmp_path, "--recompute-granularity full")
    assert _refused(result, "--recompute-granularity:", "needs --recompute-method block or uniform")


# ---- M1: recompute modules primus does not model are not dropped ------------------------------------------

def test_recomputing_the_moe_module_is_refused_not_dropped(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # dropped, the export wrote `--recompute-modules layernorm` (or none: Megatron's default core_attn)
    result = _import(run_cli, tmp_path, "--recompute-granularity selective --recompute-modules moe layernorm")
    assert _refused(result, "--recompute-modules:", "moe not modelled")


def test_recomputing_the_shared_experts_is_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = _import(run_cli, tmp_path, "--recompute-granularity selective --recompute-modules shared_experts")
    assert _refused(result, "--recompute-modules:", "shared_experts not modelled")


def test_modelled_recompute_modules_are_kept_as_listed(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = _import(run_cli, tmp_path, "--recompute-granularity selective --recompute-modules mlp layernorm")
    assert code == 0 and "recompute_modules: [mlp, layernorm]" in out


# ---- M7: misspelt option names (Megatron's parser exits on them; torchtitan raises 'Invalid field names') --

def test_a_misspelt_megatron_option_is_refused_with_the_real_name(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    # before: read as an unmodelled option, and the job proved at TP 1
    result = _import(run_cli, tmp_path, "--tensor-model-paralel-size 8")
    assert _refused(result, "--tensor-model-paralel-size:", "is not a Megatron-LM argument",
                    "did you mean --tensor-model-parallel-size?")


def test_an_option_written_with_underscores_is_refused_with_the_dashed_name(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = _import(run_cli, tmp_path, "--tensor_model_parallel_size 2")
    assert _refused(result, "did you mean --tensor-model-parallel-size?")


def test_a_real_megatron_option_primus_does_not_model_is_still_listed(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, _, err = _import(run_cli, tmp_path, "--lr 0.00015 --fp8-margin 0")
    assert code == 0 and "unmodelled: --lr 0.00015" in err and "unmodelled: --fp8-margin 0" in err


def test_a_misspelt_torchtitan_key_is_refused_with_the_real_key(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "job.toml"
    path.write_text(TOML_70B.read_text().replace("tensor_parallel_degree", "tensor_paralel_degree"))
    result = run_cli("import", "--from", "torchtitan", str(path), "--hardware", "h100-80gb", "--nodes", "8")
    assert _refused(result, "parallelism.tensor_paralel_degree:", "is not a torchtitan JobConfig field",
                    "did you mean parallelism.tensor_parallel_degree?")


# ---- L1: an FP8 format other than hybrid is said, not silently rewritten -----------------------------------

def test_an_e4m3_fp8_format_is_noted_as_exported_hybrid(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, err = _import(run_cli, tmp_path, "--tensor-model-parallel-size 2 --fp8-format e4m3 --fp8-recipe "
                             "tensorwise")
    assert code == 0 and "precision: fp8" in out
    assert "--fp8-format e4m3 read as precision fp8" in err and "writes --fp8-format hybrid" in err


# ---- M6: torch FSDP2 (core_v0.18.0 arguments.py lines 1010-1027) ---------------------------------------------

def test_torch_fsdp2_with_pipeline_parallelism_is_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = _import(run_cli, tmp_path, "--pipeline-model-parallel-size 2 --use-torch-fsdp2 "
                                        "--no-gradient-accumulation-fusion")
    assert _refused(result, "train.sh: --use-torch-fsdp2:", "not supported with pipeline parallelism")


def test_torch_fsdp2_with_gradient_accumulation_fusion_left_on_is_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    assert _refused(_import(run_cli, tmp_path, "--use-torch-fsdp2"), "--use-torch-fsdp2:",
                    "--no-gradient-accumulation-fusion")


def test_torch_fsdp2_as_megatron_accepts_it_is_read_as_fsdp(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    code, out, _ = _import(run_cli, tmp_path, "--use-torch-fsdp2 --no-gradient-accumulation-fusion")
    assert code == 0 and "sharding: fsdp" in out


# ---- L2: interleaving at PP 2 without the P2P overlap (core_v0.18.0 arguments.py lines 984-989) ------------

def test_interleaving_at_pp_2_without_the_p2p_overlap_is_refused(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    result = _import(run_cli, tmp_path, "--pipeline-model-parallel-size 2 --num-virtual-stages-per-pipeline-rank 2 "
                                        "--no-overlap-p2p-communication")
    assert _refused(result, "--no-overlap-p2p-communication: with 2 virtual stages", "needs PP > 2")


def test_interleaving_at_pp_4_without_the_p2p_overlap_is_read(run_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    options = "--pipeline-model-parallel-size 4 --num-virtual-stages-per-pipeline-rank 2 --no-overlap-p2p-communication"
    code, out, err = _import(run_cli, tmp_path, options)
    assert code == 0 and "vp: 2" in out and "--no-overlap-p2p-communication" in err
