"""The schema of a stack file (`stacks/NAME.yaml`): one framework, its releases, each setting sourced.

A stack says what a framework does for every setting a job file may leave out and that changes bytes
or time. Every setting is `{value, source}`: the source is a repository path (and commit) or a
document URL. The first release lists every setting; a later release lists only what changed.
"""

from __future__ import annotations

from typing import Annotated, Any, Generic, Literal, TypeVar

from pydantic import Field, model_validator

from primus.errors import InputError
from primus.schedule.layout import parse_layout_string
from primus.specs.base import Bool, PosInt, Spec, Text
from primus.specs.job import Dtype, ExpertGemm, Fp8Recipe, Recompute, RecomputeModule, SelectiveMode, Sharding

T = TypeVar("T")
Source = Annotated[str, Field(min_length=3, max_length=2000)]
SourcePrefix = Annotated[str, Field(min_length=1, max_length=100)]
Label = Annotated[str, Field(min_length=1, max_length=40, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]

#: Kernel sets with a profile section (`stacks.<name>` in hardware/profiles) or the default one.
Kernels = Literal["megatron-core-te", "pytorch-eager", "pytorch-compile"]
#: How the loss is computed: Megatron's vocab-parallel cross-entropy (fp32 softmax kept), a fused
#: cross-entropy (bf16 logits kept; `fused` is Megatron-Core's native kernel, `fused_te` Transformer Engine's,
#: which writes the gradient over the logits: cross_entropy_fusion_impl 'te'), PyTorch's eager
#: F.cross_entropy over fp32 logits, or a loss compiled with the model (torch.compile; the ledger holds it
#: as the vocab-parallel form).
CrossEntropy = Literal["vocab_parallel", "fused", "fused_te", "eager", "compiled"]


def loss_kernels(ce: str) -> dict[str, object]:
    """The job's `kernels` keys for a stack's or a recipe's cross-entropy."""
    return {"cross_entropy_fusion": ce in ("fused", "fused_te"), "eager_cross_entropy": ce == "eager",
            "cross_entropy_fusion_impl": "te" if ce == "fused_te" else "native"}
#: even: layers split evenly over PP x VP chunks; even_else_accounted: when they do not divide, the
#: embedding and the loss count as layers (Megatron's account_for_*_in_pipeline_split), else an
#: explicit layout with the extra layers off the first and last stages; torchtitan_layers and
#: torchtitan_weighted: torchtitan's own split of a release (`primus.schedule.torchtitan_split`), which
#: needs no divisibility.
PipelineSplit = Literal["even", "even_else_accounted", "torchtitan_layers", "torchtitan_weighted"]


class Sourced(Spec, Generic[T]):
    """One setting: its value and where it comes from."""

    value: T
    source: Source


class StackSettings(Spec):
    """Every setting a stack decides (all optional so that a later release lists only changes)."""

    framework: Sourced[Literal["megatron", "torchtitan"]] | None = None
    kernels: Sourced[Kernels] | None = None
    sharding: Sourced[Sharding] | None = None
    sharding_choices: Sourced[list[Sharding]] | None = None
    recompute: Sourced[Recompute] | None = None
    selective_recompute: Sourced[SelectiveMode] | None = None
    vp: Sourced[PosInt] | None = None
    sequence_parallel: Sourced[Literal["tp>1", "off"]] | None = None
    expert_tp: Sourced[Literal["tp", "1"]] | None = None
    fp8_recipe: Sourced[Fp8Recipe] | None = None
    #: FP8 runs keep their GEMM weights only in FP8 and all-gather them in FP8 (Megatron's
    #: --fp8-param-gather, NeMo's fp8_params / fp8_param_gather): no bf16 copy of those weights
    fp8_param_gather: Sourced[Bool] | None = None
    main_grads_dtype: Sourced[Dtype] | None = None
    #: the main gradients of an fp16 job, where the stack's source says (Megatron reduces fp16 gradients in fp16
    #: unless --accumulate-allreduce-grads-in-fp32: `primus.stacks.apply.main_grads_dtype`)
    main_grads_dtype_fp16: Sourced[Dtype | None] | None = None
    optimizer_state_dtype: Sourced[Dtype] | None = None
    tp_comm_overlap: Sourced[Bool] | None = None
    moe_a2a_overlap: Sourced[Bool] | None = None
    moe_dispatcher: Sourced[Literal["alltoall", "allgather", "flex"]] | None = None
    moe_dispatcher_scaleup: Sourced[Literal["alltoall", "allgather", "flex"] | None] | None = None
    #: Megatron's --moe-permute-fusion (`MoeOptions.permute_fusion`) where the stack's source says it
    #: stack-wide; null where it does not, and the job's default (fused) stands
    moe_permute_fusion: Sourced[Bool | None] | None = None
    #: host round trips of Megatron-Core's unfused permutation per MoE layer forward in this release
    #: (`MoeOptions.unfused_permute_syncs`); null where the release is not stated, and the job's default stands
    moe_unfused_permute_syncs: Sourced[Annotated[int, Field(ge=0, le=4)] | None] | None = None
    flash_attention: Sourced[Bool] | None = None
    cross_entropy: Sourced[CrossEntropy] | None = None
    grad_reduce_overlap: Sourced[Bool] | None = None
    param_gather_overlap: Sourced[Bool] | None = None
    pipeline_split: Sourced[PipelineSplit] | None = None
    allocator_expandable_segments: Sourced[Bool] | None = None

    def given(self) -> dict[str, Sourced[Any]]:
        return {k: getattr(self, k) for k in type(self).model_fields if getattr(self, k) is not None}


class RecipeSettings(Spec):
    """What a per-model recipe sets beyond the stack's defaults."""

    recompute: Recompute | None = None
    recompute_num_layers: PosInt | None = None
    recompute_method: Literal["uniform", "block"] | None = None
    recompute_modules: Annotated[tuple[RecomputeModule, ...], Field(min_length=1, max_length=5)] | None = None
    selective_recompute: SelectiveMode | None = None
    vp: PosInt | None = None
    cpu_offloading_num_layers: PosInt | None = None  # activations of the first N decoder layers to host memory
    sharding: Sharding | None = None  # where a preset shards otherwise than the stack (Primus's FSDP2 examples)
    cross_entropy: CrossEntropy | None = None  # where a preset's loss differs from the stack's
    #: where a preset overlaps the MoE all-to-all with another microbatch's compute (Megatron-Bridge
    #: moe_a2a_overlap: comm_overlap.overlap_moe_expert_parallel_comm) and the stack does not
    moe_a2a_overlap: Bool | None = None
    #: where a preset's run used another MoE token dispatcher than the stack's (Megatron-Bridge: a preset's
    #: moe_flex_dispatcher_backend 'deepep'/'hybridep' applied by apply_flex_dispatcher_backend is `flex`)
    moe_dispatcher: Literal["alltoall", "allgather", "flex"] | None = None
    #: where a preset builds its experts otherwise than the stack's TEGroupedMLP (`MoeOptions.grouped_gemm`;
    #: Megatron-Bridge's cutedsl_fused_grouped_mlp: `te_fused`)
    moe_grouped_gemm: ExpertGemm | None = None


#: The parallel axes a recipe's `layout` states and a run's stated layout is compared on (`Stack.recipe_for`):
#: a run that splits the model otherwise (TP, PP, CP) ran another configuration than the preset, whose
#: recompute and offloading were chosen for its split; the others tell a preset's variants apart.
PARTITION_AXES = ("tp", "pp", "cp")
LAYOUT_AXES = (*PARTITION_AXES, "vp", "ep", "etp", "mbs")


class RecipeLayout(Spec):
    """The layout a workload preset runs at: what tells apart the variants (V1/V2, LARGE_SCALE) a framework
    ships for one model, GPU, precision and release. `vp` 1 is no interleaving; `etp` null where the preset
    leaves it to the framework. `gpus` and `gbs` are the preset's own scale: the presets scale the global
    batch with the GPU count (Megatron-Bridge scripts/performance/utils/utils.py
    WorkloadBaseConfig.gbs_scaling_factor), so a run matches on GBS per GPU."""

    tp: PosInt
    pp: PosInt
    vp: PosInt
    cp: PosInt
    ep: PosInt
    etp: PosInt | None = None
    mbs: PosInt
    gpus: PosInt
    gbs: PosInt


class Recipe(Spec):
    """A framework's shipped per-model recipe, keyed by model, GPU and precision (and, where the framework
    ships several variants of one, by the layout each runs at)."""

    model: Annotated[str, Field(min_length=1, max_length=200)]
    gpu: Annotated[str, Field(min_length=1, max_length=200)]
    precision: Literal["bf16", "fp16", "fp8", "fp8-block", "mxfp8", "nvfp4"]
    since: Label | None = None
    until: Label | None = None  # the last release whose preset this is (a later one changed or split it)
    #: the preset's layout: a run whose stated layout contradicts it is not this preset's run
    layout: RecipeLayout | None = None
    settings: RecipeSettings
    source: Source


class ModelPipelineLayout(Spec):
    """A model recipe's own `pipeline_model_parallel_layout` at one PP x VP, whatever GPU or precision
    runs it (Megatron-Bridge's DeepSeek-V3 and Kimi-K2 recipes map (PP, VP) to a layout): where the
    framework names one, the stack's split (`pipeline_split`) does not guess."""

    model: Annotated[str, Field(min_length=1, max_length=200)]
    pp: PosInt
    vp: PosInt
    #: a Megatron layout string (`primus.schedule.layout.parse_layout_string`) of PP x VP chunks
    layout: Annotated[str, Field(min_length=1, max_length=400)]
    since: Label | None = None
    until: Label | None = None
    #: the recipe builds the last chunk's MTP layers from the model's mtp_num_layers (Megatron-Bridge's
    #: DeepSeek-V3 layout_map: last_layer = ['mtp'] * mtp_num_layers + ['loss']); `layout` has the
    #: catalog model's count, and a model with another count gets that many
    mtp_from_model: Bool = False
    source: Source

    @model_validator(mode="after")
    def _layout_has_pp_times_vp_chunks(self) -> ModelPipelineLayout:
        """A layout that does not parse, or names another number of chunks than PP x VP, is a bad stack
        file, refused when the file is read rather than when a job happens to reach it."""
        try:
            chunks = len(parse_layout_string(self.layout))
        except InputError as exc:
            raise ValueError(exc.reason) from None
        if chunks != self.pp * self.vp:
            raise ValueError(f"layout {self.layout!r} has {chunks} chunks, not pp x vp = {self.pp * self.vp}")
        return self


class MegatronPin(Spec):
    """The Megatron-LM release a release of another Megatron-based framework runs (a tag of
    `stacks/megatron-lm.yaml`'s `release_names`): what `export --to megatron` writes for its jobs."""

    release: Label
    source: Source


class ReleaseSpec(Spec):
    release: Label
    source: Source
    settings: StackSettings
    #: the Megatron-LM this release runs (AMD Primus, Megatron-Bridge, NeMo); a later release without one
    #: keeps the earlier release's
    megatron_lm: MegatronPin | None = None
    #: said whenever a later, undescribed release resolves to this one (a release that describes a setup
    #: rather than the framework's defaults, such as megatron-lm@2022.05, the 2022 papers' runs)
    caveat: Text | None = None


class ReleaseName(Spec):
    """A framework's own name for a release (Megatron-LM's ``core_r0.14.0``) and the day it was cut:
    a stack labelled by months resolves the name as that day's month."""

    date: Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$")]
    source: Source


class StackFile(Spec):
    name: Label
    title: Text
    homepage: Text
    validate_sources: dict[SourcePrefix, Label | None] = Field(default_factory=dict)
    #: ground-truth flags that put a row on this stack whatever its source prefix (a benchmark
    #: collection such as DGX Cloud's ships recipes on more than one framework), with a pinned release
    validate_flags: dict[SourcePrefix, Label | None] = Field(default_factory=dict)
    releases: list[ReleaseSpec] = Field(min_length=1, max_length=200)
    release_names: dict[Label, ReleaseName] = Field(default_factory=dict)
    recipes: list[Recipe] = Field(default_factory=list, max_length=2000)
    pipeline_layouts: list[ModelPipelineLayout] = Field(default_factory=list, max_length=200)
