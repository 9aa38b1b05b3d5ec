"""The projection's result object and the assumptions it states."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from primus.memory.ledger import Reserves
from primus.memory.offload import offload_applies
from primus.parallel import Layout
from primus.projection.ops import EAGER_ROPE_PASSES, FUSED_ROPE_PASSES
from primus.projection.profile import PEAK_DTYPE, Profile
from primus.stacks.apply import recipe_layout_note

if TYPE_CHECKING:
    from primus.projection.project import Projector

FLOP_CONVENTION = ("model FLOPs in Megatron's convention: 6 per GEMM weight per token (output layer included), "
                   "attention over the keys a causal mask leaves (S/2 on average), MTP modules included, recompute not "
                   "counted")


#: How each `MoeOptions.grouped_gemm` runs the experts, as the projection prices it (`primus.projection.ops`).
EXPERT_TEXT: Final = {
    "te": "TEGroupedMLP (Transformer Engine grouped linear: one GEMM and one quantisation kernel per local expert)",
    "legacy": "GroupedMLP (grouped_gemm's gmm, one kernel for all experts, bf16 under FP8)",
    "te_fused": "Transformer Engine's fused grouped MLP (GLU, clamp and biases in the FC1 GEMM's epilogue)",
    "sequential": "SequentialMLP (a loop over the local experts: a GLU call each, a cat of the outputs, FP8 rows "
                  "padded per expert)",
}


def tflops_text(tflops: float) -> str:
    """Thousands separators for GPUs; three significant digits below 10 (a CPU's peak is about 0.05)."""
    return f"{tflops:,.0f}" if tflops >= 10 else f"{tflops:.3g}"


def peak_dtype(precision: str) -> str:
    """The dense peak MFU is measured against: the job's own precision (FP4 for nvfp4)."""
    return {"nvfp4": "fp4"}.get(precision, precision)


@dataclass(frozen=True)
class Projection:
    """One projected layout: the headline figures, an exposed-time breakdown that adds up to
    `step_time_s`, what overlap hid, where each figure came from, and the assumptions behind it."""

    layout: Layout
    step_time_s: float
    tokens_per_s_per_gpu: float
    model_tflops_per_gpu: float
    mfu: float
    peak_bytes: int
    capacity_bytes: int
    fits: bool
    breakdown: dict[str, float]
    hidden: dict[str, float]
    sources: dict[str, str]
    assumptions: tuple[str, ...]
    timing: str
    critical_rank: int
    breakdown_rank: int
    num_microbatches: int
    completion: str | None = field(default=None)
    reserves: Reserves | None = field(default=None)

    @property
    def verdict_fields(self) -> dict[str, Any]:
        """The memory verdict as `fit` and `memory` state it (`Reserves.verdict_fields`, one definition):
        `verdict` (fits, tight or does not fit), `tight`, `tight_by_bytes` when tight, `allocator_reserve_bytes`,
        `over_hbm`. Empty without the
        device's reserves."""
        return {} if self.reserves is None else self.reserves.verdict_fields(self.peak_bytes, self.fits)

    @property
    def tight(self) -> bool:
        """Fits with less headroom than the allocator reserve (docs/memory.md, the tight verdict)."""
        return bool(self.verdict_fields.get("tight"))

    def with_completion(self, text: str) -> Projection:
        return Projection(**{**self.__dict__, "completion": text})

    def to_json(self) -> dict[str, Any]:
        parallel = self.layout.as_parallel()
        parallel["schedule"] = self.layout.schedule
        return {
            "parallel": parallel,
            "step_time_s": self.step_time_s,
            "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "model_tflops_per_gpu": self.model_tflops_per_gpu,
            "mfu": self.mfu,
            "peak_bytes": self.peak_bytes,
            "capacity_bytes": self.capacity_bytes,
            "fits": self.fits,
            **self.verdict_fields,
            "breakdown": dict(self.breakdown),
            "hidden": dict(self.hidden),
            "sources": dict(self.sources),
            "timing": self.timing,
            "critical_rank": self.critical_rank,
            "breakdown_rank": self.breakdown_rank,
            "num_microbatches": self.num_microbatches,
            "completion": self.completion,
            "flop_convention": FLOP_CONVENTION,
            "assumptions": list(self.assumptions),
        }


def _group(name: str, g: Any) -> str:
    if g.size == 1:
        return f"{name} 1"
    where = "inside one scale-up domain" if g.domains == 1 else f"over {g.domains} domains ({g.per_domain} per domain)"
    return f"{name} {g.size} {where}"


#: How each context-parallel communication type is timed (`primus.projection.ops.cp_comms`).
CP_COMM_TEXT: dict[str, str] = {
    "p2p": "context parallel: ring attention (p2p: CP - 1 exchanges of K and V per layer, each pipelined with the "
           "attention of one step)",
    "all_gather": "context parallel: all_gather (K and V all-gathered before each layer's attention and again in "
                  "backward, their gradients reduce-scattered; not overlapped)",
    "a2a": "context parallel: a2a (Ulysses: q, k, v and the output through an all-to-all each way per layer, "
           "heads / CP per rank over the whole sequence; not overlapped)",
}


def assumptions(p: Projector, layout: Layout, method: str, split_ok: bool, m: int, crit: int,
                bottleneck: int) -> tuple[str, ...]:
    """What the number rests on, in words (short: built for every projection)."""
    prof, spec, cluster = p.profile, p.job.spec, p.job.cluster
    acc = cluster.accelerator
    g = prof.gemm[p.fmt]  # type: ignore[index]
    eff, half = float(g.efficiency.value), float(g.half_flops.value)
    peak = acc.peak_flops(PEAK_DTYPE[p.fmt]) / 1e12
    stack = p.job.resolved_stack
    out = [
        f"stack {stack.label}" + (f" ({stack.note})" if stack.note else "")
        + (f", kernels {stack.kernel_profile}" if stack.kernel_profile else ""),
        f"profile {prof.hardware} ({_profile_kind(prof)}{_measured_use(p)}): {prof.source}",
        f"linear layers in {p.fmt}: plateau {eff:.2f} of the dense {tflops_text(peak)} TFLOP/s, half-efficiency at "
        f"{half:.3g} FLOPs; router and output layer in {p.high_fmt}",
    ]
    if spec.kernels.flash_attention:
        out.append(f"flash attention over the causal half (with CP: 1/CP of it per rank), backward 5 matmuls to "
                   f"the forward's 2, at {float(prof.attention.fwd_efficiency.value):.2f} / "
                   f"{float(prof.attention.bwd_efficiency.value):.2f} of the bf16 peak")
    else:
        out.append("unfused attention: score and context BMMs over the full s×s at the GEMM rate, plus softmax passes")
    out.append(f"memory-bound kernels (norms, activations, residuals, rotary, permutes, casts, loss) at "
               f"{float(prof.hbm.efficiency.value):.2f} of {acc.hbm_bandwidth_gb_s:,.0f} GB/s")
    if p.model.rotary and not p.rope_fused:
        why = ("Megatron fuses it for position_embedding_type rope only" if p.model.position_embedding_type != "rope"
               else "kernels.rope_fusion is off")
        fwd, bwd = (n // FUSED_ROPE_PASSES for n in EAGER_ROPE_PASSES)
        out.append(f"RoPE on Megatron-Core's eager path: {fwd} times the fused kernel's traffic over q and k forward, "
                   f"{bwd} times backward ({why})")
    gr = p.groups(layout)
    named = [("TP", "tp"), ("CP", "cp_group"), ("DP×CP", "dp_cp"), ("PP", "pp_group")]
    if p.model.is_moe:
        named += [("EP", "ep"), ("expert-TP", "etp"), ("expert-DP", "edp")]
    out.append(f"ranks in order {'-'.join(p.order)} ({cluster.scaleup.domain_size}-GPU {cluster.scaleup.topology} "
               "domains): " + ", ".join(_group(n, gr[k]) for n, k in named))
    split = "sequence-split" if layout.sp else "full"
    out.append(f"{layout.schedule} schedule, PP {layout.pp} × VP {layout.vp}, {m} microbatches, timed by {method}; "
               f"pipeline rank {crit} ends last, rank {bottleneck} has the most work (the breakdown's view); "
               f"P2P sends of each activation ({split} across TP) as a link delay")
    note = recipe_layout_note(p.job.layout_stack, p.model, p.job.pipeline_at(layout.pp, layout.vp).layout,
                              layout.pp, layout.vp)
    if note:
        out.append(note)
    if not split_ok:
        out.append("Megatron cannot split the layers this way with the job's pipeline options; the most balanced "
                   "split is timed instead")
    ov = spec.overlap
    on = [n for n, flag in (("gradient reduce", ov.grad_reduce), ("param gather", ov.param_gather),
                            ("TP comm", ov.tp_comm), ("MoE all-to-all", ov.moe_a2a)) if flag]
    out.append(f"overlap on: {', '.join(on) or 'none'}; DP buckets of max(40M, 1M×DP×CP) parameters, gradients "
               f"reduced in {spec.optimizer.main_grads_dtype}")
    modules = ", ".join(sorted(p.cost_settings.recompute_modules))
    selective = {"op_level": "torchtitan op-level selective checkpointing re-runs the matmuls and memory-bound ops "
                             "it does not keep in backward",
                 "core_attention": f"selective recompute re-runs {modules} in backward"}.get(
        p.selective, f"MaxText remat policy {p.selective} re-runs the norms, attention kernel, MLP FC1 and "
                     "activation in backward")
    rec = {"none": "no recompute", "selective": selective,
           "full": f"full recompute ({p.recompute_method}) re-runs the layer forward in backward"}
    out.append(rec[layout.recompute])
    offloaded = p.memory.offloaded_layers if offload_applies(layout.pp, layout.recompute) else 0
    if offloaded and cluster.host_link is not None:
        out.append(f"CPU offloading of {offloaded} layers' activations over the host link at "
                   f"{cluster.host_link.bandwidth_gb_s:g} GB/s per direction, hidden behind each pass's compute "
                   "except where the copies take longer")
    if p.model.is_moe:
        how = {"alltoall": "all-to-all over EP", "allgather": "all-gather / reduce-scatter over EP",
               "flex": "deduplicated dispatch (each token crosses to a remote domain once)"}[spec.moe.token_dispatcher]
        out.append(f"MoE: {spec.moe.token_dispatcher} dispatcher as {how} (+ all-gather/reduce-scatter over "
                   f"ETP), balanced routing × imbalance {spec.moe.imbalance}"
                   + (f", capacity factor {spec.moe.capacity_factor}" if spec.moe.capacity_factor else ""))
        experts = EXPERT_TEXT[spec.moe.grouped_gemm] if spec.framework == "megatron" else "grouped GEMMs"
        out.append(f"experts: {experts}")
    if layout.cp > 1:
        out.append(CP_COMM_TEXT[spec.context_parallel.comm_type])
    out.append(f"{FLOP_CONVENTION}; MFU against the dense {peak_dtype(spec.precision)} peak "
               f"{tflops_text(p.peak_flops / 1e12)} TFLOP/s")
    out.append("peak memory from the byte ledger (primus memory)")
    return tuple(out)


def _measured_use(p: Projector) -> str:
    """Beside a measured profile the calibration profile times only the calls it does not hold."""
    from primus.projection.timer import MeasuredTimer

    return "; times only the calls the measured profile does not hold" if isinstance(p.timer, MeasuredTimer) else ""


def _profile_kind(prof: Profile) -> str:
    """How a profile's efficiencies were obtained, in a few words."""
    if prof.fitted:
        return "fitted"
    if prof.transferred_from:
        return f"not fitted: the fitted factors of its same-die sibling {prof.transferred_from}"
    return "spec-derived, not fitted"
