"""`project(job, layout, profile)`: step time, throughput, MFU and an exposed-time breakdown.

A step on pipeline rank r ends at end_r (its last backward, from the schedule timing) plus its tail
(exposed gradient reduction, optimizer, parameter all-gather when not overlapped); an overlapped
parameter all-gather delays the next step's start by what its rank's pipeline fill does not absorb.
The step time is the largest over ranks, and the breakdown is that critical rank's time, split into
what it computed (per category, over M microbatches), the P2P waits on its critical path, the rest of
its idle time (bubble) and its tail, so the entries add up to the step time by construction.

Model FLOPs follow Megatron's convention (`primus.specs.flops`: every GEMM 6 FLOPs per weight per
token, attention over the keys a causal mask leaves, recompute not counted); MFU divides them by the dense peak
of the job's precision (FP8 for fp8 jobs, FP4 for nvfp4).

Pure apart from caches: a `Projector` is bound to one (job, profile, timer) and caches what depends
on few axes (block costs per shape context, chunk sums, group placements), so a fitter or a ranking
can call it thousands of times.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from primus.errors import InputError
from primus.job import Job
from primus.memory.activations import MAXTEXT_POLICIES, implied_selective, maxtext_policy_applies
from primus.memory.evaluate import MemoryModel
from primus.memory.ledger import StateWidths
from primus.memory.offload import offload_applies
from primus.memory.recompute import recomputed_mask, selective_modules
from primus.memory.shapes import split_layout
from primus.memory.units import act_units, param_units
from primus.parallel import Layout, normalise
from primus.projection.cost import CATEGORIES, DPMB, BlockCost, CostSettings, Tallies, block_tallies, finish_cost
from primus.projection.ends import embedding_block, loss_block, mtp_block
from primus.projection.offload import offloaded_bytes, with_offload
from primus.projection.ops import ACT, Block, OpContext, expert_free, fp8_align_rows, layer_block
from primus.projection.placement import DEFAULT_ORDER, GroupShape, Placement
from primus.projection.profile import PEAK_DTYPE, Profile, gemm_format, high_format, load_profile
from primus.projection.report import Projection, assumptions, peak_dtype
from primus.projection.stages import ChunkWork, RankParams, block_params, chunk_keys, chunk_work, rank_params
from primus.projection.tail import RankTail, TailSettings, rank_tail
from primus.projection.timer import AnalyticTimer, CollectiveCall, KernelTimer
from primus.projection.timing import PipelineTiming, time_pipeline
from primus.specs.flops import flops_per_token
from primus.specs.job import PipelineOptions
from primus.specs.model import ModelSpec

__all__ = ["Projection", "Projector", "project"]


#: Block kinds whose ops read neither EP nor ETP (`ops.py`, `ends.py`: only MoE layers, and the MTP
#: module through its inner layer, route tokens to experts).
EXPERT_FREE = frozenset({"embedding", "loss", "dense"})
#: The groups blocks' collectives run on (`ops.py`, `ends.py`; tested on every block kind).
BLOCK_GROUPS: tuple[str, ...] = ("tp", "cp", "cp_group", "ep", "etp")
#: The groups FSDP's per-block parameter gathers and gradient reduce-scatters run on (dense, expert).
FSDP_GROUPS: tuple[str, ...] = ("dp_cp", "edp")


@lru_cache(maxsize=1024)
def _split_keys(model: ModelSpec, options: PipelineOptions, pp: int, vp: int) -> tuple[Any, bool, Any]:
    """Megatron's stage split and each chunk's block keys: depend on the model and (PP, VP) only."""
    playout, ok = split_layout(model, options, pp, vp)
    return playout, ok, chunk_keys(model, playout)


@lru_cache(maxsize=256)
def _training_flops(model: ModelSpec, seq_len: int) -> int:
    return flops_per_token(model, seq_len).training


@dataclass(frozen=True, slots=True)
class _Memory:
    peak_bytes: int
    capacity_bytes: int
    fits: bool


class Projector:
    """Projection bound to one job, profile and kernel timer."""

    def __init__(self, job: Job, profile: Profile | None = None, *, timer: KernelTimer | None = None,
                 order: tuple[str, ...] = DEFAULT_ORDER) -> None:
        self.job = job
        self.model = job.model
        spec = job.spec
        self.profile = (profile if profile is not None
                        else load_profile(job.cluster).for_stack(job.resolved_stack.kernel_profile))
        analytic = AnalyticTimer(job.cluster, self.profile)
        self.fmt = gemm_format(spec.precision, spec.effective_fp8_recipe)
        self.high_fmt = high_format(spec.precision)
        analytic.require(self.fmt, job.where)
        analytic.require(self.high_fmt, job.where)
        self.timer: KernelTimer = timer if timer is not None else analytic
        self.order = order
        self.memory = MemoryModel(job)
        self.widths = StateWidths.of(spec.optimizer)
        self.low = spec.precision not in ("bf16", "fp16")
        self.low_width = float(self.memory.numerics.gemm_input) if self.low else None
        self.tied = not self.model.untie_embeddings_and_output_weights
        self.model_flops_per_token = _training_flops(self.model, spec.seq_len)
        self.peak_flops = job.cluster.accelerator.peak_flops(peak_dtype(spec.precision))
        # Megatron-LM and Megatron-Bridge run the fused RoPE kernel for position_embedding_type rope only
        # (`KernelOptions.rope_fusion`); other frameworks' rotary is priced as one pass, as before
        self.rope_fused = spec.framework != "megatron" or (
            spec.kernels.rope_fusion and self.model.position_embedding_type == "rope")
        self.expert_pad_align = fp8_align_rows(spec.effective_fp8_recipe)
        self.recompute_method = spec.parallel.recompute_method or "uniform"
        self.recompute_layer_ids = self.memory.recompute_layer_ids
        ov = self.profile.overlap
        self.cost_settings = CostSettings(
            fmt=self.fmt, high_fmt=self.high_fmt, low_width=self.low_width, grad_width=self.widths.grad,
            tp_overlap=float(ov.tp_comm.value) if spec.overlap.tp_comm else None,
            ep_overlap=float(ov.moe_a2a.value) if spec.overlap.moe_a2a else None,
            fsdp_overlap=float(ov.fsdp_prefetch.value),
            moe_syncs=0 if spec.moe.sync_free
            else 1 + (0 if spec.moe.permutes_fused else spec.moe.unfused_permute_syncs),
            interference=float(ov.interference.value),
            launch=float(self.profile.host.kernel_launch_us.value) * 1e-6,
            host_sync=float(self.profile.host.moe_layer_us.value) * 1e-6,
            recompute_modules=selective_modules(spec.parallel.recompute_modules),
        )
        # what selective recompute keeps and re-runs: the ledger's own mode
        self.selective = spec.selective_recompute or implied_selective(spec.framework)
        if self.selective in MAXTEXT_POLICIES and not maxtext_policy_applies(self.model, "dense", self.selective):
            self.selective = "core_attention"  # as the ledger keeps it (MLA)
        self.op_sac = self.selective == "op_level"
        self._costs: dict[tuple[Any, ...], BlockCost] = {}
        self._tallies: dict[tuple[Any, ...], Tallies] = {}
        self._plain: dict[int, tuple[OpContext, int]] = {}  # context id -> the context with EP = ETP = 1
        self._blocks: dict[tuple[str, int], tuple[Block, tuple[str, ...], int]] = {}
        self._chunks: dict[tuple[Any, ...], ChunkWork] = {}
        self._keys: dict[tuple[int, int], Any] = {}
        self._groups: dict[tuple[int, ...], dict[str, GroupShape]] = {}
        self._params: dict[tuple[int, ...], tuple[RankParams, ...]] = {}
        self._ids: dict[Any, int] = {}
        self._tails: dict[tuple[Any, ...], RankTail] = {}
        self._op_calls: dict[object, Any] = {}  # timed kernel calls per op (`cost.block_cost`'s memo)

    # ---- cached pieces ----

    def groups(self, layout: Layout) -> dict[str, GroupShape]:
        """The layout's group shapes (`Placement.groups`), cached per the sizes they read (TP, CP, DP,
        PP, EP, ETP): layouts that differ in MBS, SP, VP, recompute or sharding share them."""
        key = (layout.tp, layout.cp, layout.dp, layout.pp, layout.ep, layout.etp)
        g = self._groups.get(key)
        if g is None:
            g = Placement(layout, self.job.cluster.scaleup.domain_size, self.order).groups()
            self._groups[key] = g
        return g

    def group_id(self, groups: dict[str, GroupShape]) -> int:
        return self._intern(tuple(groups.values()))

    def offload_copy_seconds(self, layout: Layout, offloaded: int) -> float:
        """Seconds to copy one microbatch's offloaded activations over the host link, one direction."""
        link = self.job.cluster.host_link
        if link is None:
            raise InputError(self.job.where, "cpu_offloading",
                             f"hardware {self.job.cluster.name} gives no host_link bandwidth, so the copies of "
                             "offloaded activations cannot be timed; add host_link to its hardware file")
        au = act_units(self.model, self.memory.act_context(layout), "none", self.model.padded_vocab_size(layout.tp))
        return offloaded_bytes(self.model, au, offloaded) / (float(link.bandwidth_gb_s) * 1e9)

    def context(self, layout: Layout) -> OpContext:
        spec = self.job.spec
        act = self.memory.act_context(layout)
        return OpContext(act, layout.ep, self.model.padded_vocab_size(layout.tp), self.low, spec.moe.token_dispatcher,
                         per_expert_launches=act.te_grouped_mlp,
                         permute_fusion=spec.moe.permutes_fused,
                         fused_grouped_mlp=spec.moe.grouped_gemm == "te_fused",
                         sequential_experts=spec.moe.grouped_gemm == "sequential",
                         expert_pad_align=self.expert_pad_align,
                         rope_fused=self.rope_fused, cp_comm=spec.context_parallel.comm_type)

    def block_cost(self, key: str, layout: Layout, ctx: OpContext, groups: dict[str, GroupShape],
                   cid: int | None = None) -> BlockCost:
        # a block's cost depends on its shape context and on the placement of the groups it talks on
        # (its collectives' groups; with FSDP also the gather groups), not on the rest of the layout
        # (FSDP's gathers are added to the block's tallies, which are cached without them); `cid`:
        # `context_id(ctx)` when the caller costs several blocks of one context
        block, names, cid = self._block_entry(key, ctx, self._intern(ctx) if cid is None else cid)
        fsdp_on = layout.sharding == "fsdp"
        bk = (key, cid, self._intern(tuple(groups[g] for g in names)))
        ck = (*bk, self._intern(tuple(groups[g] for g in FSDP_GROUPS)) if fsdp_on else -1)
        cost = self._costs.get(ck)
        if cost is not None:
            return cost
        tallies = self._tallies.get(bk)
        if tallies is None:
            tallies = self._tallies[bk] = block_tallies(block, self.timer, groups, self.cost_settings, self._op_calls)
        fsdp = (0.0, 0.0, False)
        if layout.sharding == "fsdp":  # per block: gather bf16 weights (forward and backward), scatter grads
            pu = param_units(self.model, layout.tp, layout.ep, layout.etp)
            dense, expert = block_params(pu, key, self.tied)
            shards = [(p, grp) for p, grp in ((dense, groups["dp_cp"]), (expert, groups["edp"])) if p]
            gathers = [self._collective(CollectiveCall("all_gather", p * ACT, grp)) for p, grp in shards]
            scatters = [self._collective(CollectiveCall("reduce_scatter", p * self.widths.grad, grp))
                        for p, grp in shards]
            gather = sum(t.seconds for t in gathers)
            measured = bool(shards) and all(t.measured for t in gathers + scatters)
            fsdp = (gather, gather + sum(t.seconds for t in scatters), measured)
        cost = finish_cost(tallies, self.cost_settings, fsdp)
        self._costs[ck] = cost
        return cost

    def _collective(self, call: CollectiveCall) -> Any:
        """The timer's answer for one collective call, memoised (FSDP's gathers repeat across blocks)."""
        timed = self._op_calls.get(call)
        if timed is None:
            timed = self._op_calls[call] = self.timer.collective(call)
        return timed

    def context_id(self, ctx: OpContext) -> int:
        """A small integer standing for the context (hashing a context is slow; pass this to
        `block_cost` when costing several blocks of it)."""
        return self._intern(ctx)

    def block(self, key: str, ctx: OpContext) -> Block:
        """The ops of one block kind in one shape context (cached: every placement of that context
        shares them)."""
        return self._block_entry(key, ctx, self._intern(ctx))[0]

    def _block_entry(self, key: str, ctx: OpContext, cid: int) -> tuple[Block, tuple[str, ...], int]:
        """The block, the names of the groups its collectives run on (sorted) and the interned id of the
        context it was built in, cached per context (`cid`: the context's interned id). Blocks without
        experts do not read EP or ETP, so they are built once for all of them (in EP = ETP = 1)."""
        bk = (key, cid)
        entry = self._blocks.get(bk)
        if entry is None:
            kind, _, windowed = key.partition(":")
            if kind in EXPERT_FREE and (ctx.ep != 1 or ctx.act.etp != 1):
                plain = self._plain.get(cid)
                if plain is None:
                    ctx1 = expert_free(ctx)
                    plain = self._plain[cid] = (ctx1, self._intern(ctx1))
                entry = self._blocks[bk] = self._block_entry(key, *plain)
                return entry
            if kind == "embedding":
                block = embedding_block(self.model, ctx)
            elif kind == "loss":
                block = loss_block(self.model, ctx)
            elif kind == "mtp":
                block = mtp_block(self.model, ctx)
            else:
                block = layer_block(self.model, kind, ctx, self.model.window_size if windowed else None)
            entry = self._blocks[bk] = (block, tuple(sorted({c.group for c in block.comms})), cid)
        return entry

    def chunk_keys(self, pp: int, vp: int) -> Any:
        """(pipeline layout, Megatron can split it, per chunk (interned id, item keys))."""
        out = self._keys.get((pp, vp))
        if out is None:
            playout, ok, keys = _split_keys(self.model, self.job.pipeline_at(pp, vp), pp, vp)
            out = (playout, ok, tuple((self._intern(k), k) for k in keys))
            self._keys[(pp, vp)] = out
        return out

    def _intern(self, obj: Any) -> int:
        """A small integer standing for a hashable object, so cache keys stay cheap to hash."""
        return self._ids.setdefault(obj, len(self._ids))

    # ---- the projection ----

    def project(self, layout: Layout, method: str = "auto", *, peak: tuple[int, bool] | None = None,
                completion: str | None = None, explain: bool = True) -> Projection:
        """Project one complete layout. `method`: "auto" (closed form when exact, else simulation),
        "fast" (closed form or the bottleneck bound, for ranking), "simulate" (always simulate).
        `peak`: (peak_bytes, fits) when the caller already has the ledger's answer; `explain=False`
        skips the assumptions text (ranking thousands of candidates)."""
        job, model = self.job, self.model
        layout = normalise(layout, is_moe=model.is_moe)
        gbs = job.spec.global_batch_size
        if layout.world != job.num_gpus:
            raise InputError(job.where, "parallel",
                             f"TP×CP×DP×PP = {layout.world} but the job has {job.num_gpus} GPUs")
        if gbs % (layout.mbs * layout.dp):
            raise InputError(job.where, "global_batch_size",
                             f"{gbs} is not divisible by MBS×DP = {layout.mbs * layout.dp}")
        m = layout.num_microbatches(gbs)
        playout, split_ok, keys = self.chunk_keys(layout.pp, layout.vp)
        ctx = self.context(layout)
        groups = self.groups(layout)
        rec = (layout.recompute, self.recompute_method, layout.recompute_num_layers)
        masks = [recomputed_mask(playout.decoder_layers(c), self.recompute_method, layout.recompute_num_layers,
                                 self.recompute_layer_ids) if layout.recompute == "full" else ()
                 for c in range(len(keys))]

        chunks: list[ChunkWork] = []
        fsdp_on = layout.sharding == "fsdp"
        ctx_id, gid = self._intern(ctx), self.group_id(groups)

        def cost(key: str) -> BlockCost:
            return self.block_cost(key, layout, ctx, groups, ctx_id)

        # a chunk's work is its blocks' costs: the same wherever the groups blocks do not talk on sit
        bid = self._intern(tuple(groups[g] for g in BLOCK_GROUPS + (FSDP_GROUPS if fsdp_on else ())))
        for (kid, ks), mask in zip(keys, masks, strict=True):
            ck = (kid, ctx_id, bid, fsdp_on, rec, mask)
            w = self._chunks.get(ck)
            if w is None:
                w = chunk_work(ks, cost, layout.recompute, mask, selective=self.selective)
                self._chunks[ck] = w
            chunks.append(w)
        offloaded = self.memory.offloaded_layers if offload_applies(layout.pp, layout.recompute) else 0
        if offloaded:
            chunks = [with_offload(w, self.offload_copy_seconds(layout, offloaded)) for w in chunks]
        pp, vp = layout.pp, playout.vp
        on_rank = [[c for c in range(pp * vp) if c % pp == r] for r in range(pp)]
        pu = param_units(model, layout.tp, layout.ep, layout.etp)
        pkey = (pp, vp, layout.tp, layout.ep, layout.etp)
        params = self._params.get(pkey)
        if params is None:
            params = self._params[pkey] = rank_params(model, playout, pu)
        ov = self.profile.overlap
        tail_settings = TailSettings(
            sharding=layout.sharding, grad_width=self.widths.grad, optimizer=job.spec.optimizer,
            grad_overlap=float(ov.grad_reduce.value) if job.spec.overlap.grad_reduce else None,
            param_overlap=float(ov.param_gather.value)
            if job.spec.overlap.param_gather and layout.sharding in ("dist_opt", "zero2") else None,
            low_width=self.low_width, interference=float(ov.interference.value),
            step_host=float(self.profile.host.step_us.value) * 1e-6)
        tails: list[RankTail] = []
        for r in range(pp):
            bwd_w = sum(chunks[c].bwd_compute for c in on_rank[r])
            fwd_w = sum(chunks[c].fwd_compute for c in on_rank[r])
            tied = pu.word_embedding if self.tied and pp > 1 and r in (0, pp - 1) else 0
            tkey = (params[r], gid, tail_settings, bwd_w, fwd_w, tied)
            tail = self._tails.get(tkey)
            if tail is None:
                tail = self._tails[tkey] = rank_tail(params[r], groups, self.timer, tail_settings, bwd_w, fwd_w, tied)
            tails.append(tail)
        fwd = [w.fwd_total for w in chunks]
        bwd = [w.bwd_total for w in chunks]
        if layout.sharding == "zero2":
            for c in range(pp * vp):
                bwd[c] += tails[c % pp].grad_per_microbatch / vp
        h = model.hidden_size
        p2p_bytes = ctx.T * h * ACT / (layout.tp if layout.sp else 1)
        p2p, p2p_measured = self.timer.collective(CollectiveCall("p2p", p2p_bytes, groups["pp"]))
        timing = time_pipeline(pp, vp, m, fwd, bwd, p2p, method)

        totals = [timing.ends[r] + t.grad_exposed + t.optimizer + t.param_after for r, t in enumerate(tails)]
        crit = max(range(pp), key=lambda r: (totals[r], -r))
        lead = max(max(0.0, t.param_lead - timing.starts[r]) for r, t in enumerate(tails))
        step = totals[crit] + lead
        parts = _explain(chunks, on_rank, tails, timing, m, step, lead, p2p, layout.sharding == "zero2")
        sources = parts.sources
        sources["pp_p2p"] = "measured" if p2p_measured else "modelled"

        if peak is None:
            report = self.memory.evaluate(layout, strict=False)
            mem = _Memory(report.peak_bytes, report.capacity_bytes, report.fits)
        else:
            mem = _Memory(peak[0], self.memory.reserves.capacity_bytes, peak[1])
        n = job.num_gpus
        tokens = gbs * job.spec.seq_len
        tflops = self.model_flops_per_token * tokens / step / n / 1e12
        return Projection(
            layout=layout, step_time_s=step, tokens_per_s_per_gpu=tokens / step / n,
            model_tflops_per_gpu=tflops, mfu=tflops * 1e12 / self.peak_flops,
            peak_bytes=mem.peak_bytes, capacity_bytes=mem.capacity_bytes, fits=mem.fits,
            breakdown={k: parts.breakdown[k] for k in BREAKDOWN_ORDER}, hidden=parts.hidden,
            sources={k: sources[k] for k in BREAKDOWN_ORDER},
            assumptions=assumptions(self, layout, timing.method, split_ok, m, crit, parts.rank) if explain else (),
            timing=timing.method, critical_rank=crit, breakdown_rank=parts.rank, num_microbatches=m,
            completion=completion, reserves=self.memory.reserves,
        )


