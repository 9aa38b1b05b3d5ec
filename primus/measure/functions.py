"""Autograd functions whose `save_for_backward` keeps exactly what Megatron-Core + Transformer Engine keep.

Plain torch modules save whatever their ops happen to need (an unfused LayerNorm keeps its output *and*
the linear keeps it again, eager attention keeps the s×s probabilities...), so tracing them would
measure torch, not Megatron. Each function here computes its forward with ordinary torch ops (the
temporaries die before the function returns) and saves only the tensors the fused kernel it stands
for keeps. Backward passes are real and are gradchecked: a backward that needed something not saved
could not be written, which is the point — the saved set is provably sufficient.

Every saved activation is passed with the ledger's name for it (`primus.memory.activations`), so a
trace can be compared with the ledger tensor by tensor. Parameters and shared tables (RoPE cos/sin)
are saved unnamed: they are not per-layer activations.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence, Set
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch
from torch import Tensor
from torch.autograd import Function

# The recorders active in this context: set and reset by `recording()` only, so nothing outlives its block.
_ACTIVE: ContextVar[tuple[SavedRecorder, ...]] = ContextVar("primus_saved_recorders", default=())


class SavedRecorder:
    """Collects (name, storage, bytes) of every named tensor the functions below save while active.

    Storages, not tensors, are the unit: a view keeps its whole storage alive, and two names for one
    storage (the attention output is also the projection's input) must count once — the first name
    wins, later ones are kept as aliases."""

    def __init__(self) -> None:
        self.first_name: dict[int, str] = {}
        self.nbytes: dict[int, int] = {}
        self.aliases: dict[str, str] = {}

    def add(self, name: str, tensor: Tensor) -> None:
        storage = tensor.untyped_storage()
        key = id(storage)
        if key in self.first_name:
            if self.first_name[key] != name:
                self.aliases[name] = self.first_name[key]
            return
        self.first_name[key] = name
        self.nbytes[key] = storage.nbytes()

    def by_name(self, exclude: Set[int] = frozenset()) -> dict[str, int]:
        """Bytes per name (storages in `exclude`, e.g. external inputs, are skipped)."""
        out: dict[str, int] = {}
        for key, name in self.first_name.items():
            if key not in exclude:
                out[name] = out.get(name, 0) + self.nbytes[key]
        return out


@contextmanager
def recording() -> Iterator[SavedRecorder]:
    """Record the named saves of the functions in this module for the duration of the block."""
    rec = SavedRecorder()
    token = _ACTIVE.set((*_ACTIVE.get(), rec))
    try:
        yield rec
    finally:
        _ACTIVE.reset(token)


def save_named(ctx: Any, named: Sequence[tuple[str | None, Tensor | None]]) -> None:
    """`ctx.save_for_backward` plus, when recording, the ledger name of each saved activation."""
    ctx.save_for_backward(*(t for _, t in named))
    for name, t in named:
        if name is not None and t is not None:
            for rec in _ACTIVE.get():
                rec.add(name, t)


def stat_dtype(x: Tensor) -> torch.dtype:
    """fp32 for bf16/fp16 inputs (what TE keeps for statistics); the input's own dtype if wider."""
    return torch.promote_types(x.dtype, torch.float32)


def _lead_sum(t: Tensor, like: Tensor) -> Tensor:
    return t.reshape(-1, t.shape[-1]).sum(0).to(like.dtype)


# ---- normalisation ---------------------------------------------------------------------------------

def _norm_forward(x: Tensor, gamma: Tensor, beta: Tensor | None, eps: float, rms: bool
                  ) -> tuple[Tensor, tuple[Tensor, ...]]:
    sd = stat_dtype(x)
    xf = x.to(sd)
    stats: tuple[Tensor, ...]
    if rms:
        rstd = torch.rsqrt(xf.pow(2).mean(-1) + eps)
        xhat, stats = xf * rstd[..., None], (rstd,)
    else:
        mu = xf.mean(-1)
        xc = xf - mu[..., None]
        rstd = torch.rsqrt(xc.pow(2).mean(-1) + eps)
        xhat, stats = xc * rstd[..., None], (mu, rstd)
    y = xhat * gamma.to(sd)
    if beta is not None:
        y = y + beta.to(sd)
    return y.to(x.dtype), stats


def _norm_backward(gy: Tensor, x: Tensor, stats: Sequence[Tensor], gamma: Tensor, has_beta: bool
                   ) -> tuple[Tensor, Tensor, Tensor | None]:
    """Gradients of a LayerNorm/RMSNorm from its input and statistics alone (no saved output)."""
    sd = stat_dtype(x)
    xf, g = x.to(sd), gy.to(sd)
    rstd = stats[-1][..., None]
    xhat = (xf - stats[0][..., None]) * rstd if len(stats) == 2 else xf * rstd
    ggamma = _lead_sum(g * xhat, gamma)
    gbeta = _lead_sum(g, gamma) if has_beta else None
    gxhat = g * gamma.to(sd)
    proj = (gxhat * xhat).mean(-1, keepdim=True)
    if len(stats) == 2:
        gx = rstd * (gxhat - gxhat.mean(-1, keepdim=True) - xhat * proj)
    else:
        gx = rstd * (gxhat - xhat * proj)
    return gx.to(x.dtype), ggamma, gbeta


class NormFn(Function):
    """TE LayerNorm/RMSNorm module: keeps its input and fp32 statistics; the output is not kept (the
    consumer — router, shared experts, q/k attention — keeps it if it needs it)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, gamma: Tensor, beta: Tensor | None, eps: float, rms: bool,
                input_name: str, stats_name: str) -> Tensor:
        y, stats = _norm_forward(x, gamma, beta, eps, rms)
        ctx.has_beta = beta is not None
        save_named(ctx, [(input_name, x), (None, gamma), *((stats_name, s) for s in stats)])
        return y

    @staticmethod
    def backward(ctx: Any, gy: Tensor) -> tuple[Tensor | None, ...]:
        x, gamma, *stats = ctx.saved_tensors
        gx, ggamma, gbeta = _norm_backward(gy, x, stats, gamma, ctx.has_beta)
        return gx, ggamma, gbeta, None, None, None, None


class NormLinearFn(Function):
    """TE LayerNormLinear: keeps the norm input, its fp32 statistics and the normalised output (the
    GEMM input needed for the weight gradient) — never the GEMM output."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, gamma: Tensor, beta: Tensor | None, weight: Tensor,
                bias: Tensor | None, eps: float, rms: bool, prefix: str) -> Tensor:
        ln_out, stats = _norm_forward(x, gamma, beta, eps, rms)
        y = ln_out @ weight.t()
        if bias is not None:
            y = y + bias
        ctx.has_beta, ctx.has_bias = beta is not None, bias is not None
        save_named(ctx, [(f"{prefix}.input", x), (f"{prefix}.output", ln_out), (None, gamma), (None, weight),
                    *((f"{prefix}.stats", s) for s in stats)])
        return y

    @staticmethod
    def backward(ctx: Any, gy: Tensor) -> tuple[Tensor | None, ...]:
        x, ln_out, gamma, weight, *stats = ctx.saved_tensors
        g2 = gy.reshape(-1, gy.shape[-1])
        gweight = g2.t() @ ln_out.reshape(-1, ln_out.shape[-1])
        gbias = g2.sum(0) if ctx.has_bias else None
        gx, ggamma, gbeta = _norm_backward(gy @ weight, x, stats, gamma, ctx.has_beta)
        return gx, ggamma, gbeta, gweight, gbias, None, None, None


