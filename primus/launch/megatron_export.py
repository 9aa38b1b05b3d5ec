"""A primus job as Megatron-LM arguments (by dest), refusing what Megatron-LM would refuse.

Values that Megatron's ``validate_args`` would reject are refused here with one line (a launch config
that cannot launch is worse than none); settings Megatron cannot express but which do not change
what is launched (a router bias, an overlap Megatron ties to another option) are dropped with a note.
"""

from __future__ import annotations

from typing import Any, Final

from primus.errors import InputError
from primus.job import Job
from primus.launch.megatron_args import MEGATRON_DEFAULTS
from primus.parallel import Layout
from primus.schedule.layout import parse_layout_string
from primus.solver.options import apply_options, unset_at_pp
from primus.specs.job import PipelineOptions

SHARDED = ("dist_opt", "zero2", "fsdp")
#: The job keys a Megatron argument list states (`runtime_args`), and those it adds for a MoE model: an
#: import reads them back from the arguments, so they need no `# primus-job:` header.
WRITTEN: Final = frozenset({"seq_len", "global_batch_size", "precision", "fp8_recipe", "fp8_param_gather",
                            "pipeline", "optimizer", "overlap", "kernels"})
WRITTEN_MOE: Final = frozenset({"moe.token_dispatcher", "moe.capacity_factor", "moe.permute_fusion",
                                "moe.grouped_gemm"})
GRAD_DTYPES = ("fp32", "bf16")


def yarn_as_rope(scaling: float | None, target: str) -> str:
    """The note of a YaRN model written for a Megatron that cannot build it from its arguments."""
    return (f"model.position_embedding_type yarn (scaling factor {scaling:g}) written as --position-embedding-type "
            f"rope --no-rope-fusion: {target} builds no YaRN for standard attention from its arguments "
            "(Megatron-LM does from core_v0.19.0, argument_utils.py `_apply_yarn_config_from_args`), and Megatron-LM's "
            "examples/gptoss/02_train.sh trains gpt-oss that way; the weights, saved bytes and the eager RoPE that "
            "Megatron runs for YaRN (which the projection prices) are the same, the frequency scaling is not written")
PARAM_DTYPES = ("fp32", "fp16")
MOMENT_DTYPES = ("fp32", "fp16", "bf16")


