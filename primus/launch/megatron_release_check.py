"""A Megatron-LM argument line in the arguments of the one release it is written for.

`primus.stacks.megatron_release.megatron_target` names the release; this module makes the argument
mapping that release's: an argument the release spells differently is written its way, and an argument it
does not have is bad input (one line: the job file, the job field that needs it, the release and why),
never a line the release's argparse stops at ("unrecognized arguments").
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from primus.errors import InputError
from primus.job import Job
from primus.launch.megatron_args import BY_DEST
from primus.launch.megatron_export import yarn_as_rope
from primus.parallel import Layout
from primus.stacks.megatron_release import (
    FP16_MOE_FROM,
    GROUPED_MLP_REMOVED_IN,
    OPTION_WINDOWS,
    VALUE_WINDOWS,
    YARN_FROM,
    MegatronTarget,
    has_option,
    has_value,
)

#: The job field that makes the export write an argument (the architecture arguments come from `model`).
FIELD_OF: Final = {
    "num_virtual_stages_per_pipeline_rank": "parallel.vp", "expert_tensor_parallel_size": "parallel.etp",
    "recompute_modules": "parallel.recompute_modules", "use_torch_fsdp2": "parallel.sharding",
    "use_megatron_fsdp": "parallel.sharding", "data_parallel_sharding_strategy": "parallel.sharding",
    "ckpt_format": "parallel.sharding", "fp8_recipe": "fp8_recipe", "fp4": "precision", "fp4_recipe": "precision",
    "fp8_param_gather": "fp8_param_gather", "pipeline_model_parallel_layout": "pipeline.layout",
    "decoder_first_pipeline_num_layers": "pipeline.decoder_first_pipeline_num_layers",
    "decoder_last_pipeline_num_layers": "pipeline.decoder_last_pipeline_num_layers",
    "account_for_embedding_in_pipeline_split": "pipeline.account_for_embedding_in_pipeline_split",
    "account_for_loss_in_pipeline_split": "pipeline.account_for_loss_in_pipeline_split",
    "use_precision_aware_optimizer": "optimizer", "main_grads_dtype": "optimizer.main_grads_dtype",
    "main_params_dtype": "optimizer.main_params_dtype", "exp_avg_dtype": "optimizer.exp_avg_dtype",
    "exp_avg_sq_dtype": "optimizer.exp_avg_sq_dtype", "grad_reduce_in_bf16": "optimizer.main_grads_dtype",
    "moe_use_legacy_grouped_gemm": "moe.grouped_gemm", "moe_permute_fusion": "moe.permute_fusion",
    "moe_enable_deepep": "moe.token_dispatcher", "moe_token_dispatcher_type": "moe.token_dispatcher",
    "overlap_moe_expert_parallel_comm": "overlap.moe_a2a",
    "attention_backend": "kernels.flash_attention", "cross_entropy_fusion_impl": "kernels.cross_entropy_fusion_impl",
    "use_rope_scaling": "model.rope_scaling_factor", "rope_scaling_factor": "model.rope_scaling_factor",
}


#: MLATransformerConfig's mscale and mscale_all_dim before Megatron-LM had arguments for them (core_v0.10.0)
MLA_MSCALE_BEFORE_ARGS = 0.707


def for_release(job: Job, layout: Layout, ns: dict[str, Any], target: MegatronTarget,
                writes: Callable[[str, Any], bool]) -> tuple[dict[str, Any], list[str]]:
    """The arguments `ns` (dest -> value) in `target`'s spelling, and notes; refuses (InputError) what the
    release cannot parse or asserts against. `writes(dest, value)`: whether the line states it."""
    out, notes = dict(ns), []
    where = job.where
    if job.model.is_moe and job.spec.precision == "fp16" and target.before(FP16_MOE_FROM):
        raise InputError(where, "precision", f"fp16 with MoE layers: Megatron-LM {target.tag} ({target.why}) asserts "
                         "'GroupedGEMM for MoE only supports bf16' and 'Expert parallelism is not supported with fp16' "
                         f"(NVIDIA/Megatron-LM #2495, 4193f3aa9b, removed both in {FP16_MOE_FROM}): use bf16")
    if job.model.position_embedding_type == "yarn":
        if target.before(YARN_FROM):
            notes.append(yarn_as_rope(job.model.yarn_rotary_scaling_factor, f"Megatron-LM {target.tag}"))
        else:  # the release's own YaRN: it turns RoPE fusion off for any type but rope itself
            out.update(position_embedding_type="yarn", rotary_scaling_factor=job.model.yarn_rotary_scaling_factor,
                       apply_rope_fusion=None)
    if not has_option(target.tag, "--mscale"):
        # before core_v0.11.0 MLA's mscales are MLATransformerConfig's own, 0.707 and 0.707 (core_v0.10.0
        # transformer_config.py lines 633-636): a model with those needs no argument, any other is refused below
        for dest in ("mscale", "mscale_all_dim"):
            if out.get(dest) == MLA_MSCALE_BEFORE_ARGS:
                out.pop(dest)
    vp = out.get("num_virtual_stages_per_pipeline_rank")
    if vp and not has_option(target.tag, "--num-virtual-stages-per-pipeline-rank"):
        # before core_v0.11.0 interleaving is given in layers per virtual stage, an even split only
        chunks = layout.pp * vp
        if job.model.num_layers % chunks:
            raise InputError(where, "parallel.vp", f"{vp}: Megatron-LM {target.tag} ({target.why}) interleaves by "
                             f"--num-layers-per-virtual-pipeline-stage, and {job.model.num_layers} layers do not split "
                             f"evenly over PP x VP = {chunks} chunks")
        out = {("num_layers_per_virtual_pipeline_stage" if k == "num_virtual_stages_per_pipeline_rank" else k):
               (job.model.num_layers // chunks if k == "num_virtual_stages_per_pipeline_rank" else v)
               for k, v in out.items()}
        notes.append(f"--num-layers-per-virtual-pipeline-stage {job.model.num_layers // chunks} written for VP {vp}: "
                     f"Megatron-LM {target.tag} has no --num-virtual-stages-per-pipeline-rank (core_v0.11.0 added it)")
    if out.get("fp8_recipe") == "delayed" and not has_option(target.tag, "--fp8-recipe"):
        out["fp8_recipe"] = None  # before --fp8-recipe, FP8 in Megatron-LM was delayed scaling only
        notes.append(f"--fp8-recipe not written: Megatron-LM {target.tag} has no such argument (core_v0.12.0 added "
                     "it); its FP8 is delayed scaling, this job's recipe")
    moe_ffn = out.get("moe_ffn_hidden_size")
    if moe_ffn is not None and out.get("ffn_hidden_size") in (None, moe_ffn) \
            and not has_option(target.tag, "--moe-ffn-hidden-size"):
        # before core_v0.10.0 the experts are --ffn-hidden-size wide: a model without dense MLP layers (Mixtral)
        # states its expert width there, as core_v0.8.0's examples/mixtral/train_mixtral_8x7b_distributed.sh
        # does (--ffn-hidden-size 14336 --num-experts 8); a dense MLP of another width has no spelling
        out.update(ffn_hidden_size=moe_ffn, moe_ffn_hidden_size=None)
    if out.get("expert_tensor_parallel_size") == layout.tp \
            and not has_option(target.tag, "--expert-tensor-parallel-size"):
        out["expert_tensor_parallel_size"] = None  # before core_v0.10.0 the experts always run at the dense TP
    for dest, value in out.items():
        if dest not in BY_DEST or not writes(dest, value):
            continue
        flag = BY_DEST[dest].flag
        field = "kernels.attention_backend" if dest == "attention_backend" and value in ("flash", "fused") \
            else FIELD_OF.get(dest, "model")
        if not has_option(target.tag, flag):
            raise InputError(where, field, _missing(flag, value, target))
        if isinstance(value, str) and not has_value(target.tag, flag, value):
            since = VALUE_WINDOWS[(flag, value)][0]
            raise InputError(where, field,
                             f"needs {flag} {value}, which Megatron-LM {target.tag} ({target.why}) does not take (its "
                             f"argparse choices have it from {since}); name a release that has it "
                             "(--stack megatron-lm@RELEASE)")
    return out, notes


def _missing(flag: str, value: Any, target: MegatronTarget) -> str:
    since, until = OPTION_WINDOWS[flag]
    if flag == "--moe-use-legacy-grouped-gemm" and until is not None and not target.before(until):
        return (f"legacy: Megatron-LM {target.tag} ({target.why}) has no GroupedMLP and no {flag} (NVIDIA/Megatron-LM "
                f"#3410, 2caa681a1d, removed them in {GROUPED_MLP_REMOVED_IN}); use grouped_gemm te, export --to "
                "primus (AMD Primus keeps GroupedMLP), or a Megatron-LM release before it "
                "(--stack megatron-lm@core_v0.16.1)")
    when = f"removed in {until}" if until is not None and not target.before(until) else f"added in {since}"
    return (f"needs {flag}, which Megatron-LM {target.tag} ({target.why}) does not have ({when}): its launch would "
            "stop at 'unrecognized arguments'; name a release that has it (--stack megatron-lm@RELEASE)")
