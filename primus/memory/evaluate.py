"""Evaluate the ledger for a job and a complete layout: per-stage bytes with their assumptions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from primus.errors import InputError
from primus.job import Job
from primus.memory.activations import MAXTEXT_POLICIES, RECOMPUTED_MODULES, ActContext
from primus.memory.ledger import Reserves, StageMemory, StateWidths, combine, communicators
from primus.memory.numerics import numerics_for
from primus.memory.offload import offload_applies
from primus.memory.recompute import selective_modules
from primus.memory.shapes import PipelineKey, layout_for, stage_shapes
from primus.memory.units import act_units, param_units
from primus.parallel import Layout, normalise
from primus.schedule.pipeline import build_schedule
from primus.stacks.apply import recipe_layout_note


@dataclass(frozen=True)
class MemoryReport:
    """Per-stage bytes at each stage's peak, the capacity they are checked against, and why."""

    layout: Layout
    stages: tuple[StageMemory, ...]
    reserves: Reserves
    assumptions: tuple[str, ...]

    @property
    def peak(self) -> StageMemory:
        return max(self.stages, key=lambda s: (s.bytes, -s.stage))

    @property
    def peak_bytes(self) -> int:
        return self.peak.bytes

    @property
    def capacity_bytes(self) -> int:
        return self.reserves.capacity_bytes

    @property
    def headroom_bytes(self) -> int:
        return self.capacity_bytes - self.peak_bytes

    @property
    def fits(self) -> bool:
        return self.peak_bytes <= self.capacity_bytes

    @property
    def verdict(self) -> str:
        """fits, tight (fits with less headroom than the allocator reserve) or does not fit."""
        return self.reserves.verdict(self.peak_bytes)

    def to_json(self) -> dict[str, Any]:
        return {
            "parallel": self.layout.as_parallel(),
            "fits": self.fits,
            **self.reserves.verdict_fields(self.peak_bytes),  # as `fit` writes them
            "peak_bytes": self.peak_bytes,
            "peak_stage": self.peak.stage,
            "capacity_bytes": self.capacity_bytes,
            "hbm_bytes": self.reserves.hbm_bytes,
            "reserve_bytes": self.reserves.reserve_bytes,
            "headroom_bytes": self.headroom_bytes,
            "reserves": {
                "runtime_context_bytes": self.reserves.runtime_context_bytes,
                "fragmentation_bytes": self.reserves.fragmentation_bytes,
                "allocator": self.reserves.allocator,
                "sources": self.reserves.sources,
            },
            "stages": [
                {"stage": s.stage, "params": s.params, "bytes": s.bytes, "breakdown": s.breakdown, "terms": s.terms}
                for s in self.stages
            ],
            "assumptions": list(self.assumptions),
        }