def model_args(job: Job) -> tuple[dict[str, Any], list[str]]:
    """The architecture arguments of the job's model. A window of W keys is Megatron's
    ``--window-size W-1,0`` (W-1 keys to the left plus the query's own position: Megatron-LM's
    examples/gptoss/02_train.sh writes ``127,0`` for gpt-oss's 128-token window)."""
    m, where = job.model, job.where
    notes: list[str] = []
    if m.position_embedding_type == "alibi":
        raise InputError(where, "model.position_embedding_type", "alibi has no Megatron-LM option")
    gqa = m.num_query_groups is not None and m.num_query_groups != m.num_attention_heads
    ns: dict[str, Any] = {
        "num_layers": m.num_layers, "hidden_size": m.hidden_size, "ffn_hidden_size": m.ffn_hidden_size,
        "num_attention_heads": m.num_attention_heads, "group_query_attention": gqa,
        "num_query_groups": m.num_query_groups if gqa else None, "kv_channels": m.kv_channels,
        "vocab_size": m.vocab_size, "make_vocab_size_divisible_by": m.make_vocab_size_divisible_by,
        # YaRN as RoPE with --no-rope-fusion (`YARN_AS_ROPE`); a release from YARN_FROM on writes it as itself
        # (`primus.launch.megatron_release_check.for_release`)
        "position_embedding_type": "rope" if m.position_embedding_type == "yarn" else m.position_embedding_type,
        "max_position_embeddings": _positions(job, notes),
        "untie_embeddings_and_output_weights": m.untie_embeddings_and_output_weights,
        "normalization": m.normalization, "swiglu": m.swiglu, "squared_relu": m.squared_relu,
        "add_bias_linear": m.add_bias_linear, "add_qkv_bias": m.add_qkv_bias,
        "qk_layernorm": m.qk_layernorm or m.multi_latent_attention,
        "attention_output_gate": m.attention_output_gate,
        "softmax_type": m.softmax_type, "hidden_dropout": m.hidden_dropout, "attention_dropout": m.attention_dropout,
        "activation_func_clamp_value": m.activation_func_clamp_value,
        "window_size": (m.window_size - 1, 0) if m.window_size else None,
        "window_attn_skip_freq": m.window_attn_skip_freq,
        "multi_latent_attention": m.multi_latent_attention, "mtp_num_layers": m.mtp_num_layers or None,
    }
    if m.rotary:
        # unset ones at Megatron's defaults (1.0, 8.0), which a Primus model file may state
        ns.update(rotary_base=m.rotary_base,
                  rotary_percent=m.rotary_percent or MEGATRON_DEFAULTS["rotary_percent"],
                  use_rope_scaling=m.rope_scaling_factor is not None,
                  rope_scaling_factor=m.rope_scaling_factor or MEGATRON_DEFAULTS["rope_scaling_factor"])
        if m.rotary_base is None:
            notes.append(f"--rotary-base not written: model {m.name} does not state its RoPE base (rotary_base; HF "
                         "rope_theta), so Megatron-LM's default 10000 runs; add the model's own")
    if m.is_moe:
        ns.update(num_experts=m.num_experts, moe_router_topk=m.moe_router_topk,
                  moe_ffn_hidden_size=m.moe_ffn_hidden_size,
                  moe_shared_expert_intermediate_size=m.moe_shared_expert_intermediate_size,
                  moe_layer_freq=m.moe_layer_freq)
    if m.multi_latent_attention:
        ns.update(q_lora_rank=m.q_lora_rank, kv_lora_rank=m.kv_lora_rank, qk_head_dim=m.qk_head_dim,
                  qk_pos_emb_head_dim=m.qk_pos_emb_head_dim, v_head_dim=m.v_head_dim)
        # MLA's YaRN (its default rope_type): written whenever the model states it, since Megatron-LM's default
        # for --mscale-all-dim changed (1.0 before core_v0.14.0, 0.0 on)
        ns.update({dest: value for dest, value in (("rotary_scaling_factor", m.mla_rotary_scaling_factor),
                                                   ("mscale", m.mla_mscale), ("mscale_all_dim", m.mla_mscale_all_dim))
                   if value is not None})
    if m.multi_latent_attention and not m.qk_layernorm:
        notes.append("--qk-layernorm written: with MLA it builds the q/kv latent norms that DeepSeek-V3's "
                     "architecture has and the ledger counts (Megatron-LM examples pass it)")
    if m.embedding_layernorm:
        notes.append("model.embedding_layernorm has no Megatron-LM option: the launch config omits it")
    if m.moe_router_bias:
        notes.append("model.moe_router_bias has no Megatron-LM option in this release: the launch config omits it")
    notes += [f"model.{name} has no Megatron-LM option here: the launch config omits it" for name, used in (
        ("norm_placement", m.norm_placement != "pre"),
        ("qk_layernorm_per_head", m.qk_layernorm and not m.qk_layernorm_per_head),
        ("qk_layernorm_affine", m.qk_layernorm and not m.qk_layernorm_affine),
        ("add_proj_bias", m.add_proj_bias and not m.add_bias_linear),
        ("output_layer_bias", m.output_layer_bias),
        ("moe_shared_expert_gate", m.moe_shared_expert_gate),
        ("scalings", bool(m.scalings)),
    ) if used]
    return ns, notes


