"""Specification of the Hugging Face config.json import (primus.catalog.hf through resolve_model).

The fixtures under tests/data/hf are the published config.json files of the models, copied by hand;
the parameter counts they must give are the models' published (safetensors) counts, cited per case.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from primus.catalog.hf import supported_families
from primus.catalog.models import resolve_model
from primus.errors import InputError
from primus.specs.model import ModelSpec
from primus.specs.params import count_params

B = 1_000_000_000
HF = Path(__file__).parent / "data" / "hf"

LLAMA_3_1_8B = HF / "llama-Llama-3.1-8B" / "config.json"
MISTRAL_7B = HF / "mistral-Mistral-7B-v0.1" / "config.json"
MIXTRAL_8X7B = HF / "mixtral-Mixtral-8x7B-v0.1" / "config.json"
QWEN2_7B = HF / "qwen2-Qwen2-7B" / "Qwen2-7B.json"  # deliberately not called config.json
QWEN3_8B = HF / "qwen3-Qwen3-8B" / "config.json"
QWEN3_30B_A3B = HF / "qwen3_moe-Qwen3-30B-A3B" / "config.json"
DEEPSEEK_V3 = HF / "deepseek_v3-DeepSeek-V3" / "config.json"
GPT_OSS_120B = HF / "gpt_oss-gpt-oss-120b" / "config.json"


def load(path: Path) -> ModelSpec:
    return resolve_model(str(path), "test")


def write_config(tmp_path: Path, data: Any, name: str = "config.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def llama_config() -> dict[str, Any]:
    return json.loads(LLAMA_3_1_8B.read_text(encoding="utf-8"))


# ---- published counts -------------------------------------------------------------------------------

EXACT = [
    # fixture, published total (Hugging Face safetensors parameter count of the repository)
    (LLAMA_3_1_8B, 8_030_261_248),     # meta-llama/Llama-3.1-8B
    (MISTRAL_7B, 7_241_732_096),       # mistralai/Mistral-7B-v0.1
    (MIXTRAL_8X7B, 46_702_792_704),    # mistralai/Mixtral-8x7B-v0.1
    (QWEN2_7B, 7_615_616_512),         # Qwen/Qwen2-7B (q/k/v biases included)
    (QWEN3_8B, 8_190_735_360),         # Qwen/Qwen3-8B
    (QWEN3_30B_A3B, 30_532_122_624),   # Qwen/Qwen3-30B-A3B
]


@pytest.mark.parametrize(("path", "published"), EXACT, ids=[p.parent.name for p, _ in EXACT])
def test_imported_config_gives_the_published_total(path: Path, published: int) -> None:
    assert count_params(load(path)).total == published


@pytest.mark.parametrize("path", [LLAMA_3_1_8B, MISTRAL_7B, QWEN2_7B, QWEN3_8B], ids=lambda p: p.parent.name)
def test_dense_model_activates_every_parameter(path: Path) -> None:
    counts = count_params(load(path))
    assert counts.active == counts.total


def test_mixtral_active_matches_the_published_12_9b() -> None:
    # mistral.ai/news/mixtral-of-experts: "12.9B active parameters" (2 of 8 experts per token).
    assert abs(count_params(load(MIXTRAL_8X7B)).active - 12.9 * B) <= 0.05 * B


def test_qwen3_30b_a3b_active_is_the_published_3_3b_cut_at_0_1b() -> None:
    # Qwen/Qwen3-30B-A3B model card: "3.3B activated" (8 of 128 experts); the count is 3.353B.
    active = count_params(load(QWEN3_30B_A3B)).active
    assert 3.3 * B <= active < 3.4 * B


def test_deepseek_v3_gives_671b_total_without_its_mtp_module() -> None:
    # arXiv:2412.19437: 671B total parameters, the multi-token-prediction module not included.
    spec = load(DEEPSEEK_V3)
    assert spec.mtp_num_layers == 1
    assert abs(count_params(spec).total - 671 * B) <= 0.5 * B


def test_deepseek_v3_active_matches_37b_without_the_input_embedding() -> None:
    # arXiv:2412.19437: 37B activated per token (counted without the input embedding lookup).
    spec = load(DEEPSEEK_V3)
    active = count_params(spec).active - spec.vocab_size * spec.hidden_size
    assert abs(active - 37 * B) <= 0.5 * B


def test_gpt_oss_120b_gives_the_published_116_83b_total() -> None:
    # gpt-oss model card (arXiv:2508.10925) Table 1: 116.83B total parameters.
    assert abs(count_params(load(GPT_OSS_120B)).total - 116.83 * B) <= 0.005 * B


def test_gpt_oss_120b_active_matches_5_13b_without_the_input_embedding() -> None:
    # gpt-oss model card Table 1: 5.13B active parameters per token (embedding excluded).
    spec = load(GPT_OSS_120B)
    active = count_params(spec).active - spec.vocab_size * spec.hidden_size
    assert abs(active - 5.13 * B) <= 0.005 * B


@pytest.mark.parametrize(("path", "slug"), [
    (LLAMA_3_1_8B, "llama3.1-8b"), (MISTRAL_7B, "mistral-7b"), (MIXTRAL_8X7B, "mixtral-8x7b"),
    (QWEN3_30B_A3B, "qwen3-30b-a3b"), (DEEPSEEK_V3, "deepseek-v3"), (GPT_OSS_120B, "gpt-oss-120b"),
], ids=lambda v: v if isinstance(v, str) else v.parent.name)
def test_imported_config_counts_like_the_catalog_entry(path: Path, slug: str) -> None:
    imported, catalog = count_params(load(path)), count_params(resolve_model(slug, "test"))
    assert (imported.total, imported.active, imported.mtp_total) == \
        (catalog.total, catalog.active, catalog.mtp_total)


# ---- how files are recognised ------------------------------------------------------------------------


def test_qwen2_attention_biases_are_read_as_qkv_biases_only() -> None:
    spec = load(QWEN2_7B)
    assert spec.add_qkv_bias and not spec.add_bias_linear


def test_an_hf_config_is_recognised_whatever_the_file_is_called(tmp_path: Path) -> None:
    renamed = tmp_path / "llama-3.1-8b.hf.txt"
    shutil.copy(LLAMA_3_1_8B, renamed)
    assert count_params(load(renamed)).total == 8_030_261_248


def test_architectures_alone_identify_the_family(tmp_path: Path) -> None:
    data = llama_config()
    del data["model_type"]
    assert count_params(load(write_config(tmp_path, data))).total == 8_030_261_248


# ---- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize("field", ["hidden_size", "intermediate_size", "vocab_size", "num_hidden_layers"])
def test_missing_dimension_is_refused_naming_the_field(tmp_path: Path, field: str) -> None:
    data = llama_config()
    del data[field]
    with pytest.raises(InputError) as caught:
        load(write_config(tmp_path, data))
    assert caught.value.field == field
    assert field in str(caught.value)


def test_unsupported_model_type_is_refused_listing_the_supported_ones(tmp_path: Path) -> None:
    data = llama_config()
    data["model_type"] = "mamba"
    data["architectures"] = ["MambaForCausalLM"]
    with pytest.raises(InputError) as caught:
        load(write_config(tmp_path, data))
    message = str(caught.value)
    assert "mamba" in message
    assert all(family in message for family in supported_families())


def test_hidden_size_not_divisible_by_heads_without_head_dim_is_refused(tmp_path: Path) -> None:
    data = llama_config()
    data["hidden_size"] = 4100  # 4100 / 32 heads is not an integer
    with pytest.raises(InputError) as caught:
        load(write_config(tmp_path, data))
    assert "num_attention_heads" in str(caught.value)


def test_zero_attention_heads_is_refused_naming_the_field(tmp_path: Path) -> None:
    data = llama_config()
    data["num_attention_heads"] = 0  # was a ZeroDivisionError traceback (hidden % heads)
    with pytest.raises(InputError, match="num_attention_heads: must be at least 1"):
        load(write_config(tmp_path, data))


def test_a_huge_integer_is_quoted_as_a_short_excerpt(tmp_path: Path) -> None:
    data = llama_config()
    data["hidden_size"] = 10**90
    with pytest.raises(InputError) as caught:
        load(write_config(tmp_path, data))
    assert "hidden_size: must be an integer from 0 to 1,000,000,000 (got 1000000" in str(caught.value)
    assert "0" * 80 not in str(caught.value)


def test_explicit_head_dim_allows_hidden_size_not_divisible_by_heads(tmp_path: Path) -> None:
    data = llama_config()
    data["hidden_size"] = 4100
    data["head_dim"] = 128
    assert load(write_config(tmp_path, data)).kv_channels == 128


def test_non_json_file_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", hidden_size: 4096', encoding="utf-8")
    with pytest.raises(InputError) as caught:
        load(path)
    assert "JSON" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_json_list_is_refused_in_one_line(tmp_path: Path) -> None:
    path = write_config(tmp_path, [llama_config()])
    with pytest.raises(InputError) as caught:
        load(path)
    assert "mapping" in str(caught.value)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("path", sorted(HF.glob("*/*.json")), ids=lambda p: p.parent.name)
def test_every_fixture_is_valid_json_with_a_model_type(path: Path) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict) and data["model_type"] in supported_families()


def test_a_config_that_names_a_key_twice_is_refused(tmp_path: Path) -> None:
    # json keeps the last value silently: two hidden_size would describe another model than the file seems to
    text = LLAMA_3_1_8B.read_text().rstrip().rstrip("}") + ', "hidden_size": 8192}'
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load(path)
    assert err.value.line() == f"{path}: invalid JSON: duplicate key 'hidden_size'"


def test_a_config_of_a_billion_layers_is_refused_not_computed(tmp_path: Path) -> None:
    # ten times the deepest transformer trained (DeepNet, Wang et al. 2022: 1,000 layers) is the bound
    data = json.loads(LLAMA_3_1_8B.read_text())
    path = write_config(tmp_path, {**data, "num_hidden_layers": 1_000_000_000})
    with pytest.raises(InputError) as err:
        load(path)
    assert "num_hidden_layers" in err.value.line() and "10000" in err.value.line()
