"""The job file: the contract scripts and other tools rely on.

A job names a model, a cluster and the convergence settings (sequence length, global batch size,
precision) that tuning must never change, and pins any subset of the parallel axes; the rest is free.
Keys are exact (unknown keys are errors with a did-you-mean), numbers are bounded, and every default
below is Megatron-LM's unless said otherwise. `stack:` (NAME[@RELEASE], default megatron-lm) names
the framework a job runs on; its settings fill what the file leaves out (`primus.job`).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Annotated, Any, Literal

from pydantic import Field, StrictFloat, StrictInt, field_validator, model_validator

from primus.errors import InputError
from primus.schedule.layout import parse_layout_string
from primus.specs.base import Bool, NonNegInt, PosInt, Spec, Text

Recompute = Literal["none", "selective", "full"]
#: Megatron-Core `--recompute-modules` the ledger models (primus.memory.recompute.RECOMPUTE_MODULES)
RecomputeModule = Literal["core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp"]
Sharding = Literal["none", "zero1", "dist_opt", "zero2", "fsdp"]
Precision = Literal["bf16", "fp16", "fp8", "nvfp4"]
Fp8Recipe = Literal["tensorwise", "delayed", "blockwise", "mxfp8"]
Schedule = Literal["auto", "1f1b", "interleaved"]
Dtype = Literal["fp32", "bf16", "fp16"]
#: What selective recompute keeps (primus.memory.activations.SELECTIVE_MODES): Megatron-Core's
#: (`core_attention`: the modules of `parallel.recompute_modules`, default core_attn), torchtitan's op-level
#: policy, or a MaxText remat policy.
SelectiveMode = Literal["core_attention", "op_level", "save_dot_except_mlp", "save_dot_except_mlpwi"]

AXES = ("tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs")
FREE_EXTRAS = ("schedule", "recompute_num_layers")


class ParallelPins(Spec):
    """Pinned parallel axes; None means free. `dp` is derived from the world size and optional."""

    tp: PosInt | None = None
    pp: PosInt | None = None
    vp: PosInt | None = None
    cp: PosInt | None = None
    ep: PosInt | None = None
    etp: PosInt | None = None
    dp: PosInt | None = None
    mbs: PosInt | None = None
    sp: Bool | None = None
    recompute: Recompute | None = None
    sharding: Sharding | None = None
    recompute_num_layers: PosInt | None = None
    recompute_method: Literal["uniform", "block"] | None = None
    #: Primus-LM's `--recompute_layer_ids`: global decoder-layer ids (0-based) fully recomputed, each from
    #: its own checkpoint, instead of a method's layers (primus.memory.recompute); needs recompute full
    recompute_layer_ids: Annotated[tuple[NonNegInt, ...], Field(max_length=10_000)] | None = None
    #: Megatron-Core's `--recompute-modules`: what selective recompute re-runs (default ['core_attn'])
    recompute_modules: Annotated[tuple[RecomputeModule, ...], Field(min_length=1, max_length=5)] | None = None

    @field_validator("recompute_layer_ids")
    @classmethod
    def _distinct_ids(cls, ids: tuple[int, ...] | None) -> tuple[int, ...] | None:
        """A layer is recomputed or not: an id listed twice is a typo for another layer, not a second checkpoint."""
        if ids is not None and len(set(ids)) != len(ids):
            twice = sorted({i for i in ids if ids.count(i) > 1})
            raise ValueError(f"lists layer {', '.join(map(str, twice[:5]))} more than once")
        return ids

    def pinned(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


#: The pipeline options by split mechanism. Megatron-Core's TransformerConfig.__post_init__ (NVIDIA/Megatron-LM
#: 000c4ac transformer_config.py lines 1042-1072, d98e8a6 lines 2230-2260) raises ValueError when first/last
#: stage sizes come with the embedding/loss accounting, and when a pipeline layout comes with either
#: (`any_conflict`): `split_conflict` says which pair a set of given options holds.
STAGE_SIZE_OPTIONS = ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers")
ACCOUNTING_OPTIONS = ("account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split")
PIPELINE_FIELDS = ("layout", *STAGE_SIZE_OPTIONS, *ACCOUNTING_OPTIONS)


def split_conflict(given: Collection[str]) -> tuple[str, str] | None:
    """The second split mechanism among the options `given` (field names), as (the field to name, the one it
    conflicts with): the layout when it is given beside any other, else the accounting beside stage sizes;
    None when they hold one mechanism at most."""
    sizes = [f for f in STAGE_SIZE_OPTIONS if f in given]
    accounted = [f for f in ACCOUNTING_OPTIONS if f in given]
    if "layout" in given and (sizes or accounted):
        return "layout", (sizes + accounted)[0]
    if sizes and accounted:
        return accounted[0], sizes[0]
    return None


class PipelineOptions(Spec):
    """How layers are assigned to pipeline stages (Megatron-Core options; at most one mechanism: a layout,
    first/last stage sizes, or the embedding/loss accounting; checked when the job loads,
    `primus.job._check_one_split_mechanism`, so that the error names the field the job file spells)."""

    layout: Annotated[str, Field(max_length=10_000)] | None = None
    decoder_first_pipeline_num_layers: PosInt | None = None
    decoder_last_pipeline_num_layers: PosInt | None = None
    account_for_embedding_in_pipeline_split: Bool = False
    account_for_loss_in_pipeline_split: Bool = False

    @field_validator("layout")
    @classmethod
    def _layout_parses(cls, value: str | None) -> str | None:
        """A layout string that does not parse is bad input (exit 2, naming `pipeline.layout`), not a
        pipeline split that happens to fail for every PP."""
        if value is not None:
            try:
                parse_layout_string(value)
            except InputError as exc:
                raise ValueError(exc.reason) from None
        return value


class OptimizerOptions(Spec):
    """Adam with Megatron's mixed-precision buffers. The precision-aware optimizer (bf16 moments, or no
    fp32 master copy) is a knob, not a default."""

    name: Literal["adam"] = "adam"
    main_grads_dtype: Dtype = "fp32"
    main_params_dtype: Dtype = "fp32"
    exp_avg_dtype: Dtype = "fp32"
    exp_avg_sq_dtype: Dtype = "fp32"

    @property
    def precision_aware(self) -> bool:
        """Megatron's precision-aware optimizer: master weights or moments below fp32 (bf16 main gradients
        alone are `--grad-reduce-in-bf16`, not this); it needs the distributed optimizer."""
        return any(d != "fp32" for d in (self.main_params_dtype, self.exp_avg_dtype, self.exp_avg_sq_dtype))


#: How Megatron runs the experts' GEMMs (`MoeOptions.grouped_gemm`), also what a stack's recipe may set.
ExpertGemm = Literal["te", "legacy", "te_fused", "sequential"]


class MoeOptions(Spec):
    """Routed-token buffers: balanced by default (NVIDIA's published MoE benchmarks force balanced
    routing); `capacity_factor` caps and pads tokens per expert, `imbalance` scales the busiest rank.

    `grouped_gemm` is the experts' GEMM implementation: `te` (Transformer Engine's grouped linear,
    TEGroupedMLP, which runs in the job's FP8/FP4 format) or `legacy` (Megatron's GroupedMLP,
    --moe-use-legacy-grouped-gemm: the grouped_gemm package's `gg.ops.gmm` on bf16 tensors, with no
    low-precision path, so under FP8 the expert GEMMs still run in BF16; Megatron-Core core_v0.14.0
    megatron/core/transformer/moe/experts.py, and AMD Primus's zbpp_gemm.py calls it "the lagacy-gg
    BF16 backend"), or `te_fused`: Megatron-Core core_v0.18.0's expert MLP built from Transformer Engine's
    fused ops (`use_transformer_engine_op_fuser` with NVTE_CUTEDSL_FUSED_GROUPED_MLP=1, Megatron-Bridge's
    `cutedsl_fused_grouped_mlp`): one cuDNN CuTe-DSL grouped GEMM per projection with the GLU, its clamp
    and the expert biases inside the kernel (TE v2.16 ops/fused/forward_grouped_mlp.py), MXFP8 on compute
    capability 10.x only, so none of TEGroupedMLP's eager work around its kernels; or `sequential`:
    Megatron-Core's SequentialMLP, what Megatron-LM builds without --moe-grouped-gemm (core_v0.16.0
    megatron/core/extensions/transformer_engine_spec_provider.py `grouped_mlp_modules`): a Python loop over
    the local experts, each a Megatron MLP of Transformer Engine linears, with per-expert FP8 padding and a
    cat of the outputs (`primus.projection.ops.sequential_expert_ops`); it saves what TEGroupedMLP saves.

    `sync_free`: the per-expert token counts stay on the device through dispatch and the grouped GEMMs,
    so a MoE layer costs no host round trip (the profile's `host.moe_layer_us` is not spent). AMD
    Primus-Turbo's sync-free MoE stage 2 and above does this (use_cuda_num_token_per_expert in DeepEP and
    a grouped MLP that takes the counts on the device: Primus examples/moe_package/README.md, "Sync-Free
    MoE"); stage 1 removes only the router's and permutation's syncs and keeps the dispatcher's.

    `permute_fusion`: Megatron's --moe-permute-fusion, Transformer Engine's fused permute/unpermute
    kernels. Off, Megatron-Core runs its torch path (core_v0.14.0 megatron/core/transformer/moe/
    moe_utils.py `permute`: `masked_select` of the token indices and of the probabilities, then
    `index_select`; `unpermute`: `zeros` then `scatter_add_`), which moves more bytes and whose
    `masked_select` calls make the host wait for the device (their output size is data-dependent). AMD Primus
    leaves it off until sync-free MoE stage 1 turns it on (language_model.yaml moe_permute_fusion: false;
    rocm_arg_validation.py `_get_sync_free_moe_options`).

    `unfused_permute_syncs`: host round trips that unfused permutation adds per MoE layer forward, which
    depends on the Megatron-Core release. From core_v0.10 to core_v0.16, `permute` calls `masked_select`
    twice, back to back, and each output's size depends on the data, so the host waits once (1,
    the default: NVIDIA/Megatron-LM ac0474d26e, 2024-10-29, to d3528a2130, which AMD Primus fd1eeabb pins).
    From core_v0.17.0 (e19fbe2e1d, 2026-03-06) an `argsort` of fixed shape replaces it, and before
    core_v0.10 `permute` was `argsort` and `index_select` (core_v0.8.0 moe_utils.py); neither waits (0).
    Bounded at 4, as every number in a job file is bounded (no release has more than 1). Each round trip is
    apart from the dispatcher's own (the alltoall dispatcher's `before_ep_alltoall`
    point) and costs the profile's `host.moe_layer_us`. Stacks set it by release. It has no effect when the
    permutation runs fused."""

    capacity_factor: Annotated[StrictFloat | StrictInt, Field(gt=0, le=64)] | None = None
    imbalance: Annotated[StrictFloat | StrictInt, Field(ge=1, le=64)] = 1.0
    token_dispatcher: Literal["alltoall", "allgather", "flex"] = "alltoall"
    grouped_gemm: ExpertGemm = "te"
    sync_free: Bool = False
    permute_fusion: Bool = True
    unfused_permute_syncs: Annotated[StrictInt, Field(ge=0, le=4)] = 1

    @property
    def permutes_fused(self) -> bool:
        """Whether the permutation runs fused: `permute_fusion`, or sync-free MoE, whose stage 1 (below
        the stage `sync_free` describes) already turns Megatron's fused permutation on (AMD Primus
        rocm_arg_validation.py `_get_sync_free_moe_options`), so a sync-free job never pays the torch path."""
        return bool(self.permute_fusion or self.sync_free)


class OverlapOptions(Spec):
    """Communication overlap switches, with Megatron-LM's flag names in mind."""

    grad_reduce: Bool = True
    param_gather: Bool = True
    tp_comm: Bool = False
    moe_a2a: Bool = False