def _split_options(job: Job, layout: Layout, notes: list[str]) -> PipelineOptions:
    """The pipeline split options the arguments carry: the job's, except at PP 1, where none survives
    (`primus.solver.options.unset_at_pp`: Megatron-LM builds the same one stage with or without them and
    refuses none of those a legal job holds there), so they are dropped and a note names each. Not
    refused on load: Megatron-LM runs such a job, and an imported argument line may carry them."""
    unset = unset_at_pp(job, layout.pp)
    if not unset:
        return job.pipeline_at(layout.pp, layout.vp)
    notes.append(", ".join(unset) + " dropped at PP 1: one stage builds the embedding, every layer and the loss, "
                 "the same with or without them")
    return apply_options(job, unset).spec.pipeline


def _positions(job: Job, notes: list[str]) -> int:
    """``--max-position-embeddings``: Megatron-LM's validate_args asserts it is at least the sequence
    length. A learned table shorter than the sequence is a job Megatron refuses; with RoPE (or no
    position embedding) the setting holds no weight, so it is raised to the sequence length (noted)."""
    m, seq = job.model, job.spec.seq_len
    if m.max_position_embeddings is None or m.max_position_embeddings >= seq:
        return m.max_position_embeddings or seq
    if m.position_embedding_type == "learned_absolute":
        raise InputError(job.where, "seq_len", f"{seq} is longer than the model's learned position table "
                         f"({m.max_position_embeddings} positions): Megatron-LM refuses it")
    notes.append(f"--max-position-embeddings {seq}: the model states {m.max_position_embeddings}, and Megatron-LM "
                 f"requires at least the sequence length ({m.position_embedding_type} positions hold no weight)")
    return seq


