"""Time of one block for one microbatch, forward and backward, split into breakdown categories.

Backward work follows from the forward inventory: every GEMM runs a data-gradient GEMM ([m × n] ·
[n × k]) and a weight-gradient GEMM ([k × m] · [m × n]) whose output is accumulated into the main
gradient (Megatron's gradient-accumulation fusion: read and written in `main_grads_dtype`); low-precision
GEMMs quantise their output gradient (and, unless a norm fused it, their forward input) with one
memory-bound pass each (read bf16, write a row-wise and a column-wise quantised copy). Collectives
inside the block are exposed except where a named overlap hides them:

- TP comm overlap (`overlap.tp_comm`, Transformer Engine userbuffers): hides up to
  `profile.overlap.tp_comm` × the block's GEMM time of the same pass;
- the backward re-gather of a sequence-parallel GEMM input is issued asynchronously before the
  data-gradient GEMMs (Megatron / TE), so it hides behind them;
- MoE all-to-all overlap (`overlap.moe_a2a`): hides up to `profile.overlap.moe_a2a` × the block's compute;
- context parallelism pipelines each of its CP − 1 ring steps with one block of attention (Megatron's
  ring attention), so a step is exposed only by what exceeds 1/CP of the attention time;
- FSDP prefetch (`profile.overlap.fsdp_prefetch`): the block's parameter gathers and gradient
  reduce-scatters hide behind that fraction of its compute.

A hidden collective is not free: its kernels occupy SMs and HBM bandwidth while they run, so the
compute it overlaps slows by `profile.overlap.interference` × its duration (charged to the
collective's own category, so the breakdown still adds up).

The host issues every kernel, so a pass takes at least its launches × `profile.host.kernel_launch_us`;
a GEMM counts `Gemm.launches` kernels per pass and per quantisation (one per local expert for
Transformer Engine's GroupedLinear, `primus.projection.ops.OpContext.per_expert_launches`).
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

from primus.memory.recompute import DEFAULT_SELECTIVE
from primus.projection.ops import ACT, Block, Gemm, MemOp
from primus.projection.placement import GroupShape
from primus.projection.timer import AnalyticTimer, AttentionCall, CollectiveCall, GemmCall, KernelTimer, MemoryCall

CATEGORIES: tuple[str, ...] = ("gemm", "attention", "memory_bound", "recompute", "tp_comm", "cp_comm",
                               "ep_a2a", "fsdp_comm", "dp_grad_reduce", "host")
GEMM, ATTN, MEM, RECOMP, TP, CP, EP, FSDP, DPMB, HOST = range(len(CATEGORIES))
N_CAT = len(CATEGORIES)
_COMM_CAT = {"tp_comm": TP, "cp_comm": CP, "ep_a2a": EP}

Vec = tuple[float, ...]
ZERO: Vec = (0.0,) * N_CAT


def vadd(a: Vec, b: Vec) -> Vec:
    return tuple(x + y for x, y in zip(a, b, strict=True))


def vscale(a: Vec, s: float) -> Vec:
    return tuple(x * s for x in a)


@dataclass(frozen=True, slots=True)
class BlockCost:
    """Exposed seconds per category for one microbatch (forward, backward), what overlap hid, the
    forward work selective recompute re-runs (Megatron's recompute modules, by default the core
    attention with its CP exchange; torchtitan's op-level policy),
    and how many calls per category were measured."""

    fwd: Vec
    bwd: Vec
    hidden_fwd: Vec
    hidden_bwd: Vec
    selective: float
    calls: tuple[int, ...]
    measured: tuple[int, ...]
    selective_op: float = 0.0
    selective_remat: float = 0.0  # what a MaxText remat policy re-runs (`MAXTEXT_REMAT_SKIPS`)

    @property
    def fwd_total(self) -> float:
        return sum(self.fwd)

    @property
    def bwd_total(self) -> float:
        return sum(self.bwd)

    @property
    def compute_fwd(self) -> float:
        return self.fwd[GEMM] + self.fwd[ATTN] + self.fwd[MEM]

    @property
    def compute_bwd(self) -> float:
        return self.bwd[GEMM] + self.bwd[ATTN] + self.bwd[MEM]


@dataclass(frozen=True, slots=True)
class CostSettings:
    """What block costs depend on beyond the block: formats, widths and the overlap switches."""

    fmt: str  # the job's GEMM format for low-precision linears
    high_fmt: str  # bf16 or fp16, for the GEMMs kept in high precision
    low_width: float | None  # bytes per quantised GEMM input element; None without low precision
    grad_width: int  # main-gradient bytes (weight-gradient accumulation)
    tp_overlap: float | None  # profile fraction when TP comm overlap is on, else None
    ep_overlap: float | None
    fsdp_overlap: float
    moe_syncs: int = 0  # the dispatcher's host round trips per MoE layer forward, each `host_sync` long
    interference: float = 0.0  # share of hidden communication time the overlapped compute still loses
    launch: float = 0.0  # seconds of host dispatch per kernel (profile host.kernel_launch_us)
    #: seconds one blocking host round trip inside a MoE layer exposes (profile host.moe_layer_us): the
    #: dispatcher's (`moe_syncs`) and any op's (`MemOp.host_syncs`, spent whether or not the dispatcher is
    #: sync-free)
    host_sync: float = 0.0
    recompute_modules: frozenset[str] = DEFAULT_SELECTIVE  # what selective recompute re-runs


class _Tally:
    __slots__ = ("calls", "measured", "v")

    def __init__(self) -> None:
        self.v = [0.0] * N_CAT
        self.calls = [0] * N_CAT
        self.measured = [0] * N_CAT

    def copy(self) -> _Tally:
        out = _Tally()
        out.v, out.calls, out.measured = list(self.v), list(self.calls), list(self.measured)
        return out

    def add(self, cat: int, seconds: float, measured: bool, times: float = 1.0, launches: int = 1) -> float:
        """Add `times` × `seconds` to category `cat`; `launches`: the kernels the host issued for it."""
        t = seconds * times
        self.v[cat] += t
        self.calls[cat] += launches
        self.measured[cat] += int(measured)
        return t


#: Under a MaxText remat policy (primus.memory.activations.maxtext_remat) a dense layer's backward re-runs
#: the attention kernel (and its CP exchange), the norms, the attention residual, FC1 and the activation;
#: not the q/k/v and output projections (kept), RoPE (q and k are kept after it), FC2 (its output is read
#: by no backward computation) nor the MLP residual. These are the ops it does not re-run.
MAXTEXT_REMAT_SKIPS = frozenset({"rotary", "mlp.bias_dropout_add"})
MAXTEXT_REMAT_GEMMS = frozenset({"mlp.linear_fc1"})


def _switched_on(overlap: str, s: CostSettings) -> bool:
    """Whether the named overlap model that could hide this collective is enabled for the job."""
    return (overlap == "tp" and s.tp_overlap is not None) or (overlap == "ep" and s.ep_overlap is not None)


_Entry = tuple[int, float, bool]  # (category, seconds, measured) of one kernel call


def _gemm_calls(g: Gemm, timer: KernelTimer, s: CostSettings) -> tuple[_Entry, _Entry, _Entry, tuple[_Entry, ...],
                                                                       tuple[_Entry, ...]]:
    """A GEMM's forward, data-gradient and weight-gradient calls, and its quantisation passes (forward,
    backward) under low precision. The analytic timer is asked for seconds directly (no call records:
    a fitter projects thousands of times), any other timer through its call records; one body for both."""
    low = g.low and s.low_width is not None
    fmt = s.fmt if low else s.high_fmt
    w_in = s.low_width if low and s.low_width is not None else ACT
    cat = GEMM if g.cat == "gemm" else ATTN
    analytic = timer if type(timer) is AnalyticTimer else None

    def gemm(m: int, n: int, k: int, out: float) -> tuple[float, bool]:
        if analytic is not None:
            return analytic.gemm_seconds(fmt, m, n, k, g.count, w_in, out), False
        return timer.gemm(GemmCall(fmt, m, n, k, g.count, w_in, out))

    def memory(nbytes: float) -> tuple[float, bool]:
        if analytic is not None:
            return analytic.memory_seconds(nbytes), False
        return timer.memory(MemoryCall(nbytes))

    fwd = (cat, *gemm(g.m, g.n, g.k, ACT))
    dgrad = (cat, *gemm(g.m, g.k, g.n, ACT))
    wgrad = (cat, *gemm(g.k, g.n, g.m, 2 * s.grad_width if g.weight else ACT))
    qf: tuple[_Entry, ...] = ()
    qb: tuple[_Entry, ...] = ()
    if low and s.low_width is not None:
        quant = ACT + 2 * s.low_width
        if g.cast_input:
            qf = ((MEM, *memory(g.m * g.k * g.count * quant)),)
        if g.weight:
            qb = ((MEM, *memory(g.m * g.n * g.count * quant)),)
    return fwd, dgrad, wgrad, qf, qb


def _memop_calls(op: MemOp, timer: KernelTimer) -> tuple[_Entry, _Entry]:
    cat = ATTN if op.name in ("attention.softmax", "attention.dropout") else MEM
    if type(timer) is AnalyticTimer:
        return (cat, timer.memory_seconds(op.fwd_bytes), False), (cat, timer.memory_seconds(op.bwd_bytes), False)
    return (cat, *timer.memory(MemoryCall(op.fwd_bytes))), (cat, *timer.memory(MemoryCall(op.bwd_bytes)))


class Tallies:
    """A block's exposed and hidden seconds before FSDP's collectives, the host's per-layer cost and the
    launch floor (`block_tallies`): what every placement of FSDP's groups shares, so a projector keeps
    one per block, context and block-group placement and `finish_cost` adds the rest per FSDP
    placement."""

    __slots__ = ("attn_f", "b", "core", "f", "hb", "hf", "kind", "modules", "op_recompute", "remat")

    def __init__(self, kind: str, f: _Tally, b: _Tally, hf: list[float], hb: list[float], attn_f: float,
                 core: float, modules: float, op_recompute: float, remat: float) -> None:
        self.kind, self.f, self.b, self.hf, self.hb = kind, f, b, hf, hb
        self.attn_f, self.core, self.modules, self.op_recompute, self.remat = attn_f, core, modules, op_recompute, remat


def block_cost(block: Block, timer: KernelTimer, groups: dict[str, GroupShape], s: CostSettings,
               fsdp: tuple[float, float, bool] = (0.0, 0.0, False), memo: dict[object, Any] | None = None) -> BlockCost:
    """Cost one block. `fsdp`: (forward, backward) seconds of its FSDP parameter gathers and gradient
    reduce-scatters and whether they were measured, or zeros without FSDP. `memo`: the calls of each
    GEMM, attention, memory-bound op and collective already timed with this timer and these settings
    (blocks of different contexts and placements share many ops: a projector keeps one per job)."""
    return finish_cost(block_tallies(block, timer, groups, s, memo), s, fsdp)


def block_tallies(block: Block, timer: KernelTimer, groups: dict[str, GroupShape], s: CostSettings,
                  memo: dict[object, Any] | None = None) -> Tallies:
    """Every kernel and collective of the block timed and tallied, with the TP, MoE, CP and re-gather
    overlaps applied (`block_cost` without FSDP and the host floor)."""
    if memo is None:
        memo = {}
    f, b = _Tally(), _Tally()
    dgrad = 0.0
    op_recompute = 0.0
    modules = 0.0  # forward seconds of the ops the job's selective recompute modules re-run
    mods = s.recompute_modules
    remat = 0.0  # forward seconds a MaxText remat policy re-runs
    fv, fc, fm, bv, bc, bm = f.v, f.calls, f.measured, b.v, b.calls, b.measured  # the tallies, inlined
    for g in block.gemms:
        calls = memo.get(g)
        if calls is None:
            calls = memo[g] = _gemm_calls(g, timer, s)
        (cat, t, m), dg, wg, qf, qb = calls
        n = g.launches  # kernels per pass and per quantisation
        fv[cat] += t
        fc[cat] += n
        fm[cat] += m
        op_recompute += g.op_recompute * t
        in_module = g.module in mods
        if in_module:
            modules += t
        remat += t if g.name in MAXTEXT_REMAT_GEMMS else 0.0
        for cat, t, m in (dg, wg):
            bv[cat] += t
            bc[cat] += n
            bm[cat] += m
        dgrad += dg[1]
        for cat, t, m in qf:
            fv[cat] += t
            fc[cat] += n
            fm[cat] += m
            if in_module:
                modules += t
        for cat, t, m in qb:
            bv[cat] += t
            bc[cat] += n
            bm[cat] += m
    for a in block.attention:
        calls = memo.get(a)
        if calls is None:
            calls = memo[a] = (timer.attention(AttentionCall(a, False)), timer.attention(AttentionCall(a, True)))
        (t, m), (bt, bmeas) = calls
        f.add(ATTN, t, m)
        b.add(ATTN, bt, bmeas)
    for op in block.memops:
        calls = memo.get(op)
        if calls is None:
            calls = memo[op] = _memop_calls(op, timer)
        (cat, t, m), (bcat, bt, bmeas) = calls
        fv[cat] += t
        fc[cat] += op.launches
        fm[cat] += m
        if cat == MEM:
            op_recompute += t
            remat += t if op.name not in MAXTEXT_REMAT_SKIPS else 0.0
        if op.module in mods:
            modules += t
        if op.host_syncs and s.host_sync > 0:
            stall = op.host_syncs * s.host_sync
            fv[HOST] += stall
            fc[HOST] += op.host_syncs
            if op.module in mods:
                modules += stall
        bv[bcat] += bt
        bc[bcat] += op.launches if op.bwd_launches is None else op.bwd_launches
        bm[bcat] += bmeas

    hf, hb = [0.0] * N_CAT, [0.0] * N_CAT
    pooled_f = {TP: 0.0, EP: 0.0}
    pooled_b = {TP: 0.0, EP: 0.0}
    attn_f, attn_b = f.v[ATTN], b.v[ATTN]
    cp_exposed_f = 0.0
    for c in block.comms:
        cat = _COMM_CAT[c.name]
        group = groups[c.group]
        timed = memo.get((c, group))
        if timed is None:
            timed = memo[(c, group)] = timer.collective(CollectiveCall(c.kind, c.nbytes, group, c.fanout))
        t1, m = timed
        if c.overlap == "cp" and c.fwd:
            steps = c.fwd  # CP - 1 ring steps; backward sends K, V and their gradients per step
            per_bwd = c.bwd / steps
            cp = steps + 1
            ex_f = steps * max(0.0, t1 - attn_f / cp)
            ex_b = steps * max(0.0, per_bwd * t1 - attn_b / cp)
            keep = 1.0 - s.interference
            hid_f, hid_b = steps * t1 - ex_f, steps * per_bwd * t1 - ex_b
            f.add(cat, ex_f + s.interference * hid_f, m)
            b.add(cat, ex_b + s.interference * hid_b, m)
            hf[cat] += keep * hid_f
            hb[cat] += keep * hid_b
            cp_exposed_f += ex_f
            continue
        if c.fwd:
            t = f.add(cat, t1, m, c.fwd)
            if _switched_on(c.overlap, s):
                pooled_f[cat] += t
            if cat == CP:  # all_gather / a2a CP runs inside the attention call that core_attn recompute re-runs
                cp_exposed_f += t
        if c.bwd:
            t = b.add(cat, t1, m, c.bwd)
            if c.overlap == "wgrad":
                if s.tp_overlap is not None:
                    pooled_b[cat] += t
                else:
                    hide = min(t, dgrad)
                    dgrad -= hide
                    b.v[cat] -= hide * (1.0 - s.interference)
                    hb[cat] += hide * (1.0 - s.interference)
            elif _switched_on(c.overlap, s):
                pooled_b[cat] += t
    for tally, hidden, pooled, gemm_t in ((f, hf, pooled_f, f.v[GEMM]), (b, hb, pooled_b, b.v[GEMM])):
        compute = tally.v[GEMM] + tally.v[ATTN] + tally.v[MEM]
        if pooled[TP] and s.tp_overlap is not None:
            hide = min(pooled[TP], s.tp_overlap * gemm_t) * (1.0 - s.interference)
            tally.v[TP] -= hide
            hidden[TP] += hide
        if pooled[EP] and s.ep_overlap is not None:
            hide = min(pooled[EP], s.ep_overlap * compute) * (1.0 - s.interference)
            tally.v[EP] -= hide
            hidden[EP] += hide
    core_attn = attn_f + cp_exposed_f if "core_attn" in mods else 0.0
    return Tallies(block.kind, f, b, hf, hb, attn_f + cp_exposed_f, core_attn, modules, op_recompute, remat)


def finish_cost(tallies: Tallies, s: CostSettings, fsdp: tuple[float, float, bool] = (0.0, 0.0, False)) -> BlockCost:
    """The block's cost from its tallies (left unchanged): FSDP's gathers and reduce-scatters hidden
    behind `s.fsdp_overlap` of the compute, the host's per-MoE-layer cost and the launch floor.
    (Plain lists, not `_Tally`: it runs once per block, context and placement of a bounded search.)"""
    tf, tb = tallies.f, tallies.b
    fv, bv = list(tf.v), list(tb.v)
    fc, bc = list(tf.calls), list(tb.calls)
    fm, bm = list(tf.measured), list(tb.measured)
    hf, hb = list(tallies.hf), list(tallies.hb)
    for v, calls, meas, hidden, t in ((fv, fc, fm, hf, fsdp[0]), (bv, bc, bm, hb, fsdp[1])):
        if t > 0:
            compute = v[GEMM] + v[ATTN] + v[MEM]
            hide = min(t, s.fsdp_overlap * compute) * (1.0 - s.interference)
            v[FSDP] += t - hide
            calls[FSDP] += 1
            meas[FSDP] += int(fsdp[2])
            hidden[FSDP] += hide
    if tallies.kind == "moe" and s.moe_syncs and s.host_sync > 0:
        fv[HOST] += s.host_sync * s.moe_syncs
        fc[HOST] += 1
    if s.launch > 0:  # the host issues every kernel: a block cannot run faster than its launches
        for v, calls in ((fv, fc), (bv, bc)):
            floor = sum(calls) * s.launch - sum(v)
            if floor > 0:
                v[HOST] += floor
    calls_t = tuple(map(operator.add, fc, bc))
    measured = tuple(map(operator.add, fm, bm))
    return BlockCost(tuple(fv), tuple(bv), tuple(hf), tuple(hb), tallies.core + tallies.modules, calls_t, measured,
                     tallies.op_recompute, tallies.attn_f + tallies.remat)
