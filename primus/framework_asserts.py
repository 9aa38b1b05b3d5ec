"""Jobs the framework itself refuses at start-up, whatever the layout: bad input at load (one line, exit
2), so that `fit` never proves them and `export` never writes them.

Each check is a framework assertion on the job's own options (the model, the precision, the MoE
implementation), not on a parallel axis the search could change; assertions that depend on an axis are
rules in `constraints/`.
"""

from __future__ import annotations

from primus.errors import InputError
from primus.specs.job import JobSpec
from primus.specs.model import ModelSpec
from primus.stacks.core import Stack
from primus.stacks.megatron_release import (
    CP_COMM_TYPE_FROM,
    CP_PER_LAYER_LIST_FROM,
    FP16_MOE_FROM,
    GROUPED_MLP_REMOVED_IN,
    STOCK_MEGATRON_CORE,
    TE_FUSED_EXPERTS_FROM,
    TE_GROUPED_BIAS_REFUSED,
    MegatronTarget,
    megatron_target,
)


def check_framework_asserts(spec: JobSpec, model: ModelSpec, stack: Stack, where: str) -> None:
    """Refuse a job whose options the framework asserts against (see the module docstring)."""
    _context_parallel_asserts(spec, stack, where)
    if spec.kernels.attention_backend != "auto" and spec.framework != "megatron":
        raise InputError(where, "kernels.attention_backend",
                         f"{spec.kernels.attention_backend} is Megatron's --attention-backend; {spec.framework} runs "
                         "its own attention kernel: drop it")
    if not model.is_moe:
        return
    moe = spec.moe
    if moe.grouped_gemm == "legacy" and moe.sync_free:
        # AMD Primus fd1eeab primus/backends/megatron/patches/args/rocm_arg_validation.py lines 190-205:
        # sync-free stage 2 or 3 requires use_turbo_grouped_gemm, which raises "incompatible" beside
        # moe_use_legacy_grouped_gemm (and transformer_engine_spec_provider.py lines 244-246 asserts it)
        raise InputError(where, "moe.grouped_gemm",
                         "legacy cannot run sync-free MoE (moe.sync_free: AMD Primus's stage 2 needs Primus-Turbo's "
                         "grouped GEMM, which Primus refuses beside the legacy one): use grouped_gemm te or drop "
                         "sync_free")
    if moe.grouped_gemm == "sequential" and spec.framework != "megatron":
        raise InputError(where, "moe.grouped_gemm",
                         f"sequential is Megatron-Core's SequentialMLP; {spec.framework}'s experts run grouped "
                         "GEMMs: use grouped_gemm te")
    if moe.grouped_gemm == "sequential" and moe.sync_free:
        # Primus fd1eeab rocm_arg_validation.py lines 202-205: stage 2 or 3 requires PrimusTurboGroupedLinear
        # (use_turbo_grouped_gemm), a grouped linear; SequentialMLP splits its rows on host-side counts
        # (experts.py `tokens_per_expert.tolist()`), which is what sync-free MoE removes
        raise InputError(where, "moe.grouped_gemm",
                         "sequential cannot run sync-free MoE (moe.sync_free: AMD Primus's stage 2 needs "
                         "Primus-Turbo's grouped linear, and SequentialMLP splits its rows on host-side counts): "
                         "use grouped_gemm te or drop sync_free")
    if moe.grouped_gemm == "legacy" and model.add_bias_linear:
        # NVIDIA/Megatron-LM 000c4ac megatron/core/transformer/moe/experts.py lines 116-118 (GroupedMLP):
        # assert config.add_bias_linear == False, "bias not supported in Grouped GEMM yet"
        raise InputError(where, "moe.grouped_gemm",
                         f"legacy cannot build {model.name}'s expert biases (add_bias_linear): Megatron-Core's "
                         "GroupedMLP asserts add_bias_linear == False; use grouped_gemm te")
    if moe.grouped_gemm == "te_fused" and (spec.framework != "megatron" or spec.precision != "fp8"
                                           or spec.effective_fp8_recipe != "mxfp8"):
        # TE v2.16 transformer_engine/pytorch/ops/fused/forward_grouped_mlp.py lines 34-102: the CuTe-DSL
        # fused grouped MLP takes MXFP8 quantizers only; in another format Megatron-Core core_v0.18.0 runs
        # TE's unfused fuser ops instead, which primus does not model
        raise InputError(where, "moe.grouped_gemm",
                         "te_fused (Transformer Engine's fused grouped MLP) runs only Megatron's MXFP8 experts: "
                         "set precision fp8 with fp8_recipe mxfp8, or use grouped_gemm te")
    target = _release(stack, where) if stack.name in STOCK_MEGATRON_CORE else None
    if moe.grouped_gemm == "te_fused" and target is not None and target.before(TE_FUSED_EXPERTS_FROM):
        raise InputError(where, "moe.grouped_gemm", f"te_fused needs Megatron-LM {TE_FUSED_EXPERTS_FROM} or later "
                         f"(use_transformer_engine_op_fuser in its experts), not {target.tag}; use grouped_gemm te")
    if moe.grouped_gemm == "te" and model.add_bias_linear and target is not None \
            and not target.before(TE_GROUPED_BIAS_REFUSED[0]) and target.before(TE_GROUPED_BIAS_REFUSED[1]):
        raise InputError(where, "moe.grouped_gemm",
                         f"te cannot build {model.name}'s expert biases (add_bias_linear) on {stack.asked}'s "
                         f"Megatron-LM, {target.tag}: its TEGroupedMLP asserts 'bias not supported in TEGroupedMLP "
                         f"yet' ({TE_GROUPED_BIAS_REFUSED[0]} to {target.tag}; NVIDIA/Megatron-LM a329dd6da5 lifted it "
                         f"in {TE_GROUPED_BIAS_REFUSED[1]}): name a later release")
    if moe.grouped_gemm == "legacy" and target is not None and not target.before(GROUPED_MLP_REMOVED_IN):
        raise InputError(where, "moe.grouped_gemm", legacy_gemm_removed(stack.asked, target))
    if spec.precision == "fp16" and stack.name == "megatron-lm" and target is not None \
            and target.before(FP16_MOE_FROM):
        # Megatron-Core without Megatron-LM's launcher (NeMo, Megatron-Bridge) never ran these asserts, and AMD
        # Primus's pinned Megatron-LM (d3528a2) holds #2495
        raise InputError(where, "precision",
                         f"fp16 with MoE layers is refused by {stack.asked}'s Megatron-LM, {target.tag}: validate_args "
                         "asserts grouped GEMM only in bf16 and no expert parallelism in fp16 (removed by #2495, "
                         f"4193f3aa9b, first tagged {FP16_MOE_FROM}): use bf16 or a later release")