class KernelOptions(Spec):
    """Which kernels run. The cross-entropy comes in three forms with different peak memory: Megatron's
    vocab-parallel cross-entropy (the default: fp32 softmax kept, computed in place), a fused
    cross-entropy (`cross_entropy_fusion`, Megatron's --cross-entropy-loss-fusion: bf16 logits kept) and
    PyTorch's eager `F.cross_entropy` over fp32 logits (`eager_cross_entropy`, torchtitan when the loss
    is not compiled: log-softmax kept, and in backward its gradient and the logits' gradient as two
    more fp32 buffers; three under TP, where torchtitan runs it as DTensor's loss_parallel)."""

    flash_attention: Bool = True
    #: which of Megatron's flash attention backends runs it (`--attention-backend`): `auto` (Transformer
    #: Engine chooses; on Hopper and Blackwell it prefers cuDNN's fused attention), `flash` (Dao's
    #: flash-attn through Transformer Engine) or `fused` (cuDNN). All three are timed alike, at the profile's
    #: flash-attention efficiency; the choice is kept so that a launch line exports back as it was written.
    #: Read with `flash_attention` only (off is `--attention-backend unfused`).
    attention_backend: Literal["auto", "flash", "fused"] = "auto"
    cross_entropy_fusion: Bool = False
    #: which fused cross-entropy runs (Megatron-Core's `cross_entropy_fusion_impl`): `native`, Megatron's
    #: kernel, whose backward writes the logits' gradient into a new tensor; or `te`, Transformer Engine's
    #: parallel_cross_entropy, which writes the gradient over the logits during the forward (TE v2.9
    #: transformer_engine/pytorch/triton/cross_entropy.py lines 187 and 263: in place), so the loss
    #: allocates no second logit-sized tensor. Read only with `cross_entropy_fusion`.
    cross_entropy_fusion_impl: Literal["native", "te"] = "native"
    eager_cross_entropy: Bool = False
    #: Megatron's fused RoPE kernel (`apply_rope_fusion`: on in Megatron-LM unless --no-rope-fusion, and in
    #: every Megatron-Bridge performance recipe). It applies to position_embedding_type rope only: Megatron-LM
    #: (arguments.py, core_v0.15.0 lines 1004-1005) and Megatron-Bridge (gpt_provider.py `provide`) turn it off
    #: for any other type. Off, Megatron-Core's eager `_apply_rotary_pos_emb_bshd` runs
    #: (`primus.projection.ops.rotary_op`). Read by the megatron framework only.
    rope_fusion: Bool = True

    @model_validator(mode="after")
    def _one_loss(self) -> KernelOptions:
        if self.cross_entropy_fusion and self.eager_cross_entropy:
            raise ValueError("cross_entropy_fusion and eager_cross_entropy exclude each other")
        if self.attention_backend != "auto" and not self.flash_attention:
            raise ValueError(f"attention_backend {self.attention_backend} is a flash attention backend; "
                             "flash_attention is false")
        return self


