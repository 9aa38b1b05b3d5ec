"""Model FLOPs as Megatron-LM counts them (`num_floating_point_operations`, core_v0.12.0 on), so that the MFU and
model TFLOP/s primus prints read like a Megatron log: causal attention counts half the sequence, and
multi-token prediction modules count as layers (review of the projection: full-sequence attention made MFU
12.5% high on Llama 3.1 8B at 8,192 tokens).

Megatron-LM core_v0.15.0 megatron/training/training.py `transformer_flops`, worked by hand:
- Llama 3.1 8B, sequence 8,192 (h 4096, 32 layers, 32 heads, 8 groups, ffn 14336, vocab 128,256):
  per token 12 x 32 x 4096^2 x ((1 + 8/32 + 8192/4096/2)) + 12 x 32 x 4096 x 14336 x 3/2 + 6 x 4096 x 128,256
  = 51,470,401,536;
- NVIDIA's published Llama 3.1 405B runs: model TFLOP/s over tokens/s gives 2.521e12-2.530e12 per token at
  sequence 8,192 (Megatron-Bridge performance summary, e.g. 26.06 H100: 822 / 326 tokens/s).
"""

from __future__ import annotations

import pytest

from primus.catalog.models import resolve_model
from primus.specs.flops import causal_keys, flops_per_token


def test_llama_3_1_8b_counts_what_megatrons_formula_counts() -> None:
    assert flops_per_token(resolve_model("llama3.1-8b", "t"), 8192).training == 51_470_401_536


def test_llama_3_1_405b_is_within_nvidias_published_flops_per_token() -> None:
    per_token = flops_per_token(resolve_model("llama3.1-405b", "t"), 8192).training
    assert 2.521e12 * 0.998 <= per_token <= 2.530e12 * 1.002


def test_a_causal_query_attends_half_the_sequence_and_a_window_less_its_ramp() -> None:
    assert causal_keys(8192, None) == 4096
    assert causal_keys(8192, 16384) == 4096
    assert float(causal_keys(8192, 128)) == pytest.approx(128 - 128 * 127 / (2 * 8192))


def test_deepseek_v3_counts_its_multi_token_prediction_module() -> None:
    model = resolve_model("deepseek-v3", "t")
    assert model.mtp_num_layers == 1
    without = model.model_copy(update={"mtp_num_layers": 0})
    extra = flops_per_token(model, 4096).training - flops_per_token(without, 4096).training
    # one MoE layer (about 0.6B active GEMM weights), the 2h x h projection (0.1B) and the output layer again
    # (129,280 x 7,168 = 0.93B): 4.1% more than the 61 layers alone
    assert 0.035 < extra / flops_per_token(without, 4096).training < 0.045