# ---- linear layers ---------------------------------------------------------------------------------

class LinearFn(Function):
    """TE Linear: keeps its input for the weight gradient (the bias needs nothing)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, input_name: str) -> Tensor:
        y = x @ weight.t()
        if bias is not None:
            y = y + bias
        ctx.has_bias = bias is not None
        save_named(ctx, [(input_name, x), (None, weight)])
        return y

    @staticmethod
    def backward(ctx: Any, gy: Tensor) -> tuple[Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        g2 = gy.reshape(-1, gy.shape[-1])
        gbias = g2.sum(0) if ctx.has_bias else None
        return gy @ weight, g2.t() @ x.reshape(-1, x.shape[-1]), gbias, None


class GroupedLinearFn(Function):
    """TE GroupedLinear over experts: rows of `x` are grouped by expert (`splits` rows each); keeps the
    whole grouped input once."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, splits: tuple[int, ...], input_name: str) -> Tensor:
        parts = [c @ weight[e].t() for e, c in enumerate(x.split(list(splits)))]
        ctx.splits = splits
        save_named(ctx, [(input_name, x), (None, weight)])
        return torch.cat(parts)

    @staticmethod
    def backward(ctx: Any, gy: Tensor) -> tuple[Tensor | None, ...]:
        x, weight = ctx.saved_tensors
        splits = list(ctx.splits)
        gs, xs = gy.split(splits), x.split(splits)
        gx = torch.cat([g @ weight[e] for e, g in enumerate(gs)])
        gw = torch.stack([g.t() @ c for g, c in zip(gs, xs, strict=True)])
        return gx, gw, None, None


