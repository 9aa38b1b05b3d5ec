"""Specification of the Hugging Face families beyond Llama: every supported model_type counts exactly what
`transformers` builds, the fields that are easy to misread are read as their configuration class means
them, and what they change reaches the ledger and the projection.

The reference for a total is `transformers` itself (tests/helpers/hf_reference.py: the causal-LM model
built from the config on the meta device, parameters summed, tied weights once). The fixtures under
tests/data/hf/<model_type>-<name>/config.json carry the published config.json field values of the named
Hugging Face repositories (rope-scaling factor tables and tokenizer ids aside where noted in no count).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from primus.catalog.hf import supported_families
from primus.catalog.models import resolve_model
from primus.errors import InputError
from primus.memory.activations import ActContext, layer_inventory
from primus.memory.numerics import numerics_for
from primus.memory.units import param_units
from primus.projection.ops import OpContext, layer_block
from primus.specs.flops import flops_per_token
from primus.specs.model import ModelSpec
from primus.specs.params import count_params
from tests.helpers.hf_reference import transformers_param_count

HF = Path(__file__).parent / "data" / "hf"
FIXTURES = sorted(HF.glob("*/*.json"))


def fixture(name: str) -> Path:
    return HF / name / "config.json"


def config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(fixture(name).read_text(encoding="utf-8"))
    return data


def load(path: Path) -> ModelSpec:
    return resolve_model(str(path), "test")


def load_dict(tmp_path: Path, data: dict[str, Any]) -> ModelSpec:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return load(path)


def variant(spec: ModelSpec, **changes: Any) -> ModelSpec:
    """The same model with some fields changed, validated like any spec."""
    return ModelSpec.model_validate({**spec.model_dump(), **changes})


def model_type(path: Path) -> str:
    return path.parent.name.split("-", 1)[0]


# ---- the total is transformers' own count ----------------------------------------------------------


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.parent.name)
def test_total_equals_transformers_meta_device_count(path: Path) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert count_params(load(path)).total == transformers_param_count(data)


def test_every_supported_model_type_has_a_published_config_fixture() -> None:
    # llama4_text is read through the text_config of the llama4 fixtures
    assert set(supported_families()) - {model_type(p) for p in FIXTURES} == {"llama4_text"}


VARIANTS: list[tuple[str, dict[str, Any]]] = [
    # (fixture, overrides): branches the published configs do not take, against transformers too
    ("olmo2-OLMo-2-1124-7B", {"num_key_value_heads": 8}),  # GQA: the k norm is kv_heads × head_dim wide
    ("olmo2-OLMo-2-1124-7B", {"attention_bias": True, "tie_word_embeddings": True}),
    ("qwen2_moe-Qwen1.5-MoE-A2.7B", {"decoder_sparse_step": 2, "mlp_only_layers": [1]}),
    ("qwen2_moe-Qwen1.5-MoE-A2.7B", {"qkv_bias": False}),
    ("gemma2-gemma-2-2b", {"attention_bias": True}),
    ("phimoe-Phi-3.5-MoE-instruct", {"lm_head_bias": False, "attention_bias": False}),
    ("phimoe-Phi-3.5-MoE-instruct", {"tie_word_embeddings": True}),  # the lm_head bias stays its own
    ("glm4_moe-GLM-4.5-Air", {"n_shared_experts": 2, "first_k_dense_replace": 4}),
    ("deepseek_v2-DeepSeek-V2-Lite", {"first_k_dense_replace": 0}),
    ("granitemoe-granite-3.0-1b-a400m-base", {"tie_word_embeddings": False}),
    ("olmoe-OLMoE-1B-7B-0924", {"num_key_value_heads": 4}),
]


@pytest.mark.parametrize(("name", "overrides"), VARIANTS, ids=[f"{n}:{','.join(o)}" for n, o in VARIANTS])
def test_variant_total_equals_transformers_count(tmp_path: Path, name: str, overrides: dict[str, Any]) -> None:
    data = {**config(name), **overrides}
    assert count_params(load_dict(tmp_path, data)).total == transformers_param_count(data)


#: (fixture, key dropped): a config without the key takes its class default, which the count must match.
#: Qwen3Config's num_key_value_heads defaults to 32 (not the published 8); Qwen3MoeConfig has no head_dim, so
#: Qwen3MoeAttention takes hidden / heads = 2048 / 32 = 64 (not the published 128): 9,096,705,024 and
#: 30,079,131,648 parameters with transformers 5.25 (the published configs: 8,190,735,360 and 30,532,122,624).
DROPPED: list[tuple[str, str, int]] = [
    ("qwen3-Qwen3-8B", "num_key_value_heads", 9_096_705_024),
    ("qwen3_moe-Qwen3-30B-A3B", "head_dim", 30_079_131_648),
]


@pytest.mark.parametrize(("name", "key", "total"), DROPPED, ids=[f"{n}:-{k}" for n, k, _ in DROPPED])
def test_a_dropped_key_takes_the_class_default_as_transformers_does(tmp_path: Path, name: str, key: str,
                                                                      total: int) -> None:
    data = {k: v for k, v in config(name).items() if k != key}
    assert count_params(load_dict(tmp_path, data)).total == transformers_param_count(data) == total


@pytest.mark.parametrize(("name", "interleave", "moe_layers"), [
    ("llama4-Llama-4-Maverick-17B-128E", 2, 24), ("llama4-Llama-4-Maverick-17B-128E", 4, 12)])
def test_llama4_interleaved_moe_layers_without_a_list_count_like_transformers(
        tmp_path: Path, name: str, interleave: int, moe_layers: int) -> None:
    data = config(name)
    text = {k: v for k, v in data["text_config"].items() if k != "moe_layers"}
    data["text_config"] = {**text, "interleave_moe_layer_step": interleave}
    spec = load_dict(tmp_path, data)
    assert spec.num_moe_layers == moe_layers
    assert count_params(spec).total == transformers_param_count(data)


# ---- published figures ------------------------------------------------------------------------------

B = 1_000_000_000


@pytest.mark.parametrize(("name", "total", "active"), [
    # model cards: Qwen1.5-MoE-A2.7B "14.3B total, 2.7B activated"; DeepSeek-V2-Lite "15.7B, 2.4B activated"
    # (below, without the embedding, as DeepSeek counts); OLMoE-1B-7B "6.9B total, 1.3B active"; Phi-3.5-MoE
    # "41.9B total, 6.6B active"; Llama 4 Maverick "400B total, 17B active"; Granite-3.0-1B-A400M "1.3B, 400M
    # active"
    ("qwen2_moe-Qwen1.5-MoE-A2.7B", 14.3, 2.7),
    ("olmoe-OLMoE-1B-7B-0924", 6.9, 1.3),
    ("phimoe-Phi-3.5-MoE-instruct", 41.9, 6.6),
    ("llama4-Llama-4-Maverick-17B-128E", 400.7, 17.2),
    ("granitemoe-granite-3.0-1b-a400m-base", 1.3, 0.4),
])
def test_totals_and_actives_round_to_the_model_cards(name: str, total: float, active: float) -> None:
    counts = count_params(load(fixture(name)))
    assert round(counts.total / B, 1) == total
    assert round(counts.active / B, 1) == active


def test_deepseek_v2_lite_active_is_the_published_2_4b_cut_at_0_1b_without_the_embedding() -> None:
    # deepseek-ai/DeepSeek-V2-Lite model card: "2.4B activated parameters"; the count is 2.451B
    spec = load(fixture("deepseek_v2-DeepSeek-V2-Lite"))
    active = count_params(spec).active - spec.vocab_size * spec.hidden_size
    assert 2.4 * B <= active < 2.5 * B


# ---- Gemma ------------------------------------------------------------------------------------------


def test_gemma2_head_dim_is_read_not_derived_from_hidden_over_heads() -> None:
    spec = load(fixture("gemma2-gemma-2-9b"))
    assert spec.hidden_size // spec.num_attention_heads == 224
    assert spec.head_dim == 256


def test_gemma2_default_head_dim_is_the_class_default_256(tmp_path: Path) -> None:
    data = {k: v for k, v in config("gemma2-gemma-2-9b").items() if k != "head_dim"}
    spec = load_dict(tmp_path, data)
    assert spec.head_dim == 256
    assert "head_dim=256" in (spec.notes or "")


def test_gemma2_slides_a_4096_window_on_every_other_layer_starting_with_layer_0() -> None:
    spec = load(fixture("gemma2-gemma-2-9b"))
    assert spec.window_size == 4096
    assert spec.windowed_layers()[:4] == (True, False, True, False)
    assert sum(spec.windowed_layers()) == 21


def test_gemma3_slides_a_1024_window_on_five_of_every_six_layers() -> None:
    spec = load(fixture("gemma3-gemma-3-27b-it"))
    assert spec.window_size == 1024
    assert spec.windowed_layers()[:6] == (True,) * 5 + (False,)
    assert sum(spec.windowed_layers()) == 62 - 10


def test_gemma_layer_types_that_break_the_pattern_are_refused(tmp_path: Path) -> None:
    data = config("gemma2-gemma-2-2b")
    data["layer_types"] = ["full_attention"] * 13 + ["sliding_attention"] * 13
    with pytest.raises(InputError) as caught:
        load_dict(tmp_path, data)
    assert caught.value.field == "layer_types"


def test_gemma2_soft_caps_are_recorded_without_parameters() -> None:
    spec = load(fixture("gemma2-gemma-2-9b"))
    assert spec.scalings is not None
    assert (spec.scalings["attn_logit_softcapping"], spec.scalings["final_logit_softcapping"]) == (50.0, 30.0)


def test_gemma3_without_soft_caps_records_none() -> None:
    spec = load(fixture("gemma3_text-gemma-3-1b-it"))
    assert spec.scalings is not None
    assert "attn_logit_softcapping" not in spec.scalings and "final_logit_softcapping" not in spec.scalings


def test_gemma_sandwich_norms_are_four_per_layer() -> None:
    spec = load(fixture("gemma2-gemma-2-9b"))
    layer = count_params(spec).dense
    assert layer is not None
    norms = [w.name for w in layer.weights if w.name.endswith("layernorm") and "attention." not in w.name]
    assert norms == ["input_layernorm", "post_attention_layernorm", "pre_mlp_layernorm", "post_mlp_layernorm"]


def test_gemma3_multimodal_config_reads_its_text_decoder_and_says_the_vision_tower_is_left_out() -> None:
    spec = load(fixture("gemma3-gemma-3-27b-it"))
    assert (spec.num_layers, spec.hidden_size, spec.head_dim, spec.vocab_size) == (62, 5376, 128, 262208)
    assert "vision tower" in (spec.notes or "")


def test_multimodal_config_without_text_config_is_refused(tmp_path: Path) -> None:
    data = {k: v for k, v in config("gemma3-gemma-3-27b-it").items() if k != "text_config"}
    with pytest.raises(InputError) as caught:
        load_dict(tmp_path, data)
    assert caught.value.field == "text_config"


def test_missing_decoder_key_of_a_text_config_is_named_with_its_path(tmp_path: Path) -> None:
    data = config("llama4-Llama-4-Scout-17B-16E")
    del data["text_config"]["hidden_size"]
    with pytest.raises(InputError) as caught:
        load_dict(tmp_path, data)
    assert caught.value.field == "text_config.hidden_size"


# ---- DeepSeek-V2 ------------------------------------------------------------------------------------


def test_deepseek_v2_lite_keeps_its_first_layer_dense() -> None:
    spec = load(fixture("deepseek_v2-DeepSeek-V2-Lite"))
    assert spec.moe_layers[0] is False and all(spec.moe_layers[1:])
    assert (spec.num_dense_layers, spec.ffn_hidden_size) == (1, 10944)


def test_deepseek_v2_shared_experts_fuse_into_one_mlp_of_n_shared_times_the_expert_width() -> None:
    spec = load(fixture("deepseek_v2-DeepSeek-V2-Lite"))
    assert spec.moe_shared_expert_intermediate_size == 2 * 1408


def test_deepseek_v2_lite_null_q_lora_rank_means_no_query_compression() -> None:
    lite, v25 = load(fixture("deepseek_v2-DeepSeek-V2-Lite")), load(fixture("deepseek_v2-DeepSeek-V2.5"))
    assert lite.q_lora_rank is None and v25.q_lora_rank == 1536
    names = {w.name for w in count_params(lite).moe.weights}  # type: ignore[union-attr]
    assert "attention.linear_q_proj.weight" in names and "attention.linear_q_down_proj.weight" not in names


def test_deepseek_v2_without_top_k_is_refused(tmp_path: Path) -> None:
    data = {k: v for k, v in config("deepseek_v2-DeepSeek-V2.5").items() if k != "num_experts_per_tok"}
    with pytest.raises(InputError) as caught:
        load_dict(tmp_path, data)
    assert caught.value.field == "num_experts_per_tok"


def test_glm45_records_its_mtp_layer_outside_the_total() -> None:
    spec = load(fixture("glm4_moe-GLM-4.5"))
    assert spec.mtp_num_layers == 1 and count_params(spec).mtp_total > 0
    assert (spec.num_dense_layers, spec.qk_layernorm, spec.add_qkv_bias, spec.add_proj_bias) == (3, True, True, False)


# ---- Qwen2-MoE, Granite, OLMo 2, Llama 4 -------------------------------------------------------------


def test_qwen2_moe_shared_expert_width_and_gate_are_read() -> None:
    spec = load(fixture("qwen2_moe-Qwen1.5-MoE-A2.7B"))
    assert (spec.moe_ffn_hidden_size, spec.moe_shared_expert_intermediate_size) == (1408, 5632)
    moe = count_params(spec).moe
    assert moe is not None
    gate = [w for w in moe.weights if w.name == "mlp.shared_experts.gate.weight"]
    assert [w.count for w in gate] == [spec.hidden_size]


def test_granite_multipliers_are_recorded_as_scalings() -> None:
    spec = load(fixture("granitemoe-granite-3.1-3b-a800m-base"))
    assert spec.scalings == {"embedding_multiplier": 12.0, "residual_multiplier": 0.22,
                             "attention_multiplier": 0.015625, "logits_scaling": 6.0}


def test_olmo2_qk_norm_spans_the_whole_q_and_k_projections(tmp_path: Path) -> None:
    spec = load_dict(tmp_path, {**config("olmo2-OLMo-2-1124-7B"), "num_key_value_heads": 8})
    layer = count_params(spec).dense
    assert layer is not None
    norms = {w.name: w.count for w in layer.weights if w.name in ("attention.q_layernorm", "attention.k_layernorm")}
    assert norms == {"attention.q_layernorm": 32 * 128, "attention.k_layernorm": 8 * 128}
    assert not spec.qk_layernorm_per_head and spec.norm_placement == "post"


def test_llama4_chunked_attention_counts_as_a_window_on_three_of_four_layers() -> None:
    spec = load(fixture("llama4-Llama-4-Scout-17B-16E"))
    assert (spec.window_size, spec.window_attn_skip_freq) == (8192, 4)
    assert "chunked attention" in (spec.notes or "")


def test_llama4_irregular_no_rope_layers_are_refused(tmp_path: Path) -> None:
    data = config("llama4-Llama-4-Scout-17B-16E")
    data["text_config"]["no_rope_layers"] = [0] + [1] * 47  # a global first layer, then chunks: no period
    with pytest.raises(InputError) as caught:
        load_dict(tmp_path, data)
    assert caught.value.field == "text_config.no_rope_layers"


def test_an_explicit_layer_types_list_sets_the_window_period(tmp_path: Path) -> None:
    # newer Gemma 3 configs carry layer_types (and a private pattern key) instead of sliding_window_pattern
    data = {k: v for k, v in config("gemma3_text-gemma-3-1b-it").items() if k != "sliding_window_pattern"}
    data["layer_types"] = ["full_attention" if (i + 1) % 4 == 0 else "sliding_attention" for i in range(26)]
    spec = load_dict(tmp_path, data)
    assert (spec.window_size, spec.window_attn_skip_freq) == (512, 4)
    assert count_params(spec).total == transformers_param_count(data)


def test_phimoe_layernorm_biases_and_output_bias_are_counted() -> None:
    spec = load(fixture("phimoe-Phi-3.5-MoE-instruct"))
    assert (spec.normalization, spec.add_qkv_bias, spec.add_proj_bias, spec.output_layer_bias) == \
        ("LayerNorm", True, True, True)
    assert count_params(spec).output_layer() == spec.vocab_size * (spec.hidden_size + 1)


# ---- what the features change reaches the ledger and the projection -------------------------------

CTX = ActContext(seq_len=4096, mbs=1, tp=2, cp=1, sp=True, etp=1, numerics=numerics_for("bf16", None))


def test_full_width_qk_norm_weights_split_across_tp_while_per_head_ones_replicate() -> None:
    olmo, qwen3 = load(fixture("olmo2-OLMo-2-1124-7B")), load(HF / "qwen3-Qwen3-8B" / "config.json")
    for spec, per_rank in ((olmo, (32 + 32) * 128 // 2), (qwen3, 2 * 128)):
        with_norm = param_units(spec, 2, 1, 1).dense_layer
        without = param_units(variant(spec, qk_layernorm=False, qk_layernorm_per_head=True), 2, 1, 1).dense_layer
        assert with_norm - without == per_rank


def test_sandwich_norms_keep_their_inputs_and_statistics_for_backward() -> None:
    spec = load(fixture("gemma2-gemma-2-2b"))
    names = {s.name for s in layer_inventory(spec, "dense", CTX)}
    assert {"post_attention_layernorm.input", "post_attention_layernorm.stats",
            "post_mlp_layernorm.input", "post_mlp_layernorm.stats"} <= names
    pre = variant(spec, norm_placement="pre")
    extra = sum(s.bytes for s in layer_inventory(spec, "dense", CTX)) - \
        sum(s.bytes for s in layer_inventory(pre, "dense", CTX))
    tokens = CTX.tokens // CTX.tp
    assert extra == 2 * (tokens * spec.hidden_size * 2 + tokens * 4)  # bf16 input + fp32 rstd, twice


def test_sandwich_norms_are_timed_in_the_projection() -> None:
    spec = load(fixture("gemma2-gemma-2-2b"))
    ctx = OpContext(CTX, ep=1, padded_vocab=spec.padded_vocab_size(2), low_precision=False)
    names = [m.name for m in layer_block(spec, "dense", ctx).memops]
    assert "post_attention_layernorm" in names and "post_mlp_layernorm" in names


def test_qwen2_moe_shared_expert_gate_reaches_flops_and_saved_bytes() -> None:
    spec = load(fixture("qwen2_moe-Qwen1.5-MoE-A2.7B"))
    ungated = variant(spec, moe_shared_expert_gate=False)
    gemm = flops_per_token(spec, 4096).gemm - flops_per_token(ungated, 4096).gemm
    assert gemm == 2 * spec.hidden_size * spec.num_moe_layers
    assert "shared_experts.gate.output" in {s.name for s in layer_inventory(spec, "moe", CTX)}


def test_phimoe_output_bias_is_held_by_the_output_stage_split_across_tp() -> None:
    spec = load(fixture("phimoe-Phi-3.5-MoE-instruct"))
    unbiased = variant(spec, output_layer_bias=False)
    assert param_units(spec, 2, 1, 1).output - param_units(unbiased, 2, 1, 1).output == \
        spec.padded_vocab_size(2) // 2


def test_gemma2_windows_cut_attention_flops_on_the_windowed_half() -> None:
    # 13 of 26 layers attend a 4,096-key window: at sequence 8,192 a query keeps on average 4096 - 4096 x 4095 /
    # 16384 = 3,072.25 keys under the window and the causal mask, against 4,096 (S/2) under the mask alone
    spec = load(fixture("gemma2-gemma-2-2b"))
    full = variant(spec, window_size=None, window_attn_skip_freq=None)
    per_key = flops_per_token(full, 8192).attention / spec.num_layers / 4096
    assert flops_per_token(spec, 8192).attention == round(per_key * (13 * 4096 + 13 * 3072.25))


# ---- refusals ---------------------------------------------------------------------------------------


def test_unknown_model_type_exits_2_naming_it_and_every_supported_type(run_cli: Any, tmp_path: Path) -> None:
    data = {**config("olmo2-OLMo-2-1124-7B"), "model_type": "jamba", "architectures": ["JambaForCausalLM"]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    code, out, err = run_cli("models", "show", str(path))
    assert code == 2 and out == ""
    assert "'jamba'" in err and all(t in err for t in supported_families())
    assert err.count("\n") == 1


def test_a_reference_layer_for_memory_checks_refuses_features_it_does_not_build() -> None:
    from primus.measure.reference import check_supported

    with pytest.raises(ValueError, match="sandwich"):
        check_supported(load(fixture("gemma2-gemma-2-2b")), "dense")


def _job(model_path: Path, **parallel: Any) -> Any:
    from primus.job import job_from_mapping

    return job_from_mapping({
        "model": str(model_path), "hardware": "h100-80gb", "nodes": 1, "seq_len": 4096, "global_batch_size": 16,
        "parallel": {"tp": 2, "pp": 1, "vp": 1, "cp": 1, "mbs": 1, "sp": True, "recompute": "none",
                     "sharding": "dist_opt", **parallel}}, "test")


def test_the_ledger_holds_an_imported_olmo2_with_its_full_width_qk_norm_weights() -> None:
    from primus.memory.evaluate import MemoryModel, pinned_layout

    job = _job(fixture("olmo2-OLMo-2-1124-7B"))
    report = MemoryModel(job).evaluate(pinned_layout(job))
    spec = job.model
    word = spec.padded_vocab_size(2) * spec.hidden_size // 2
    # every parameter once, split by TP: both vocabulary matrices, and every layer (its QK-norm included)
    layer = param_units(spec, 2, 1, 1).dense_layer
    assert report.stages[0].params == 2 * word + spec.num_layers * layer + spec.hidden_size


def test_megatron_export_notes_what_megatron_lm_cannot_express() -> None:
    from primus.launch import export_job

    notes = export_job(_job(fixture("gemma2-gemma-2-2b")), "megatron").notes
    assert any("norm_placement" in n for n in notes) and any("scalings" in n for n in notes)


def test_gemma3_text_config_without_head_counts_takes_the_class_defaults() -> None:
    # google/gemma-3-4b-it: text_config gives only hidden size, MLP width, layers and window
    spec = load(fixture("gemma3-gemma-3-4b-it"))
    assert (spec.num_attention_heads, spec.query_groups, spec.head_dim) == (8, 4, 256)
    assert "num_attention_heads=8" in (spec.notes or "")


def test_models_show_prints_the_exact_total_and_the_recorded_scalings(run_cli: Any) -> None:
    path = fixture("gemma2-gemma-2-9b")
    code, out, _ = run_cli("models", "show", str(path), "--format", "json")
    doc = json.loads(out)
    assert code == 0
    assert doc["total_params"] == transformers_param_count(config("gemma2-gemma-2-9b"))
    assert doc["architecture"]["scalings"]["final_logit_softcapping"] == 30.0


def test_readme_and_docs_list_every_supported_model_type() -> None:
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text(encoding="utf-8")
    docs = (root / "docs" / "models.md").read_text(encoding="utf-8")
    for family in supported_families():
        name = family.removesuffix("_text") if family == "llama4_text" else family
        assert f"`{name}`" in readme and f"`{name}`" in docs, family