def runtime_args(job: Job, layout: Layout, fsdp: str,
                 primus: bool = False) -> tuple[dict[str, Any], list[str], set[str]]:
    """Parallelism, batch, precision, optimizer, MoE, overlap and kernel arguments. `primus`: the target
    is AMD Primus's Megatron, which keeps options Megatron-LM does not have (``recompute_layer_ids``,
    the legacy grouped GEMM)."""
    spec, m, where = job.spec, job.model, job.where
    notes: list[str] = []
    ns: dict[str, Any] = {"tensor_model_parallel_size": layout.tp, "pipeline_model_parallel_size": layout.pp}
    pipe = _split_options(job, layout, notes)
    # whitespace the job file may hold is dropped: Megatron-Core's parse_str_to_list removes only commas
    # and asserts on a space (NVIDIA/Megatron-LM 000c4ac pipeline_parallel_layer_layout.py lines 275-305)
    text = pipe.layout
    ns["pipeline_model_parallel_layout"] = None if text is None else "".join(text.split())
    ns["num_virtual_stages_per_pipeline_rank"] = None
    if text is not None:
        stages = len(parse_layout_string(text, where))
        if stages != layout.pp * layout.vp:
            raise InputError(where, "pipeline.layout", f"has {stages} stages but PP×VP is {layout.pp * layout.vp}")
    elif layout.vp > 1:
        ns["num_virtual_stages_per_pipeline_rank"] = layout.vp
    ns["context_parallel_size"] = layout.cp
    cpo = spec.context_parallel  # Megatron's default is p2p; another type is written as the job says
    ns["cp_comm_type"] = ([cpo.comm_type] * m.num_layers if cpo.per_layer_list
                          else None if cpo.comm_type == "p2p" else [cpo.comm_type])
    if m.is_moe:
        ns["expert_model_parallel_size"], ns["expert_tensor_parallel_size"] = layout.ep, layout.etp
    ns.update(sequence_parallel=layout.sp, micro_batch_size=layout.mbs, global_batch_size=spec.global_batch_size,
              seq_length=spec.seq_len)
    ns["recompute_granularity"] = None if layout.recompute == "none" else layout.recompute
    ns["recompute_method"] = ns["recompute_num_layers"] = None
    modules = spec.parallel.recompute_modules
    ns["recompute_modules"] = list(modules) if layout.recompute == "selective" and modules else None
    if layout.recompute == "full" and spec.parallel.recompute_layer_ids is not None:
        ns.update(_layer_ids(job, layout, primus))
    elif layout.recompute == "full":
        ns["recompute_method"] = spec.parallel.recompute_method or "uniform"
        ns["recompute_num_layers"] = layout.recompute_num_layers or 1
    ns.update(_sharding(job, layout, fsdp))
    ns.update(_precision(job))
    ns.update(decoder_first_pipeline_num_layers=pipe.decoder_first_pipeline_num_layers,
              decoder_last_pipeline_num_layers=pipe.decoder_last_pipeline_num_layers,
              account_for_embedding_in_pipeline_split=pipe.account_for_embedding_in_pipeline_split,
              account_for_loss_in_pipeline_split=pipe.account_for_loss_in_pipeline_split)
    ns.update(_optimizer(job))
    written = set(WRITTEN)
    if m.is_moe:
        capacity = spec.moe.capacity_factor
        # the flex dispatcher with DeepEP drops at capacity without padding (d98e8a6 transformer_config.py
        # lines 1754-1761 refuse the padding); primus still sizes padded buffers, an upper bound
        pad = capacity is not None and spec.moe.token_dispatcher != "flex"
        if capacity is not None and not pad:
            notes.append("moe_pad_expert_input_to_capacity not written: the flex (DeepEP) dispatcher refuses it and "
                         "drops tokens at the capacity factor unpadded; primus sizes padded buffers (an upper bound)")
        ns.update(moe_token_dispatcher_type=spec.moe.token_dispatcher, moe_expert_capacity_factor=capacity,
                  moe_pad_expert_input_to_capacity=pad, moe_permute_fusion=spec.moe.permutes_fused,
                  # without it Megatron-LM builds SequentialMLP, a loop over the local experts
                  moe_grouped_gemm=spec.moe.grouped_gemm != "sequential")
        if spec.moe.token_dispatcher == "flex" and not primus:
            # core_v0.14.0 token_dispatcher.py asserts it for flex; later releases accept it (deprecated)
            ns["moe_enable_deepep"] = True
        written |= WRITTEN_MOE
        # written when the release has it; a release without it refuses (`megatron_release_check`)
        ns["moe_use_legacy_grouped_gemm"] = spec.moe.grouped_gemm == "legacy"
        if spec.moe.grouped_gemm == "legacy":
            _check_legacy_gemm(job, layout)
        if spec.moe.grouped_gemm == "te_fused":
            notes.append("moe.grouped_gemm te_fused is not written: add --use-transformer-engine-op-fuser "
                         "(Megatron-LM core_v0.18.0 and later) and NVTE_CUTEDSL_FUSED_GROUPED_MLP=1 to the "
                         "environment (Megatron-Bridge's cutedsl_fused_grouped_mlp); without them the experts run "
                         "TEGroupedMLP")
        if spec.moe.sync_free and not primus:  # the header keeps it; the Primus export writes its stage
            notes.append(SYNC_FREE_NOT_IN_MEGATRON)
    ov = spec.overlap
    gather = ov.param_gather and layout.sharding in SHARDED
    if gather and not ov.grad_reduce:
        notes.append("overlap.param_gather dropped: Megatron-LM allows it only with --overlap-grad-reduce")
        gather = False
    if gather and fsdp == "torch" and layout.sharding == "fsdp":
        notes.append("overlap.param_gather dropped: Megatron-LM allows it only with the distributed optimizer or "
                     "Megatron FSDP, not torch FSDP2 (Primus's Megatron refuses it)")
        gather = False
    tp_comm = ov.tp_comm
    if tp_comm and not layout.sp:
        notes.append("overlap.tp_comm dropped: Megatron-LM overlaps TP communication only with sequence parallel")
        tp_comm = False
    ns.update(overlap_grad_reduce=ov.grad_reduce, overlap_param_gather=gather, tp_comm_overlap=tp_comm,
              overlap_moe_expert_parallel_comm=ov.moe_a2a and m.is_moe,
              attention_backend=spec.kernels.attention_backend if spec.kernels.flash_attention else "unfused",
              cross_entropy_loss_fusion=spec.kernels.cross_entropy_fusion,
              # Megatron runs its fused RoPE for position_embedding_type rope only (`KernelOptions.rope_fusion`);
              # YaRN, written as RoPE, runs without it; a model without rotary embeddings states nothing
              apply_rope_fusion=(spec.kernels.rope_fusion and m.position_embedding_type == "rope") if m.rotary
              else None,
              cross_entropy_fusion_impl="te" if spec.kernels.cross_entropy_fusion
              and spec.kernels.cross_entropy_fusion_impl == "te" else None)
    return ns, notes, written


