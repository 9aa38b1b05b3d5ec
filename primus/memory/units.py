"""Per-rank unit sizes: parameters per layer at a TP/EP/ETP, bytes per layer per microbatch.

The sharding-dependent half of the ledger; see `primus.memory.shapes` for the schedule half.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from primus.memory.activations import (
    ActContext,
    checkpoint_bytes,
    embedding_bytes,
    layer_bytes,
    layer_working_bytes,
    loss_bytes,
    loss_working_bytes,
    mtp_extra_bytes,
)
from primus.specs.model import ModelSpec
from primus.specs.params import LayerParams, ParamCount, Shard, count_params


@dataclass(frozen=True, slots=True)
class ParamUnits:
    """Parameters one rank holds per unit of each kind, at a given TP, EP, ETP."""

    dense_layer: int
    moe_layer_dense: int  # attention, norms, router, shared experts of an MoE layer (TP-split)
    moe_layer_expert: int  # the rank's local routed experts of an MoE layer (EP and ETP split)
    mtp_dense: int
    mtp_expert: int
    embedding: int  # word embedding (padded vocab / TP) + position embedding + embedding norm
    word_embedding: int  # word embedding alone (the copy a tied output or MTP needs)
    output: int  # final norm + untied output layer (padded vocab / TP)
    gemm_dense_layer: int  # linear weights of a dense layer (FP8 caches are kept for these)
    gemm_moe_dense: int
    gemm_moe_expert: int
    gemm_mtp_dense: int
    gemm_mtp_expert: int
    max_layer: int  # the largest decoder layer's per-rank parameters (FSDP unshards one at a time)


def _gemm(layer: LayerParams | None, tp: int, ep: int, etp: int) -> tuple[int, int]:
    """Per-rank linear-weight parameters (dense part, expert part)."""
    if layer is None:
        return 0, 0
    dense = expert = 0
    for w in layer.weights:
        if not w.name.endswith(".weight") or "layernorm" in w.name or w.name.startswith("mlp.router") \
                or w.name == "mlp.shared_experts.gate.weight":  # a bf16 h→1 product, no FP8 cache
            continue
        if w.shard is Shard.TP:
            dense += -(-w.count // tp)
        elif w.shard is Shard.REPLICATED:
            dense += w.count
        elif w.shard is Shard.EXPERT_TP:
            expert += -(-layer.num_experts // ep) * -(-w.count // etp)
    return dense, expert


@lru_cache(maxsize=1024)
def param_units(model: ModelSpec, tp: int, ep: int, etp: int) -> ParamUnits:
    counts: ParamCount = count_params(model)
    vocab = model.padded_vocab_size(tp)
    word = vocab * model.hidden_size // tp
    extra = counts.embedding(vocab) - vocab * model.hidden_size  # embedding LayerNorm (BLOOM)
    output = counts.final_norm + (word if model.untie_embeddings_and_output_weights else 0)
    if model.output_layer_bias:  # vocab-parallel, split with the output layer's rows
        output += vocab // tp
    dense = counts.dense.per_rank(tp) if counts.dense else 0
    moe_dense = counts.moe.dense_part(tp) if counts.moe else 0
    moe_expert = counts.moe.expert_part(ep, etp) if counts.moe else 0
    mtp_dense = counts.mtp.dense_part(tp) if counts.mtp else 0
    mtp_expert = counts.mtp.expert_part(ep, etp) if counts.mtp else 0
    g_dense, _ = _gemm(counts.dense, tp, ep, etp)
    g_moe_d, g_moe_e = _gemm(counts.moe, tp, ep, etp)
    g_mtp_d, g_mtp_e = _gemm(counts.mtp, tp, ep, etp)
    return ParamUnits(
        dense_layer=dense, moe_layer_dense=moe_dense, moe_layer_expert=moe_expert,
        mtp_dense=mtp_dense, mtp_expert=mtp_expert,
        embedding=word + counts.position_embedding + extra, word_embedding=word, output=output,
        gemm_dense_layer=g_dense, gemm_moe_dense=g_moe_d, gemm_moe_expert=g_moe_e,
        gemm_mtp_dense=g_mtp_d, gemm_mtp_expert=g_mtp_e,
        max_layer=max(dense, moe_dense + moe_expert),
    )


@dataclass(frozen=True, slots=True)
class ActUnits:
    """Bytes per in-flight microbatch of each kind (and transient working sets) at one setting."""

    dense: int  # a dense layer, activations kept (less core attention under selective recompute)
    moe: int
    dense_full: int  # a dense layer with everything kept (what full recompute rematerialises)
    moe_full: int
    checkpoint: int  # the input of a fully recomputed layer
    embedding: int
    loss: int  # final norm, output-layer input, fp32 softmax (or bf16 logits when fused)
    mtp: int  # one MTP module: its layer, norms, projection input and its own loss
    work_dense: int  # a layer's backward transient (with what selective recompute rebuilds)
    work_moe: int
    work_loss: int


def act_units(model: ModelSpec, ctx: ActContext, recompute: str, padded_vocab: int) -> ActUnits:
    """Activation units per layer kind under a recompute mode. Only what a layer keeps depends on it
    (selective drops the recomputed tensors; full and none keep everything and differ in the stage
    shapes, which count checkpoints and rematerialised layers), so full and none share one entry."""
    return _act_units(model, ctx, "selective" if recompute == "selective" else "none", padded_vocab)


@lru_cache(maxsize=8192)
def _act_units(model: ModelSpec, ctx: ActContext, kept: str, padded_vocab: int) -> ActUnits:
    has_dense = model.has_dense_layers
    has_moe = model.num_moe_layers > 0
    dense = layer_bytes(model, "dense", ctx, kept) if has_dense else 0
    moe = layer_bytes(model, "moe", ctx, kept) if has_moe else 0
    dense_full = layer_bytes(model, "dense", ctx, "none") if has_dense else 0
    moe_full = layer_bytes(model, "moe", ctx, "none") if has_moe else 0
    loss = loss_bytes(model, ctx, padded_vocab)
    work_dense = layer_working_bytes(model, "dense", ctx) if has_dense else 0
    work_moe = layer_working_bytes(model, "moe", ctx) if has_moe else 0
    if kept == "selective" and ctx.selective_mode != "op_level":
        # selective recompute (Megatron's modules, a MaxText remat policy) rebuilds one layer's dropped
        # tensors during its backward
        work_dense += dense_full - dense
        work_moe += moe_full - moe
    mtp = 0
    if model.mtp_num_layers:
        inner = moe if model.moe_layers[-1] else dense
        mtp = inner + mtp_extra_bytes(model, ctx) + loss
    return ActUnits(
        dense=dense, moe=moe, dense_full=dense_full, moe_full=moe_full,
        checkpoint=checkpoint_bytes(model, ctx), embedding=embedding_bytes(model, ctx), loss=loss, mtp=mtp,
        work_dense=work_dense, work_moe=work_moe,
        work_loss=loss_working_bytes(ctx, padded_vocab),
    )