#: Megatron-Core's context-parallel communication types primus models (`--cp-comm-type`, TransformerConfig
#: cp_comm_type, Transformer Engine's `attn_forward_func_with_cp`): the p2p ring (the default), the KV
#: all-gather, and the DeepSpeed-Ulysses-style all-to-all. Hierarchical a2a+p2p is not modelled.
CpCommType = Literal["p2p", "a2a", "all_gather"]


class ContextParallelOptions(Spec):
    """How the CP ranks exchange attention inputs (Megatron-Core `cp_comm_type`, Transformer Engine v2.12
    dot_product_attention/context_parallel.py): `p2p` passes K and V round a ring, overlapped with the
    attention of each step (AttnFuncWithCPAndKVP2P); `all_gather` gathers the full-sequence K and V before
    attention and reduce-scatters their gradients, not overlapped (AttnFuncWithCPAndKVAllGather); `a2a`
    exchanges sequence for heads (q, k, v in, the output back, and their gradients: AttnFuncWithCPAndQKVOA2A),
    so each rank runs whole-sequence attention on heads / CP heads. TE runs sliding-window attention only
    under all_gather or a2a, attention sinks only under a2a, and multi-latent attention only under p2p."""

    comm_type: CpCommType = "p2p"
    #: the type given once per transformer layer (`--cp-comm-type a2a a2a ...`, every layer the same), which
    #: Megatron-Core indexes by layer number: from 1 before core_v0.17.0, so the last layer raised IndexError
    #: until d3a8584533 "Correct indexing when cp_comms_type is a list" (#3389)
    per_layer_list: Bool = False


