"""A torch reference decoder layer (dense or MoE) built from a `ModelSpec`, saving what Megatron saves.

The layer mirrors Megatron-Core's TransformerLayer with Transformer Engine modules at TP = CP = 1
without sequence parallelism, in Megatron's [s, b, h] layout:

  dense: LayerNormLinear(QKV) → [q/k norm] → RoPE → flash attention → Linear(proj) → bias-dropout-add
         → LayerNormLinear(FC1) → SwiGLU | GELU | squared ReLU → Linear(FC2) → bias-dropout-add
  moe:   the same attention → Norm → router Linear → top-k (fp32 probabilities) → permute
         → GroupedLinear(FC1) → activation → GroupedLinear(FC2) → unpermute (+ shared-expert MLP)
         → bias-dropout-add

Every op that keeps something for backward is one of the functions in `primus.measure.functions` or
`primus.measure.routing`, so the trace measures Megatron's saved set, not eager torch's. Where
Megatron releases differ, the difference is a parameter: `moe_probs="unpermute"` applies the routing
probabilities in the unpermute (keeping the expert output: Megatron-Core before the probabilities
moved into the experts, and the ledger's model); `moe_probs="activation"` applies them inside the
experts' SwiGLU (recent Megatron-Core, all token dispatchers: the FC2 output is not kept, the
permuted fp32 probabilities are). Not modelled: multi-latent attention, attention dropout inside
flash attention (it keeps only a 16-byte RNG state), z-loss / auxiliary-loss tensors (off by default
in Megatron).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensor

from primus.measure.functions import (
    BiasDropoutAddFn,
    FlashAttentionFn,
    GeluFn,
    GroupedLinearFn,
    LinearFn,
    NormFn,
    NormLinearFn,
    RopeFn,
    SquaredReLUFn,
    SwiGLUFn,
    WeightedSwiGLUFn,
)
from primus.measure.routing import GatherProbsFn, PermuteFn, TopKRouterFn, UnpermuteFn
from primus.specs.model import ModelSpec

MOE_PROBS = ("unpermute", "activation")
EPS = 1e-5


def check_supported(model: ModelSpec, kind: str, moe_probs: str = "unpermute") -> None:
    """ValueError naming what the reference cannot build (so callers can report it, not crash)."""
    if kind not in ("dense", "moe"):
        raise ValueError(f"layer kind must be 'dense' or 'moe', not {kind!r}")
    if model.multi_latent_attention:
        raise ValueError("the reference layer does not model multi-latent attention")
    unbuilt = [name for name, used in (
        ("sandwich or post norms", model.norm_placement != "pre"),
        ("q/k norms over the whole projection", model.qk_layernorm and not model.qk_layernorm_per_head),
        ("a gated shared expert", model.moe_shared_expert_gate),
        ("an attention output gate", model.attention_output_gate),
        ("q/k norms without weights", model.qk_layernorm and not model.qk_layernorm_affine),
        ("an attention output bias without add_bias_linear", model.add_proj_bias and not model.add_bias_linear),
    ) if used]
    if unbuilt:
        raise ValueError(f"the reference layer does not model {', '.join(unbuilt)}")
    if kind == "moe" and not model.is_moe:
        raise ValueError(f"{model.name} has no MoE layers")
    if kind == "dense" and model.ffn_hidden_size is None:
        raise ValueError(f"{model.name} has no dense MLP (ffn_hidden_size unset)")
    if moe_probs not in MOE_PROBS:
        raise ValueError(f"moe_probs must be one of {MOE_PROBS}, not {moe_probs!r}")
    if kind == "moe" and moe_probs == "activation" and not model.swiglu:
        raise ValueError("probabilities inside the expert activation are modelled for SwiGLU experts only")


def rope_tables(seq_len: int, head_dim: int, dtype: torch.dtype, base: float = 10000.0
                ) -> tuple[Tensor, Tensor]:
    """cos/sin [s, 1, 1, d]. Computed once per model forward and shared by every layer, so a trace
    treats them as external inputs, not as the layer's activations."""
    inv = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    ang = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv)
    ang = torch.cat((ang, ang), dim=-1)[:, None, None, :]
    return ang.cos().to(dtype), ang.sin().to(dtype)


