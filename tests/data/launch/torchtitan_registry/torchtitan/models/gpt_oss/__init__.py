# Written for primus's tests in the structure of pytorch/torchtitan (after #2386) torchtitan/models/gpt_oss/__init__.py:
# a small flavor built by a function (gpt-oss's layer: every layer MoE, sinks and biases, a window on every
# other layer; the attention shape is the builder's default). primus reads this file with `ast`; it is never imported.
from .model import Embedding, GptOssModel, Linear


def _build_gptoss_layers(**kwargs):  # type: ignore[no-untyped-def]
    return [kwargs]


def _small(moe_comm_backend: str) -> GptOssModel.Config:
    dim = 512
    return GptOssModel.Config(
        dim=dim,
        vocab_size=4096,
        tok_embeddings=Embedding.Config(num_embeddings=4096, embedding_dim=dim),
        lm_head=Linear.Config(in_features=dim, out_features=4096),
        layers=_build_gptoss_layers(dim=dim, n_layers=2, hidden_dim=1024, num_experts=4, top_k=2,
                                    moe_comm_backend=moe_comm_backend),
    )


gptoss_configs = {"small": _small}