@dataclass(frozen=True, slots=True)
class _Parts:
    rank: int
    breakdown: dict[str, float]
    hidden: dict[str, float]
    sources: dict[str, str]


def _explain(chunks: list[ChunkWork], on_rank: list[list[int]], tails: list[RankTail], timing: PipelineTiming,
             m: int, step: float, lead: float, p2p: float, zero2: bool) -> _Parts:
    """Split the step into exposed seconds, seen from the bottleneck rank: the one with the most own
    work (compute, exposed in-layer communication, tail). Its work per category plus its tail, the P2P
    waits on its critical path, and its remaining idle time (bubble: pipeline fill and drain, and
    waiting for slower stages) add up to the step time; step ≥ its end + tail ≥ its work + tail."""
    pp = len(on_rank)
    n_cat = len(CATEGORIES)

    def work(r: int) -> float:
        own = m * sum(chunks[c].total for c in on_rank[r])
        t = tails[r]
        return own + (m * t.grad_per_microbatch if zero2 else 0.0) + t.grad_exposed + t.optimizer + t.param_after

    b = max(range(pp), key=lambda r: (work(r), -r))
    busy, hidden_v = [0.0] * n_cat, [0.0] * n_cat
    calls, measured = [0] * n_cat, [0] * n_cat
    for c in on_rank[b]:
        w = chunks[c]
        for i in range(n_cat):
            busy[i] += m * (w.fwd[i] + w.bwd[i])
            hidden_v[i] += m * w.hidden[i]
            calls[i] += w.calls[i]
            measured[i] += w.measured[i]
    t_b = tails[b]
    if zero2:
        busy[DPMB] += m * t_b.grad_per_microbatch
    idle = timing.ends[b] - sum(busy)
    p2p_exposed = min(max(0.0, idle), timing.p2p_on_path(b))
    breakdown = {name: busy[i] for i, name in enumerate(CATEGORIES)}
    breakdown["dp_grad_reduce"] += t_b.grad_exposed
    breakdown["pp_p2p"] = p2p_exposed
    breakdown["dp_param_gather"] = t_b.param_after + lead
    breakdown["optimizer"] = t_b.optimizer
    breakdown["bubble"] = step - sum(breakdown.values())
    transfers = m * sum((c > 0) + (c < len(chunks) - 1) for c in on_rank[b]) if pp > 1 else 0
    cat = CATEGORIES.index
    hidden = {
        "tp_comm": hidden_v[cat("tp_comm")],
        "cp_comm": hidden_v[cat("cp_comm")],
        "ep_a2a": hidden_v[cat("ep_a2a")],
        "fsdp_comm": hidden_v[cat("fsdp_comm")],
        "pp_p2p": max(0.0, transfers * p2p - p2p_exposed),
        "dp_grad_reduce": t_b.grad_hidden * (m if zero2 else 1),  # ZeRO-2 reduces every microbatch's gradients
        "dp_param_gather": t_b.param_hidden + min(t_b.param_lead, timing.starts[b]),
    }
    sources = {name: ("measured" if calls[i] and calls[i] == measured[i] else "modelled")
               for i, name in enumerate(CATEGORIES)}
    sources["bubble"] = "modelled"
    tail_source = "measured" if t_b.measured else "modelled"
    sources["dp_param_gather"] = sources["optimizer"] = tail_source
    if not zero2:
        sources["dp_grad_reduce"] = tail_source
    return _Parts(b, breakdown, hidden, sources)


BREAKDOWN_ORDER: tuple[str, ...] = ("gemm", "attention", "memory_bound", "recompute", "tp_comm", "cp_comm",
                                    "ep_a2a", "host", "fsdp_comm", "pp_p2p", "bubble", "dp_grad_reduce",
                                    "dp_param_gather", "optimizer")

def projector_for(job: Job, profile: Profile | None = None, timer: KernelTimer | None = None) -> Projector:
    """A Projector for (job, profile, timer). Callers that project many layouts of one job keep it: its
    caches (block and chunk costs, per sharding) are what makes the second projection cheap."""
    return Projector(job, profile, timer=timer)


def project(job: Job, layout: Layout, profile: Profile | None = None, *, timer: KernelTimer | None = None,
            method: str = "auto") -> Projection:
    """Project one complete layout of `job` (profile: the hardware's shipped one by default)."""
    return projector_for(job, profile, timer).project(layout, method)


__all__ += ["BREAKDOWN_ORDER", "PEAK_DTYPE", "projector_for"]
