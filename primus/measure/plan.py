"""What to measure for one target: the projection's own calls, each with the torch kernel that times it.

The list of calls is not re-derived here: the target is projected once through a `RecordingTimer`,
which collects every distinct `GemmCall`, `AttentionCall`, `MemoryCall` and `CollectiveCall` the
projection asks about — exactly what a measured table has to answer to replace the model. Each call
then gets one or more *recipes* (a torch kernel and its shape) that stand for it:

- GEMM: `m × k · k × n` in the call's format (`count` > 1: a batched GEMM of equal groups, i.e. the
  grouped expert GEMM under balanced routing); a weight-gradient call (wider output, accumulated into
  the main gradient) is timed with its transposed-A layout (`xᵀ · dy`), the others as `x · Wᵀ`;
- attention: scaled-dot-product attention with the call's batch × heads, queries and head dims: causal
  over the queries when the keys are the causal half of them, else non-causal over the average key
  count (equal FLOPs: a CP rank's share or a sliding window), forward or backward;
- memory-bound kernels: the block inventory (`primus.projection.ops` / `ends`) names every `MemOp`, so
  a `MemoryCall` is timed as the kernel it stands for — norm, SwiGLU / GELU / squared ReLU, residual
  add (with dropout), rotary, cross-entropy, embedding — at the same element count, and as a plain copy
  otherwise (permutes, router softmax, casts). Several kernels of one byte count are all timed and
  averaged by occurrence. Memory calls outside the blocks are the step's tail (optimizer step, gradient
  buffer zeroing, weight casts): an Adam step on a bounded buffer, scaled by bytes;
- collectives: the call's kind at its message size on `size` local processes, when the group fits
  the local processes and sits in one scale-up domain (on the `cpu` entry every "node" is a process on
  this host talking over loopback, which is what gloo uses, so groups across its "nodes" qualify too).

Zero-byte calls and size-1 groups cost nothing by construction and are entered as exact zeros.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from primus.job import Job
from primus.parallel import Layout, normalise
from primus.projection.ends import cross_entropy_traffic, embedding_block, loss_block, mtp_block
from primus.projection.ops import ACT, EAGER_ROPE_PASSES, FUSED_ROPE_PASSES, Block, OpContext, layer_block
from primus.projection.profile import Profile, load_profile
from primus.projection.project import Projector
from primus.projection.report import Projection
from primus.projection.stages import item_key
from primus.projection.timer import (
    AnalyticTimer,
    AttentionCall,
    CollectiveCall,
    GemmCall,
    MemoryCall,
    RecordingTimer,
)
from primus.specs.model import ModelSpec

Call = GemmCall | AttentionCall | MemoryCall | CollectiveCall

MEASURABLE_COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")
TORCH_GEMM_FORMATS = ("bf16", "fp16", "fp8")  # fp8: per-tensor scaled (torch._scaled_mm)
NORMS = ("input_layernorm", "pre_mlp_layernorm", "final_layernorm", "qk_layernorm", "q_layernorm",
         "kv_layernorm", "mtp.enorm", "mtp.hnorm", "post_attention_layernorm", "post_mlp_layernorm")


@dataclass(frozen=True, slots=True, order=True)
class Recipe:
    """A torch kernel and its shape. `op`: gemm, attention, norm, swiglu, gelu, squared_relu, residual,
    rope, cross_entropy, embedding, copy, adam, collective, zero. `flag`: op detail (GEMM format and
    layout, norm kind, causal, collective kind, dropout)."""

    op: str
    dims: tuple[int, ...] = ()
    backward: bool = False
    flag: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "dims": list(self.dims), "backward": self.backward, "flag": self.flag}


@dataclass(frozen=True)
class PlanItem:
    """One call of the target and how to time it; `skip` says why it stays modelled (None: measurable)."""

    call: Call
    recipes: tuple[tuple[Recipe, int], ...]  # (recipe, occurrences): the entry is their weighted mean
    analytic_s: float
    priority: float  # modelled seconds × expected occurrences per step: the order of measurement
    skip: str | None = None

    @property
    def is_collective(self) -> bool:
        return isinstance(self.call, CollectiveCall)

    @property
    def trivial(self) -> bool:
        return any(r.op == "zero" for r, _ in self.recipes)


@dataclass(frozen=True)
class Plan:
    job: Job
    layout: Layout
    items: tuple[PlanItem, ...]
    projection: Projection  # the analytic projection the calls were recorded from

    def by_priority(self) -> list[PlanItem]:
        return sorted(self.items, key=lambda i: -i.priority)


# ---- memory-bound kernels, from the block inventory ------------------------------------------------

def _blocks(model: ModelSpec, ctx: OpContext) -> list[tuple[Block, int]]:
    """Every block kind of the model at this context, with how many of it one model replica runs."""
    counts = Counter(item_key(model, ("t", i)) for i in range(model.num_layers))
    out: list[tuple[Block, int]] = []
    for key, n in counts.items():
        kind, _, windowed = key.partition(":")
        out.append((layer_block(model, kind, ctx, model.window_size if windowed else None), n))
    out.append((embedding_block(model, ctx), 1))
    out.append((loss_block(model, ctx), 1))
    if model.mtp_num_layers:
        out.append((mtp_block(model, ctx), model.mtp_num_layers))
    return out


def _memop_recipe(model: ModelSpec, ctx: OpContext, name: str, nbytes: float, fwd_bytes: float,
                  bwd_bytes: float, backward: bool) -> Recipe:
    """The kernel a named MemOp stands for, at its element count (see `primus.projection.ops`)."""
    if name in NORMS:
        elems = int(bwd_bytes // (3 * ACT))  # norm backward: read dy and x, write dx
        dim = {"qk_layernorm": model.head_dim, "q_layernorm": model.q_lora_rank or model.hidden_size,
               "kv_layernorm": model.kv_lora_rank or model.hidden_size}.get(name, model.hidden_size)
        if elems and elems % dim == 0:
            return Recipe("norm", (elems // dim, dim), backward, "rms" if model.normalization == "RMSNorm" else "ln")
    elif name.endswith(".activation"):
        if model.swiglu:
            return Recipe("swiglu", (int(fwd_bytes // (3 * ACT)),), backward)
        return Recipe("squared_relu" if model.squared_relu else "gelu", (int(fwd_bytes // (2 * ACT)),), backward)
    elif name.endswith("bias_dropout_add"):
        p = model.hidden_dropout
        elems = int(fwd_bytes // (3 * ACT + (1 if p > 0 else 0)))
        return Recipe("residual", (elems,), backward, f"{p:g}")
    elif name == "rotary":
        d = (model.qk_pos_emb_head_dim or model.head_dim) if model.multi_latent_attention else model.head_dim
        elems = int(fwd_bytes // ((FUSED_ROPE_PASSES if ctx.rope_fused else EAGER_ROPE_PASSES[0]) * ACT))
        if d and elems % d == 0:
            return Recipe("rope", (elems // d, d), backward)
    elif name == "cross_entropy":
        per = cross_entropy_traffic(ctx.act)[0]
        logits = int(fwd_bytes // per)
        if ctx.T and logits % ctx.T == 0:
            return Recipe("cross_entropy", (ctx.T, logits // ctx.T), backward)
    elif name == "embedding.lookup":
        return Recipe("embedding", (ctx.T, model.hidden_size, ctx.padded_vocab // ctx.act.tp), backward)
    return Recipe("copy", (int(nbytes),), backward)


def memory_recipes(model: ModelSpec, ctx: OpContext) -> dict[MemoryCall, Counter[Recipe]]:
    """For every MemoryCall the blocks make: the kernels behind it, counted per model replica."""
    out: dict[MemoryCall, Counter[Recipe]] = {}
    quant = ACT + 2 * ctx.low_width
    for block, n in _blocks(model, ctx):
        for op in block.memops:
            for nbytes, backward in ((op.fwd_bytes, False), (op.bwd_bytes, True)):
                r = _memop_recipe(model, ctx, op.name, nbytes, op.fwd_bytes, op.bwd_bytes, backward)
                out.setdefault(MemoryCall(nbytes), Counter())[r] += n
        if ctx.low_precision:  # the quantisation passes `primus.projection.cost` adds for FP8 / NVFP4 GEMMs
            for g in block.gemms:
                if g.low and g.cast_input:
                    out.setdefault(MemoryCall(g.m * g.k * g.count * quant), Counter())[
                        Recipe("copy", (int(g.m * g.k * g.count * quant),))] += n
                if g.low and g.weight:
                    out.setdefault(MemoryCall(g.m * g.n * g.count * quant), Counter())[
                        Recipe("copy", (int(g.m * g.n * g.count * quant),), True)] += n
    return out


# ---- the plan ------------------------------------------------------------------------------------

def adam_bytes_per_param(job: Job) -> int:
    """Bytes the projection's optimizer step moves per parameter (`primus.projection.tail`): the
    gradient read twice, master and both moments read and written, the bf16 parameter written."""
    from primus.memory.numerics import DTYPE_BYTES

    o = job.spec.optimizer
    g = DTYPE_BYTES[o.main_grads_dtype]
    states = DTYPE_BYTES[o.main_params_dtype] + DTYPE_BYTES[o.exp_avg_dtype] + DTYPE_BYTES[o.exp_avg_sq_dtype]
    return int(2 * g + 2 * states + 2)


def collective_skip(call: CollectiveCall, procs: int, device_kind: str) -> str | None:
    """Why a collective cannot be measured on the local processes (None: it can)."""
    g = call.group
    if call.kind not in MEASURABLE_COLLECTIVES:
        return f"{call.kind} (a deduplicating dispatch) has no torch.distributed equivalent: modelled"
    if g.size > procs:
        return f"group of {g.size} needs {g.size} local processes (have {procs}): modelled"
    if g.domains > 1 and device_kind != "cpu":
        return "crosses scale-up domains (inter-node): modelled"
    return None


def gemm_skip(fmt: str, has_fp8: bool) -> str | None:
    if fmt not in TORCH_GEMM_FORMATS:
        return f"torch has no {fmt} GEMM kernel to time: modelled"
    if fmt == "fp8" and not has_fp8:
        return "this torch build has no scaled FP8 GEMM (torch._scaled_mm): modelled"
    return None


def build_plan(job: Job, layout: Layout, *, procs: int, device_kind: str, profile: Profile | None = None,
               has_fp8: bool = True) -> Plan:
    """Record the target's calls through an analytic projection and attach a recipe to each."""
    calib = profile if profile is not None else load_profile(job.cluster)
    rec = RecordingTimer(AnalyticTimer(job.cluster, calib))
    projector = Projector(job, calib, timer=rec)
    layout = normalise(layout, is_moe=job.model.is_moe)
    projection = projector.project(layout, "simulate")
    ctx = projector.context(layout)
    model = job.model
    mem = memory_recipes(model, ctx)
    m = projection.num_microbatches
    per_layer = max(1, model.num_layers // max(1, layout.pp)) * m
    bpp = adam_bytes_per_param(job)
    analytic = rec.fallback
    items: list[PlanItem] = []
    for call in rec.calls:
        if isinstance(call, GemmCall):
            t = analytic.gemm(call).seconds
            layout_flag = "tn" if call.out_bytes != ACT else "nt"
            r = Recipe("gemm", (call.m, call.n, call.k, call.count), False, f"{call.fmt}:{layout_flag}")
            items.append(PlanItem(call, ((r, 1),), t, t * per_layer, gemm_skip(call.fmt, has_fp8)))
        elif isinstance(call, AttentionCall):
            t = analytic.attention(call).seconds
            op = call.op
            causal = abs(op.keys - (op.sq + 1) / 2) < 1e-9
            kv = op.sq if causal else max(1, round(op.keys))
            r = Recipe("attention", (op.batch_heads, op.sq, kv, op.d_qk, op.d_v), call.backward,
                       "causal" if causal else "full")
            items.append(PlanItem(call, ((r, 1),), t, t * per_layer))
        elif isinstance(call, MemoryCall):
            t = analytic.memory(call).seconds
            if call.nbytes <= 0:
                items.append(PlanItem(call, ((Recipe("zero"), 1),), 0.0, 0.0))
                continue
            recipes = mem.get(call)
            if recipes:
                items.append(PlanItem(call, tuple(sorted(recipes.items())), t, t * per_layer))
            else:  # the tail: optimizer step, gradient-buffer zeroing, weight casts
                r = Recipe("adam", (int(call.nbytes), bpp))
                items.append(PlanItem(call, ((r, 1),), t, t))
        elif isinstance(call, CollectiveCall):
            t = analytic.collective(call).seconds
            if call.group.size <= 1 or call.nbytes <= 0:
                items.append(PlanItem(call, ((Recipe("zero"), 1),), 0.0, 0.0))
                continue
            r = Recipe("collective", (int(call.nbytes), call.group.size), False, call.kind)
            items.append(PlanItem(call, ((r, 1),), t, t * per_layer, collective_skip(call, procs, device_kind)))
    return Plan(job, layout, tuple(items), projection)
