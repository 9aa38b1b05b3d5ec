# Written for primus's tests in the structure of pytorch/torchtitan (after #2386) torchtitan/models/llama3/__init__.py:
# flavors built by functions (Llama 3.2 1B's published shape: 16 layers, dim 2048, 32 heads / 8 KV heads, FFN 8192,
# tied embeddings). primus reads this file with `ast`; it is never imported.
from torchtitan.models.common import compute_ffn_hidden_dim

from .model import ComplexRoPE, Embedding, Linear, Llama3Model


def _build_llama3_layers(**kwargs):  # type: ignore[no-untyped-def]
    return [kwargs]


def _1b(attn_backend: str) -> Llama3Model.Config:
    dim = 2048
    n_heads = 32
    vocab_size = 128256
    return Llama3Model.Config(
        dim=dim,
        vocab_size=vocab_size,
        enable_weight_tying=True,
        tok_embeddings=Embedding.Config(num_embeddings=vocab_size, embedding_dim=dim),
        lm_head=Linear.Config(in_features=dim, out_features=vocab_size),
        layers=_build_llama3_layers(
            n_layers=16,
            dim=dim,
            n_heads=n_heads,
            n_kv_heads=8,
            hidden_dim=compute_ffn_hidden_dim(dim, multiple_of=1024, ffn_dim_multiplier=1.5),
            rope=ComplexRoPE.Config(dim=dim // n_heads, max_context_length=131072, theta=500000),
            attn_backend=attn_backend,
        ),
    )


llama3_configs = {"1B": _1b}
