# Written for primus's tests in the structure of pytorch/torchtitan (b5bcd76) models/muse_glimmer/__init__.py:
# a text decoder built by a shared function, its layers by a builder (sandwich norms, a gated attention with
# weightless q/k norms, a SwiGLU whose width is a module constant times dim, a cyclic window pattern), and a
# flavor with a vision encoder chosen through functools.partial. Read with `ast`; never imported.
from functools import partial

from .model import Attention, Block, Linear, Model, RMSNorm, check_vision, vision_configs

_EVERY_N_LAYERS_NOPE = 3
_FFN_DIM_MULTIPLIER = 2.5


def _scaleless_norm(dim: int) -> RMSNorm.Config:
    return RMSNorm.Config(normalized_shape=dim, elementwise_affine=False)


def _build_muse_glimmer_attention(*, dim: int, n_heads: int, n_kv_heads: int, head_dim: int) -> Attention.Config:
    return Attention.Config(
        wq=Linear.Config(in_features=dim, out_features=n_heads * head_dim),
        wkv=Linear.Config(in_features=dim, out_features=n_kv_heads * head_dim),
        wo=Linear.Config(in_features=n_heads * head_dim, out_features=dim),
        qk_norm=_scaleless_norm(head_dim),
        o_gate=Linear.Config(in_features=dim, out_features=n_heads * head_dim),
    )


def _build_muse_glimmer_layers(*, n_layers: int, dim: int, n_heads: int, n_kv_heads: int, head_dim: int,
                               window_pattern: list[int]) -> list[Block.Config]:
    hidden_dim = int(_FFN_DIM_MULTIPLIER * dim)
    layers = []
    for _ in range(n_layers):
        layers.append(Block.Config(
            attention_norm=RMSNorm.Config(normalized_shape=dim),
            post_attention_norm=RMSNorm.Config(normalized_shape=dim),
            ffn_norm=RMSNorm.Config(normalized_shape=dim),
            post_ffn_norm=RMSNorm.Config(normalized_shape=dim),
            attention=_build_muse_glimmer_attention(dim=dim, n_heads=n_heads, n_kv_heads=n_kv_heads,
                                                    head_dim=head_dim),
            feed_forward=Linear.Config(in_features=dim, out_features=hidden_dim),
        ))
    return layers


def _muse_glimmer_config(*, dim: int, n_layers: int, n_heads: int, n_kv_heads: int, head_dim: int, vocab_size: int,
                         window_pattern: list[int], output_multiplier: float, vision_encoder=None) -> Model.Config:
    if vision_encoder is not None:
        check_vision(vision_encoder)
    return Model.Config(
        dim=dim,
        vocab_size=vocab_size,
        lm_head=Linear.Config(in_features=dim, out_features=vocab_size, output_multiplier=output_multiplier,
                              output_soft_cap_temp=15.0),
        layers=_build_muse_glimmer_layers(n_layers=n_layers, dim=dim, n_heads=n_heads, n_kv_heads=n_kv_heads,
                                          head_dim=head_dim, window_pattern=window_pattern),
        vision_encoder=vision_encoder,
    )


def _small(attn_backend: str, *, with_vision: bool = False) -> Model.Config:
    vision_encoder = None
    if with_vision:
        vision_encoder, _adapter = vision_configs()
    return _muse_glimmer_config(dim=512, n_layers=6, n_heads=8, n_kv_heads=2, head_dim=96, vocab_size=3000,
                                window_pattern=[256, 256, 0], output_multiplier=0.5, vision_encoder=vision_encoder)


muse_glimmer_configs = {
    "small": _small,
    "small_mm": partial(_small, with_vision=True),
}
