"""Issue 21 item 2: a Primus experiment's model file is read from the Primus checkout it lives in (with
its `extends:` chain, and a placeholder name), falls back to the catalog with the missing file named,
and a model that is not a transformer decoder is refused as "not supported"."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from primus.cli.launch_cmds import import_cmd
from primus.errors import InputError
from primus.launch import import_launch, load_launch_job
from primus.solver.api import Question
from primus.solver.fit import fit

LAUNCH = Path(__file__).resolve().parent / "data" / "launch"
CHECKOUT = LAUNCH / "primus_checkout"  # the layout of AMD-AGI/Primus fd1eeab, written for these tests
MI355X = CHECKOUT / "examples" / "megatron" / "configs" / "MI355X"
EXAMPLE = MI355X / "mixtral_8x22B_v0.1-BF16-pretrain.yaml"
FOUR_NODE = MI355X / "mixtral_8x22B_v0.1-BF16-4node.yaml"


def test_mixtral_8x22b_model_file_is_read_through_its_extends_chain() -> None:
    config = import_launch("primus", EXAMPLE, hardware="mi355x", nodes=4)
    assert config.job["model"] == "mixtral-8x22b"  # 56 x 6144, 48 heads / 8 groups, 8 experts top-2
    chain = "mixtral_8x22B_v0.1.yaml < mixtral_base.yaml < llama_base.yaml < language_model.yaml"
    assert any(chain in n for n in config.notes)
    # no vocab_size anywhere: the tokenizer mistralai/Mixtral-8x22B-v0.1 gives 32000
    assert any("vocabulary 32000 from the tokenizer of mistralai/Mixtral-8x22B-v0.1" in n for n in config.notes)
    # recompute_num_layers 0 with the block method recomputes nothing
    assert config.job["parallel"]["recompute"] == "none"


def test_amd_published_4_node_mixtral_recipe_fits_at_about_238_gib() -> None:
    # AMD-AGI/Primus docs/02-user-guide/megatron-lm-training.md: MBS 1, GBS 512, PP 4 x VP 2, EP 8, full block
    # recompute of 1 layer, 4 nodes of MI355X; the ledger puts stage 0 at about 238 GiB (issue 18).
    job, config = load_launch_job("primus", FOUR_NODE, hardware="mi355x", nodes=4)
    assert any("${PRIMUS_MODEL:mixtral_8x22B_v0.1} read as its default" in n for n in config.notes)
    assert job.model.name == "mixtral-8x22b" and job.num_gpus == 32
    result = fit(Question(job))
    assert result.fits and result.report is not None
    assert 237 * 2**30 < result.report.peak_bytes < 239 * 2**30


def test_without_a_checkout_the_published_copy_is_read_and_the_missing_file_is_named(tmp_path: Path) -> None:
    alone = tmp_path / "exp.yaml"
    shutil.copy(EXAMPLE, alone)
    config = import_launch("primus", alone, hardware="mi355x", nodes=4)
    assert config.job["model"] == "mixtral-8x22b"
    assert any("no Primus checkout holds mixtral_8x22B_v0.1.yaml" in n and "read as published at AMD-AGI/Primus "
               "fd1eeab" in n and "mixtral_8x22B_v0.1.yaml < mixtral_base.yaml" in n for n in config.notes)


@pytest.mark.parametrize("name", ["mixtral_8x22B_v0.1.yaml"])
def test_the_shipped_copy_of_a_model_file_reads_as_the_checkout_s_file(name: str) -> None:
    # the test checkout holds the keys of AMD-AGI/Primus fd1eeab's files that its tests need; merged through
    # their chains, the copy primus ships (primus_published) gives each the same value, so an import reads
    # the same model with or without a checkout
    from primus.launch.common import Collector
    from primus.launch.primus_models import read_model_file
    from primus.launch.primus_published import published_model_file

    checkout = read_model_file(CHECKOUT, name, "test", Collector())
    shipped = published_model_file(name, "test", Collector())
    assert checkout is not None and shipped is not None
    assert {k: shipped.values.get(k) for k in checkout.values} == checkout.values


def test_every_model_file_primus_knows_is_shipped_and_reads_as_its_catalog_model() -> None:
    from primus.launch.common import Collector
    from primus.launch.primus_models import MODEL_FILES
    from primus.launch.primus_published import published_model_file

    for slug, name in MODEL_FILES.items():
        found = published_model_file(name, "test", Collector())
        assert found is not None and found.chain[0] == name and "language_model.yaml" in found.chain, slug
        assert found.values["num_layers"] > 0 and found.values["hidden_size"] > 0


@pytest.mark.parametrize(("model_file", "overrides", "expected"), [
    # grok1.yaml (fd1eeab) runs Mixtral-8x22B-v0.1's tokenizer: a 32,000-row vocabulary, not Grok-1's 131,072
    ("grok1.yaml", "", {"vocab_size": 32000}),
    # deepseek_v2_lite-BF16-pretrain.yaml turns MLA off; deepseek_v2_base.yaml then gives qk_layernorm true and
    # kv_channels 128 for the standard attention that takes its place
    ("deepseek_v2_lite.yaml", "      multi_latent_attention: false\n",
     {"multi_latent_attention": False, "qk_layernorm": True, "kv_channels": 128}),
])
def test_without_a_checkout_the_published_file_s_architecture_applies(tmp_path: Path, model_file: str, overrides: str,
                                                                      expected: dict[str, object]) -> None:
    # review 45, M6: the same experiment read two ways (grok1 146.4 GiB with a checkout, 154.1 without)
    path = tmp_path / "exp.yaml"
    path.write_text("modules:\n  pre_trainer:\n    framework: megatron\n    config: pre_trainer.yaml\n"
                    f"    model: {model_file}\n    overrides:\n      micro_batch_size: 1\n"
                    "      global_batch_size: 64\n      seq_length: 4096\n" + overrides)
    model = import_launch("primus", path, hardware="mi355x", nodes=8).job["model"]
    assert isinstance(model, dict) and all(model[k] == v for k, v in expected.items())


def test_without_a_checkout_the_published_file_s_moe_settings_still_apply(tmp_path: Path) -> None:
    # mixtral_base.yaml lines 16-17 (AMD-AGI/Primus fd1eeab): grouped GEMM and the alltoall dispatcher, not
    # Megatron-LM's argument default (allgather): the same job with or without the checkout
    alone = tmp_path / "exp.yaml"
    shutil.copy(EXAMPLE, alone)
    with_checkout = import_launch("primus", EXAMPLE, hardware="mi355x", nodes=4).job
    without = import_launch("primus", alone, hardware="mi355x", nodes=4).job
    assert without["moe"] == with_checkout["moe"] and without["moe"]["token_dispatcher"] == "alltoall"


def test_deepseek_v3_without_a_checkout_reads_its_preset_dispatcher_fusion_and_ep(tmp_path: Path) -> None:
    # deepseek_v3_base.yaml lines 34 and 47-49: alltoall, grouped GEMM, fused permutation; deepseek_v3.yaml
    # line 34: expert_model_parallel_size 8 (fd1eeab). The overrides still win over the file.
    path = tmp_path / "dsv3.yaml"
    path.write_text("modules:\n  pre_trainer:\n    framework: megatron\n    config: pre_trainer.yaml\n"
                    "    model: deepseek_v3.yaml\n    overrides:\n      micro_batch_size: 1\n"
                    "      global_batch_size: 256\n      seq_length: 4096\n      pipeline_model_parallel_size: 8\n")
    job = import_launch("primus", path, hardware="mi355x", nodes=32).job
    assert (job["moe"]["token_dispatcher"], job["moe"]["permute_fusion"], job["parallel"]["ep"]) == \
        ("alltoall", True, 8)
    path.write_text(path.read_text() + "      expert_model_parallel_size: 16\n")
    assert import_launch("primus", path, hardware="mi355x", nodes=32).job["parallel"]["ep"] == 16


def test_an_unknown_model_file_is_named_not_the_vocabulary() -> None:
    with pytest.raises(InputError, match=r"qwen2\.5_7B\.yaml is not in .*primus/configs/models/megatron") as exc:
        import_launch("primus", MI355X / "qwen2.5_7B-BF16-pretrain.yaml", hardware="mi355x", nodes=1)
    assert "vocab" not in exc.value.reason


def test_a_hybrid_model_file_is_not_supported() -> None:
    with pytest.raises(InputError, match="not supported: mamba"):
        import_launch("primus", MI355X / "zebra_hybrid_1B-pretrain.yaml", hardware="mi355x", nodes=1)


def test_primus_root_names_the_checkout(tmp_path: Path) -> None:
    alone = tmp_path / "exp.yaml"
    shutil.copy(EXAMPLE, alone)
    result = CliRunner().invoke(import_cmd, ["--from", "primus", str(alone), "--hardware", "mi355x", "--nodes", "4",
                                             "--primus-root", str(CHECKOUT)])
    assert result.exit_code == 0, result.output
    assert "read from the Primus checkout" in result.output
    bad = CliRunner().invoke(import_cmd, ["--from", "primus", str(alone), "--hardware", "mi355x", "--nodes", "4",
                                          "--primus-root", str(tmp_path)])
    assert bad.exit_code == 2 and "not a Primus checkout" in bad.output


def test_recompute_layers_beyond_a_virtual_chunk_are_what_megatron_accepts() -> None:
    # AMD's Grok-1 YAMLs (AMD-AGI/Primus fd1eeab examples/megatron/configs/MI300X/grok1-BF16-pretrain.yaml):
    # recompute_num_layers 8 at PP 4 x VP 4 over 64 layers (4 layers per chunk). Megatron-LM recomputes
    # min(8, 4) layers per chunk (megatron/core/recompute.py) and bounds the setting only by the 16 layers
    # of a pipeline rank (transformer_config.py): primus has no rule on the count.
    from primus.launch import axes_job

    job = axes_job({"model": "grok-1-314b", "hardware": "mi300x", "nodes": 8, "seq_len": 8192,
                    "global_batch_size": 128, "precision": "bf16", "tp": 1, "pp": 4, "vp": 4, "cp": 1, "ep": 8,
                    "etp": 1, "mbs": 2, "sp": False, "recompute": "full", "recompute_method": "block",
                    "recompute_num_layers": 8, "sharding": "dist_opt"})
    result = fit(Question(job))
    assert result.fits, result.violated_rules


def test_block_recompute_count_above_a_pipeline_rank_is_what_megatron_runs() -> None:
    # review 50 M3 (hostile/rnl.yaml): full block recompute with --recompute-num-layers 32 at PP 4 over 32
    # layers. core_v0.18.0 transformer_config.py lines 1562-1568 raise only when the count is None, and
    # megatron/core/recompute.py lines 155-161 re-run the layers below the count: all 8 of each rank.
    from primus.launch import axes_job

    job = axes_job({"model": "llama3-8b", "hardware": "h100-80gb", "nodes": 1, "seq_len": 8192,
                    "global_batch_size": 64, "precision": "bf16", "tp": 2, "pp": 4, "vp": 1, "cp": 1, "ep": 1,
                    "etp": 1, "mbs": 1, "sp": True, "recompute": "full", "recompute_method": "block",
                    "recompute_num_layers": 32, "sharding": "dist_opt"})
    every = job.with_spec(parallel={**job.spec.parallel.model_dump(), "recompute_num_layers": 8})
    result, same = fit(Question(job)), fit(Question(every))
    assert result.fits, result.violated_rules
    assert result.report is not None and same.report is not None
    assert result.report.peak_bytes == same.report.peak_bytes  # min(32, 8 layers per rank) = 8


def test_mxfp4_recipe_is_noted_not_silently_nvfp4(tmp_path: Path) -> None:
    fp4 = "      fp4: e2m1\n      fp4_recipe: mxfp4\n"
    text = EXAMPLE.read_text().replace("      cross_entropy_loss_fusion: true\n",
                                       "      cross_entropy_loss_fusion: true\n" + fp4)
    path = tmp_path / "mxfp4.yaml"
    path.write_text(text)
    config = import_launch("primus", path, hardware="mi355x", nodes=4, primus_root=CHECKOUT)
    assert config.job["precision"] == "nvfp4"
    assert any("fp4_recipe mxfp4: modelled as nvfp4" in n for n in config.notes)


def test_fit_from_a_primus_experiment_takes_primus_root(tmp_path: Path) -> None:
    from primus.cli.solver_cmds import fit_cmd

    alone = tmp_path / "exp.yaml"
    shutil.copy(FOUR_NODE, alone)
    result = CliRunner().invoke(fit_cmd, ["--from", "primus", str(alone), "--hardware", "mi355x", "--nodes", "4",
                                          "--primus-root", str(CHECKOUT)])
    assert result.exit_code == 0, result.output
    assert "read from the Primus checkout" in result.output and "FITS" in result.output


# A MiniMax-M2.5-shaped model file (MiniMaxAI/MiniMax-M2.5 config.json: 62 layers, hidden 3072, 48 query and
# 8 KV heads of 128, 256 experts of width 1536, top-8, QK norm, untied embeddings, a 200,064-row vocabulary
# left to its tokenizer; MiniMax publishes 229B parameters), written here in Primus's model-file form.
MINIMAX_LIKE = """bases:
  - language_model.yaml