class CpuOffloadOptions(Spec):
    """Megatron-Core's CPU offloading (`cpu_offloading`, `cpu_offloading_num_layers`,
    `cpu_offloading_activations`, `cpu_offloading_weights`): Transformer Engine copies the saved
    activations of the first `num_layers` decoder layers to host memory during the forward and brings
    them back for the backward. Weight offloading has no effect in Transformer Engine ("Offloading
    weights is deprecated. Using offload_weights=True does not have any effect", TE
    `cpu_offload.get_cpu_offload_context`), so only activations count. 0 layers: off."""

    num_layers: NonNegInt = 0
    activations: Bool = True
    weights: Bool = False

    @property
    def offloaded_layers(self) -> int:
        """Decoder layers whose activations leave the device (0 unless activations are offloaded)."""
        return self.num_layers if self.activations else 0


class AllocatorOptions(Spec):
    """PyTorch's caching allocator. `expandable_segments` (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
    fragments less, so the reserve `fit` keeps free is smaller (`stacks/allocators.yaml`); None: the
    stack's setting."""

    expandable_segments: Bool | None = None


#: The largest job: sizes far beyond any cluster built, small enough for the solver's arithmetic. One
#: definition for the job file and the command line's --nodes/--gpus, so both refuse the same sizes.
MAX_NODES = 100_000
MAX_GPUS = 1_000_000


