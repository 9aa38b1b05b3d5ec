"""Issue 18 item 2 and issue 21 items 1, 6: launch files in the structure the frameworks publish import
with the values their framework would read, and an imported model is named as what it is."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from primus.errors import InputError
from primus.job import load_job
from primus.launch import export_job, import_launch, load_launch_job
from primus.launch.arch import differences
from primus.launch.torchtitan import import_torchtitan_registry
from primus.solver.api import Question
from primus.solver.fit import fit
from primus.specs.params import count_params

DATA = Path(__file__).resolve().parent / "data"
TT_2025_02 = DATA / "launch" / "torchtitan" / "llama3_8b_2025_02.toml"
QWEN2_7B = DATA / "hf" / "qwen2-Qwen2-7B" / "Qwen2-7B.json"


def test_torchtitan_early_2025_batch_size_and_degrees_are_read() -> None:
    # torchtitan 57387af: `training.batch_size` (default 8) is the per-rank batch; read as local_batch_size
    # it is 1, not the default 8 that made llama3_8b.toml "DOES NOT FIT" (issue 18).
    job, config = load_launch_job("torchtitan", TT_2025_02, hardware="h100-80gb", nodes=1)
    assert (job.spec.parallel.mbs, job.spec.global_batch_size, job.spec.parallel.dp) == (1, 8, 8)
    assert any("training.batch_size read as training.local_batch_size" in n for n in config.notes)
    assert any("training.tensor_parallel_degree read as parallelism" in n for n in config.notes)
    assert fit(Question(job)).fits


def _qwen2_job(tmp_path: Path) -> Path:
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump({
        "model": str(QWEN2_7B), "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 64,
        "parallel": {"tp": 2, "pp": 1, "cp": 1, "dp": 4, "mbs": 1, "sp": True, "recompute": "selective",
                     "sharding": "dist_opt"}}))
    return path


def test_a_model_file_exported_and_imported_keeps_its_name(tmp_path: Path) -> None:
    # Issue 18: a Qwen2 7B exported and imported again came back as {base: llama3.1-405b, ...} and printed
    # as "llama3.1-405b on 8 x h100-80gb". The base is now the nearest in size, and the name travels.
    job = load_job(_qwen2_job(tmp_path))
    for kind in ("megatron", "primus"):
        out = tmp_path / f"exported.{kind}"
        out.write_text(export_job(job, kind).text)
        back, config = load_launch_job(kind, out)
        assert back.model.name == "Qwen2-7B"
        assert config.job["model"]["base"] == "llama3.1-8b"
        assert differences(back.model, job.model) == []


def test_quick_geglu_is_a_gated_ffn(tmp_path: Path) -> None:
    # Megatron-LM examples/gptoss/02_train.sh passes --quick-geglu (gated, like SwiGLU) and --window-size 127,0
    # for gpt-oss's 128-token sliding window.
    text = ("--num-layers 36 --hidden-size 2880 --num-attention-heads 64 --group-query-attention "
            "--num-query-groups 8 --kv-channels 64 --ffn-hidden-size 2880 --quick-geglu --softmax-type learnable "
            "--window-size 127,0 --window-attn-skip-freq 2 --num-experts 128 --moe-router-topk 4 "
            "--moe-ffn-hidden-size 2880 --untie-embeddings-and-output-weights --normalization RMSNorm "
            "--position-embedding-type rope --add-qkv-bias --vocab-size 201088 --attention-dropout 0.0 "
            "--hidden-dropout 0.0 --bf16 --seq-length 4096 --micro-batch-size 1 --global-batch-size 64")
    path = tmp_path / "gptoss.sh"
    path.write_text(text)
    config = import_launch("megatron", path, hardware="h100-80gb", nodes=8)
    model = config.job["model"]
    assert isinstance(model, dict) and "swiglu" not in model and "window_size" not in model
    assert any("--quick-geglu" in n for n in config.notes)


TT_CHECKOUT = DATA / "launch" / "torchtitan_checkout" / "torchtitan" / "models"


def test_torchtitan_flavor_outside_the_table_is_read_from_the_checkout() -> None:
    # Qwen3 1.7B: 28 layers, dim 2048, 16 heads / 8 KV heads of 128, FFN 6144, tied embeddings, QK-norm:
    # 1,720,574,976 parameters (Hugging Face Qwen/Qwen3-1.7B, 1.7B; 1.4B without embeddings)
    job, config = load_launch_job("torchtitan", TT_CHECKOUT / "qwen3" / "train_configs" / "qwen3_1.7b.toml",
                                  hardware="h100-80gb", nodes=1)
    assert job.model.name == "qwen3-1.7B"
    assert count_params(job.model).total == 1_720_574_976
    assert any("read from" in n and "statically" in n for n in config.notes)


def test_a_torchtitan_image_model_is_not_supported() -> None:
    with pytest.raises(InputError, match="not supported: diffusion"):
        import_launch("torchtitan", TT_CHECKOUT / "flux" / "train_configs" / "flux_dev_model.toml",
                      hardware="h100-80gb", nodes=1)


REGISTRY = DATA / "launch" / "torchtitan_registry" / "torchtitan" / "models" / "llama3" / "config_registry.py"


def test_torchtitan_config_registry_function_is_read_statically() -> None:
    # torchtitan after #2386: a Trainer.Config function; 2 x 8192 tokens per microbatch at context 8192 is MBS 2
    config = import_torchtitan_registry(REGISTRY, "llama3_70b", hardware="h100-80gb", nodes=8)
    job = config.job
    assert job["model"] == "llama3.1-70b" and (job["seq_len"], job["global_batch_size"]) == (8192, 16)
    par = job["parallel"]
    assert (par["tp"], par["dp"], par["mbs"], par["recompute"], par["sharding"]) == (8, 8, 2, "full", "fsdp")
    assert "kernels" not in job  # ChunkedLossWrapper: never the whole fp32 logits, not an eager loss
    assert any("ChunkedLossWrapper" in n for n in config.notes)


def test_a_registry_function_that_modifies_its_base_is_followed() -> None:
    config = import_torchtitan_registry(REGISTRY, "llama3_70b_fp8", hardware="h100-80gb", nodes=8)
    job = config.job
    assert (job["precision"], job["fp8_recipe"]) == ("fp8", "tensorwise")  # Float8LinearConverter
    assert job["parallel"]["cp"] == 2 and job["seq_len"] == 16384  # config.x.y = ... after the base
    assert job["parallel"]["mbs"] == 1  # 16384 tokens per microbatch over a 16384-token context
    with pytest.raises(InputError, match="no function 'llama3_8b'"):
        import_torchtitan_registry(REGISTRY, "llama3_8b", hardware="h100-80gb", nodes=8)


def test_import_command_takes_a_config_registry() -> None:
    from click.testing import CliRunner

    from primus.cli.launch_cmds import import_cmd

    ok = CliRunner().invoke(import_cmd, ["--from", "torchtitan", "--config-registry", str(REGISTRY), "--config",
                                         "llama3_70b", "--hardware", "h100-80gb", "--nodes", "8"])
    assert ok.exit_code == 0 and "model: llama3.1-70b" in ok.output
    neither = CliRunner().invoke(import_cmd, ["--from", "torchtitan", "--hardware", "h100-80gb"])
    assert neither.exit_code == 2 and "exactly one" in neither.output


def test_torchtitan_deepseek_16b_flavor_is_read_with_mla_and_shared_experts() -> None:
    # torchtitan's DeepSeek-V3 "16B" has DeepSeek-V2-Lite's shape: 15,706,484,224 parameters, the same count
    # primus gives Megatron-LM's own DeepSeek-V2-Lite model definition (Hugging Face lists 15.7B)
    job, _ = load_launch_job("torchtitan", TT_CHECKOUT / "deepseek_v3" / "train_configs" / "deepseek_v3_16b.toml",
                             hardware="h100-80gb", nodes=1)
    assert job.model.multi_latent_attention and job.model.q_lora_rank is None
    assert (job.model.num_moe_layers, job.model.num_dense_layers) == (26, 1)
    assert count_params(job.model).total == 15_706_484_224


@pytest.mark.parametrize(("flavor", "total", "moe_layers"), [
    # Scout: 48 layers x (attention 62,914,560 + 16 experts and 1 shared of 3 x 5120 x 8192 + router
    # 81,920 + norms 10,240) + 2 x 202,048 x 5120 embeddings + final norm = 107,769,861,120 (Meta: "17B
    # active, 109B total", the total with the vision encoder)
    ("17bx16e", 107_769_861_120, 48),
    # Maverick: MoE every second layer (24 x 128 experts), dense SwiGLU of 16,384 in between: "400B total"
    ("17bx128e", 400_711_848_960, 24),
])
def test_torchtitan_llama4_flavors_are_read_with_interleaved_moe(flavor: str, total: int, moe_layers: int) -> None:
    # the expert width is the auto-scaled one: 2/3 x 4 x 5120 x 1.2 / (top-1 + 1 shared) -> 8,192
    job, _ = load_launch_job("torchtitan", TT_CHECKOUT / "llama4" / "train_configs" / f"llama4_{flavor}.toml",
                             hardware="h100-80gb", nodes=8)
    assert job.model.moe_ffn_hidden_size == 8192 and job.model.moe_shared_expert_intermediate_size == 8192
    assert job.model.num_moe_layers == moe_layers and job.model.moe_router_topk == 1
    assert count_params(job.model).total == total


def test_a_gpt_oss_flavor_built_by_a_function_is_read_with_sinks_biases_and_windows() -> None:
    # 2 layers x (QKV 512 x (64 + 2 x 8) x 64 + bias, O 4096 x 512 + bias, 64 sinks, router 512 x 4 + bias,
    # 4 experts of 512 -> 2 x 1024 -> 512 with biases, 2 norms) + untied 4096 x 512 embeddings + norm
    # = 26,252,936; the attention shape is _make_gptoss_attn_config's default (64 heads, 8 KV of 64)
    config = import_torchtitan_registry(REGISTRY.parent.parent / "gpt_oss" / "config_registry.py", "gpt_oss_small",
                                        hardware="h100-80gb", nodes=1)
    from primus.catalog.models import resolve_model

    model = resolve_model(config.job["model"], "test")
    assert (model.softmax_type, model.window_size, model.window_attn_skip_freq) == ("learnable", 128, 2)
    assert count_params(model).total == 26_252_936


def test_a_kimi_text_tower_is_read_and_a_vision_language_flavor_refused() -> None:
    # Moonlight's structure: a flavor returns a shared builder's config, called with its settings. MLA without
    # a query LoRA, one dense layer then 3 MoE layers of 8 experts + 1 shared: 73,041,920 parameters
    registry = REGISTRY.parent.parent / "kimi_k2_7" / "config_registry.py"
    config = import_torchtitan_registry(registry, "kimi_text", hardware="h100-80gb", nodes=1)
    from primus.catalog.models import resolve_model

    model = resolve_model(config.job["model"], "test")
    assert model.multi_latent_attention and (model.num_dense_layers, model.num_moe_layers) == (1, 3)
    assert count_params(model).total == 73_041_920
    with pytest.raises(InputError, match="not supported: a vision-language model"):
        import_torchtitan_registry(registry, "kimi_vl", hardware="h100-80gb", nodes=1)


def test_a_flavor_built_by_a_function_is_read_from_the_package() -> None:
    # torchtitan after #2386 builds flavors in functions (llama3_configs = {"1B": _1b}); Llama 3.2 1B has
    # 1,235,814,400 parameters (Hugging Face meta-llama/Llama-3.2-1B, tied embeddings)
    config = import_torchtitan_registry(REGISTRY, "llama3_1b", hardware="h100-80gb", nodes=1)
    from primus.catalog.models import resolve_model

    model = resolve_model(config.job["model"], "test")
    assert model.name == "llama3-1B" and count_params(model).total == 1_235_814_400
    assert config.job["parallel"]["mbs"] == 4


LAUNCH = DATA / "launch"
#: Every launch fixture written in the structure the frameworks publish, and what importing it gives:
#: a catalog model, a derived model's name, or the refusal's words (exit 2).
CORPUS = [
    ("megatron", "megatron/llama3_8b_arrays_fp8.sh", "llama3-8b"),
    ("megatron", "megatron/llama3.1_8b_model_args.sh", "llama3.1-8b"),
    ("megatron", "megatron/hybrid_model_args.sh", "not supported: hybrid"),
    ("megatron", "megatron/bert_arrays.sh", "not supported: BERT"),
    ("primus", "primus_checkout/examples/megatron/configs/MI355X/mixtral_8x22B_v0.1-BF16-pretrain.yaml",
     "mixtral-8x22b"),
    ("primus", "primus_checkout/examples/megatron/configs/MI355X/mixtral_8x22B_v0.1-BF16-4node.yaml",
     "mixtral-8x22b"),
    ("primus", "primus_checkout/examples/megatron/configs/MI355X/zebra_hybrid_1B-pretrain.yaml",
     "not supported: mamba"),
    ("torchtitan", "torchtitan/llama3_8b_2025_02.toml", "llama3.1-8b"),
    ("torchtitan", "torchtitan_checkout/torchtitan/models/qwen3/train_configs/qwen3_1.7b.toml", "qwen3-1.7B"),
    ("torchtitan", "torchtitan_checkout/torchtitan/models/deepseek_v3/train_configs/deepseek_v3_16b.toml",
     "deepseek-v2-lite"),  # the catalog model of that shape (checkpoint-exact count)
    ("torchtitan", "torchtitan_checkout/torchtitan/models/flux/train_configs/flux_dev_model.toml",
     "not supported: diffusion"),
]


@pytest.mark.parametrize(("kind", "name", "expected"), CORPUS)
def test_the_fixture_corpus_imports_as_its_framework_would(kind: str, name: str, expected: str) -> None:
    hardware = "mi355x" if kind == "primus" else "h100-80gb"
    if expected.startswith("not supported"):
        with pytest.raises(InputError, match=expected):
            import_launch(kind, LAUNCH / name, hardware=hardware, nodes=4)
        return
    config = import_launch(kind, LAUNCH / name, hardware=hardware, nodes=None if "arrays" in name else 4)
    ref = config.job["model"]
    assert (ref if isinstance(ref, str) else ref["name"]) == expected


MUSE = REGISTRY.parent.parent / "muse_glimmer" / "config_registry.py"


def test_a_gated_sandwich_decoder_flavor_is_read_exactly_from_its_builders() -> None:
    # Muse Glimmer's structure: 6 layers x (4 norms of 512 + wq, wo and the o_gate 512 x 8 x 96 each + wk, wv
    # 512 x 2 x 96 each + SwiGLU 3 x 512 x int(2.5 x 512)) + untied 3000 x 512 embeddings + final norm
    # = 6 x 3,344,384 + 3,072,000 + 512 = 23,138,816; the q/k and embedding norms have no weights
    config = import_torchtitan_registry(MUSE, "muse_small", hardware="h100-80gb", nodes=1)
    from primus.catalog.models import resolve_model

    model = resolve_model(config.job["model"], "test")
    assert count_params(model).total == 23_138_816
    assert (model.norm_placement, model.attention_output_gate, model.qk_layernorm_affine) == ("sandwich", True, False)
    assert (model.ffn_hidden_size, model.kv_channels) == (1280, 96)
    # window pattern [256, 256, 0] aligned to the 3-layer NoPE phase: layers 2 and 5 global
    assert (model.window_size, model.window_attn_skip_freq) == (256, 3)
    assert model.make_vocab_size_divisible_by == 1  # 3,000 rows, as torchtitan builds them: no padding
    assert model.scalings == {"output_multiplier": 0.5, "output_soft_cap_temp": 15.0}


def test_a_flavor_chosen_through_partial_with_a_vision_encoder_is_refused() -> None:
    with pytest.raises(InputError, match="not supported: a vision-language model"):
        import_torchtitan_registry(MUSE, "muse_small_mm", hardware="h100-80gb", nodes=1)


def test_a_config_returning_another_config_function_called_with_settings_is_followed() -> None:
    # muse_small_flex() returns _base(attn_backend="flex"): the same job as muse_small(), whose _base() runs
    # with its default backend
    flex = import_torchtitan_registry(MUSE, "muse_small_flex", hardware="h100-80gb", nodes=1)
    plain = import_torchtitan_registry(MUSE, "muse_small", hardware="h100-80gb", nodes=1)
    assert flex.job == plain.job and flex.job["parallel"]["mbs"] == 2


def test_model_registry_num_mtp_layers_builds_the_mtp_blocks() -> None:
    # 2 MTP blocks of (enorm + hnorm 2 x 512, eh_proj 1024 x 512, one decoder layer 3,344,384, a norm 512)
    config = import_torchtitan_registry(MUSE, "muse_small_mtp", hardware="h100-80gb", nodes=1)
    from primus.catalog.models import resolve_model

    model = resolve_model(config.job["model"], "test")
    assert model.mtp_num_layers == 2 and count_params(model).mtp_total == 2 * 3_870_208
    assert not any("num_mtp_layers" in n and "not read" in n for n in config.notes)


def test_a_registry_helper_that_is_not_a_config_says_so() -> None:
    with pytest.raises(InputError, match=r"not a config: enable_fused_kernels\(config\) -> None"):
        import_torchtitan_registry(MUSE, "enable_fused_kernels", hardware="h100-80gb", nodes=1)


def test_a_conf_file_of_parallel_sizes_names_the_model_file_to_import() -> None:
    with pytest.raises(InputError, match=r"not a model definition: it sets only parallel sizes \(TP, PP, EP\).*"
                                         r"Acme-8B-Instruct\.sh beside it"):
        import_launch("megatron", LAUNCH / "megatron" / "parallel_sizes_only.sh", hardware="h100-80gb")
    model = import_launch("megatron", LAUNCH / "megatron" / "Acme-8B-Instruct.sh", hardware="h100-80gb")
    assert model.model_only


def test_a_file_world_size_that_contradicts_its_layout_says_where_it_came_from() -> None:
    # the GPT-3 175B example's torchrun asks for NUM_NODES=1 x 8 GPUs while TP 8 x PP 16 needs 128
    with pytest.raises(InputError, match=r"the world size is the file's torchrun \(--nnodes 1 x --nproc-per-node 8\)"
                                         r".*--nodes 16 at the least"):
        import_launch("megatron", LAUNCH / "gpt3_175b_distributed.sh", hardware="h100-80gb")
    assert import_launch("megatron", LAUNCH / "gpt3_175b_distributed.sh", hardware="h100-80gb",
                         nodes=16).job["parallel"]["dp"] == 1


@pytest.mark.parametrize(("name", "words"), [
    ("hf_sft.template.yaml", r"not an experiment: a template \(<YOUR_MODEL_YAML>"),
    ("llama3_8B-lora-overlay.yaml", r"not an experiment: .* has none \(top-level keys: extends, lora"),
])
def test_a_primus_yaml_that_is_not_an_experiment_says_what_it_is(name: str, words: str) -> None:
    path = LAUNCH / "primus_checkout" / "examples" / "megatron" / "configs" / "MI355X" / name
    with pytest.raises(InputError, match=words):
        import_launch("primus", path, hardware="mi355x", nodes=1)


def test_a_flavor_whose_vocabulary_comes_from_the_tokenizer_says_so() -> None:
    # torchtitan v0.1.0's debug_model.toml: debugmodel's vocab_size is the ModelArgs default -1, set from
    # model.tokenizer_path when the job starts
    with pytest.raises(InputError, match="vocab_size is -1: torchtitan sets it from the tokenizer file"):
        import_launch("torchtitan", TT_CHECKOUT / "qwen3" / "train_configs" / "debug_model.toml",
                      hardware="h100-80gb", nodes=1)


def test_the_nodes_a_contradicted_layout_needs_are_the_fewest_it_divides(tmp_path: Path) -> None:
    # TP 3 on nodes of 8 GPUs: one node (8) and two (16) do not divide; three (24) are the fewest that do
    text = (LAUNCH / "gpt3_175b_distributed.sh").read_text()
    text = text.replace("--tensor-model-parallel-size 8", "--tensor-model-parallel-size 3").replace(
        "--pipeline-model-parallel-size 16", "--pipeline-model-parallel-size 1")
    path = tmp_path / "tp3.sh"
    path.write_text(text)
    with pytest.raises(InputError, match=r"TP×PP×CP = 3 does not divide.*--nodes 3 at the least"):
        import_launch("megatron", path, hardware="h100-80gb")
