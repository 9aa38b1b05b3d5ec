"""Model FLOPs per token, in Megatron-LM's model-FLOP convention.

Convention (Narayanan et al. 2021, appendix; Megatron-LM `num_floating_point_operations`): every GEMM
a token passes through costs 2 FLOPs per weight in the forward pass and twice that in the backward
pass (3× in all); the attention score and value products are counted over the full sequence (no
causal halving), as Megatron does; recomputation is *not* counted (model FLOPs, not hardware FLOPs).
Routed experts count top-k experts per token; the router and the output layer count as GEMMs; the
embedding lookup does not. Sliding-window layers attend min(seq, window) keys. MTP modules are
excluded, like the published parameter totals.
"""

from __future__ import annotations

from dataclasses import dataclass

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


def flops_per_token(model: ModelSpec, seq_len: int) -> FlopsPerToken:
    gemm = 2 * count_params(model).matmul_params_per_token()
    d_qk, d_v = attention_dims(model)
    heads = model.num_attention_heads
    attention = 0
    for windowed in model.windowed_layers():
        keys = min(seq_len, model.window_size or seq_len) if windowed else seq_len
        attention += 2 * keys * heads * (d_qk + d_v)
    return FlopsPerToken(gemm=gemm, attention=attention)