class MemoryModel:
    """The ledger bound to one job. Pure apart from caches of the pieces that depend on few axes."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.model = job.model
        spec = job.spec
        self.numerics = numerics_for(spec.precision, spec.effective_fp8_recipe)
        self.widths = StateWidths.of(spec.optimizer, spec.fp8_param_gather, spec.precision, spec.effective_fp8_recipe)
        self.reserves = Reserves.of(job.cluster, job.expandable_segments)
        self.comm_figure = int(job.cluster.reserves.communicator_buffer_bytes.value)
        self.recompute_method = spec.parallel.recompute_method or "uniform"
        ids = spec.parallel.recompute_layer_ids
        self.recompute_layer_ids = frozenset(ids) if ids is not None else None
        if ids is not None and (max(ids, default=0) >= self.model.num_layers):
            raise InputError(job.where, "parallel.recompute_layer_ids",
                             f"layer id {max(ids)} is not below the model's {self.model.num_layers} decoder layers")
        self.offloaded_layers = spec.cpu_offloading.offloaded_layers
        if spec.cpu_offloading.num_layers >= self.model.num_layers:
            raise InputError(job.where, "cpu_offloading.num_layers",
                             f"{spec.cpu_offloading.num_layers} is not below the model's {self.model.num_layers} "
                             "decoder layers (Megatron-Core offloads fewer layers than the model has)")

    def act_context(self, layout: Layout) -> ActContext:
        spec = self.job.spec
        return ActContext(
            seq_len=spec.seq_len, mbs=layout.mbs, tp=layout.tp, cp=layout.cp, sp=layout.sp, etp=layout.etp,
            numerics=self.numerics, flash_attention=spec.kernels.flash_attention,
            cross_entropy_fusion=spec.kernels.cross_entropy_fusion,
            cross_entropy_in_place=spec.kernels.cross_entropy_fusion_impl == "te",
            eager_cross_entropy=spec.kernels.eager_cross_entropy,
            moe_capacity_factor=spec.moe.capacity_factor, moe_imbalance=spec.moe.imbalance,
            framework=spec.framework, recompute_modules=selective_modules(spec.parallel.recompute_modules),
            experts_low=spec.moe.grouped_gemm != "legacy", fused_grouped_mlp=spec.moe.grouped_gemm == "te_fused",
            selective=spec.selective_recompute, cp_comm=spec.context_parallel.comm_type,
        )

    def pipeline_key(self, layout: Layout) -> PipelineKey:
        return PipelineKey(
            pp=layout.pp, vp=layout.vp, num_microbatches=layout.num_microbatches(self.job.spec.global_batch_size),
            recompute=layout.recompute, recompute_num_layers=layout.recompute_num_layers,
            recompute_method=self.recompute_method, recompute_layer_ids=self.recompute_layer_ids,
            offloaded_layers=self.offloaded_layers,
        )

    def communicator_bytes(self, layout: Layout) -> int:
        n = communicators(layout.tp, layout.cp, layout.dp, layout.pp, layout.ep, layout.etp, layout.edp,
                          self.model.is_moe)
        return n * self.comm_figure

    def evaluate(self, layout: Layout, strict: bool = True) -> MemoryReport:
        """Bytes of every stage. With `strict`, a layout Megatron cannot build (world size, batch,
        layer split, schedule) raises InputError; otherwise the ledger estimates it anyway (the rule
        engine reports legality separately)."""
        layout = normalise(layout, is_moe=self.model.is_moe)
        gbs = self.job.spec.global_batch_size
        if layout.world != self.job.num_gpus:
            raise InputError(self.job.where, "parallel",
                             f"TP×CP×DP×PP = {layout.world} but the job has {self.job.num_gpus} GPUs")
        if gbs % (layout.mbs * layout.dp):
            raise InputError(self.job.where, "global_batch_size",
                             f"{gbs} is not divisible by MBS×DP = {layout.mbs * layout.dp}")
        if strict:
            layout_for(self.model, self.job.pipeline_at(layout.pp, layout.vp), layout.pp, layout.vp,
                       where=self.job.where)
            m = layout.num_microbatches(gbs)
            cap = 4 * layout.pp  # same legality, small schedule: interleaving needs M % PP == 0
            build_schedule(layout.pp, layout.vp, m if m <= cap else cap + m % layout.pp, "auto", where=self.job.where)
            if self.offloaded_layers and (layout.pp > 1 or layout.recompute != "none"):
                raise InputError(self.job.where, "cpu_offloading",
                                 "Megatron-Core offloads activations only without pipeline parallelism and "
                                 f"without recompute (this layout: PP {layout.pp}, recompute {layout.recompute})")
        shapes = stage_shapes(self.model, self.job.pipeline_at(layout.pp, layout.vp), self.pipeline_key(layout))
        pu = param_units(self.model, layout.tp, layout.ep, layout.etp)
        au = act_units(self.model, self.act_context(layout), layout.recompute, self.model.padded_vocab_size(layout.tp))
        comm = self.communicator_bytes(layout)
        stages = tuple(
            combine(shape, pu, au, self.widths, self.numerics, layout.sharding, layout.dp_cp, layout.edp, comm)
            for shape in shapes
        )
        return MemoryReport(layout, stages, self.reserves, self.assumptions(layout, shapes[0].in_flight_chunks))

    def assumptions(self, layout: Layout, stage0_in_flight: int) -> tuple[str, ...]:
        spec = self.job.spec
        w = self.widths
        out = [
            f"vocabulary padded to {self.model.padded_vocab_size(layout.tp):,} (multiple of "
            f"{self.model.make_vocab_size_divisible_by}×TP), split across TP",
            self.weights_text() + f"; main gradients {w.grad} B/param ({spec.optimizer.main_grads_dtype})",
            f"precision: {self.numerics.description}",
        ]
        if layout.sharding == "none":
            out.append(f"no optimizer sharding: master + Adam moments {w.optimizer} B/param on every rank")
        elif layout.sharding == "dist_opt":
            experts = f" (dense) and expert-DP = {layout.edp} (experts)" if self.model.is_moe else ""
            out.append(f"distributed optimizer: master + Adam moments {w.optimizer} B/param sharded over DP×CP = "
                       f"{layout.dp_cp}{experts}")
        elif layout.sharding == "zero2":
            out.append(f"ZeRO-2: gradients and optimizer ({w.grad}+{w.optimizer} B/param) sharded over DP×CP = "
                       f"{layout.dp_cp}")
        else:
            out.append(f"FSDP (ZeRO-3): fp32 parameter, gradient and moment shards over DP×CP = {layout.dp_cp}; "
                       "unsharded bf16 copies of the current and prefetched layer")
        out.append(f"{layout.schedule} pipeline schedule: stage 0 holds {stage0_in_flight} microbatch chunk(s) in "
                   f"flight at its peak (M = {layout.num_microbatches(spec.global_batch_size)})")
        note = recipe_layout_note(self.job.layout_stack, self.model,
                                  self.job.pipeline_at(layout.pp, layout.vp).layout, layout.pp, layout.vp)
        if note:
            out.append(note)
        out.append("flash attention: q, k, v, output and fp32 log-sum-exp kept, no s×s scores"
                   if spec.kernels.flash_attention else "unfused attention: s×s softmax (and dropout) kept")
        mode = self.act_context(layout).selective_mode
        selective = _SELECTIVE_TEXT.get(mode, "selective recompute of " + ", ".join(sorted(selective_modules(
            spec.parallel.recompute_modules))) + " (what each frees: primus.memory.recompute)")
        if mode in MAXTEXT_POLICIES:
            selective += (" (nearest Megatron-Core recompute_modules: " + ", ".join(RECOMPUTED_MODULES[mode])
                          + ", which keeps the input norm's output and the attention output as well)")
        rec = {"none": "no recompute", "selective": selective,
               "full": f"full recompute ({self.recompute_method}, {layout.recompute_num_layers or 1} layer(s) "
                       "per checkpoint unit): layer inputs kept, one unit rematerialised in backward"}
        if layout.recompute == "full" and self.recompute_layer_ids is not None:
            rec["full"] = (f"full recompute of the {len(self.recompute_layer_ids)} listed layer(s) "
                           "(recompute_layer_ids), each from its own checkpoint; other layers keep their activations")
        out.append(rec[layout.recompute])
        if self.offloaded_layers:
            applies = offload_applies(layout.pp, layout.recompute)
            out.append(f"CPU activation offloading of the first {self.offloaded_layers} decoder layers: "
                       + (f"{self.model.num_layers - self.offloaded_layers} layers' activations on the device "
                          "beside the loss, one more (the last offloaded layer, still copying, then reloaded) "
                          "beside the last layer's forward and backward" if applies
                          else "not applied (Megatron-Core offloads only at PP 1 without recompute)"))
        out.append("sequence parallel: norm/dropout regions split across TP" if layout.sp
                   else "no sequence parallel: norm/dropout regions replicated across TP")
        te_loss = spec.kernels.cross_entropy_fusion_impl == "te"
        out.append(("cross-entropy fused (Transformer Engine, in place: the logits' gradient overwrites them): "
                    "bf16 logits kept, no second logit tensor" if te_loss else "cross-entropy fused: bf16 logits kept")
                   if spec.kernels.cross_entropy_fusion
                   else "eager PyTorch cross-entropy: fp32 log-softmax kept; its gradient and the logits' "
                        "fp32 gradient allocated in backward" if spec.kernels.eager_cross_entropy
                   else "unfused vocab-parallel cross-entropy: fp32 softmax over the padded vocab kept")
        if self.model.is_moe:
            if spec.moe.capacity_factor:
                out.append(f"MoE capacity factor {spec.moe.capacity_factor}: routed-token buffers padded to capacity")
            else:
                out.append(f"MoE routing balanced (as NVIDIA's published benchmarks force it); imbalance factor "
                           f"{spec.moe.imbalance} on the routed-token buffers")
        used = communicators(layout.tp, layout.cp, layout.dp, layout.pp, layout.ep, layout.etp, layout.edp,
                             self.model.is_moe)
        out.append(f"communicator buffers: {self.comm_figure:,} B per NCCL/RCCL communicator ({used} used)")
        stack_line, capacity_line = self.layout_free_assumptions()
        return (stack_line, *out, capacity_line)

    def weights_text(self) -> str:
        """What the weight bytes are, as the ledger counts them (`combine`): working weights in bf16 (fp16
        under fp16) whatever the GEMM precision; FP8 or NVFP4 compute adds a low-precision cache per GEMM
        weight, and `--fp8-param-gather` drops the GEMMs' 16-bit copy."""
        w, spec = self.widths, self.job.spec
        dtype = "fp16" if spec.precision == "fp16" else "bf16"
        cache = self.numerics.weight_cache
        if not cache:
            return f"{dtype} weights {w.weight} B/param"
        low = "NVFP4" if spec.precision == "nvfp4" else "FP8"
        cache_text = f"{float(cache):.4g} B/param {low} cache of every GEMM weight ({self.numerics.name})"
        if spec.fp8_param_gather:
            return (f"{low} compute: GEMM weights only in {low} (--fp8-param-gather), {cache_text}; other weights "
                    f"{dtype} {w.weight} B/param")
        return f"{low} compute with {dtype} weights {w.weight} B/param, plus a {cache_text}"

    def layout_free_assumptions(self) -> tuple[str, str]:
        """The stack and the capacity: what every answer about this job assumes whatever its layout, so
        that a refusal decided before any layout is evaluated (a pin against the world size) still names
        the framework it answered for."""
        stack = self.job.resolved_stack
        return (f"stack {stack.label}: settings the job leaves out follow {stack.title}"
                + (f" ({stack.note})" if stack.note else ""),
                f"capacity = HBM {self.reserves.hbm_bytes:,} B − runtime context "
                f"{self.reserves.runtime_context_bytes:,} B − allocator reserve "
                f"{self.reserves.fragmentation_bytes:,} B ({self.reserves.allocator} allocator)")