# ---- attention -------------------------------------------------------------------------------------

def _heads_first(t: Tensor, repeat: int, dtype: torch.dtype) -> Tensor:
    """[s, b, heads, d] -> [b, heads*repeat, s, d]: each key/value group serves `repeat` query heads."""
    t = t.permute(1, 2, 0, 3).to(dtype)
    return t.repeat_interleave(repeat, dim=1) if repeat > 1 else t


def _probs(qh: Tensor, kh: Tensor, scale: float, causal: bool) -> Tensor:
    scores = (qh @ kh.transpose(-1, -2)) * scale
    if causal:
        s = scores.shape[-1]
        mask = torch.ones(s, s, dtype=torch.bool, device=scores.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    return scores


class FlashAttentionFn(Function):
    """Flash attention: keeps q, k, v, the output and the fp32 log-sum-exp ([b, heads, s]); the s×s
    probabilities exist only transiently (here as temporaries, in the kernel tile by tile) and are
    rebuilt in backward from q, k and the log-sum-exp."""

    @staticmethod
    def forward(ctx: Any, q: Tensor, k: Tensor, v: Tensor, causal: bool, prefix: str) -> Tensor:
        sd = stat_dtype(q)
        rep = q.shape[2] // k.shape[2]
        scale = q.shape[-1] ** -0.5
        qh, kh, vh = _heads_first(q, 1, sd), _heads_first(k, rep, sd), _heads_first(v, rep, sd)
        scores = _probs(qh, kh, scale, causal)
        lse = torch.logsumexp(scores, dim=-1)
        out = (torch.exp(scores - lse[..., None]) @ vh).to(q.dtype).permute(2, 0, 1, 3).contiguous()
        ctx.causal, ctx.scale, ctx.rep = causal, scale, rep
        save_named(ctx, [(f"{prefix}.q", q), (f"{prefix}.k", k), (f"{prefix}.v", v),
                         (f"{prefix}.output", out), (f"{prefix}.softmax_lse", lse)])
        return out

    @staticmethod
    def backward(ctx: Any, gout: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        sd, rep, scale = lse.dtype, ctx.rep, ctx.scale
        qh, kh, vh = _heads_first(q, 1, sd), _heads_first(k, rep, sd), _heads_first(v, rep, sd)
        oh, gh = _heads_first(out, 1, sd), _heads_first(gout, 1, sd)
        p = torch.exp(_probs(qh, kh, scale, ctx.causal) - lse[..., None])
        gv = p.transpose(-1, -2) @ gh
        gp = gh @ vh.transpose(-1, -2)
        gs = p * (gp - (gh * oh).sum(-1, keepdim=True))
        gq = (gs @ kh) * scale
        gk = (gs.transpose(-1, -2) @ qh) * scale

        def back(t: Tensor, like: Tensor, groups: int) -> Tensor:
            b, _, s, d = t.shape
            t = t.reshape(b, like.shape[2], groups, s, d).sum(2)
            return t.permute(2, 0, 1, 3).to(like.dtype)

        return back(gq, q, 1), back(gk, k, rep), back(gv, v, rep), None, None


def _rotate(x: Tensor, sign: int) -> Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1) if sign > 0 else (x2, -x1), dim=-1)