def _context_parallel_asserts(spec: JobSpec, stack: Stack, where: str) -> None:
    """`context_parallel.comm_type` names Megatron-Core's --cp-comm-type: other frameworks' context parallelism
    is their own (torchtitan's is PyTorch's ring attention), and releases before it have only the p2p ring."""
    cp = spec.context_parallel
    comm = cp.comm_type
    if comm == "p2p" and not cp.per_layer_list:
        return
    if spec.framework != "megatron":
        raise InputError(where, "context_parallel.comm_type",
                         f"{comm} is Megatron-Core's --cp-comm-type; {spec.framework}'s context parallelism is "
                         "PyTorch's (context_parallel_rotate_method), which primus times as the ring exchange: drop "
                         "the key")
    if stack.name not in STOCK_MEGATRON_CORE and stack.name != "primus":
        raise InputError(where, "context_parallel.comm_type",
                         f"{comm} is Megatron-Core's --cp-comm-type ({CP_COMM_TYPE_FROM} on), which {stack.asked} does "
                         "not run: use p2p")
    target = _release(stack, where) if stack.name in STOCK_MEGATRON_CORE else None
    if stack.name in STOCK_MEGATRON_CORE and (target is None or target.before(CP_COMM_TYPE_FROM)):
        tag = target.tag if target is not None else "a release before every one primus has read (core_v0.8.0)"
        raise InputError(where, "context_parallel.comm_type",
                         f"{comm} needs Megatron-LM {CP_COMM_TYPE_FROM} or later (--cp-comm-type), not {tag}, whose "
                         "context parallelism is the p2p ring only: use p2p or name a later release")
    if cp.per_layer_list and target is not None and target.before(CP_PER_LAYER_LIST_FROM):
        raise InputError(where, "context_parallel.per_layer_list",
                         f"{stack.asked}'s Megatron-LM, {target.tag}, indexes a per-layer --cp-comm-type list from 1 "
                         "and raises IndexError at the last layer (fixed by d3a8584533, #3389, in "
                         f"{CP_PER_LAYER_LIST_FROM}): give the type once")


def _release(stack: Stack, where: str) -> MegatronTarget | None:
    """The Megatron-LM release the stack runs; None for one older than every release primus has read (an
    export refuses it; no assert here is known for it)."""
    try:
        return megatron_target(stack, where)
    except InputError:
        return None


def legacy_gemm_removed(label: str, target: MegatronTarget) -> str:
    """Why `label`, on Megatron-LM `target`, cannot run the legacy grouped GEMM, and what can."""
    return (f"legacy cannot run on {label}: its Megatron-LM, {target.tag}, has no GroupedMLP and no "
            f"--moe-use-legacy-grouped-gemm (NVIDIA/Megatron-LM #3410, 2caa681a1d, removed them in "
            f"{GROUPED_MLP_REMOVED_IN}); use grouped_gemm te, a release before {GROUPED_MLP_REMOVED_IN} "
            "(megatron-lm@core_v0.16.1), or AMD Primus (stack primus, export --to primus), which keeps GroupedMLP")
