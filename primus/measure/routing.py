"""MoE routing functions saving what Megatron-Core's router and TE's fused permute/unpermute keep.

Routed copies are identified by their expert-major flat index e*T + t in the [T, E] routing map
(Megatron's argsort-based permute orders them this way): one int64 per copy is the whole row map.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torch.autograd import Function

from primus.measure.functions import save_named, stat_dtype


class TopKRouterFn(Function):
    """TE's fused top-k router (softmax over the selected logits): keeps the sparse fp32 probabilities
    [T, E] and the bool routing map [T, E]."""

    @staticmethod
    def forward(ctx: Any, logits: Tensor, topk: int) -> tuple[Tensor, Tensor]:
        sd = stat_dtype(logits)
        vals, idx = torch.topk(logits, topk, dim=-1)
        probs = torch.zeros(logits.shape, dtype=sd, device=logits.device)
        probs = probs.scatter(1, idx, torch.softmax(vals.to(sd), dim=-1))
        routing_map = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device).scatter(1, idx, True)
        ctx.mark_non_differentiable(routing_map)
        ctx.logits_dtype = logits.dtype
        save_named(ctx, [("router.probs", probs), ("router.routing_map", routing_map)])
        return probs, routing_map

    @staticmethod
    def backward(ctx: Any, gprobs: Tensor, _gmap: Tensor | None) -> tuple[Tensor | None, ...]:
        probs, routing_map = ctx.saved_tensors
        g = gprobs * routing_map
        glogits = probs * (g - (probs * g).sum(-1, keepdim=True))
        return glogits.to(ctx.logits_dtype), None


def _token_expert(flat: Tensor, tokens: int) -> tuple[Tensor, Tensor]:
    """Permuted row -> (token, expert): rows are expert-major flat indices e*T + t of the routing map."""
    return flat % tokens, torch.div(flat, tokens, rounding_mode="floor")


class PermuteFn(Function):
    """Token permutation to expert order: keeps only the int64 row map (one entry per routed copy)."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, flat: Tensor, name: str) -> Tensor:
        ctx.tokens = x.shape[0]
        save_named(ctx, [(name, flat)])
        return x.index_select(0, flat % ctx.tokens)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        (flat,) = ctx.saved_tensors
        gx = g.new_zeros(ctx.tokens, g.shape[-1]).index_add_(0, flat % ctx.tokens, g)
        return gx, None, None


class GatherProbsFn(Function):
    """The routing probability of each permuted row ([T, E] -> [rows]), for the weighted activation."""

    @staticmethod
    def forward(ctx: Any, probs: Tensor, flat: Tensor) -> Tensor:
        ctx.shape = probs.shape
        save_named(ctx, [(None, flat)])
        t, e = _token_expert(flat, probs.shape[0])
        return probs[t, e]

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        (flat,) = ctx.saved_tensors
        t, e = _token_expert(flat, ctx.shape[0])
        return g.new_zeros(ctx.shape).index_put_((t, e), g, accumulate=True), None


class UnpermuteFn(Function):
    """Unpermute back to token order, optionally probability-weighted (TE's fused unpermute with merging
    probabilities): weighted, it keeps the expert output and the [T, E] probabilities; unweighted,
    only the row map."""

    @staticmethod
    def forward(ctx: Any, y: Tensor, flat: Tensor, probs: Tensor | None, tokens: int, name: str) -> Tensor:
        t, e = _token_expert(flat, tokens)
        ctx.tokens, ctx.weighted = tokens, probs is not None
        if probs is None:
            save_named(ctx, [(None, flat)])
            return y.new_zeros(tokens, y.shape[-1]).index_add_(0, t, y)
        save_named(ctx, [(name, y), (None, flat), (None, probs)])
        w = probs[t, e][:, None]
        out = torch.zeros(tokens, y.shape[-1], dtype=w.dtype, device=y.device)
        out.index_add_(0, t, y.to(w.dtype) * w)
        return out.to(y.dtype)

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        if not ctx.weighted:
            (flat,) = ctx.saved_tensors
            return g[flat % ctx.tokens], None, None, None, None
        y, flat, probs = ctx.saved_tensors
        t, e = _token_expert(flat, ctx.tokens)
        gt = g[t].to(probs.dtype)
        gy = (gt * probs[t, e][:, None]).to(y.dtype)
        gprobs = torch.zeros_like(probs).index_put_((t, e), (gt * y.to(probs.dtype)).sum(-1), accumulate=True)
        return gy, None, gprobs, None, None