class RopeFn(Function):
    """Fused RoPE (Megatron's non-interleaved rotate-half): keeps only the shared cos/sin tables."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        save_named(ctx, [(None, cos), (None, sin)])
        return x * cos + _rotate(x, 1) * sin

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        cos, sin = ctx.saved_tensors
        return g * cos + _rotate(g * sin, -1), None, None


# ---- activations and dropout -------------------------------------------------------------------------

def _silu_parts(a: Tensor) -> tuple[Tensor, Tensor]:
    sig = torch.sigmoid(a)
    return a * sig, sig * (1 + a * (1 - sig))


class SwiGLUFn(Function):
    """Megatron's fused (bias-)SwiGLU: keeps its input, the FC1 output [.., 2f]."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, name: str) -> Tensor:
        a, b = x.chunk(2, dim=-1)
        save_named(ctx, [(name, x)])
        return torch.nn.functional.silu(a) * b

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        (x,) = ctx.saved_tensors
        a, b = x.chunk(2, dim=-1)
        silu, dsilu = _silu_parts(a)
        return torch.cat((g * b * dsilu, g * silu), dim=-1), None


class WeightedSwiGLUFn(Function):
    """Megatron-Core's weighted SwiGLU for experts (routing probabilities applied inside the activation,
    every token dispatcher of recent releases): keeps the FC1 output and the fp32 probabilities."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, w: Tensor, name: str, probs_name: str) -> Tensor:
        a, b = x.chunk(2, dim=-1)
        save_named(ctx, [(name, x), (probs_name, w)])
        return (torch.nn.functional.silu(a) * b * w).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        x, w = ctx.saved_tensors
        a, b = x.chunk(2, dim=-1)
        silu, dsilu = _silu_parts(a)
        gw_ = g * w
        gx = torch.cat((gw_ * b * dsilu, gw_ * silu), dim=-1).to(x.dtype)
        return gx, (g * silu * b).sum(-1, keepdim=True).to(w.dtype), None, None


_GELU_C = (2 / torch.pi) ** 0.5


class GeluFn(Function):
    """Megatron's fused bias-GELU (tanh approximation): keeps its input, the FC1 output."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, name: str) -> Tensor:
        save_named(ctx, [(name, x)])
        return 0.5 * x * (1 + torch.tanh(_GELU_C * (x + 0.044715 * x.pow(3))))

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        (x,) = ctx.saved_tensors
        t = torch.tanh(_GELU_C * (x + 0.044715 * x.pow(3)))
        dt = (1 - t * t) * _GELU_C * (1 + 3 * 0.044715 * x * x)
        return g * (0.5 * (1 + t) + 0.5 * x * dt), None


class SquaredReLUFn(Function):
    """Megatron's squared ReLU, pow(relu(x), 2): relu keeps its output, which pow reuses — one tensor
    of the FC1 output's size (the ledger's FC1-output slot)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, name: str) -> Tensor:
        r = torch.relu(x)
        save_named(ctx, [(name, r)])
        return r * r

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        (r,) = ctx.saved_tensors
        return 2 * g * r, None


class BiasDropoutAddFn(Function):
    """Megatron's bias-dropout-add: residual + dropout(x). Keeps the 1-byte bool mask only, and nothing
    at all when p == 0 (no dropout kernel runs)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, residual: Tensor, p: float, name: str) -> Tensor:
        ctx.p = p
        if p <= 0:
            save_named(ctx, [])
            return residual + x
        mask = torch.rand_like(x) >= p
        save_named(ctx, [(name, mask)])
        return residual + x * mask / (1 - p)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        if ctx.p <= 0:
            return g, g, None, None
        (mask,) = ctx.saved_tensors
        return g * mask / (1 - ctx.p), g, None, None