class JobSpec(Spec):
    model: str | dict[str, Any]
    hardware: str | dict[str, Any]
    nodes: PosInt | None = Field(default=None, le=MAX_NODES)
    gpus: PosInt | None = Field(default=None, le=MAX_GPUS)
    seq_len: Annotated[StrictInt, Field(ge=1, le=16_777_216)]
    global_batch_size: Annotated[StrictInt, Field(ge=1, le=100_000_000)]
    precision: Precision = "bf16"
    fp8_recipe: Fp8Recipe | None = None
    fp8_param_gather: Bool = False
    framework: Literal["megatron", "torchtitan"] = "megatron"
    #: what `recompute: selective` keeps; None: by framework (torchtitan op_level, else core_attention)
    selective_recompute: SelectiveMode | None = None
    stack: Annotated[str, Field(min_length=1, max_length=120)] | None = None
    parallel: ParallelPins = ParallelPins()
    schedule: Schedule = "auto"
    pipeline: PipelineOptions = PipelineOptions()
    optimizer: OptimizerOptions = OptimizerOptions()
    moe: MoeOptions = MoeOptions()
    overlap: OverlapOptions = OverlapOptions()
    kernels: KernelOptions = KernelOptions()
    context_parallel: ContextParallelOptions = ContextParallelOptions()
    cpu_offloading: CpuOffloadOptions = CpuOffloadOptions()
    allocator: AllocatorOptions = AllocatorOptions()
    rules: list[dict[str, Any]] = Field(default_factory=list, max_length=1000)
    free: list[Literal["schedule", "recompute_num_layers"]] = Field(default_factory=list)
    notes: Text | None = None

    @model_validator(mode="after")
    def _one_size(self) -> JobSpec:
        if (self.nodes is None) == (self.gpus is None):
            raise ValueError("give exactly one of nodes and gpus")
        if self.fp8_recipe is not None and self.precision != "fp8":
            raise ValueError("fp8_recipe is only meaningful with precision: fp8")
        if self.fp8_param_gather and self.precision not in ("fp8", "nvfp4"):
            raise ValueError("fp8_param_gather needs precision fp8 (Megatron-LM --fp8-param-gather)")
        return self

    @property
    def effective_fp8_recipe(self) -> Fp8Recipe | None:
        """Megatron-LM's default --fp8-recipe is 'delayed'."""
        if self.precision != "fp8":
            return None
        return self.fp8_recipe or "delayed"