tokenizer_type: HuggingFaceTokenizer
tokenizer_model: MiniMaxAI/MiniMax-M2.5
num_layers: 62
hidden_size: 3072
ffn_hidden_size: 1536
num_attention_heads: 48
group_query_attention: true
num_query_groups: 8
qk_layernorm: true
kv_channels: 128
moe_layer_freq: 1
num_experts: 256
moe_router_topk: 8
swiglu: true
normalization: RMSNorm
position_embedding_type: rope
untie_embeddings_and_output_weights: true
hidden_dropout: 0.0
attention_dropout: 0.0
"""


def _minimax_experiment(tmp_path: Path, pipeline: str) -> Path:
    root = tmp_path / "checkout"
    shutil.copytree(CHECKOUT, root)
    (root / "primus/configs/models/megatron/minimax_like.yaml").write_text(MINIMAX_LIKE)
    path = root / "examples/megatron/configs/MI355X/minimax_like-BF16-pretrain.yaml"
    path.write_text("modules:\n  pre_trainer:\n    config: pre_trainer.yaml\n    framework: megatron\n"
                    "    model: minimax_like.yaml\n    overrides:\n      micro_batch_size: 1\n"
                    "      global_batch_size: 256\n      seq_length: 4096\n      max_position_embeddings: 4096\n"
                    "      pipeline_model_parallel_size: 4\n      expert_model_parallel_size: 8\n" + pipeline)
    return path


def test_a_minimax_model_file_takes_its_tokenizers_vocabulary_and_counts_229b(tmp_path: Path) -> None:
    from primus.specs.params import count_params

    # both a VP size and a layout string, as AMD's MiniMax-M2.5 file gives them: Megatron-LM (d98e8a6
    # arguments.py) derives VP from the layout, here 8 stages over PP 4 = 2, which the VP size agrees with
    path = _minimax_experiment(tmp_path, "      virtual_pipeline_model_parallel_size: 2\n"
                                         "      pipeline_model_parallel_layout: 'Et*7|t*8|t*8|t*8|t*8|t*8|t*8|t*7,L'\n")
    job, config = load_launch_job("primus", path, hardware="mi355x", nodes=4)
    assert any("vocabulary 200064 from the tokenizer of MiniMaxAI/MiniMax-M2.5" in n for n in config.notes)
    assert job.spec.parallel.vp == 2
    assert count_params(job.model).total == 228_689_320_448


def test_a_vp_size_that_contradicts_the_layout_is_refused(tmp_path: Path) -> None:
    path = _minimax_experiment(tmp_path, "      virtual_pipeline_model_parallel_size: 3\n"
                                         "      pipeline_model_parallel_layout: 'Et*7|t*8|t*8|t*8|t*8|t*8|t*8|t*7,L'\n")
    with pytest.raises(InputError, match="contradicts the 2 virtual stages"):
        import_launch("primus", path, hardware="mi355x", nodes=4)
