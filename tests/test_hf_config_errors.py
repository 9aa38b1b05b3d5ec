"""Specification of how a refused Hugging Face config.json is reported and which values are refused.

A user edits config.json, not primus' Megatron names, so every refusal names the key as the file
spells it (`qk_rope_head_dim`, not `qk_pos_emb_head_dim`), and a two-key refusal quotes both keys and
their values. A layer period of 0, which the model's code cannot build (it divides the layer index
by it), is refused rather than read as 1. The fixtures are the models' published config.json files under
tests/data/hf; the published value each case starts from is cited beside it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from primus.catalog.models import resolve_model
from primus.cli.main import cli
from primus.errors import InputError
from primus.specs.model import ModelSpec

HF = Path(__file__).parent / "data" / "hf"


def config(folder: str) -> dict[str, Any]:
    return json.loads((HF / folder / "config.json").read_text(encoding="utf-8"))


def load(tmp_path: Path, data: dict[str, Any]) -> ModelSpec:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return resolve_model(str(path), "test")


def refusal(tmp_path: Path, data: dict[str, Any]) -> InputError:
    with pytest.raises(InputError) as caught:
        load(tmp_path, data)
    return caught.value


# ---- the key the file holds -------------------------------------------------------------------------


@pytest.mark.parametrize(("folder", "key"), [
    ("deepseek_v3-DeepSeek-V3", "qk_rope_head_dim"),                   # published 64
    ("deepseek_v3-DeepSeek-V3", "qk_nope_head_dim"),                   # published 128
    ("gpt_oss-gpt-oss-120b", "sliding_window"),                        # published 128
    ("qwen2_moe-Qwen1.5-MoE-A2.7B", "shared_expert_intermediate_size"),  # published 5632
])
def test_a_zero_width_is_refused_under_the_config_key(tmp_path: Path, folder: str, key: str) -> None:
    error = refusal(tmp_path, {**config(folder), key: 0})
    assert (error.field, error.reason) == (key, "Input should be greater than or equal to 1 (got 0)")


def test_kv_heads_that_do_not_divide_the_heads_are_refused_with_both_keys_and_values(tmp_path: Path) -> None:
    # meta-llama/Llama-3.1-8B config.json: num_attention_heads 32, num_key_value_heads 8
    error = refusal(tmp_path, {**config("llama-Llama-3.1-8B"), "num_key_value_heads": 5})
    assert error.reason == "num_attention_heads (32) must be divisible by num_key_value_heads (5)"


def test_top_k_above_the_expert_count_is_refused_with_both_keys_and_values(tmp_path: Path) -> None:
    # Qwen/Qwen3-30B-A3B config.json: num_experts 128, num_experts_per_tok 8
    error = refusal(tmp_path, {**config("qwen3_moe-Qwen3-30B-A3B"), "num_experts_per_tok": 200})
    assert error.reason == "num_experts_per_tok (200) exceeds num_experts (128)"


def test_an_expert_count_taken_from_the_class_default_is_named_by_its_key(tmp_path: Path) -> None:
    # MixtralConfig's num_local_experts defaults to 8 (the published Mixtral-8x7B config also says 8)
    data = {k: v for k, v in config("mixtral-Mixtral-8x7B-v0.1").items() if k != "num_local_experts"}
    error = refusal(tmp_path, {**data, "num_experts_per_tok": 9})
    assert error.reason == "num_experts_per_tok (9) exceeds num_local_experts (8)"


def test_a_multimodal_config_names_the_keys_under_text_config(tmp_path: Path) -> None:
    # google/gemma-3-27b-it config.json text_config: num_attention_heads 32, num_key_value_heads 16
    data = config("gemma3-gemma-3-27b-it")
    data["text_config"] = {**data["text_config"], "num_key_value_heads": 5}
    error = refusal(tmp_path, data)
    assert error.reason == ("text_config.num_attention_heads (32) must be divisible by"
                            " text_config.num_key_value_heads (5)")


# ---- what is read and what is refused ---------------------------------------------------------------


def test_an_unknown_model_type_read_through_architectures_says_so(tmp_path: Path) -> None:
    # moonshotai/Kimi-K2-Instruct ships model_type "kimi_k2" with DeepseekV3ForCausalLM: read by its class
    spec = load(tmp_path, {**config("deepseek_v3-DeepSeek-V3"), "model_type": "kimi_k2"})
    assert (spec.notes or "").startswith("model_type 'kimi_k2' is not one primus reads: read as deepseek_v3, "
                                         "the family of its architectures entry DeepseekV3ForCausalLM")


def test_a_json_model_without_model_type_or_architectures_exits_2_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "partial.json"
    path.write_text(json.dumps({"hidden_size": 4096, "num_hidden_layers": 32}), encoding="utf-8")
    result = CliRunner().invoke(cli, ["models", "show", str(path)])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"primus: {path}: model_type: a .json model is read as a Hugging Face config.json and this one has neither"
        " model_type nor architectures (a model in Megatron-LM's argument names is a YAML file)"]


def test_qwen3_moe_refuses_per_layer_sliding_windows_as_qwen3_does(tmp_path: Path) -> None:
    data = {**config("qwen3_moe-Qwen3-30B-A3B"), "use_sliding_window": True, "sliding_window": 4096}
    assert refusal(tmp_path, data).field == "use_sliding_window"


@pytest.mark.parametrize(("folder", "key"), [
    ("qwen3_moe-Qwen3-30B-A3B", "decoder_sparse_step"),   # published 1
    ("deepseek_v2-DeepSeek-V2-Lite", "moe_layer_freq"),   # published 1
])
def test_a_layer_period_of_zero_is_refused(tmp_path: Path, folder: str, key: str) -> None:
    error = refusal(tmp_path, {**config(folder), key: 0})
    reason = "must be at least 1 (got 0): the model's code divides the layer index by it"
    assert (error.field, error.reason) == (key, reason)


def test_gemma3_window_pattern_zero_is_refused(tmp_path: Path) -> None:
    # google/gemma-3-1b-it config.json: sliding_window_pattern 6 (five windowed layers of every six)
    data = {**config("gemma3_text-gemma-3-1b-it"), "sliding_window_pattern": 0}
    data.pop("layer_types", None)
    assert refusal(tmp_path, data).field == "sliding_window_pattern"


def test_llama4_interleave_step_zero_is_refused_when_it_decides_the_moe_layers(tmp_path: Path) -> None:
    # meta-llama/Llama-4-Scout-17B-16E config.json: interleave_moe_layer_step 1
    data = config("llama4-Llama-4-Scout-17B-16E")
    text = {k: v for k, v in data["text_config"].items() if k != "moe_layers"}
    data["text_config"] = {**text, "interleave_moe_layer_step": 0}
    assert refusal(tmp_path, data).field == "text_config.interleave_moe_layer_step"


def test_a_model_name_with_a_control_character_is_refused_under_name_or_path(tmp_path: Path) -> None:
    error = refusal(tmp_path, {**config("llama-Llama-3.1-8B"), "_name_or_path": "\x1b[31mevil"})
    assert error.field == "_name_or_path"


def test_a_gpt_oss_layer_types_list_of_the_wrong_length_says_so(tmp_path: Path) -> None:
    # openai/gpt-oss-120b config.json: 36 layers, layer_types alternating sliding/full from layer 0
    data = config("gpt_oss-gpt-oss-120b")
    data["layer_types"] = data["layer_types"][:10]
    assert refusal(tmp_path, data).reason == "has 10 entries but num_hidden_layers is 36"


def test_deepseek_moe_layer_freq_counts_from_layer_0_after_the_dense_first_layers(tmp_path: Path) -> None:
    # DeepSeek's modeling_deepseek.py: a layer is MoE when layer_idx >= first_k_dense_replace and
    # layer_idx % moe_layer_freq == 0 (the published V2-Lite config: 1 and 1)
    data = {**config("deepseek_v2-DeepSeek-V2-Lite"), "num_hidden_layers": 10, "first_k_dense_replace": 3,
            "moe_layer_freq": 2}
    spec = load(tmp_path, data)
    assert [i for i, moe in enumerate(spec.moe_layers) if moe] == [4, 6, 8]