def balanced_splits(rows: int, experts: int) -> tuple[int, ...]:
    """Rows per expert under balanced routing (what the ledger assumes by default)."""
    base, extra = divmod(rows, experts)
    return tuple(base + (1 if e < extra else 0) for e in range(experts))


def _param(*shape: int, dtype: torch.dtype, fill: float | None = None) -> nn.Parameter:
    t = torch.empty(*shape, dtype=dtype)
    if fill is None:
        nn.init.normal_(t, std=0.02)
    else:
        nn.init.constant_(t, fill)
    return nn.Parameter(t)


class ReferenceLayer(nn.Module):
    """One decoder layer of `model`; `forward(x [s, b, h], rope)` returns the layer output."""

    def __init__(self, model: ModelSpec, kind: str, moe_probs: str = "unpermute",
                 dtype: torch.dtype = torch.bfloat16) -> None:
        super().__init__()
        check_supported(model, kind, moe_probs)
        self.kind, self.moe_probs = kind, moe_probs
        self.rms = model.normalization == "RMSNorm"
        self.p = float(model.hidden_dropout)
        self.heads, self.groups, self.head_dim = model.num_attention_heads, model.query_groups, model.head_dim
        self.qk_norm = model.qk_layernorm
        self.activation = "swiglu" if model.swiglu else "squared_relu" if model.squared_relu else "gelu"
        h, d, bias = model.hidden_size, model.head_dim, model.add_bias_linear
        ln_bias = not self.rms

        def norm(dim: int, name: str) -> None:
            self.register_parameter(f"{name}_w", _param(dim, dtype=dtype, fill=1.0))
            self.register_parameter(f"{name}_b", _param(dim, dtype=dtype, fill=0.0) if ln_bias else None)

        def linear(out_dim: int, in_dim: int, name: str, with_bias: bool) -> None:
            self.register_parameter(f"{name}_w", _param(out_dim, in_dim, dtype=dtype))
            b = _param(out_dim, dtype=dtype, fill=0.0) if with_bias else None
            self.register_parameter(f"{name}_b", b)

        norm(h, "ln1")
        linear((self.heads + 2 * self.groups) * d, h, "qkv", bias or model.add_qkv_bias)
        if self.qk_norm:
            norm(d, "q_norm")
            norm(d, "k_norm")
        linear(h, self.heads * d, "proj", bias)
        norm(h, "ln2")
        widen = 2 if model.swiglu else 1
        if kind == "dense":
            ffn = model.ffn_hidden_size or 0
            linear(widen * ffn, h, "fc1", bias)
            linear(h, ffn, "fc2", bias)
            return
        self.experts, self.topk = model.num_experts or 0, model.topk
        ffn = model.moe_ffn_hidden_size or 0
        self.router_w = _param(self.experts, h, dtype=dtype)
        self.w1 = _param(self.experts, widen * ffn, h, dtype=dtype)
        self.w2 = _param(self.experts, h, ffn, dtype=dtype)
        self.shared = model.moe_shared_expert_intermediate_size or 0
        if self.shared:
            linear(widen * self.shared, h, "shared_fc1", False)
            linear(h, self.shared, "shared_fc2", False)

    # ---- pieces -----------------------------------------------------------------------------------

    def _act(self, x: Tensor, name: str) -> Tensor:
        fn = {"swiglu": SwiGLUFn, "gelu": GeluFn, "squared_relu": SquaredReLUFn}[self.activation]
        return fn.apply(x, name)

    def _attention(self, x: Tensor, rope: tuple[Tensor, Tensor] | None) -> Tensor:
        s, b, _ = x.shape
        g, d = self.groups, self.head_dim
        rep = self.heads // g
        qkv = NormLinearFn.apply(x, self.ln1_w, self.ln1_b, self.qkv_w, self.qkv_b, EPS, self.rms,
                                 "input_layernorm")
        # Megatron's interleaved layout [s, b, groups, (rep + 2) * d]: each group's queries, then k, v.
        qkv = qkv.view(s, b, g, rep + 2, d)
        # Separate compact q, k, v: TE's attention copies them when their strides match no supported
        # layout (always once RoPE has rewritten q and k); without RoPE and GQA they may stay views of
        # the QKV output instead, which keeps the same q + k + v bytes.
        q = qkv[:, :, :, :rep].reshape(s, b, g * rep, d).contiguous()
        k, v = qkv[:, :, :, rep].contiguous(), qkv[:, :, :, rep + 1].contiguous()
        if self.qk_norm:
            q = NormFn.apply(q, self.q_norm_w, self.q_norm_b, EPS, self.rms, "q_layernorm.input",
                             "qk_layernorm.stats")
            k = NormFn.apply(k, self.k_norm_w, self.k_norm_b, EPS, self.rms, "k_layernorm.input",
                             "qk_layernorm.stats")
        if rope is not None:
            q, k = RopeFn.apply(q, *rope), RopeFn.apply(k, *rope)
        out = FlashAttentionFn.apply(q, k, v, True, "core_attention")
        proj = LinearFn.apply(out.view(s, b, -1), self.proj_w, self.proj_b, "linear_proj.input")
        return BiasDropoutAddFn.apply(proj, x, self.p, "self_attention.dropout_mask")

    def _dense_mlp(self, h: Tensor) -> Tensor:
        f1 = NormLinearFn.apply(h, self.ln2_w, self.ln2_b, self.fc1_w, self.fc1_b, EPS, self.rms,
                                "pre_mlp_layernorm")
        f2 = LinearFn.apply(self._act(f1, "mlp.linear_fc1.output"), self.fc2_w, self.fc2_b,
                            "mlp.activation.output")
        return BiasDropoutAddFn.apply(f2, h, self.p, "mlp.dropout_mask")

    def _moe_mlp(self, h: Tensor) -> Tensor:
        s, b, hidden = h.shape
        tokens = s * b
        x = NormFn.apply(h, self.ln2_w, self.ln2_b, EPS, self.rms, "pre_mlp_layernorm.input",
                         "pre_mlp_layernorm.stats").view(tokens, hidden)
        logits = LinearFn.apply(x, self.router_w, None, "pre_mlp_layernorm.output")
        probs, routing_map = TopKRouterFn.apply(logits, self.topk)
        rows = tokens * self.topk
        # Expert-major order of the routed copies (Megatron's argsort-based permute); clone() so the
        # row map keeps rows × 8 bytes, not the whole argsort buffer.
        order = routing_map.t().reshape(-1).to(torch.int8).argsort(descending=True, stable=True)
        flat = order[:rows].clone()
        if isinstance(flat, FakeTensor):  # no data under FakeTensorMode: balanced routing, as the ledger
            splits = balanced_splits(rows, self.experts)
        else:
            counts = torch.bincount(torch.div(flat, tokens, rounding_mode="floor"), minlength=self.experts)
            splits = tuple(int(c) for c in counts.tolist())
        xp = PermuteFn.apply(x, flat, "dispatcher.row_id_map")
        f1 = GroupedLinearFn.apply(xp, self.w1, splits, "experts.input")
        if self.moe_probs == "activation":
            w = GatherProbsFn.apply(probs, flat)[:, None]
            act = WeightedSwiGLUFn.apply(f1, w, "experts.linear_fc1.output", "experts.probs")
        else:
            act = self._act(f1, "experts.linear_fc1.output")
        f2 = GroupedLinearFn.apply(act, self.w2, splits, "experts.activation.output")
        weights = probs if self.moe_probs == "unpermute" else None
        y = UnpermuteFn.apply(f2, flat, weights, tokens, "experts.output")
        if self.shared:
            sh = LinearFn.apply(x, self.shared_fc1_w, None, "pre_mlp_layernorm.output")
            sh = LinearFn.apply(self._act(sh, "shared_experts.linear_fc1.output"), self.shared_fc2_w, None,
                                "shared_experts.activation.output")
            y = y + sh
        return BiasDropoutAddFn.apply(y.view(s, b, hidden), h, self.p, "mlp.dropout_mask")

    def forward(self, x: Tensor, rope: tuple[Tensor, Tensor] | None = None) -> Tensor:
        h = self._attention(x, rope)
        return self._dense_mlp(h) if self.kind == "dense" else self._moe_mlp(h)