#: Sync-free MoE (the token counts kept on the device) is AMD Primus-Turbo's (turbo_sync_free_moe_stage 2-3),
#: not a Megatron-LM option; its fused permutation, which stage 1 turns on, is (--moe-permute-fusion).
SYNC_FREE_NOT_IN_MEGATRON: Final = (
    "moe.sync_free not written: sync-free MoE is AMD Primus-Turbo's (turbo_sync_free_moe_stage), which Megatron-LM "
    "does not have; the launched run waits for the token counts on the host once per MoE layer forward "
    "(host.moe_layer_us), which this job's projection leaves out (export --to primus writes the stage)")

def _check_legacy_gemm(job: Job, layout: Layout) -> None:
    """Megatron-Core's GroupedMLP refuses to recompute its activation under FP8 (core_v0.14.0
    megatron/core/transformer/moe/experts.py line 136: "moe_act recompute for fp8 cannot work with the legacy
    GroupedMLP"), so such a launch would stop at model construction."""
    modules = job.spec.parallel.recompute_modules or ()
    if job.spec.precision not in ("bf16", "fp16") and layout.recompute == "selective" and "moe_act" in modules:
        raise InputError(job.where, "parallel.recompute_modules",
                         f"moe_act cannot be recomputed with moe.grouped_gemm legacy under {job.spec.precision}: "
                         "Megatron-Core's GroupedMLP refuses it (core_v0.14.0 experts.py line 136)")


def _layer_ids(job: Job, layout: Layout, primus: bool) -> dict[str, Any]:
    """Full recompute of the listed layers (``parallel.recompute_layer_ids``). AMD Primus takes the list
    itself, with ``recompute_method`` unset (its patches/recompute_layer_patches.py refuses a method
    beside the list). Megatron-LM has no such option: the list is written as ``--recompute-method block
    --recompute-num-layers K`` when it is exactly the first K layers of every pipeline chunk (what block
    recomputes, each layer from its own checkpoint), and refused otherwise: another set of recomputed
    layers is another job."""
    ids = job.spec.parallel.recompute_layer_ids or ()
    if primus:
        return {"recompute_layer_ids": list(ids), "recompute_method": None, "recompute_num_layers": None}
    from primus.memory.recompute import recomputed_mask
    from primus.memory.shapes import split_layout

    playout, _ = split_layout(job.model, job.pipeline_at(layout.pp, layout.vp), layout.pp, layout.vp)
    chunks = [playout.decoder_layers(c) for c in range(layout.pp * playout.vp)]
    listed = frozenset(ids)
    wanted = [recomputed_mask(layers, "block", None, listed) for layers in chunks]
    for k in range(1, max(len(layers) for layers in chunks) + 1):
        if wanted == [recomputed_mask(layers, "block", k, None) for layers in chunks]:
            return {"recompute_method": "block", "recompute_num_layers": k}
    raise InputError(job.where, "parallel.recompute_layer_ids",
                     "Megatron-LM has no option for a list of recomputed layers (AMD Primus's recompute_layer_ids), "
                     "and this list is not the first K layers of every pipeline chunk (--recompute-method block): "
                     "export --to primus, or recompute by method")


