"""The blocks at the ends of the pipeline: the embedding (first stage), the output layer and loss
(last stage) and multi-token-prediction modules, in the same inventory terms as `primus.projection.ops`."""

from __future__ import annotations

from functools import lru_cache

from primus.memory.activations import ActContext
from primus.projection.ops import (
    ACT,
    FP32,
    MASK,
    Block,
    Comm,
    Gemm,
    MemOp,
    OpContext,
    layer_block,
    norm_op,
    tp_in,
    tp_out,
)
from primus.specs.model import ModelSpec


@lru_cache(maxsize=1024)
def embedding_block(model: ModelSpec, ctx: OpContext) -> Block:
    """Vocab-parallel embedding: each TP rank looks up its vocabulary shard and the partial rows are
    all-reduced (reduce-scattered with SP). Forward reads and writes T rows; backward reads the
    gradient and read-modify-writes the fp32 gradient rows."""
    T, Tn, h = ctx.T, ctx.Tn, model.hidden_size
    mem = [MemOp("embedding.lookup", 2 * T * h * ACT, T * h * (ACT + 2 * FP32))]
    if model.position_embedding_type == "learned_absolute":
        mem.append(MemOp("embedding.position_add", 3 * Tn * h * ACT, 0))
    if model.hidden_dropout > 0:
        mem.append(MemOp("embedding.dropout", Tn * h * (2 * ACT + MASK), Tn * h * (2 * ACT + MASK)))
    comms: tuple[Comm, ...] = ()
    if ctx.act.tp > 1:
        comms = (Comm("tp_comm", "reduce_scatter", "tp", T * h * ACT, 1, 0, "none"),
                 Comm("tp_comm", "all_gather", "tp", T * h * ACT, 0, 1, "none")) if ctx.act.sp else \
            (Comm("tp_comm", "all_reduce", "tp", T * h * ACT, 1, 0, "none"),)
    return Block("embedding", (), (), tuple(mem), comms)


#: Unfused vocab-parallel cross-entropy (Megatron's `_VocabParallelCrossEntropy`), bytes per logit:
#: forward = cast bf16→fp32 (2+4) + max (4) + subtract (4+4) + exp (4+4) + sum (4) + divide (4+4) = 38;
#: backward = scale by the loss gradient (4+4) + cast back to bf16 (4+2) = 14.
CE_UNFUSED = (38, 14)
#: Fused cross-entropy (`--cross-entropy-loss-fusion`): two passes over the bf16 logits (max, then
#: sum-exp and the target logit) = 4; backward reads the logits and writes their gradient = 4.
CE_FUSED = (4, 4)
#: PyTorch eager `F.cross_entropy` over fp32 logits (torchtitan with the loss not compiled): forward =
#: cast bf16→fp32 (2+4) + log_softmax (max pass 4, sum-exp pass 4, write pass 4+4) = 22; backward =
#: nll_loss's zero-filled fp32 gradient (4) + log_softmax backward (sum pass 4, then 4+4 read, 4 write)
#: + cast back to bf16 (4+2) = 26.
CE_EAGER = (22, 26)


def cross_entropy_traffic(act: ActContext) -> tuple[int, int]:
    """Bytes per logit (forward, backward) of the cross-entropy the job runs."""
    if act.cross_entropy_fusion:
        return CE_FUSED
    return CE_EAGER if act.eager_cross_entropy else CE_UNFUSED


@lru_cache(maxsize=1024)
def loss_block(model: ModelSpec, ctx: OpContext) -> Block:
    """Final norm, output layer (kept in bf16, as Megatron's ColumnParallelLinear) and the loss."""
    T, Tn, h = ctx.T, ctx.Tn, model.hidden_size
    vocab = ctx.padded_vocab // ctx.act.tp
    logits = T * vocab
    fwd, bwd = cross_entropy_traffic(ctx.act)
    mem = (norm_op("final_layernorm", Tn, h, ctx, fused_cast=False),
           MemOp("cross_entropy", logits * fwd, logits * bwd))
    comms: tuple[Comm, ...] = ()
    if ctx.act.tp > 1:
        # the output layer's gathered input, and three all-reduces of T fp32 values (max, target
        # logit, sum of exponentials) across the vocabulary shards
        comms = (*tp_in(ctx, h, fp8_gather=False), Comm("tp_comm", "all_reduce", "tp", T * FP32, 3, 0, "none"))
    return Block("loss", (Gemm("output_layer", T, vocab, h, low=False),), (), mem, comms)


@lru_cache(maxsize=1024)
def mtp_block(model: ModelSpec, ctx: OpContext) -> Block:
    """One MTP module: embedding of the shifted tokens, two norms, the 2h→h projection (its input
    gathered, its output re-split across TP), a decoder layer, and a second output layer and loss."""
    T, Tn, h = ctx.T, ctx.Tn, model.hidden_size
    inner = "moe" if model.moe_layers[-1] else "dense"
    own = Block("mtp",
                (Gemm("mtp.eh_proj", T, h // ctx.act.tp, 2 * h, cast_input=True),),
                (),
                (norm_op("mtp.enorm", Tn, h, ctx, fused_cast=False),
                 norm_op("mtp.hnorm", Tn, h, ctx, fused_cast=False)),
                tp_in(ctx, 2 * h, fp8_gather=False) + tp_out(ctx, h))
    b = embedding_block(model, ctx) + own + layer_block(model, inner, ctx) + loss_block(model, ctx)
    return Block("mtp", b.gemms, b.attention, b.memops, b.comms)
