"""The end of a step on one pipeline rank: data-parallel gradient reduction, optimizer, parameter gather.

Megatron-Core's DDP reduces gradients in buckets of max(40M, 1M × DP) parameters
(`distributed_data_parallel.py`) during the backward of the last microbatch: a bucket's collective
starts as soon as its gradients are final, so all but the last bucket can hide behind that backward.
Named overlap models, each with one profile parameter:

- gradient reduction (`overlap.grad_reduce` on): exposed = last bucket + max(0, rest −
  f_grad_reduce × backward time of one microbatch on this rank); off: all of it;
- distributed-optimizer parameter all-gather (`overlap.param_gather` on): issued bucket by bucket
  in the next step's first forward, so exposed = first bucket + max(0, rest − f_param_gather × one
  microbatch's forward), less the idle time the rank has before its first forward anyway; off: after
  the optimizer, all of it.

By sharding: `dist_opt` reduce-scatters fp32 (main_grads_dtype) gradients and all-gathers bf16
parameters over DP × CP (dense) and expert-DP (experts); `none` all-reduces the gradients; `zero2`
reduce-scatters every microbatch (gradients are kept sharded, so they cannot accumulate unsharded) and
all-gathers once; `fsdp` moves parameters and gradients per block (see `cost.py`), leaving only the
optimizer here. Tied embeddings add Megatron's embedding-gradient all-reduce between the first and last
stage.

Optimizer (Adam, memory-bound, on this rank's shard): read the gradient and read-write the master copy
and both moments at their widths, write the bf16 parameter, read the gradient again for the norm;
zero the rank's gradient buffer; quantise the linear weights once per step under FP8/NVFP4 (read bf16,
write a row-wise and a column-wise copy); and one all-reduce of the gradient norm over all ranks; plus
the step's fixed host work (`host.step_us`: the found-inf and gradient-norm synchronisations, the
multi-tensor launches), negligible for a large model and the bulk of a tiny one's step.
"""

from __future__ import annotations

from dataclasses import dataclass

from primus.memory.numerics import DTYPE_BYTES
from primus.projection.placement import GroupShape
from primus.projection.stages import RankParams
from primus.projection.timer import CollectiveCall, KernelTimer, MemoryCall
from primus.specs.job import OptimizerOptions

BUCKET_MIN_PARAMS = 40_000_000  # Megatron-Core DDP default bucket: max(40M, 1M × data-parallel size)
BUCKET_PER_DP_RANK = 1_000_000
PARAM_BYTES = 2  # bf16/fp16 working weights


@dataclass(frozen=True, slots=True)
class TailSettings:
    sharding: str
    grad_width: int
    optimizer: OptimizerOptions
    grad_overlap: float | None  # profile fraction when overlap.grad_reduce is on, else None
    param_overlap: float | None  # profile fraction when overlap.param_gather is on (dist_opt), else None
    low_width: float | None  # quantised weight copy width under FP8/NVFP4
    interference: float = 0.0  # share of hidden communication time the overlapped compute still loses
    step_host: float = 0.0  # seconds of per-step host work (profile host.step_us): syncs and launches


@dataclass(frozen=True, slots=True)
class RankTail:
    grad_exposed: float
    grad_hidden: float
    grad_per_microbatch: float  # ZeRO-2: exposed reduce-scatter per microbatch (on the compute path)
    param_after: float  # exposed parameter all-gather after the optimizer
    param_lead: float  # overlapped gather's exposed part, before subtracting the rank's idle before its first forward
    param_hidden: float
    optimizer: float
    measured: bool


def _bucketed(timer: KernelTimer, kind: str, params: int, width: float, group: GroupShape,
              bucket: int) -> tuple[float, float, float, list[bool]]:
    """(total, first bucket, last bucket) seconds of a bucketed collective over `params`, and whether
    each timed call was measured."""
    if params <= 0 or group.size <= 1:
        return 0.0, 0.0, 0.0, []
    full, rest = divmod(params, bucket)
    flags = []
    t_full = t_rest = 0.0
    if full:
        t_full, m = timer.collective(CollectiveCall(kind, bucket * width, group))
        flags.append(m)
    if rest:
        t_rest, m = timer.collective(CollectiveCall(kind, rest * width, group))
        flags.append(m)
    total = full * t_full + t_rest
    last = t_rest if rest else t_full
    first = t_full if full else t_rest
    return total, first, last, flags


