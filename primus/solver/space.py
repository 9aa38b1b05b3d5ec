"""The names rules can use, and the domain of every axis for one job.

Axes are the decision variables (Megatron names: tp, pp, vp, cp, ep, etp, mbs, sp, recompute,
sharding) and what follows from them (dp, edp, num_microbatches); facts are constants of the job
(model dimensions, cluster shape, capacity); memory quantities come from the byte ledger.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from primus.errors import InputError
from primus.job import Job
from primus.memory.ledger import Reserves
from primus.memory.shapes import layout_for, split_layout
from primus.parallel import RECOMPUTES, SHARDINGS
from primus.rules.expr import Domain
from primus.stacks.megatron_release import (
    folds_experts,
    refuses_expert_bias_etp,
    runs_megatron_lm,
    splits_kv_heads,
)

MAX_BYTES = 2**50
MAX_INT = 2**40

AXIS_DOCS: dict[str, str] = {
    "tp": "tensor-parallel size",
    "pp": "pipeline-parallel size",
    "vp": "virtual pipeline stages per rank (interleaving); 1 without",
    "cp": "context-parallel size",
    "ep": "expert-parallel size (MoE layers)",
    "etp": "expert tensor-parallel size (MoE layers)",
    "dp": "data-parallel size = world / (TP×CP×PP)",
    "edp": "expert data-parallel size = world / (ETP×EP×PP)",
    "mbs": "micro-batch size",
    "num_microbatches": "microbatches per step per pipeline = GBS / (MBS×DP)",
    "sp": "sequence parallelism (bool)",
    "recompute_num_layers": "layers per recompute unit (full recompute), when searched or pinned",
}
for _r in RECOMPUTES:
    AXIS_DOCS[f"recompute_{_r}"] = f"recompute is '{_r}' (bool)"
for _s in SHARDINGS:
    AXIS_DOCS[f"sharding_{_s}"] = f"sharding is '{_s}' (bool; zero1 is dist_opt)"

MEMORY_DOCS: dict[str, str] = {
    "peak_bytes": "bytes of the worst pipeline stage at its peak (the ledger)",
    "first_stage_bytes": "bytes of pipeline stage 0",
    "last_stage_bytes": "bytes of the last pipeline stage",
    "weights_bytes": "largest per-stage weights bytes",
    "gradients_bytes": "largest per-stage gradient bytes",
    "optimizer_bytes": "largest per-stage optimizer bytes",
    "activations_bytes": "largest per-stage activation bytes",
    "other_bytes": "largest per-stage other bytes (logits/loss, communicator buffers)",
}

DERIVED_DOCS: dict[str, str] = {
    "pipeline_split_ok": "Megatron can assign the layers to PP×VP chunks (even split or the job's pipeline options)",
    "schedule_ok": "the pipeline schedule exists (interleaving needs num_microbatches % pp == 0)",
}

FACT_DOCS: dict[str, str] = {
    "num_layers": "decoder layers",
    "hidden_size": "hidden size",
    "ffn_hidden_size": "dense MLP width (0 if every layer is MoE)",
    "moe_ffn_hidden_size": "routed expert width (0 for dense models)",
    "num_attention_heads": "attention heads",
    "num_query_groups": "key/value heads (GQA groups)",
    "qkv_projection_width": "output width of Megatron's linear_qkv, (num_attention_heads + 2 x num_query_groups) x "
                            "kv_channels plus a fused output gate (0 with multi-latent attention, which has none)",
    "num_experts": "routed experts (0 for dense models)",
    "moe_router_topk": "experts per token (0 for dense models)",
    "is_moe": "the model has MoE layers (bool)",
    "mtp_num_layers": "multi-token-prediction modules",
    "vocab_size": "vocabulary size (unpadded)",
    "seq_len": "sequence length",
    "global_batch_size": "global batch size (sequences per step)",
    "world_size": "GPUs in the job",
    "num_nodes": "nodes in the job",
    "gpus_per_node": "GPUs per node",
    "scaleup_domain_size": "GPUs in one NVLink / Infinity Fabric domain",
    "hbm_bytes": "device memory per GPU as torch's allocator reports it",
    "reserve_bytes": "named runtime reserves (context, fragmentation)",
    "capacity_bytes": "hbm_bytes - reserve_bytes",
    "cpu_offload_layers": "decoder layers whose activations are offloaded to host memory (cpu_offloading)",
    "flex_dispatcher": "MoE tokens go through Megatron's flex (DeepEP) dispatcher (bool)",
    "allgather_dispatcher": "MoE tokens go through Megatron's allgather dispatcher (bool)",
    "moe_a2a_overlap": "Megatron overlaps the MoE all-to-all with computation (overlap.moe_a2a, bool)",
    "fused_grouped_mlp": "the experts run Transformer Engine's fused grouped MLP (moe.grouped_gemm te_fused, bool)",
    "precision_aware_optimizer": "Megatron's precision-aware optimizer: an optimizer state not in fp32 (bool)",
    "kv_subsharding": "the job's Megatron-LM (core_v0.16.0 or later) runs TP above num_query_groups by "
                      "all-gathering the QKV activations (bool)",
    "expert_bias_needs_etp1": "a MoE model with linear biases (add_bias_linear) on a Megatron-LM that asserts ETP 1 "
                              "for it (core_v0.15.0 or later, bool)",
    "unfolded_experts": "a MoE model on a Megatron-LM without MoE parallel folding (before core_v0.10.0): experts "
                        "run at the dense TP and EP splits the data-parallel ranks (bool)",
    "cp_comm_p2p": "context parallelism passes K and V round a ring (context_parallel.comm_type p2p, Megatron's "
                   "default; torchtitan's ring attention) (bool)",
    "cp_comm_a2a": "context parallelism exchanges sequence for heads (context_parallel.comm_type a2a) (bool)",
    "cp_comm_all_gather": "context parallelism all-gathers K and V (context_parallel.comm_type all_gather) (bool)",
    "te_window_attention": "Megatron with Transformer Engine attention of a model with sliding-window attention (bool)",
    "te_attention_sinks": "Megatron with Transformer Engine attention of a model with attention sinks "
                          "(softmax_type other than vanilla) (bool)",
    "te_mla": "Megatron with Transformer Engine attention of a multi-latent-attention model (bool)",
}


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass(frozen=True)
class Space:
    """Axis domains and job facts for one job (pins are applied by the solver, not here)."""

    job: Job

    @cached_property
    def world(self) -> int:
        return self.job.num_gpus

    @cached_property
    def reserves(self) -> Reserves:
        return Reserves.of(self.job.cluster, self.job.expandable_segments)

    @cached_property
    def facts(self) -> dict[str, int | bool]:
        m = self.job.model
        c = self.job.cluster
        spec = self.job.spec
        # Megatron-Core's attention is Transformer Engine's DotProductAttention, whose context parallelism
        # decides which cp_comm_type runs which attention (constraints/megatron.yaml, cp-* rules)
        te_attention = spec.framework == "megatron" and runs_megatron_lm(self.job.resolved_stack) is not None
        return {
            "num_layers": m.num_layers,
            "hidden_size": m.hidden_size,
            "ffn_hidden_size": m.ffn_hidden_size or 0,
            "moe_ffn_hidden_size": m.moe_ffn_hidden_size or 0,
            "num_attention_heads": m.num_attention_heads,
            "num_query_groups": m.query_groups,
            "qkv_projection_width": m.linear_qkv_width,
            "num_experts": m.num_experts or 0,
            "moe_router_topk": m.topk,
            "is_moe": m.is_moe,
            "mtp_num_layers": m.mtp_num_layers,
            "vocab_size": m.vocab_size,
            "seq_len": spec.seq_len,
            "global_batch_size": spec.global_batch_size,
            "world_size": self.world,
            "num_nodes": self.job.num_nodes,
            "gpus_per_node": c.gpus_per_node,
            "scaleup_domain_size": c.scaleup.domain_size,
            "hbm_bytes": self.reserves.hbm_bytes,
            "reserve_bytes": self.reserves.reserve_bytes,
            "capacity_bytes": self.reserves.capacity_bytes,
            "cpu_offload_layers": spec.cpu_offloading.offloaded_layers,
            "flex_dispatcher": m.is_moe and spec.moe.token_dispatcher == "flex",
            "allgather_dispatcher": m.is_moe and spec.moe.token_dispatcher == "allgather",
            "fused_grouped_mlp": m.is_moe and spec.moe.grouped_gemm == "te_fused",
            "moe_a2a_overlap": m.is_moe and spec.overlap.moe_a2a,
            # what makes the export write --use-precision-aware-optimizer (launch/megatron_export.py); other
            # frameworks (torchtitan's FSDP2) keep their states in any dtype without it
            "precision_aware_optimizer": spec.framework == "megatron" and spec.optimizer.precision_aware,
            "kv_subsharding": spec.framework == "megatron" and splits_kv_heads(self.job.resolved_stack),
            "expert_bias_needs_etp1": (spec.framework == "megatron" and m.is_moe and m.add_bias_linear
                                       and refuses_expert_bias_etp(self.job.resolved_stack)),
            "unfolded_experts": (spec.framework == "megatron" and m.is_moe
                                 and not folds_experts(self.job.resolved_stack)),
            "cp_comm_p2p": spec.context_parallel.comm_type == "p2p",
            "cp_comm_a2a": spec.context_parallel.comm_type == "a2a",
            "cp_comm_all_gather": spec.context_parallel.comm_type == "all_gather",
            "te_window_attention": te_attention and m.window_size is not None,
            "te_attention_sinks": te_attention and m.softmax_type != "vanilla",
            "te_mla": te_attention and m.multi_latent_attention,
        }

    def _with_pin(self, values: list[int], axis: str) -> list[int]:
        pinned = self.job.spec.parallel.pinned().get(axis)
        if isinstance(pinned, int) and not isinstance(pinned, bool) and pinned not in values:
            return sorted([*values, pinned])
        return values

    @cached_property
    def tp_values(self) -> list[int]:
        return self._with_pin(divisors(self.world), "tp")

    @cached_property
    def cp_values(self) -> list[int]:
        return self._with_pin(divisors(self.world), "cp")

    @cached_property
    def pp_values(self) -> list[int]:
        limit = self.job.model.num_layers + 2
        return self._with_pin([d for d in divisors(self.world) if d <= limit], "pp")

    @cached_property
    def ep_values(self) -> list[int]:
        m = self.job.model
        if not m.is_moe:
            return [1]
        return self._with_pin([d for d in divisors(self.world) if (m.num_experts or 1) % d == 0], "ep")

    @cached_property
    def etp_values(self) -> list[int]:
        if not self.job.model.is_moe:
            return [1]
        return self._with_pin(divisors(self.world), "etp")

    @cached_property
    def mbs_values(self) -> list[int]:
        return self._with_pin(divisors(self.job.spec.global_batch_size), "mbs")

    @cached_property
    def microbatch_values(self) -> list[int]:
        return divisors(self.job.spec.global_batch_size)

    @cached_property
    def split_pairs(self) -> dict[tuple[int, int], bool]:
        """(pp, vp) → can Megatron split the layers that way (given the job's pipeline options there,
        `Job.pipeline_at`)."""
        out: dict[tuple[int, int], bool] = {}
        pinned_vp = self.job.spec.parallel.vp
        for pp in self.pp_values:
            top = 1 if pp == 1 else max(1, (self.job.model.num_layers + 2) // pp)
            vps = set(range(1, top + 1))
            if pinned_vp is not None:
                vps.add(pinned_vp)
            for vp in sorted(vps):
                if pp == 1 and vp != 1:
                    continue
                try:
                    layout_for(self.job.model, self.job.pipeline_at(pp, vp), pp, vp)
                    out[(pp, vp)] = True
                except InputError:
                    out[(pp, vp)] = False
        return out

    @cached_property
    def vp_values(self) -> list[int]:
        return sorted({vp for (_, vp) in self.split_pairs})

    @cached_property
    def recompute_layer_values(self) -> list[int] | None:
        """Values of recompute_num_layers searched or pinned; None when Megatron's default applies."""
        pinned = self.job.spec.parallel.recompute_num_layers
        if "recompute_num_layers" in self.job.spec.free:
            return list(range(1, self.job.model.num_layers + 1))
        return [pinned] if pinned is not None else None

    def recompute_layer_values_at(self, pp: int, vp: int) -> list[int] | None:
        """`recompute_layer_values` for one (PP, VP). A searched count stops at the widest virtual stage:
        Megatron recomputes min(count, layers in the chunk) (`recomputed_layers`), so every larger count
        is that one again, and listing it would only repeat a layout. A pinned count is kept as given,
        since Megatron accepts any count (transformer_config.py asks only that it be set)."""
        values = self.recompute_layer_values
        if values is None or "recompute_num_layers" not in self.job.spec.free:
            return values
        widest = widest_chunk(self.job, pp, vp)
        return [n for n in values if n <= widest]

    def name_domains(self) -> dict[str, Domain]:
        """The Domain of every name a rule may read (for the whitelist checker)."""
        d: dict[str, Domain] = {}
        for name, value in self.facts.items():
            d[name] = Domain(int(value), int(value), isinstance(value, bool))
        w = self.world
        d["tp"] = Domain(min(self.tp_values), max(self.tp_values))
        d["pp"] = Domain(min(self.pp_values), max(self.pp_values))
        d["vp"] = Domain(min(self.vp_values), max(self.vp_values))
        d["cp"] = Domain(min(self.cp_values), max(self.cp_values))
        d["ep"] = Domain(min(self.ep_values), max(self.ep_values))
        d["etp"] = Domain(min(self.etp_values), max(self.etp_values))
        d["dp"] = Domain(1, w)
        d["edp"] = Domain(1, w)
        d["mbs"] = Domain(min(self.mbs_values), max(self.mbs_values))
        d["num_microbatches"] = Domain(1, self.job.spec.global_batch_size)
        d["recompute_num_layers"] = Domain(0, self.job.model.num_layers)
        for name in ("sp", *(f"recompute_{r}" for r in RECOMPUTES), *(f"sharding_{s}" for s in SHARDINGS),
                     *DERIVED_DOCS):
            d[name] = Domain.boolean()
        for name in MEMORY_DOCS:
            d[name] = Domain(0, MAX_BYTES)
        return d


def rule_names_doc() -> dict[str, dict[str, str]]:
    """For `primus schema rule`: every name with its kind and meaning."""
    out: dict[str, dict[str, str]] = {}
    for kind, docs in (("axis", AXIS_DOCS), ("derived", DERIVED_DOCS), ("fact", FACT_DOCS), ("memory", MEMORY_DOCS)):
        for name, doc in docs.items():
            out[name] = {"kind": kind, "meaning": doc}
    return out


def widest_chunk(job: Job, pp: int, vp: int) -> int:
    """The most decoder layers any virtual stage holds (block recompute of that many re-runs them all)."""
    playout, _ = split_layout(job.model, job.pipeline_at(pp, vp), pp, vp)
    return max(len(playout.decoder_layers(k)) for k in range(playout.num_chunks))
