"""Issue 21 item 5: an exported launch starts. The environment Megatron-LM's validate_args requires is
written, only what `fit` accepts is exported, and Primus exports name Primus's own model files."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from primus.cli.launch_cmds import export_cmd
from primus.launch import axes_job, export_job

AXES = {"hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 64, "precision": "bf16",
        "pp": 1, "cp": 1, "mbs": 1, "recompute": "full"}


def _job(model: str, **axes: object):  # type: ignore[no-untyped-def]
    return axes_job({"model": model, **AXES, **axes})


def test_tensor_parallel_export_sets_cuda_device_max_connections() -> None:
    # megatron/training/arguments.py (d98e8a6): TP or CP > 1 before Blackwell asserts CUDA_DEVICE_MAX_CONNECTIONS=1
    text = export_job(_job("llama3.1-8b", tp=2, sp=True, sharding="dist_opt"), "megatron").text
    lines = text.splitlines()
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in lines
    assert lines.index("export CUDA_DEVICE_MAX_CONNECTIONS=1") < next(i for i, x in enumerate(lines)
                                                                        if x.startswith("torchrun"))


def test_fsdp_export_unsets_cuda_device_max_connections() -> None:
    # the same file: FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset
    text = export_job(_job("llama3.1-8b", tp=2, sp=True, sharding="fsdp"), "megatron").text
    assert "unset CUDA_DEVICE_MAX_CONNECTIONS" in text.splitlines()
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" not in text


def test_export_refuses_what_fit_refuses(tmp_path: Path) -> None:
    # Llama 3.1 405B at PP 5: 126 layers (128 with the embedding and the loss) do not split into 5 stages;
    # Megatron-LM would stop at "Number of layers should be divisible by the pipeline-model-parallel size".
    # Exit 1 with fit's reasons, and nothing written.
    args = ["--model", "llama3.1-405b", "--hardware", "h200", "--gpus", "320", "--seq-len", "8192",
            "--global-batch-size", "512", "--tp", "8", "--pp", "5", "--cp", "1", "--mbs", "1", "--sp",
            "--recompute", "full", "--sharding", "dist_opt", "--to", "megatron", "--out", str(tmp_path / "x.sh")]
    result = CliRunner().invoke(export_cmd, args)
    assert result.exit_code == 1
    assert "not exported" in result.output and "pipeline-split" in result.output
    # fit's suggestions read as `primus fit` prints them: the layout in one line and each option with its
    # value (26 decoder layers on the last stage: 25 x 4 + 26 = 126), not a Python dict.
    assert "fits instead: TP8 PP5 VP1 CP1 EP1 ETP1 DP8 MBS1 sp=on recompute=full sharding=dist_opt" in result.output
    assert "pipeline.decoder_last_pipeline_num_layers=26" in result.output and "{'tp'" not in result.output
    assert not (tmp_path / "x.sh").exists()


def _primus_doc(model: str, **axes: object) -> dict:  # type: ignore[type-arg]
    text = export_job(_job(model, **axes), "primus").text
    return yaml.safe_load(text)["modules"]["pre_trainer"]


def test_primus_exports_name_primus_model_files() -> None:
    # AMD-AGI/Primus fd1eeab ships gpt_oss_120B.yaml (not gpt_oss_120b.yaml) and mixtral_8x22B_v0.1.yaml
    assert _primus_doc("gpt-oss-120b", tp=1, ep=8, etp=1, sharding="dist_opt")["model"] == "gpt_oss_120B.yaml"
    assert _primus_doc("mixtral-8x22b", tp=1, ep=8, etp=1, sharding="dist_opt")["model"] == "mixtral_8x22B_v0.1.yaml"


def test_deepseek_v3_export_keeps_qk_layernorm() -> None:
    # Primus's deepseek_v3_base.yaml and Megatron-LM's DeepSeek examples set qk_layernorm: with MLA it builds the
    # q/kv latent norms DeepSeek-V3 has (and the ledger counts)
    doc = _primus_doc("deepseek-v3", tp=1, ep=8, etp=1, sharding="dist_opt")
    assert doc["overrides"]["qk_layernorm"] is True


def test_primus_fsdp_export_leaves_out_param_gather_overlap() -> None:
    job = axes_job({"model": "llama3.1-8b", **AXES, "tp": 1, "sharding": "fsdp"})
    data = job.spec.model_dump(mode="json", exclude_none=True)
    data["overlap"] = {"grad_reduce": True, "param_gather": True}
    from primus.job import job_from_mapping

    exported = export_job(job_from_mapping(data, "test"), "primus")
    overrides = yaml.safe_load(exported.text)["modules"]["pre_trainer"]["overrides"]
    assert overrides["use_torch_fsdp2"] is True and overrides["overlap_param_gather"] is False


def test_torchtitan_export_names_its_release_and_the_registry_form() -> None:
    # TOML configs load up to torchtitan v0.2.2; #2386 replaced them with config_registry.py functions
    from primus.job import job_from_mapping

    base = _job("llama3.1-70b", tp=8, sp=True, sharding="fsdp", nodes=8)
    data = {**base.spec.model_dump(mode="json", exclude_none=True), "stack": "torchtitan@2025.04"}
    text = export_job(job_from_mapping(data, "test"), "torchtitan").text
    assert "loads in torchtitan up to v0.2.2" in text
    assert "--module llama3 --config llama3_70b --training.num_tokens_per_microbatch_per_dp_rank 4096" in text


def test_recompute_and_fp8_recipe_survive_a_torchtitan_round_trip(tmp_path: Path) -> None:
    from primus.launch import import_launch

    job = _job("llama3.1-8b", tp=1, sp=False, sharding="fsdp", precision="fp8", fp8_recipe="mxfp8",
               recompute_method="block", recompute_num_layers=16)
    path = tmp_path / "tt.toml"
    path.write_text(export_job(job, "torchtitan").text)
    back = import_launch("torchtitan", path).job
    assert (back["precision"], back["fp8_recipe"]) == ("fp8", "mxfp8")
    par = back["parallel"]
    assert (par["recompute"], par["recompute_method"], par["recompute_num_layers"]) == ("full", "block", 16)


def test_export_names_the_pipeline_options_that_make_the_split_legal_and_does_not_add_them() -> None:
    # 126 layers + embedding + loss = 128 = 16 chunks of 8 at PP 8 x VP 2: legal with Megatron-LM's
    # --account-for-embedding/loss-in-pipeline-split, and the job fits on 64 nodes of H200 with them; the job
    # does not set them, so the export refuses it (exit 1) and names them rather than changing the job
    args = ["--model", "llama3.1-405b", "--hardware", "h200", "--nodes", "64", "--seq-len", "8192",
            "--global-batch-size", "512", "--tp", "8", "--pp", "8", "--vp", "2", "--cp", "1", "--mbs", "1", "--sp",
            "--recompute", "full", "--sharding", "dist_opt", "--to", "megatron"]
    result = CliRunner().invoke(export_cmd, args)
    assert result.exit_code == 1, result.output
    assert "--account-for-embedding/loss-in-pipeline-split" in result.stderr and "the job does not set them" in \
        result.stderr
    assert "--account-for-loss-in-pipeline-split \\" not in result.stdout


def test_blackwell_export_leaves_cuda_device_max_connections_alone() -> None:
    # megatron/training/arguments.py (d98e8a6): "CUDA_DEVICE_MAX_CONNECTIONS requirement no longer exists since
    # the Blackwell architecture" (get_device_arch_version() >= 10; hardware/b200.yaml: compute capability 10.0)
    text = export_job(_job("llama3.1-8b", hardware="b200", tp=2, sp=True, sharding="dist_opt"), "megatron").text
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in text


def test_mi300x_export_sets_cuda_device_max_connections() -> None:
    # ROCm reports MI300X (gfx942) as compute capability 9.4: before Blackwell for validate_args
    text = export_job(_job("llama3.1-8b", hardware="mi300x", tp=2, sp=True, sharding="dist_opt"), "megatron").text
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in text.splitlines()


def _listed(ids: list[int], **axes: object):  # type: ignore[no-untyped-def]
    from primus.job import job_from_mapping

    data = _job("llama3.1-8b", tp=1, sp=False, sharding="dist_opt", **axes).spec.model_dump(mode="json",
                                                                                           exclude_none=True)
    data["parallel"]["recompute_layer_ids"] = ids
    return job_from_mapping(data, "test")


def test_listed_recompute_that_is_the_first_layers_of_each_chunk_is_written_as_block() -> None:
    # Llama 3.1 8B (32 layers) at PP 2: layers 0-2 and 16-18 are the first 3 of each 16-layer chunk, which is
    # exactly what Megatron-LM's --recompute-method block --recompute-num-layers 3 recomputes
    text = export_job(_listed([0, 1, 2, 16, 17, 18], pp=2, vp=1), "megatron").text
    assert "--recompute-method block" in text and "--recompute-num-layers 3" in text


def test_listed_recompute_that_megatron_cannot_express_is_refused() -> None:

    from primus.errors import InputError

    with pytest.raises(InputError, match="Megatron-LM has no option for a list of recomputed layers") as caught:
        export_job(_listed([0, 5]), "megatron")
    assert caught.value.field == "parallel.recompute_layer_ids"


def test_listed_recompute_survives_a_primus_round_trip(tmp_path: Path) -> None:
    # AMD Primus takes the list itself, with recompute_method null (patches/recompute_layer_patches.py)
    from primus.launch import import_launch

    text = export_job(_listed([0, 5, 9]), "primus").text
    overrides = yaml.safe_load(text)["modules"]["pre_trainer"]["overrides"]
    assert overrides["recompute_layer_ids"] == [0, 5, 9] and "recompute_method" not in overrides
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    par = import_launch("primus", path).job["parallel"]
    assert (par["recompute"], par["recompute_layer_ids"]) == ("full", [0, 5, 9])
    assert "recompute_method" not in par


def test_primus_reads_recompute_layer_ids_written_as_a_string(tmp_path: Path) -> None:
    # Primus's evaluator and blog write the list as "0,1,2,4"; its patch splits the string on commas
    from primus.launch import import_launch

    text = export_job(_listed([0]), "primus").text.replace("recompute_layer_ids:\n      - 0",
                                                           "recompute_layer_ids: '0,1,2,4'")
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    assert import_launch("primus", path).job["parallel"]["recompute_layer_ids"] == [0, 1, 2, 4]


def test_a_rope_context_shorter_than_the_sequence_is_raised_to_it() -> None:
    # megatron/training/arguments.py (d98e8a6): "max_position_embeddings (4096) must be greater than or equal to
    # seq_length (8192)"; Llama 2 7B states 4096 positions, and RoPE positions hold no weight
    exported = export_job(_job("llama2-7b", seq_len=8192, tp=1, sp=False, sharding="dist_opt"), "megatron")
    assert "--max-position-embeddings 8192" in exported.text
    assert any("requires at least the sequence length" in n for n in exported.notes)


def test_a_learned_position_table_shorter_than_the_sequence_is_refused() -> None:

    from primus.errors import InputError

    # GPT-3 175B's learned table has 2,048 positions (Brown et al. 2020, n_ctx 2048)
    with pytest.raises(InputError, match="longer than the model's learned position table"):
        export_job(_job("gpt3-175b", nodes=16, seq_len=4096, tp=8, pp=8, vp=1, sp=True, sharding="dist_opt"),
                   "megatron")


def test_an_imported_model_keeps_the_context_its_file_states(tmp_path: Path) -> None:
    # a model written over a catalog base keeps the file's --max-position-embeddings, not the base's
    from primus.launch import import_launch

    script = tmp_path / "m.sh"
    script.write_text('MODEL_ARGS="--num-layers 4 --hidden-size 896 --ffn-hidden-size 4864 --num-attention-heads 14 '
                      '--group-query-attention --num-query-groups 2 --kv-channels 64 --vocab-size 151936 --swiglu '
                      '--normalization RMSNorm --position-embedding-type rope --disable-bias-linear --add-qkv-bias '
                      '--max-position-embeddings 32768"\n')
    model = import_launch("megatron", script).job["model"]
    assert isinstance(model, dict) and model["max_position_embeddings"] == 32768


def test_the_structural_split_check_adds_the_options_only_where_they_make_the_split_legal() -> None:
    # the sweep's fast path (no fit): 126 layers + embedding + loss = 128 = 16 chunks of 8 at PP 8 x VP 2;
    # 12 layers at PP 8 (Megatron-LM's gpt-oss example on one node) split neither way
    from primus.launch.export_check import split_for_export

    big = split_for_export(_job("llama3.1-405b", hardware="h200", nodes=64, seq_len=8192, global_batch_size=512,
                                tp=8, pp=8, vp=2, sp=True, sharding="dist_opt"))
    assert big.split_added and big.job.spec.pipeline.account_for_loss_in_pipeline_split
    from primus.job import job_from_mapping

    data = _job("llama3.1-8b", tp=1, pp=8, vp=1, sp=False, sharding="dist_opt").spec.model_dump(mode="json",
                                                                                              exclude_none=True)
    data["model"] = {"base": "llama3.1-8b", "num_layers": 12}
    small = split_for_export(job_from_mapping(data, "test"))
    assert not small.split_ok and not small.split_added


def _legacy(precision: str, fp8_recipe: str | None = None):  # type: ignore[no-untyped-def]
    from primus.job import job_from_mapping

    axes = {"precision": precision, **({"fp8_recipe": fp8_recipe} if fp8_recipe else {})}
    data = _job("mixtral-8x7b", tp=1, ep=8, etp=1, sp=False, sharding="dist_opt", **axes).spec.model_dump(
        mode="json", exclude_none=True)
    data["moe"] = {"grouped_gemm": "legacy"}
    data["stack"] = "megatron-lm@core_v0.16.1"  # the newest Megatron-LM release with GroupedMLP
    return job_from_mapping(data, "test")


@pytest.mark.parametrize(("precision", "recipe"), [("bf16", None), ("fp8", "delayed")])
def test_the_legacy_grouped_gemm_is_written_in_the_option_names_the_export_targets(tmp_path: Path, precision: str,
                                                                                  recipe: str | None) -> None:
    # the line is written for the job's release, megatron-lm@core_v0.16.1, whose arguments.py generates
    # --moe-use-legacy-grouped-gemm from TransformerConfig.moe_use_legacy_grouped_gemm (core_v0.16.1
    # transformer_config.py line 655); under FP8 the flag keeps the experts in bf16 (core_v0.14.0 experts.py
    # GroupedMLP), the job's own numbers; import gives the job back on that release
    from primus.launch import import_launch

    megatron = export_job(_legacy(precision, recipe), "megatron")
    assert "    --moe-use-legacy-grouped-gemm \\" in megatron.text.splitlines()
    assert "Megatron-LM core_v0.16.1 argument names" in megatron.release
    path = tmp_path / "legacy.sh"
    path.write_text(megatron.text)
    back = import_launch("megatron", path).job
    assert back["moe"]["grouped_gemm"] == "legacy" and back["stack"] == "megatron-lm@core_v0.16.1"
    overrides = yaml.safe_load(export_job(_legacy(precision, recipe), "primus").text)["modules"]["pre_trainer"][
        "overrides"]
    assert overrides["moe_use_legacy_grouped_gemm"] is True


def test_the_legacy_grouped_gemm_cannot_recompute_its_activation_under_fp8() -> None:
    # core_v0.14.0 experts.py line 136: "moe_act recompute for fp8 cannot work with the legacy GroupedMLP"
    from primus.errors import InputError
    from primus.job import job_from_mapping

    data = _legacy("fp8", "delayed").spec.model_dump(mode="json", exclude_none=True)
    data["parallel"] = {**data["parallel"], "recompute": "selective", "recompute_modules": ["moe_act"]}
    with pytest.raises(InputError, match="moe_act"):
        export_job(job_from_mapping(data, "test"), "megatron")


def test_a_torchtitan_export_for_a_release_without_tomls_launches_the_registry_form() -> None:
    # torchtitan@2026.08 (pytorch/torchtitan b5bcd76) reads no TOML since #2386: the launch line is the
    # registry config with command-line overrides, and a note says the TOML keys are for v0.2.2
    from primus.job import job_from_mapping

    base = _job("llama3.1-70b", tp=8, sp=True, sharding="fsdp", nodes=8)
    data = {**base.spec.model_dump(mode="json", exclude_none=True), "stack": "torchtitan@2026.08"}
    exported = export_job(job_from_mapping(data, "test"), "torchtitan")
    launch = next(line for line in exported.text.splitlines() if line.startswith("# Launch"))
    assert launch.startswith("# Launch (torchtitan@2026.08): torchrun --nnodes 8 --nproc-per-node 8 "
                             "-m torchtitan.train --module llama3 --config llama3_70b")
    assert any("reads no TOML" in n for n in exported.notes)