#: How each selective mode reads in an assumption list.
_SELECTIVE_TEXT = {
    "op_level": "torchtitan op-level selective checkpointing (block input, every other matmul output and the "
                "attention outputs kept)",
    "save_dot_except_mlp": "MaxText remat policy save_dot_except_mlp: layer input, q, k, v and the attention "
                           "output projection kept; norms, attention kernel and MLP recomputed in backward",
    "save_dot_except_mlpwi": "MaxText remat policy save_dot_except_mlpwi: layer input, q, k, v and the attention "
                             "output projection kept (the MLP output too after a post-MLP norm); norms, attention "
                             "kernel and MLP FC1 recomputed in backward",
}


def free_axes(job: Job) -> list[str]:
    """The axes a layout needs that the job leaves free (VP only above PP 1, EP and ETP only for MoE, SP
    not at TP 1): what `pinned_layout` refuses, and what tells a rule broken by the pins from pins not
    all given."""
    values = job.spec.parallel.pinned()
    needed = ["tp", "pp", "cp", "mbs", "sp", "recompute", "sharding"]
    if values.get("pp", 1) > 1:
        needed.append("vp")
    if job.model.is_moe:
        needed += ["ep", "etp"]
    return [k for k in needed if k not in values and not (k == "sp" and values.get("tp") == 1)]


