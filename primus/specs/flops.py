"""Model FLOPs per token, in Megatron-LM's model-FLOP convention.

Convention (Narayanan et al. 2021, appendix; Megatron-LM `num_floating_point_operations`, core_v0.12.0 on,
megatron/training/training.py `transformer_flops`): every GEMM a token passes through costs 2 FLOPs per
weight in the forward pass and twice that in the backward pass (3x in all); the attention score and value
products count the keys a causal mask leaves each query, half the sequence on average ("Only half of the
attention matrix is non-zero", seq_length / 2; the 2021 appendix and Megatron-LM before core_v0.12.0 counted
the whole sequence, so their TFLOP/s and MFU read higher: Llama 3.1 8B at sequence 8,192 by 12.5%);
recomputation is *not* counted (model FLOPs, not hardware FLOPs). Routed experts count top-k experts per
token; the router and the output layer count as GEMMs; the embedding lookup does not. Multi-token prediction
modules count as Megatron counts them (core_v0.15.0 lines 272-276, 371-382): each a decoder layer of the last
layer's kind, its 2h x h projection and one more pass through the output layer. Sliding-window layers count
the keys the window leaves each query (W - W(W-1)/(2S) on average; Megatron's formula ignores windows and
counts S/2 there too): FLOPs that are not performed are not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from primus.specs.model import ModelSpec
from primus.specs.params import count_params

TRAINING_MULTIPLIER = 3  # forward + backward (data gradient + weight gradient)


@dataclass(frozen=True)
class FlopsPerToken:
    gemm: int
    attention: int

    @property
    def forward(self) -> int:
        return self.gemm + self.attention

    @property
    def training(self) -> int:
        return TRAINING_MULTIPLIER * self.forward


def attention_dims(model: ModelSpec) -> tuple[int, int]:
    """Per-head query/key and value widths (MLA: nope + rope for q/k, v_head_dim for v)."""
    if model.multi_latent_attention:
        return (model.qk_head_dim or 0) + (model.qk_pos_emb_head_dim or 0), model.v_head_dim or 0
    return model.head_dim, model.head_dim


def causal_keys(seq_len: int, window: int | None) -> Fraction:
    """Keys a query attends to under a causal mask, averaged over the sequence: S/2 (Megatron's seq_length
    / 2), or with a sliding window of W keys, W less the ramp at the start, W - W(W-1)/(2S)."""
    if window is None or window >= seq_len:
        return Fraction(seq_len, 2)
    return window - Fraction(window * (window - 1), 2 * seq_len)


def flops_per_token(model: ModelSpec, seq_len: int) -> FlopsPerToken:
    counts = count_params(model)
    gemm = 2 * (counts.matmul_params_per_token() + counts.mtp_matmul_params_per_token())
    d_qk, d_v = attention_dims(model)
    per_key = 2 * model.num_attention_heads * (d_qk + d_v)  # score and value products, per key, 2 FLOPs each
    keys = sum((causal_keys(seq_len, model.window_size if windowed else None)
                for windowed in model.windowed_layers()), Fraction(0))
    keys += model.mtp_num_layers * causal_keys(seq_len, None)
    return FlopsPerToken(gemm=gemm, attention=round(per_key * keys))
