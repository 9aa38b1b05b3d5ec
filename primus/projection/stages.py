"""Per-chunk times and per-rank parameters, from the ledger's own stage-to-layer assignment.

`split_layout` (primus.memory.shapes) says which items each model chunk holds: "E" (embedding),
("t", i) decoder layer i, ("m", k) MTP module k, "L" (output layer and loss). A chunk's forward and
backward times are the sums of its items' block costs, plus what recompute re-runs in backward:

- selective: the forward of the job's recompute modules in every decoder layer (by default the core
  attention and its CP exchange; `primus.memory.recompute.RECOMPUTE_MODULES`);
- full: the whole forward of the decoder layers `primus.memory.recompute` says are recomputed (uniform:
  every layer; block: the first recompute_num_layers of each chunk; Primus's listed layer ids).

Parameters per rank (for the data-parallel tail and FSDP) come from `param_units`, the same per-rank
counts the memory ledger uses; dense and expert parameters are kept apart because they reduce over
different groups (DP × CP and expert-DP).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from primus.memory.units import ParamUnits
from primus.projection.cost import ATTN, GEMM, MEM, RECOMP, ZERO, BlockCost, Vec
from primus.schedule.layout import Item, PipelineLayout
from primus.specs.model import ModelSpec


@dataclass(frozen=True, slots=True)
class ChunkWork:
    """One model chunk: exposed seconds per category per microbatch, and what overlap hid; the totals
    (and the compute-only windows overlap models use) are precomputed, as they are read per rank."""

    fwd: Vec
    bwd: Vec
    hidden: Vec
    calls: tuple[int, ...]
    measured: tuple[int, ...]
    fwd_total: float = 0.0
    bwd_total: float = 0.0
    fwd_compute: float = 0.0
    bwd_compute: float = 0.0

    @property
    def total(self) -> float:
        return self.fwd_total + self.bwd_total

    @staticmethod
    def of(fwd: Vec, bwd: Vec, hidden: Vec, calls: tuple[int, ...], measured: tuple[int, ...]) -> ChunkWork:
        return ChunkWork(fwd, bwd, hidden, calls, measured, sum(fwd), sum(bwd),
                         fwd[GEMM] + fwd[ATTN] + fwd[MEM], bwd[GEMM] + bwd[ATTN] + bwd[MEM])


def item_key(model: ModelSpec, item: Item) -> str:
    """The block kind an item costs as: embedding, loss, mtp, or a decoder layer kind (with ':w' for a
    sliding-window layer)."""
    if item == "E":
        return "embedding"
    if item == "L":
        return "loss"
    if isinstance(item, tuple) and item[0] == "m":
        return "mtp"
    assert isinstance(item, tuple)
    idx = item[1]
    kind = "moe" if model.moe_layers[idx] else "dense"
    return kind + (":w" if model.window_size is not None and model.windowed_layers()[idx] else "")


def chunk_work(keys: tuple[str, ...], cost: Callable[[str], BlockCost], recompute: str,
               recomputed: tuple[bool, ...] = (), selective: str = "core_attention") -> ChunkWork:
    """Sum the block costs of one chunk (its item keys in order) and add the recompute forward.
    `recomputed`: under full recompute, which of the chunk's decoder layers are re-run
    (`primus.memory.recompute.recomputed_mask`, the ledger's own definition).
    `selective`: what selective recompute re-runs in dense layers (`primus.memory.activations`
    SELECTIVE_MODES, the ledger's own mode): Megatron's core attention, torchtitan's op-level policy (the
    matmuls and memory-bound ops it does not keep) or a MaxText remat policy (the attention kernel,
    norms, FC1 and activation); MoE layers re-run their core attention."""
    counts = Counter(keys)
    costs = {key: cost(key) for key in counts}
    n = len(ZERO)
    fwd = [0.0] * n
    bwd = [0.0] * n
    hidden = [0.0] * n
    calls = [0] * n
    measured = [0] * n
    for key, k in counts.items():
        c = costs[key]
        for i in range(n):
            fwd[i] += k * c.fwd[i]
            bwd[i] += k * c.bwd[i]
            hidden[i] += k * (c.hidden_fwd[i] + c.hidden_bwd[i])
            calls[i] += c.calls[i]
            measured[i] += c.measured[i]
    decoder = [key for key in keys if key.startswith(("dense", "moe"))]
    if recompute == "selective":
        bwd[RECOMP] += sum(selective_seconds(costs[key], key, selective) for key in decoder)
    elif recompute == "full":
        decoder = [key for key, on in zip(decoder, recomputed, strict=True) if on]
        bwd[RECOMP] += sum(costs[key].fwd_total for key in decoder)
    return ChunkWork.of(tuple(fwd), tuple(bwd), tuple(hidden), tuple(calls), tuple(measured))


def selective_seconds(cost: BlockCost, key: str, mode: str) -> float:
    if not key.startswith("dense") or mode == "core_attention":
        return cost.selective
    return cost.selective_op if mode == "op_level" else cost.selective_remat


def chunk_keys(model: ModelSpec, layout: PipelineLayout) -> tuple[tuple[str, ...], ...]:
    return tuple(tuple(item_key(model, it) for it in chunk) for chunk in layout.chunks)


@dataclass(frozen=True, slots=True)
class RankParams:
    """Parameters one rank holds: reduced over DP × CP (dense) or expert-DP (experts); `gemm` are the
    linear weights among them (FP8 keeps a quantised copy of those)."""

    dense: int
    expert: int
    gemm: int


def rank_params(model: ModelSpec, layout: PipelineLayout, pu: ParamUnits) -> tuple[RankParams, ...]:
    tied = not model.untie_embeddings_and_output_weights
    out = []
    for rank in range(layout.pp):
        dense = expert = gemm = 0
        has_e = layout.has_embedding(rank)
        for c in layout.stage_chunks(rank):
            for item in layout.chunks[c]:
                key = item_key(model, item).split(":")[0]
                if key == "dense":
                    dense += pu.dense_layer
                    gemm += pu.gemm_dense_layer
                elif key == "moe":
                    dense += pu.moe_layer_dense
                    expert += pu.moe_layer_expert
                    gemm += pu.gemm_moe_dense + pu.gemm_moe_expert
                elif key == "mtp":
                    dense += pu.mtp_dense
                    expert += pu.mtp_expert
                    gemm += pu.gemm_mtp_dense + pu.gemm_mtp_expert
                elif key == "embedding":
                    dense += pu.embedding
                elif key == "loss":
                    dense += pu.output
        if not has_e and ((layout.has_loss(rank) and tied) or layout.mtp_layers_on(rank)):
            dense += pu.word_embedding  # the second word-embedding copy a tied output or MTP needs
        out.append(RankParams(dense, expert, gemm))
    return tuple(out)


def block_params(pu: ParamUnits, key: str, tied: bool) -> tuple[int, int]:
    """(dense, expert) per-rank parameters of one block kind, for FSDP's per-block gathers."""
    kind = key.split(":")[0]
    if kind == "dense":
        return pu.dense_layer, 0
    if kind == "moe":
        return pu.moe_layer_dense, pu.moe_layer_expert
    if kind == "mtp":
        return pu.mtp_dense, pu.mtp_expert
    if kind == "embedding":
        return pu.embedding, 0
    return pu.output + (pu.word_embedding if tied else 0), 0