def pinned_layout(job: Job) -> Layout:
    """The job's layout when every meaningful axis is pinned (dp derived); InputError listing the free ones.

    The layout is `normalise`d for the ledger, which is no verdict that Megatron-LM would run it: a
    command that answers for the pins as written (`primus memory`, `primus project`) asks
    `primus.solver.check.pinned_breaks` which rules they break."""
    model = job.model
    values: dict[str, Any] = job.spec.parallel.pinned()
    missing = free_axes(job)
    if missing:
        raise InputError(job.where, "parallel",
                         f"axes {', '.join(missing)} are free; pin them, or use `primus fit` to complete them")
    tp, pp, cp = values["tp"], values["pp"], values["cp"]
    denom = tp * pp * cp
    if job.num_gpus % denom:
        raise InputError(job.where, "parallel", f"TP×PP×CP = {denom} does not divide {job.num_gpus} GPUs")
    dp = job.num_gpus // denom
    if "dp" in values and values["dp"] != dp:
        raise InputError(job.where, "parallel.dp", f"dp {values['dp']} disagrees with the derived {dp}")
    layout = Layout(
        tp=tp, pp=pp, vp=values.get("vp", 1), cp=cp, ep=values.get("ep", 1), etp=values.get("etp", 1), dp=dp,
        mbs=values["mbs"], sp=values.get("sp", False), recompute=values["recompute"], sharding=values["sharding"],
        recompute_num_layers=values.get("recompute_num_layers"),
    )
    return normalise(layout, is_moe=model.is_moe)