def _sharding(job: Job, layout: Layout, fsdp: str) -> dict[str, Any]:
    ns: dict[str, Any] = {"use_distributed_optimizer": layout.sharding == "dist_opt", "use_torch_fsdp2": False,
                          "use_megatron_fsdp": False, "data_parallel_sharding_strategy": None}
    if layout.sharding == "fsdp" and fsdp == "torch":
        if layout.pp > 1 or layout.ep > 1:
            raise InputError(job.where, "parallel.sharding",
                             "fsdp: Megatron-LM's torch FSDP2 supports neither pipeline nor expert parallelism")
        if not job.model.untie_embeddings_and_output_weights:
            raise InputError(job.where, "parallel.sharding", "fsdp: Megatron-LM's torch FSDP2 needs untied embeddings")
        if job.spec.optimizer.precision_aware:
            # core_v0.18.0 arguments.py line 1017 (torch FSDP2 asserts no distributed optimizer) and
            # optimizer_config.py lines 428-430 (the precision-aware optimizer asserts one)
            raise InputError(job.where, "optimizer", "states below fp32 need the distributed optimizer, which "
                             "Megatron-LM's torch FSDP2 refuses")
        ns.update(use_torch_fsdp2=True, gradient_accumulation_fusion=False)
    elif layout.sharding in ("fsdp", "zero2"):
        strategy = "optim_grads_params" if layout.sharding == "fsdp" else "optim_grads"
        ns.update(use_megatron_fsdp=True, data_parallel_sharding_strategy=strategy, ckpt_format="fsdp_dtensor")
    return ns


def _precision(job: Job) -> dict[str, Any]:
    precision = job.spec.precision
    return {"bf16": precision != "fp16", "fp16": precision == "fp16",
            "fp8": "hybrid" if precision == "fp8" else None,
            "fp8_recipe": job.spec.fp8_recipe if precision == "fp8" else None,
            "fp8_param_gather": True if precision == "fp8" and job.spec.fp8_param_gather else None,
            "fp4": "e2m1" if precision == "nvfp4" else None}


def _optimizer(job: Job) -> dict[str, Any]:
    o, where = job.spec.optimizer, job.where
    accumulate = None
    if job.spec.precision == "fp16":
        # Megatron's --fp16 keeps fp16 gradients; fp32 ones are --accumulate-allreduce-grads-in-fp32 (arguments.py
        # core_v0.15.0 lines 733-745 apply --grad-reduce-in-bf16 under --bf16 only)
        if o.main_grads_dtype not in ("fp16", "fp32"):
            raise InputError(where, "optimizer.main_grads_dtype", f"{o.main_grads_dtype} with precision fp16 is not a "
                             "Megatron-LM choice: --fp16 reduces gradients in fp16, or in fp32 with "
                             "--accumulate-allreduce-grads-in-fp32")
        accumulate = o.main_grads_dtype == "fp32"
        o = o.model_copy(update={"main_grads_dtype": "fp32"})  # checked above; the rest as for bf16
    for name, value, allowed in (("main_grads_dtype", o.main_grads_dtype, GRAD_DTYPES),
                                 ("main_params_dtype", o.main_params_dtype, PARAM_DTYPES),
                                 ("exp_avg_dtype", o.exp_avg_dtype, MOMENT_DTYPES),
                                 ("exp_avg_sq_dtype", o.exp_avg_sq_dtype, MOMENT_DTYPES)):
        if value not in allowed:
            raise InputError(where, f"optimizer.{name}", f"{value} is not a Megatron-LM choice ({', '.join(allowed)})")
    ns: dict[str, Any] = {"use_precision_aware_optimizer": False, "grad_reduce_in_bf16": False}
    if accumulate is not None:
        ns["accumulate_allreduce_grads_in_fp32"] = accumulate
    if not o.precision_aware:
        ns["grad_reduce_in_bf16"] = o.main_grads_dtype == "bf16"
    else:
        ns.update(use_precision_aware_optimizer=True, main_grads_dtype=o.main_grads_dtype,
                  main_params_dtype=o.main_params_dtype, exp_avg_dtype=o.exp_avg_dtype,
                  exp_avg_sq_dtype=o.exp_avg_sq_dtype)
    return ns
