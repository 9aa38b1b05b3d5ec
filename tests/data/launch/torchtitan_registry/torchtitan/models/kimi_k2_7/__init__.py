# Written for primus's tests in the structure of pytorch/torchtitan (after #2386) models/kimi_k2_7/__init__.py:
# a text tower built by a shared function called with its settings (as Moonlight's is), and a flavor with a
# vision encoder. primus reads this file with `ast`; it is never imported.
from .model import KimiModel, Linear


def _build_kimi_layers(**kwargs):  # type: ignore[no-untyped-def]
    return [kwargs]


def _tower(*, vision_encoder=None, max_context_length: int) -> KimiModel.Config:  # type: ignore[no-untyped-def]
    return KimiModel.Config(
        dim=1024,
        vocab_size=8192,
        lm_head=Linear.Config(in_features=1024, out_features=8192),
        layers=_build_kimi_layers(n_layers=4, n_dense_layers=1, dim=1024, n_heads=8, q_lora_rank=0,
                                  kv_lora_rank=256, qk_nope_head_dim=64, qk_rope_head_dim=32, v_head_dim=64,
                                  dense_hidden_dim=2048, moe_hidden_dim=512, num_experts=8,
                                  num_shared_experts=1, router_top_k=2),
        vision_encoder=vision_encoder,
    )


def _text(moe_comm_backend: str) -> KimiModel.Config:
    return _tower(max_context_length=8192, vision_encoder=None)


def _vl(moe_comm_backend: str) -> KimiModel.Config:
    return _tower(max_context_length=8192, vision_encoder=KimiModel.Vision(dim=256))


kimi_configs = {"text": _text, "vl": _vl}
