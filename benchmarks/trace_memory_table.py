"""Print the ledger-vs-trace agreement table for docs/memory.md (markdown on stdout).

Each row traces one forward of the torch reference layer (`primus.measure.reference`) under
FakeTensorMode with torch's MemTracker and compares the activations the autograd graph keeps with
the ledger's `layer_bytes` for the same layer (TP 1, CP 1, no SP, bf16, flash attention).
Needs the measure extra (torch). Run: python benchmarks/trace_memory_table.py
"""

from __future__ import annotations

from typing import Any

from primus.catalog.models import resolve_model
from primus.measure.trace import TraceResult, trace_activation_bytes
from primus.specs.model import ModelSpec


def _spec(name: str, h: int, heads: int, groups: int, **kw: Any) -> ModelSpec:
    base: dict[str, Any] = dict(
        name=name, num_layers=2, hidden_size=h, num_attention_heads=heads, num_query_groups=groups,
        vocab_size=1000, position_embedding_type="rope", normalization="RMSNorm", swiglu=True,
        add_bias_linear=False, hidden_dropout=0.0, attention_dropout=0.0)
    return ModelSpec(**{**base, **kw})


_GPT = dict(normalization="LayerNorm", swiglu=False, add_bias_linear=True, hidden_dropout=0.1,
            attention_dropout=0.1, position_embedding_type="learned_absolute", max_position_embeddings=4096)
_MOE = dict(num_experts=8, moe_router_topk=2)

# (label, model, kind, seq, mbs, moe_probs)
_U, _A = "unpermute", "activation"
_MIXTRAL = resolve_model("mixtral-8x7b", "benchmark")
CASES: list[tuple[str, ModelSpec, str, int, int, str]] = [
    ("h256 4h/1g ffn 2.5× SwiGLU RMSNorm", _spec("a", 256, 4, 1, ffn_hidden_size=640), "dense", 128, 1, _A),
    ("h512 8h/2g ffn 2.7× SwiGLU RMSNorm", _spec("b", 512, 8, 2, ffn_hidden_size=1376), "dense", 512, 2, _A),
    ("h1024 16h/4g ffn 2.75× SwiGLU RMSNorm", _spec("c", 1024, 16, 4, ffn_hidden_size=2816),
     "dense", 1024, 1, _A),
    ("h1024 16h MHA ffn 4× SwiGLU qk-norm", _spec("d", 1024, 16, 16, ffn_hidden_size=4096, qk_layernorm=True),
     "dense", 256, 2, _A),
    ("h512 8h ffn 4× GELU LayerNorm dropout", _spec("e", 512, 8, 8, ffn_hidden_size=2048, **_GPT),
     "dense", 512, 2, _A),
    ("h256 4h/2g ffn 4× sq-ReLU LayerNorm dropout",
     _spec("f", 256, 4, 2, ffn_hidden_size=1024, **{**_GPT, "squared_relu": True}), "dense", 256, 2, _A),
    ("h256 MoE 8×top-2 ffn 512", _spec("g", 256, 4, 2, moe_ffn_hidden_size=512, **_MOE), "moe", 256, 2, _A),
    ("h512 MoE 8×top-2 ffn 768 + shared 1024",
     _spec("h", 512, 8, 2, moe_ffn_hidden_size=768, moe_shared_expert_intermediate_size=1024, **_MOE),
     "moe", 512, 1, _A),
    ("h1024 MoE 8×top-2 + shared, dropout",
     _spec("i", 1024, 16, 4, moe_ffn_hidden_size=1024, moe_shared_expert_intermediate_size=2048,
           hidden_dropout=0.1, **_MOE), "moe", 1024, 2, _A),
    ("llama3-8b", resolve_model("llama3-8b", "benchmark"), "dense", 8192, 1, _A),
    ("gpt3-175b", resolve_model("gpt3-175b", "benchmark"), "dense", 2048, 1, _A),
    ("mixtral-8x7b", _MIXTRAL, "moe", 4096, 1, _A),
    ("qwen3-30b-a3b", resolve_model("qwen3-30b-a3b", "benchmark"), "moe", 4096, 1, _A),
    ("mixtral-8x7b, reference with probs in the unpermute (older MCore)", _MIXTRAL, "moe", 4096, 1, _U),
]


def row(label: str, res: TraceResult) -> str:
    differ = ", ".join(f"`{d.name}`" for d in res.diffs()) or "—"
    return (f"| {label} | {res.kind} | {res.seq_len}×{res.mbs} | {res.ledger_bytes:,} | {res.traced_bytes:,} "
            f"| {100 * res.error:+.3f}% | {differ} |")


def main() -> None:
    print("| shape | layer | seq×mbs | ledger bytes | traced bytes | error | tensors that differ |")
    print("|---|---|---|---:|---:|---:|---|")
    for label, model, kind, seq, mbs, moe_probs in CASES:
        print(row(label, trace_activation_bytes(model, seq, mbs, kind, moe_probs=moe_probs)))
    print()
    print("error = (ledger − traced) / traced. Traced = bytes torch's MemTracker still counts as activations "
          "after one forward under FakeTensorMode once only the autograd graph holds them (layer input "
          "included; output, parameters and RoPE tables excluded).")


if __name__ == "__main__":
    main()
