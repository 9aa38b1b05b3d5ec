"""The per-rank byte ledger of a fully pinned layout.

bytes(stage) = weights + gradients + optimizer + activations + other, each a sum of (count × unit)
products (see `shapes` and `units`). `combine` is the single arithmetic definition; the CP-SAT model
encodes the very same expression, and a property test checks the two agree to the byte.

State bytes follow Megatron-Core mixed precision: bf16/fp16 weights (2 B), main gradients in
`optimizer.main_grads_dtype` (fp32 by default, Megatron's accumulate-in-fp32 for bf16), Adam's master
copy and two moments (fp32: 12 B). Dense parameters shard their optimizer over DP × CP (Megatron's
data-parallel group with context parallel), expert parameters over expert-DP; shards are whole
parameters, ceil(P / D). ZeRO-2 also shards gradients. FSDP (ZeRO-3, torchtitan FSDP2 semantics) keeps
fp32 parameter shards that double as the master copy, fp32 gradient and moment shards, and unsharded
bf16 working copies of the layer being computed and the one prefetched (plus one layer's unsharded
gradients before its reduce-scatter).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from primus.memory.numerics import DTYPE_BYTES, Numerics
from primus.memory.shapes import StageShape
from primus.memory.units import ActUnits, ParamUnits
from primus.specs.hardware import ClusterSpec
from primus.specs.job import OptimizerOptions

BREAKDOWN_KEYS = ("weights", "gradients", "optimizer", "activations", "other")


@dataclass(frozen=True, slots=True)
class StateWidths:
    """Bytes per parameter of each model-state buffer."""

    weight: int
    gemm_weight_copy: int  # bytes of the bf16 copy of a GEMM weight (0 with FP8 parameter gather)
    grad: int
    optimizer: int  # master copy + both Adam moments (dist-opt / ZeRO / none)
    fsdp_param: int  # FSDP parameter shard (doubles as the master copy)
    fsdp_optimizer: int  # FSDP: the two moments only
    step_grad_copy: int = 0  # the fp32 copy of each 16-bit main gradient the optimizer step makes (0: none)

    @staticmethod
    def of(options: OptimizerOptions, fp8_param_gather: bool = False, precision: str = "bf16",
           fp8_recipe: str | None = None) -> StateWidths:
        """With Megatron's `--fp8-param-gather` the GEMM weights live only in FP8 (their low-precision
        cache); the fp32 master copy in the optimizer is unchanged.

        16-bit main gradients (fp16 training, or bf16 ones without --accumulate-allreduce-grads-in-fp32)
        reach Adam as an fp32 copy made at the step: Megatron-Core's distributed optimizer sets each shard's
        `grad = shard_model_grad.float()` and the non-distributed one each parameter's `grad =
        main_grad.float()` (core_v0.15.0 megatron/core/optimizer/distrib_optimizer.py lines 2386-2396,
        optimizer.py lines 750-758), all before Adam runs, freed at the next step's zero_grad; DeepSpeed's ZeRO
        stage 1/2 casts its gradient partition the same way (stage_1_and_2.py `step`, `.to(fp32)`). The
        precision-aware optimizer reads the 16-bit gradient itself (`decoupled_grad`) where Megatron allows
        it: master weights below fp32, or no FP8 recipe other than delayed scaling (optimizer_config.py lines
        198-205, `use_precision_aware_optimizer_no_fp8_or_ds_fp8`; NVFP4 leaves --fp8-recipe at 'delayed').
        Megatron-FSDP copies too (`update_main_grads`), and so do DeepSpeed's ZeRO stages 1 and 2."""
        moments = DTYPE_BYTES[options.exp_avg_dtype] + DTYPE_BYTES[options.exp_avg_sq_dtype]
        # Megatron-LM keys this on --fp8-recipe (default 'delayed', which --fp4-format leaves as it is)
        fp8_like = precision == "fp8" and (fp8_recipe or "delayed") != "delayed"
        decoupled = options.precision_aware and (options.main_params_dtype != "fp32" or not fp8_like)
        return StateWidths(
            weight=2,
            gemm_weight_copy=0 if fp8_param_gather else 2,
            grad=DTYPE_BYTES[options.main_grads_dtype],
            optimizer=DTYPE_BYTES[options.main_params_dtype] + moments,
            fsdp_param=DTYPE_BYTES[options.main_params_dtype],
            fsdp_optimizer=moments,
            step_grad_copy=4 if DTYPE_BYTES[options.main_grads_dtype] < 4 and not decoupled else 0,
        )


def ceil_div(a: Any, b: Any) -> Any:
    """Ceiling division for ints and numpy integer arrays alike."""
    return -(-a // b)


def ceil_frac(elements: Any, width: Fraction) -> Any:
    """ceil(elements × width) for ints and numpy integer arrays alike."""
    return -(-(elements * width.numerator) // width.denominator)


def _max(*values: Any) -> Any:
    if any(isinstance(v, np.ndarray) for v in values):
        return functools.reduce(np.maximum, values)
    return max(values)


def backward_moments(shape: StageShape, au: ActUnits) -> dict[str, Any]:
    """The ledger terms of the larger of the two moments a stage's backward can peak at (ties: the layer
    moment), beyond the in-flight activations and checkpoints:

    - loss: the loss stage's cross-entropy backward, with every in-flight microbatch's loss state kept and the
      loss's working set (`work_loss`);
    - layer: a decoder layer's backward, after its microbatch's loss and output layer have run backward and
      freed their state (so one loss state fewer on the loss stage), with the layer rematerialised by full
      recompute, the larger layer working set, and the layer CPU offloading reloads.

    Mirrored exactly by the CP-SAT model (`primus.solver.cpsat`)."""
    loss_all = shape.if_loss * au.loss
    loss_work = shape.output * au.work_loss
    loss_left = loss_all - shape.output * au.loss  # the layer's own microbatch has freed its loss state
    remat = shape.remat_dense * au.dense_full + shape.remat_moe * au.moe_full
    layer_work = _max(shape.has_dense * au.work_dense, shape.has_moe * au.work_moe)
    reload = shape.reload_dense * au.dense + shape.reload_moe * au.moe
    layer_side = loss_left + remat + layer_work + reload >= loss_all + loss_work
    return {"activations.recompute_transient": _pick(layer_side, remat, 0),
            "activations.backward_working_set": _pick(layer_side, layer_work, loss_work),
            "activations.offload_reload": _pick(layer_side, reload, 0),
            "other.logits_and_loss": _pick(layer_side, loss_left, loss_all)}


def _pick(cond: Any, a: Any, b: Any) -> Any:
    """`a` where `cond`, else `b` (numpy arrays element-wise)."""
    if isinstance(cond, np.ndarray) or isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.where(cond, a, b)
    return a if cond else b


@dataclass(frozen=True, slots=True)
class StageMemory:
    """One stage's bytes at its peak: total, the five-way breakdown and the finer named terms."""

    stage: Any
    params: Any
    bytes: Any
    breakdown: dict[str, Any]
    terms: dict[str, Any]


def communicators(tp: Any, cp: Any, dp: Any, pp: Any, ep: Any, etp: Any, edp: Any, is_moe: bool) -> Any:
    """NCCL/RCCL communicators a rank uses in a step (groups larger than one rank): TP, CP, DP×CP, PP and,
    for MoE models, EP, ETP and expert-DP. Works on ints and numpy arrays alike."""
    count = (tp > 1) * 1 + (cp > 1) * 1 + (dp * cp > 1) * 1 + (pp > 1) * 1
    if is_moe:
        count = count + (ep > 1) * 1 + (etp > 1) * 1 + (edp > 1) * 1
    return count


def combine(shape: StageShape, pu: ParamUnits, au: ActUnits, widths: StateWidths, numerics: Numerics,
            sharding: str, d_dense: Any, d_expert: Any, comm_bytes: Any) -> StageMemory:
    """The ledger's arithmetic for one stage (mirrored exactly by the CP-SAT model).

    Every input may also be a numpy integer array (one entry per candidate layout, all with the same
    `sharding`): the vectorised enumerator calls this very function, so there is one definition."""
    p_dense = (shape.n_dense * pu.dense_layer + shape.n_moe * pu.moe_layer_dense + shape.n_mtp * pu.mtp_dense
               + shape.embedding * pu.embedding + shape.embedding_copy * pu.word_embedding
               + shape.output * pu.output)
    p_expert = shape.n_moe * pu.moe_layer_expert + shape.n_mtp * pu.mtp_expert
    gemm = (shape.n_dense * pu.gemm_dense_layer + shape.n_moe * (pu.gemm_moe_dense + pu.gemm_moe_expert)
            + shape.n_mtp * (pu.gemm_mtp_dense + pu.gemm_mtp_expert))
    s_dense = ceil_div(p_dense, d_dense)
    s_expert = ceil_div(p_expert, d_expert)
    held = p_dense + p_expert
    shards = s_dense + s_expert
    has_layers = (shape.n_dense + shape.n_moe + shape.n_mtp > 0) * 1
    terms: dict[str, int] = {}
    if sharding == "fsdp":
        terms["weights.param_shards"] = widths.fsdp_param * shards
        terms["weights.unsharded_working_copies"] = 2 * widths.weight * pu.max_layer * has_layers
        terms["gradients.grad_shards"] = widths.grad * shards
        terms["gradients.unsharded_layer_grads"] = widths.weight * pu.max_layer * has_layers
        terms["optimizer.moments"] = widths.fsdp_optimizer * shards
    else:
        terms["weights.model"] = widths.weight * held - (widths.weight - widths.gemm_weight_copy) * gemm
        terms["weights.low_precision_cache"] = ceil_frac(gemm, numerics.weight_cache)
        if sharding == "zero2":
            terms["gradients.grad_shards"] = widths.grad * shards
        else:
            terms["gradients.main_grads"] = widths.grad * held
        terms["optimizer.master_and_moments"] = widths.optimizer * (held if sharding == "none" else shards)
    terms["activations.dense_layers"] = shape.if_dense * au.dense
    terms["activations.moe_layers"] = shape.if_moe * au.moe
    terms["activations.recompute_checkpoints"] = shape.if_ckpt * au.checkpoint
    terms["activations.embedding"] = shape.if_embedding * au.embedding
    terms["activations.mtp"] = shape.if_mtp * au.mtp
    # The backward peak comes at one of two moments (`backward_moments`): the loss stage's loss backward (every
    # in-flight microbatch's loss state and the loss's own working set), or a layer's backward, when that
    # microbatch's loss state, logits gradient and output-layer input are already freed (the output layer's
    # backward runs first): the layer rematerialised by full recompute, the layer's working set and, with CPU
    # offloading, the reloaded layer (never beside the loss: primus.memory.offload). The terms below are the
    # chosen moment's.
    terms.update(backward_moments(shape, au))
    # The optimizer step is a third moment: every activation, checkpoint and loss state is freed (and, with
    # FSDP, the gathered layer copies and their unsharded gradients), and the step's fp32 copies of 16-bit main
    # gradients (`StateWidths.step_grad_copy`) are held: the distributed optimizer's, or Megatron-FSDP's own
    # (core_v0.15.0 megatron_fsdp/param_and_grad_buffer.py `update_main_grads`, lines 2399-2460:
    # `optimizer_grad.to(param.dtype)` beside the fp32 main weights, held until zero_grad). The peak is the
    # larger moment: the copies count where they exceed what the backward moment holds beyond the rest.
    if widths.step_grad_copy:
        copies = widths.step_grad_copy * (held if sharding == "none" else shards)
        backward = sum(v for k, v in terms.items() if k.startswith("activations.")) + terms["other.logits_and_loss"]
        if sharding == "fsdp":
            backward = backward + terms["weights.unsharded_working_copies"] + terms["gradients.unsharded_layer_grads"]
        terms["optimizer.step_grad_copy"] = _max(copies - backward, 0)
    terms["other.communicator_buffers"] = comm_bytes
    breakdown: dict[str, Any] = {k: 0 for k in BREAKDOWN_KEYS}
    for name, value in terms.items():
        breakdown[name.split(".", 1)[0]] += value
    total = breakdown["weights"] + breakdown["gradients"] + breakdown["optimizer"] + breakdown["activations"] \
        + breakdown["other"]
    return StageMemory(stage=shape.stage, params=held, bytes=total, breakdown=breakdown, terms=terms)


@dataclass(frozen=True, slots=True)
class Reserves:
    """Device memory the ledger's model state cannot use, each figure named with its source."""

    hbm_bytes: int
    runtime_context_bytes: int
    fragmentation_bytes: int
    sources: dict[str, str] = field(default_factory=dict)
    allocator: str = "hardware"

    @property
    def reserve_bytes(self) -> int:
        return self.runtime_context_bytes + self.fragmentation_bytes

    @property
    def capacity_bytes(self) -> int:
        return self.hbm_bytes - self.reserve_bytes

    @property
    def tight_band_bytes(self) -> int:
        """Headroom below which a fitting layout is `tight`: the allocator reserve itself, which runs
        that ran bound from above but nothing measures for the job at hand."""
        return self.fragmentation_bytes

    def verdict(self, peak_bytes: int) -> str:
        """fits, tight (fits with less headroom than the allocator reserve) or does not fit."""
        if peak_bytes > self.capacity_bytes:
            return "does not fit"
        return "tight" if self.capacity_bytes - peak_bytes < self.tight_band_bytes else "fits"

    def verdict_fields(self, peak_bytes: int, fits: bool = True) -> dict[str, Any]:
        """The verdict as `fit` and `memory` print it in JSON (one definition for both): `verdict`,
        `tight`, `tight_by_bytes` when tight (how far the headroom falls short of the allocator
        reserve), `allocator_reserve_bytes` and `over_hbm` (the peak exceeds raw HBM as well).
        `fits` False: the answer is does not fit whatever the peak (`fit` refused the layout by a rule)."""
        verdict = self.verdict(peak_bytes) if fits else "does not fit"
        doc: dict[str, Any] = {"verdict": verdict, "tight": verdict == "tight"}
        if verdict == "tight":
            doc["tight_by_bytes"] = self.tight_band_bytes - (self.capacity_bytes - peak_bytes)
        doc["allocator_reserve_bytes"] = self.fragmentation_bytes
        doc["over_hbm"] = peak_bytes > self.hbm_bytes
        return doc

    @staticmethod
    def of(cluster: ClusterSpec, expandable_segments: bool | None = None) -> Reserves:
        """The reserves of a device; with the stack's allocator configuration (`expandable_segments`),
        the allocator reserve is the smaller of the hardware's ceiling and that configuration's
        evidence-derived figure (`stacks/allocators.yaml`)."""
        r = cluster.reserves
        hbm = cluster.accelerator.hbm_bytes
        context = int(r.runtime_context_bytes.value)
        fraction = float(r.allocator_fragmentation.value)
        source = r.allocator_fragmentation.source
        name = "hardware"
        if expandable_segments is not None:
            from primus.stacks.allocator import allocator_of

            name, spec = allocator_of(expandable_segments)
            if spec.reserve_fraction < fraction:
                fraction, source = float(spec.reserve_fraction), f"stacks/allocators.yaml {name}: {spec.source}"
        frag = int(fraction * (hbm - context))
        return Reserves(hbm, context, frag, {
            "hbm_bytes": cluster.accelerator.hbm_bytes_source,
            "runtime_context_bytes": r.runtime_context_bytes.source,
            "allocator_fragmentation": source,
            "communicator_buffer_bytes": r.communicator_buffer_bytes.source,
        }, name)