def rank_tail(p: RankParams, groups: dict[str, GroupShape], timer: KernelTimer, s: TailSettings,
              bwd_window: float, fwd_window: float, tied_params: int) -> RankTail:
    """The tail of one rank. Windows: its backward and forward compute for one microbatch;
    tied_params: word-embedding parameters it all-reduces with the other end of the pipeline."""
    dp_cp, edp = groups["dp_cp"], groups["edp"]
    bucket = max(BUCKET_MIN_PARAMS, BUCKET_PER_DP_RANK * dp_cp.size)
    g = s.grad_width
    flags: list[bool] = []  # measured or not, per timed call: the tail is "measured" when all were
    grad_total = grad_last = ag_total = ag_first = 0.0
    if s.sharding != "fsdp":
        kind = "all_reduce" if s.sharding == "none" else "reduce_scatter"
        for params, group in ((p.dense, dp_cp), (p.expert, edp)):
            tot, _, last, ms = _bucketed(timer, kind, params, g, group, bucket)
            grad_total += tot
            grad_last = max(grad_last, last)
            flags += ms
            if s.sharding in ("dist_opt", "zero2"):
                tot, first, _, ms = _bucketed(timer, "all_gather", params, PARAM_BYTES, group, bucket)
                ag_total += tot
                ag_first = max(ag_first, first)
                flags += ms
    grad_exposed = grad_total
    if s.grad_overlap is not None and grad_total > 0:
        grad_exposed = min(grad_total, grad_last + max(0.0, grad_total - grad_last - s.grad_overlap * bwd_window))
    grad_exposed += s.interference * (grad_total - grad_exposed)
    grad_hidden = grad_total - grad_exposed
    per_mb = 0.0
    if s.sharding == "zero2":  # every microbatch, on that microbatch's backward
        per_mb, grad_exposed = grad_exposed, 0.0
    tied = 0.0
    if tied_params and groups["pp"].size > 1:
        tied, m = timer.collective(CollectiveCall("all_reduce", tied_params * g, groups["pp"]))
        flags.append(m)
    param_after = param_lead = param_hidden = 0.0
    if s.param_overlap is not None and ag_total > 0:
        exposed = min(ag_total, ag_first + max(0.0, ag_total - ag_first - s.param_overlap * fwd_window))
        exposed += s.interference * (ag_total - exposed)
        param_lead = exposed
        param_hidden = ag_total - exposed
    else:
        param_after = ag_total
    o = s.optimizer
    states = DTYPE_BYTES[o.main_params_dtype] + DTYPE_BYTES[o.exp_avg_dtype] + DTYPE_BYTES[o.exp_avg_sq_dtype]
    sharded = s.sharding != "none"
    shard = (-(-p.dense // dp_cp.size) + -(-p.expert // edp.size)) if sharded else p.dense + p.expert
    step_bytes = shard * (2 * g + 2 * states + PARAM_BYTES)
    buffer = (shard if s.sharding in ("zero2", "fsdp") else p.dense + p.expert) * g
    cast = p.gemm * (PARAM_BYTES + 2 * s.low_width) if s.low_width is not None else 0.0
    opt = 0.0
    for nbytes in (step_bytes, buffer, cast):
        t, m = timer.memory(MemoryCall(nbytes))
        opt += t
        flags.append(m)
    t, m = timer.collective(CollectiveCall("all_reduce", 4.0, groups["world"]))
    flags.append(m)
    return RankTail(grad_exposed + tied, grad_hidden, per_mb, param_after, param_lead, param_hidden,
                    opt + t + s.step_host, all(flags))
