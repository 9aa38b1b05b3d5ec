"""Config values transformers reads one way and primus read another (review of the model readers). Counts are
transformers 5.25's own (the model built on the meta device from the same config.json).

- Qwen2Config and Qwen3Config turn `num_key_value_heads: null` into the query head count
  (configuration_qwen2.py lines 84-85, configuration_qwen3.py lines 87-88); primus took the class default, 32:
  a Qwen2-72B-shaped config counted 76,733,227,008 parameters where transformers counts 82,102,591,488.
- Mistral, Mixtral, Qwen2-MoE and Qwen3-MoE declare a plain int (their strict configs refuse None): refused.
- Qwen3's and Qwen3-MoE's `attention_bias` puts a bias on o_proj too (modeling_qwen3.py `o_proj = nn.Linear(...,
  bias=config.attention_bias)`): Qwen3-8B's shape with the flag has 8,191,104,000 parameters, 36 x 4,096 more
  than q/k/v biases alone.
- MistralConfig's `sliding_window` defaults to 4,096: a config without the key has the window, one stating null
  has none.
- DeepseekV2's `mlp_bias` (gate, up and down biases, no attention bias) has no Megatron equivalent: refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from primus.catalog.models import resolve_model
from primus.errors import InputError
from primus.specs.model import ModelSpec
from primus.specs.params import count_params

HF = Path(__file__).parent / "data" / "hf"


def load(tmp_path: Path, data: dict[str, Any]) -> ModelSpec:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return resolve_model(str(path), "test")


QWEN2_72B_SHAPE = {"model_type": "qwen2", "hidden_size": 8192, "intermediate_size": 29568, "num_attention_heads": 64,
                   "num_hidden_layers": 80, "vocab_size": 152064}
QWEN3_8B_SHAPE = {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_attention_heads": 32,
                  "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 36, "vocab_size": 151936}
MISTRAL_7B_SHAPE = {"model_type": "mistral", "hidden_size": 4096, "intermediate_size": 14336,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 32000}


def test_qwen2_reads_a_null_key_value_head_count_as_the_query_heads(tmp_path: Path) -> None:
    model = load(tmp_path, {**QWEN2_72B_SHAPE, "num_key_value_heads": None})
    assert model.num_query_groups == 64
    assert count_params(model).total == 82_102_591_488


def test_qwen2_without_the_key_keeps_the_class_default(tmp_path: Path) -> None:
    assert load(tmp_path, QWEN2_72B_SHAPE).num_query_groups == 32


@pytest.mark.parametrize("model_type, extra", [
    ("mistral", {}),
    ("mixtral", {"num_local_experts": 8, "num_experts_per_tok": 2}),
])
def test_a_null_key_value_head_count_is_refused_where_transformers_refuses_it(tmp_path: Path, model_type: str,
                                                                            extra: dict[str, Any]) -> None:
    with pytest.raises(InputError) as err:
        load(tmp_path, {**MISTRAL_7B_SHAPE, **extra, "model_type": model_type, "num_key_value_heads": None})
    assert err.value.field == "num_key_value_heads" and "takes an integer" in err.value.reason


def test_qwen3_attention_bias_includes_the_output_projection(tmp_path: Path) -> None:
    model = load(tmp_path, {**QWEN3_8B_SHAPE, "attention_bias": True})
    assert count_params(model).total == 8_191_104_000
    # per layer: q (32 x 128), k and v (8 x 128 each) and o_proj (4,096) biases
    plain = count_params(load(tmp_path, QWEN3_8B_SHAPE)).total
    assert count_params(model).total - plain == 36 * (4096 + 2 * 1024 + 4096)


def test_mistral_without_sliding_window_has_the_class_window_and_null_has_none(tmp_path: Path) -> None:
    assert load(tmp_path, MISTRAL_7B_SHAPE).window_size == 4096
    assert load(tmp_path, {**MISTRAL_7B_SHAPE, "sliding_window": None}).window_size is None


def test_deepseek_v2_mlp_bias_is_refused(tmp_path: Path) -> None:
    data = json.loads((HF / "deepseek_v2-DeepSeek-V2-Lite" / "config.json").read_text(encoding="utf-8"))
    with pytest.raises(InputError) as err:
        load(tmp_path, {**data, "mlp_bias": True})
    assert err.value.field == "mlp_bias"
