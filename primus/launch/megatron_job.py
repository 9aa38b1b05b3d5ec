"""Megatron-LM arguments (by argparse dest) to a primus job and back: the semantics the Megatron
argument line and the Primus YAML share. Each rule below is Megatron's own (arguments.py
``validate_args``): SP is switched off at TP 1, ETP defaults to TP, ``--recompute-activations`` means
selective, ``--num-layers-per-virtual-pipeline-stage`` counts the embedding/loss when they are
accounted in the split, ``--overlap-param-gather`` needs the distributed optimizer and
``--overlap-grad-reduce``, ``--tp-comm-overlap`` needs SP.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from primus.catalog.models import resolve_model
from primus.errors import InputError, shown
from primus.job import Job
from primus.launch.arch import (
    SHAPE_IGNORED,
    VOCAB_FIELDS,
    build_model,
    catalog_matches,
    catalog_spec,
    differences,
    model_reference,
    spec_fields,
)
from primus.launch.common import Collector, data_parallel
from primus.launch.megatron_args import MEGATRON_DEFAULTS
from primus.launch.megatron_export import model_args, runtime_args
from primus.launch.rope import ROPE_DESTS, file_rope, model_rope, rope_note, with_rope
from primus.launch.tokenizers import vocab_from_tokenizer
from primus.memory.recompute import RECOMPUTE_MODULES
from primus.parallel import Layout
from primus.schedule.layout import parse_layout_string
from primus.specs.job import STAGE_SIZE_OPTIONS, split_conflict
from primus.specs.model import ModelSpec

SHARDED = ("dist_opt", "zero2", "fsdp")
#: Model fields with no Megatron-LM option: the header's model decides them.
INEXPRESSIBLE = ("moe_router_bias", "embedding_layernorm")
#: What a YaRN model written as RoPE (`primus.launch.megatron_export.yarn_as_rope`) does not state.
YARN_FIELDS = ("position_embedding_type", "yarn_rotary_scaling_factor")
_FSDP_STRATEGY = {"optim_grads_params": "fsdp", "optim_grads": "zero2", "optim": "dist_opt", "no_shard": "none"}


@dataclass(frozen=True)
class ImportContext:
    where: str
    world: int
    defaults: Mapping[str, Any]
    label: Callable[[str], str]
    base: ModelSpec | None = None  # the architecture a Primus model file stands for
    header_model: Any = None
    prefer: tuple[str, ...] = ()
    model_name: str | None = None  # what the file calls the model (header, tokenizer id, file name)
    recompute_layer_ids: tuple[int, ...] | None = None  # AMD Primus's list of fully recomputed layers
    world_source: str | None = None  # where the world size was read (Cluster.source)
    gpus_per_node: int | None = None


class ArgReader:
    """Reads dests, recording which were used; an absent (or null) dest reads as the default."""

    def __init__(self, ns: Mapping[str, Any], ctx: ImportContext) -> None:
        self.ns, self.ctx = ns, ctx
        self.consumed: set[str] = set()

    def has(self, dest: str) -> bool:
        return self.ns.get(dest) is not None

    def get(self, dest: str) -> Any:
        if dest in self.ns:
            self.consumed.add(dest)
            if self.ns[dest] is not None:
                return self.ns[dest]
        return self.ctx.defaults.get(dest, MEGATRON_DEFAULTS.get(dest))

    def pos(self, dest: str, required: bool = False) -> int | None:
        value = self.get(dest)
        if value is None:
            if required:
                raise InputError(self.ctx.where, self.ctx.label(dest), "is required (Megatron-LM has no default)")
            return None
        if value < 1:
            raise InputError(self.ctx.where, self.ctx.label(dest), f"must be >= 1, got {value}")
        return int(value)


#: Megatron-LM's validate_args copies --encoder-num-layers into --num-layers and --encoder-seq-length into
#: --seq-length when only the encoder's is given, and asserts that both are not (core_v0.18.0
#: megatron/training/arguments.py lines 1255-1262 and 1292-1297; the same in core_v0.8.0 to core_v0.19.0).
ENCODER_ALIASES: Final = {"encoder_num_layers": "num_layers", "encoder_seq_length": "seq_length"}


def _aliased(ns: Mapping[str, Any], ctx: ImportContext) -> tuple[Mapping[str, Any], set[str]]:
    """`ns` with each encoder alias read as the option validate_args copies it to (`ENCODER_ALIASES`), and the
    aliases so read."""
    moved = {alias: dest for alias, dest in ENCODER_ALIASES.items() if ns.get(alias) is not None}
    if not moved:
        return ns, set()
    out = dict(ns)
    for alias, dest in moved.items():
        if ns.get(dest) is not None:
            raise InputError(ctx.where, ctx.label(alias), f"and {ctx.label(dest)} together are refused by Megatron-LM "
                             "(validate_args: 'cannot have both ...')")
        out[dest] = out.pop(alias)
    return out, set(moved)


def _transformer_impl(r: ArgReader) -> None:
    """Refuse the modules primus does not model: Megatron-LM's local spec (--transformer-impl local, or
    inference_optimized) builds unfused DotProductAttention and none of Transformer Engine's kernels
    (core_v0.18.0 gpt_builders.py: use_te only for transformer_engine; megatron/core/models/backends.py
    LocalSpecProvider), and --use-legacy-models builds megatron/legacy/model; the ledger and the projection
    are Megatron-Core's with Transformer Engine, so either would be proven as another job."""
    impl = r.get("transformer_impl")
    if impl != "transformer_engine":
        raise InputError(r.ctx.where, r.ctx.label("transformer_impl"),
                         f"{shown(impl)}: Megatron-LM then builds its local spec (unfused attention, no Transformer "
                         "Engine kernels), which primus does not model; primus models transformer_engine")
    if r.get("use_legacy_models"):
        raise InputError(r.ctx.where, r.ctx.label("use_legacy_models"),
                         "builds Megatron-LM's legacy models (megatron/legacy/model), which primus does not model; "
                         "primus models Megatron-Core's")


def job_from_args(ns: Mapping[str, Any], ctx: ImportContext, out: Collector) -> tuple[dict[str, Any], set[str]]:
    """The job mapping (without hardware and size) the arguments describe, and the dests used."""
    ns, aliases = _aliased(ns, ctx)
    r = ArgReader(ns, ctx)
    r.consumed |= aliases
    _transformer_impl(r)
    model_ref, model = _model(r, ctx, out)
    job: dict[str, Any] = {"model": model_ref}
    job["seq_len"] = r.pos("seq_length", required=True)
    parallel = _parallel(r, ctx, model, out)
    gbs = r.pos("global_batch_size")
    if gbs is None:
        gbs = parallel["mbs"] * parallel["dp"]
        out.note(f"no global batch size: Megatron-LM's default micro-batch × DP = {gbs}")
    job["global_batch_size"] = gbs
    job.update(_precision(r, ctx, out))
    job["parallel"] = parallel
    pipeline = {k: v for k, v in (
        ("layout", r.get("pipeline_model_parallel_layout")),
        ("decoder_first_pipeline_num_layers", r.get("decoder_first_pipeline_num_layers")),
        ("decoder_last_pipeline_num_layers", r.get("decoder_last_pipeline_num_layers")),
        ("account_for_embedding_in_pipeline_split", r.get("account_for_embedding_in_pipeline_split") or None),
        ("account_for_loss_in_pipeline_split", r.get("account_for_loss_in_pipeline_split") or None)) if v}
    _one_split_mechanism(pipeline, ctx)
    _even_split_note(r, model, parallel, pipeline, out)
    if pipeline:
        job["pipeline"] = pipeline
    optimizer = _optimizer(r, out)
    if optimizer:
        job["optimizer"] = optimizer
    if model.is_moe:
        job["moe"] = _moe(r, out)
    sharded = parallel["sharding"] in SHARDED
    overlap = {"grad_reduce": bool(r.get("overlap_grad_reduce")), "tp_comm": bool(r.get("tp_comm_overlap")),
               "moe_a2a": bool(r.get("overlap_moe_expert_parallel_comm"))}
    if r.ns.get("overlap_param_gather") and not overlap["grad_reduce"]:
        # every release: core_v0.8.0 arguments.py lines 279-283 ('--overlap-grad-reduce should be turned on when
        # using --overlap-param-gather'), core_v0.18.0 lines 1003-1008 ('Must use --overlap-param-gather with
        # --overlap-grad-reduce')
        raise InputError(ctx.where, ctx.label("overlap_param_gather"),
                         f"without {ctx.label('overlap_grad_reduce')} is refused by Megatron-LM (validate_args)")
    if r.ns.get("overlap_param_gather") and (not sharded or r.get("use_torch_fsdp2")):
        # core_v0.18.0 arguments.py lines 1003-1005: use_distributed_optimizer or use_megatron_fsdp (torch FSDP2 is
        # neither)
        raise InputError(ctx.where, ctx.label("overlap_param_gather"),
                         "without the distributed optimizer or Megatron FSDP (torch FSDP2 is neither) is refused by "
                         "Megatron-LM (validate_args: '--overlap-param-gather only supported with distributed "
                         "optimizer, megatron fsdp, or dist_muon')")
    if sharded:
        overlap["param_gather"] = bool(r.get("overlap_param_gather"))
    elif r.ns.get("overlap_param_gather") is False:
        r.get("overlap_param_gather")  # off, and meaningless without a sharded optimizer
    job["overlap"] = overlap
    backend = str(r.get("attention_backend"))
    stated = backend  # what --attention-backend says; --use-flash-attn alone leaves the backend to Megatron
    if r.get("use_flash_attn"):
        backend = "flash" if backend == "auto" else backend
    fused_loss = bool(r.get("cross_entropy_loss_fusion"))
    impl = r.get("cross_entropy_fusion_impl")  # read either way: without the fusion it selects nothing
    if impl not in ("native", "te"):
        raise InputError(r.ctx.where, r.ctx.label("cross_entropy_fusion_impl"),
                         f"must be native or te (Megatron-LM's choices), got {impl!r}")
    job["kernels"] = {"flash_attention": backend in ("auto", "flash", "fused"), "cross_entropy_fusion": fused_loss}
    if stated in ("flash", "fused"):  # timed as any flash attention, kept for the export back
        job["kernels"]["attention_backend"] = stated
    if model.position_embedding_type == "rope":  # Megatron fuses RoPE for 'rope' only; --no-rope-fusion says
        job["kernels"]["rope_fusion"] = bool(r.get("apply_rope_fusion"))  # nothing about YaRN or other positions
    else:
        r.get("apply_rope_fusion")
    comm, per_layer = _cp_comm_type(r, model, parallel["cp"], out)
    if comm not in (None, "p2p") or per_layer:  # p2p once is the job file's default as it is Megatron's
        job["context_parallel"] = {"comm_type": comm or "p2p", **({"per_layer_list": True} if per_layer else {})}
    if fused_loss:
        job["kernels"]["cross_entropy_fusion_impl"] = impl
    elif impl == "te":
        out.note(f"{r.ctx.label('cross_entropy_fusion_impl')} te selects nothing without "
                 f"{r.ctx.label('cross_entropy_loss_fusion')}: the loss is Megatron-LM's unfused vocab-parallel "
                 "cross-entropy (megatron/core/models/common/language_module/language_module.py)")
    return job, r.consumed


def _cp_comm_type(r: ArgReader, model: ModelSpec, cp: int, out: Collector) -> tuple[str | None, bool]:
    """`--cp-comm-type` as `context_parallel.comm_type` (None: absent, Megatron's p2p) and whether it was given
    once per layer. Megatron-Core passes the string on to Transformer Engine only when context_parallel_size > 1
    (core_v0.18.0 transformer_layer.py line 348, extensions/transformer_engine.py lines 1672-1695), which knows
    p2p, all_gather, a2a and a2a+p2p and raises on anything else (TE v2.12 dot_product_attention/context_parallel.py
    line 4110, "Unsupported communication type"; Megatron-LM's help text spells it "allgather"); a per-layer list
    must name every layer (core_v0.15.0 transformer_config.py lines 1491-1496)."""
    if r.ns.get("cp_comm_type") is None:
        return None, False
    raw = r.get("cp_comm_type")
    listed = [str(v) for v in (raw if isinstance(raw, (list, tuple)) else [raw])]
    label = r.ctx.label("cp_comm_type")
    if not listed:
        raise InputError(r.ctx.where, label, "names no communication type")
    if cp <= 1:
        out.note(f"{label} {' '.join(listed)[:80]} has no effect at CP 1: Megatron-Core hands it to Transformer Engine "
                 "only with context parallelism")
        return None, False
    if len(listed) > 1 and len(listed) != model.num_layers:
        raise InputError(r.ctx.where, label, f"lists {len(listed)} types for {model.num_layers} layers: Megatron-Core "
                         "asserts one type, or one per transformer layer")
    kinds = sorted(set(listed))
    if len(kinds) > 1:
        raise InputError(r.ctx.where, label, f"mixes {', '.join(kinds)} across layers, which primus does not model: "
                         "give one type for every layer")
    kind = kinds[0]
    if kind == "allgather":
        raise InputError(r.ctx.where, label, "allgather is refused by Transformer Engine ('Unsupported communication "
                         "type'): its name is all_gather")
    if kind == "a2a+p2p":
        raise InputError(r.ctx.where, label, "a2a+p2p (hierarchical context parallelism) is not modelled: primus "
                         "models p2p, all_gather and a2a")
    if kind not in ("p2p", "all_gather", "a2a"):
        raise InputError(r.ctx.where, label, f"{kind!r} is no communication type of Transformer Engine's context "
                         "parallelism (p2p, all_gather, a2a, a2a+p2p)")
    return kind, len(listed) > 1


# ---- model --------------------------------------------------------------------------------------


def model_from_args(ns: Mapping[str, Any], ctx: ImportContext, out: Collector) -> tuple[Any, set[str]]:
    """The job's `model` value for a file that only defines a model's arguments, and the dests used."""
    ns, aliases = _aliased(ns, ctx)
    r = ArgReader(ns, ctx)
    r.consumed |= aliases
    ref, _ = _model(r, ctx, out)
    return ref, r.consumed


def _model(r: ArgReader, ctx: ImportContext, out: Collector) -> tuple[Any, ModelSpec]:
    ref, spec = _architecture(r, ctx, out)
    if spec.rotary:
        note = rope_note(r.get, resolve_model(ref, ctx.where, "model"))
        if note:
            out.note(note)
            model = resolve_model(ref, ctx.where, "model")
            mine = model_rope(model)
            stated = {k: v for k, v in file_rope(r.get, model.multi_latent_attention).items()
                      if any(d in r.ns for d in ROPE_DESTS[k]) and v != mine[k]}
            if stated:  # what the file states explicitly is what it trains: kept, so an export writes it
                ref = with_rope(ref, stated)
    return ref, spec


def _architecture(r: ArgReader, ctx: ImportContext, out: Collector) -> tuple[Any, ModelSpec]:
    base = ctx.base
    fields: dict[str, Any] = spec_fields(base) if base is not None else {}

    def take(field: str, dest: str | None = None) -> None:
        dest = dest or field
        if dest in r.ns:  # an explicit null over a Primus model file resets the field to Megatron's default
            value = r.get(dest)
            if value is not None or base is not None:
                fields[field] = value
        elif base is None:
            default = r.get(dest)
            if default is not None:
                fields[field] = default

    for name in ("num_layers", "hidden_size", "num_attention_heads", "kv_channels", "max_position_embeddings",
                 "normalization", "swiglu", "squared_relu", "add_bias_linear", "add_qkv_bias", "qk_layernorm",
                 "attention_output_gate", "softmax_type", "activation_func_clamp_value", "hidden_dropout",
                 "attention_dropout",
                 "untie_embeddings_and_output_weights",
                 "make_vocab_size_divisible_by", "position_embedding_type", "window_attn_skip_freq",
                 "num_experts", "moe_shared_expert_intermediate_size", "multi_latent_attention"):
        take(name)
    if fields.get("num_experts") == 0:
        fields["num_experts"] = None  # Megatron: --num-experts 0 means dense
    if r.get("quick_geglu"):
        fields["swiglu"] = True
        out.note("--quick-geglu: a gated FFN (two input projections, as SwiGLU), modelled as SwiGLU: the same "
                 "weights and stored activations; the activation function differs")
    if r.get("use_rotary_position_embeddings"):
        fields["position_embedding_type"] = "rope"
    if fields.get("position_embedding_type") == "yarn":  # core_v0.19.0: --rotary-scaling-factor is YaRN's factor
        fields["yarn_rotary_scaling_factor"] = r.get("rotary_scaling_factor")
    elif base is not None and base.position_embedding_type == "yarn":
        fields["yarn_rotary_scaling_factor"] = None  # a Primus model file's YaRN overridden by another type
    if r.has("vocab_size"):
        fields["vocab_size"] = r.get("vocab_size")
    elif r.has("padded_vocab_size"):
        fields["vocab_size"], fields["make_vocab_size_divisible_by"] = r.get("padded_vocab_size"), 1
        out.note("--padded-vocab-size taken as the vocabulary, with no further padding")
    if r.has("group_query_attention") or base is None:
        if r.get("group_query_attention"):
            fields["num_query_groups"] = r.get("num_query_groups")
        else:
            fields["num_query_groups"] = None
            if r.has("num_query_groups"):
                r.consumed.discard("num_query_groups")
                out.note("num_query_groups is ignored by Megatron-LM without group_query_attention")
    elif r.has("num_query_groups"):
        fields["num_query_groups"] = r.get("num_query_groups")
    if r.has("window_size"):
        left, right = r.get("window_size")
        fields["window_size"] = left + 1  # left keys plus the query's own position (see megatron_export)
        if right:
            out.note(f"window_size right extent {right} not modelled (causal attention looks left only)")
    if fields.get("num_experts"):
        for name in ("moe_router_topk", "moe_layer_freq"):
            take(name)
    if fields.get("multi_latent_attention"):
        for name in ("q_lora_rank", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim"):
            take(name)
    take("mtp_num_layers")
    fields["mtp_num_layers"] = fields.get("mtp_num_layers") or 0
    megatron_ffn = r.get("ffn_hidden_size")
    if megatron_ffn is None and base is None and "hidden_size" in fields:
        h = fields["hidden_size"]
        megatron_ffn = int((4 * h * 2 / 3) / 64) * 64 if fields.get("swiglu") else 4 * h
    if r.has("ffn_hidden_size") or base is None:
        fields["ffn_hidden_size"] = megatron_ffn
    if fields.get("num_experts"):
        if r.has("moe_ffn_hidden_size"):
            fields["moe_ffn_hidden_size"] = r.get("moe_ffn_hidden_size")
        elif base is None:
            fields["moe_ffn_hidden_size"] = megatron_ffn
    if fields.get("vocab_size") is None:
        by_name = vocab_from_tokenizer(r.ns.get("tokenizer_type"), r.ns.get("tokenizer_model"))
        if by_name is not None:
            for dest in ("tokenizer_type", "tokenizer_model"):
                r.get(dest)
            fields["vocab_size"] = by_name[0]
            out.note(f"vocabulary {by_name[0]} from {by_name[1]}, padded as Megatron-LM pads it (a multiple of "
                     f"{fields.get('make_vocab_size_divisible_by') or 128} x TP)")
        else:
            fields.update(_vocab_from_catalog(fields, ctx, out))
    spec = build_model(fields, ctx.where)
    if ctx.header_model is not None:
        named = resolve_model(ctx.header_model, ctx.where, "primus-job.model")
        # a YaRN model is written for a release that cannot build it as RoPE without fusion (`yarn_as_rope`):
        # the header's model decides, as for the fields no Megatron-LM option states
        as_rope = (named.position_embedding_type == "yarn" and spec.position_embedding_type == "rope"
                   and not r.get("apply_rope_fusion"))
        diff = differences(named, spec, ignore=INEXPRESSIBLE + (YARN_FIELDS if as_rope else ()))
        if not diff:
            if as_rope:
                out.note("position_embedding_type yarn from the primus-job header: the file states RoPE with "
                         "--no-rope-fusion, which is how primus writes YaRN for a Megatron that cannot build it")
                spec = build_model({**fields, "position_embedding_type": "yarn",
                                    "yarn_rotary_scaling_factor": named.yarn_rotary_scaling_factor}, ctx.where)
            return ctx.header_model, spec
        out.note(f"the primus-job header names another model (differs in {', '.join(diff)}); the options win")
    ref, how = model_reference(spec, ctx.prefer, ctx.model_name, ctx.where)
    out.note(how)
    return ref, spec


def _vocab_from_catalog(fields: dict[str, Any], ctx: ImportContext, out: Collector) -> dict[str, Any]:
    matches = catalog_matches(fields, SHAPE_IGNORED)
    if not matches:
        raise InputError(ctx.where, ctx.label("vocab_size"),
                         "is not given (Megatron reads it from the tokenizer) and the architecture matches no "
                         "catalog model; add the vocabulary size to the file")
    pick = next((s for s in ctx.prefer if s in matches), matches[0])
    if isinstance(ctx.header_model, str) and ctx.header_model in matches:
        pick = ctx.header_model
    cat = catalog_spec(pick)
    out.note(f"vocabulary {cat.vocab_size} from catalog model {pick}: the file leaves it to the tokenizer")
    return {k: getattr(cat, k) for k in VOCAB_FIELDS}


# ---- parallel layout ----------------------------------------------------------------------------


def _parallel(r: ArgReader, ctx: ImportContext, model: ModelSpec, out: Collector) -> dict[str, Any]:
    tp = r.pos("tensor_model_parallel_size") or 1
    pp = r.pos("pipeline_model_parallel_size") or 1
    cp = r.pos("context_parallel_size") or 1
    dp = data_parallel(ctx.world, tp, pp, cp, ctx.where, ctx.world_source, ctx.gpus_per_node)
    vp = _virtual(r, ctx, model, pp)
    if vp > 1 and pp <= 2 and r.ns.get("overlap_p2p_comm") is False:
        # core_v0.18.0 arguments.py lines 984-989 (review 50, L2): "When interleaved schedule is used and p2p
        # communication overlap is disabled, pipeline-model-parallel size should be greater than 2"
        raise InputError(ctx.where, ctx.label("overlap_p2p_comm"), f"with {vp} virtual stages at pipeline-parallel "
                         "size 2 is refused by Megatron-LM: without the overlap the interleaved schedule needs PP > 2")
    ep, etp = r.pos("expert_model_parallel_size") or 1, r.pos("expert_tensor_parallel_size") or tp
    if not model.is_moe:
        if ep > 1:
            raise InputError(ctx.where, ctx.label("expert_model_parallel_size"), "expert parallelism needs experts")
        ep = etp = 1
    mbs = r.pos("micro_batch_size", required=True)
    sp = bool(r.get("sequence_parallel"))
    if sp and tp == 1:
        out.note("sequence parallel at TP 1: Megatron-LM switches it off")
        sp = False
    par: dict[str, Any] = {"tp": tp, "pp": pp, "vp": vp, "cp": cp, "ep": ep, "etp": etp, "dp": dp, "mbs": mbs,
                           "sp": sp}
    granularity = r.get("recompute_granularity") or ("selective" if r.get("recompute_activations") else None)
    par["recompute"] = granularity or "none"
    if granularity not in (None, "selective", "full"):
        raise InputError(ctx.where, ctx.label("recompute_granularity"), f"unknown value {granularity!r}")
    modules = r.ns.get("recompute_modules")
    if modules is not None and granularity == "selective":
        listed = [str(m) for m in r.get("recompute_modules")]
        unmodelled = [m for m in listed if m not in RECOMPUTE_MODULES]
        if unmodelled:  # dropping one would change the job, and an export would write another list
            raise InputError(ctx.where, ctx.label("recompute_modules"),
                             f"{', '.join(unmodelled)} not modelled (primus models "
                             f"{', '.join(RECOMPUTE_MODULES)}; Megatron-Core also has moe and shared_experts): "
                             "primus would prove and export another job")
        if listed:
            par["recompute_modules"] = listed
    elif modules is not None:
        r.get("recompute_modules")
    if ctx.recompute_layer_ids is not None:
        _listed_recompute(r, ctx, granularity, par)
    elif granularity == "full":
        method = r.get("recompute_method")
        if method is not None:
            par["recompute_method"] = method
        else:  # core_v0.18.0 transformer_config.py lines 1551-1560 raise on it
            raise InputError(ctx.where, ctx.label("recompute_granularity"),
                             f"full needs {ctx.label('recompute_method')} block or uniform (Megatron-Core's "
                             "TransformerConfig raises 'recompute_method must be \"block\" or \"uniform\"')")
        if r.get("recompute_num_layers") == 0 and method == "block":
            # Megatron-LM's block method checkpoints the first N layers of each chunk: N = 0 is none
            out.note("full recompute with the block method and recompute_num_layers 0 recomputes no layer: "
                     "modelled as no recompute")
            par["recompute"] = "none"
            par.pop("recompute_method", None)
        else:
            layers = r.pos("recompute_num_layers")
            if layers is not None:
                par["recompute_num_layers"] = layers
    par["sharding"] = _sharding(r, ctx)
    if par["sharding"] == "fsdp" and r.get("use_torch_fsdp2"):
        _torch_fsdp2_asserts(r, ctx, par, model)
    return par


def _torch_fsdp2_asserts(r: ArgReader, ctx: ImportContext, par: dict[str, Any], model: ModelSpec) -> None:
    """What Megatron-LM asserts of `--use-torch-fsdp2` (core_v0.18.0 megatron/training/arguments.py lines
    1010-1027, the same in d98e8a6): no pipeline or expert parallelism, no gradient-accumulation fusion (on
    by default: --no-gradient-accumulation-fusion turns it off), untied embeddings, no fp16. primus's
    `fsdp` sharding would otherwise prove a launch line Megatron refuses at start-up (review 50, M6)."""
    label = ctx.label("use_torch_fsdp2")
    if par["pp"] > 1 or par["ep"] > 1:
        axis = "pipeline" if par["pp"] > 1 else "expert"
        raise InputError(ctx.where, label, f"is refused by Megatron-LM with {axis} parallelism "
                         f"(pp {par['pp']}, ep {par['ep']}): '--use-torch-fsdp2 is not supported with {axis} "
                         "parallelism'")
    fusion = r.ns.get("gradient_accumulation_fusion")
    if fusion is None:
        fusion = ctx.defaults.get("gradient_accumulation_fusion", True)  # Megatron-LM's default: on
    if fusion:
        raise InputError(ctx.where, label, "is refused by Megatron-LM with gradient-accumulation fusion, which is on "
                         "unless --no-gradient-accumulation-fusion is given")
    if not model.untie_embeddings_and_output_weights:
        raise InputError(ctx.where, label, "is refused by Megatron-LM with tied embeddings: it "
                         "requires --untie-embeddings-and-output-weights")
    if r.get("fp16"):
        raise InputError(ctx.where, label, "is refused by Megatron-LM with fp16")


def _listed_recompute(r: ArgReader, ctx: ImportContext, granularity: str | None, par: dict[str, Any]) -> None:
    """AMD Primus's ``recompute_layer_ids``: exactly the listed layers are recomputed, each from its own
    checkpoint. Primus refuses it without ``recompute_granularity: full`` or beside a
    ``recompute_method`` (patches/recompute_layer_patches.py, validate_specified_recompute_layers)."""
    if granularity != "full":
        raise InputError(ctx.where, ctx.label("recompute_layer_ids"),
                         f"needs recompute_granularity full, got {granularity} (Primus refuses it)")
    if r.get("recompute_method") is not None:
        raise InputError(ctx.where, ctx.label("recompute_layer_ids"),
                         "goes with recompute_method null (Primus refuses a method beside the list)")
    r.get("recompute_num_layers")  # not used with a list
    par["recompute_layer_ids"] = sorted(set(ctx.recompute_layer_ids or ()))


def _one_split_mechanism(pipeline: Mapping[str, Any], ctx: ImportContext) -> None:
    """Megatron-Core's TransformerConfig refuses a layout beside first/last stage sizes or the
    embedding/loss accounting, and those two together (NVIDIA/Megatron-LM 000c4ac transformer_config.py
    lines 1042-1072: `any_conflict`); the import says so in the file's own argument names."""
    conflict = split_conflict(pipeline)
    if conflict is None:
        return
    field, other = conflict
    if field == "layout":
        raise InputError(ctx.where, ctx.label("pipeline_model_parallel_layout"),
                         f"cannot be given with {ctx.label(other)} (Megatron-Core's TransformerConfig "
                         "refuses a layout beside any other pipeline split option)")
    raise InputError(ctx.where, ctx.label(field),
                     f"cannot be given with {ctx.label(other)} (Megatron-Core's TransformerConfig refuses "
                     "first/last stage sizes beside the embedding/loss accounting)")


def _virtual(r: ArgReader, ctx: ImportContext, model: ModelSpec, pp: int) -> int:
    layout = r.get("pipeline_model_parallel_layout")
    per_rank = r.pos("num_virtual_stages_per_pipeline_rank")
    per_stage = r.pos("num_layers_per_virtual_pipeline_stage")
    legacy = r.pos("virtual_pipeline_model_parallel_size")
    # Megatron-LM d98e8a6 arguments.py asserts at most one of the layout, --num-virtual-stages-per-
    # pipeline-rank and --num-layers-per-virtual-pipeline-stage, then derives the VP size from it, over a
    # --virtual-pipeline-model-parallel-size given beside (AMD Primus's MiniMax-M2.5 file gives both)
    if sum(x is not None for x in (layout, per_rank, per_stage)) > 1:
        raise InputError(ctx.where, "pipeline", "give at most one of the virtual-pipeline options (Megatron asserts)")
    vp = _derived_virtual(r, ctx, model, pp, layout, per_rank, per_stage)
    if vp is None:
        return 1 if pp == 1 else legacy or 1
    if legacy is not None and pp > 1 and legacy != vp:
        raise InputError(ctx.where, ctx.label("virtual_pipeline_model_parallel_size"),
                         f"{legacy} contradicts the {vp} virtual stages per rank its other pipeline option gives "
                         "(Megatron-LM takes the other option's)")
    return vp


def _even_split_note(r: ArgReader, model: ModelSpec, parallel: Mapping[str, Any], pipeline: Mapping[str, Any],
                     out: Collector) -> None:
    """Without a layout, a virtual-pipeline option or first/last stage sizes, Megatron-LM asserts 'Number of
    layers should be divisible by the pipeline-model-parallel size', counting the embedding and the loss
    when they are accounted (core_v0.18.0 megatron/training/arguments.py lines 958-977). The import keeps
    the job as written and says so: `primus fit` refuses it (rule pipeline-split) and lists the fixes."""
    pp = int(parallel["pp"])
    if pp == 1 or any(r.has(d) for d in ("pipeline_model_parallel_layout", "num_layers_per_virtual_pipeline_stage",
                                         "num_virtual_stages_per_pipeline_rank", *STAGE_SIZE_OPTIONS)):
        return
    layers = model.num_layers + sum(bool(pipeline.get(k)) for k in ("account_for_embedding_in_pipeline_split",
                                                                     "account_for_loss_in_pipeline_split"))
    if layers % pp:
        out.note(f"{layers} layers do not divide over {r.ctx.label('pipeline_model_parallel_size')} {pp}: "
                 "Megatron-LM asserts 'Number of layers should be divisible by the pipeline-model-parallel size'; "
                 "`primus fit` refuses the split (pipeline-split) and lists the pipeline options that fix it")


def _derived_virtual(r: ArgReader, ctx: ImportContext, model: ModelSpec, pp: int, layout: Any,
                     per_rank: int | None, per_stage: int | None) -> int | None:
    """The VP size the layout string or a per-rank / per-stage option gives; None when neither is set."""
    if layout is not None:
        stages = len(parse_layout_string(str(layout), ctx.where))
        if stages % pp:
            raise InputError(ctx.where, ctx.label("pipeline_model_parallel_layout"),
                             f"{stages} stages are not a multiple of PP {pp}")
        return _interleaved(ctx, pp, stages // pp, "pipeline_model_parallel_layout")
    if per_stage is not None:
        sizes = [d for d in STAGE_SIZE_OPTIONS if r.get(d)]
        if sizes:  # Megatron-LM 000c4ac arguments.py lines 558-560 (d98e8a6 lines 954-956) asserts this
            raise InputError(ctx.where, ctx.label("num_layers_per_virtual_pipeline_stage"),
                             f"cannot be given with {ctx.label(sizes[0])}: Megatron-LM asserts 'please use "
                             "--num-virtual-stages-per-pipeline-rank' with uneven first/last stages")
        layers = model.num_layers + bool(r.get("account_for_embedding_in_pipeline_split")) \
            + bool(r.get("account_for_loss_in_pipeline_split"))
        if layers % pp or (layers // pp) % per_stage:
            raise InputError(ctx.where, ctx.label("num_layers_per_virtual_pipeline_stage"),
                             f"{per_stage} does not divide the {layers // pp} layers of a pipeline stage")
        return _interleaved(ctx, pp, layers // pp // per_stage, "num_layers_per_virtual_pipeline_stage")
    if per_rank is not None:
        return _interleaved(ctx, pp, per_rank, "num_virtual_stages_per_pipeline_rank")
    return None


def _interleaved(ctx: ImportContext, pp: int, vp: int, dest: str) -> int:
    """The VP size an option derives, refused above 1 at PP 1: Megatron-LM derives it first and then
    asserts 'When interleaved schedule is used, pipeline-model-parallel size should be greater than 1'
    (core_v0.18.0 megatron/training/arguments.py lines 980-983; a derived VP of 1 is dropped before it)."""
    if pp == 1 and vp > 1:
        raise InputError(ctx.where, ctx.label(dest),
                         f"gives {vp} virtual stages per rank at pipeline-parallel size 1 (Megatron-LM asserts "
                         "'When interleaved schedule is used, pipeline-model-parallel size should be greater than 1')")
    return vp


def _sharding(r: ArgReader, ctx: ImportContext) -> str:
    torch_fsdp, megatron_fsdp, dist = (r.get(d) for d in ("use_torch_fsdp2", "use_megatron_fsdp",
                                                          "use_distributed_optimizer"))
    if torch_fsdp:
        if megatron_fsdp or dist:
            raise InputError(ctx.where, ctx.label("use_torch_fsdp2"),
                             "with the distributed optimizer or Megatron FSDP is refused by Megatron-LM")
        if r.ns.get("gradient_accumulation_fusion") is False:
            r.get("gradient_accumulation_fusion")  # required by torch FSDP2 in Megatron: part of the choice
        return "fsdp"
    if megatron_fsdp:
        strategy = str(r.get("data_parallel_sharding_strategy"))
        if strategy not in _FSDP_STRATEGY:
            raise InputError(ctx.where, ctx.label("data_parallel_sharding_strategy"), f"unknown value {strategy!r}")
        if r.ns.get("ckpt_format") == "fsdp_dtensor":
            r.get("ckpt_format")  # Megatron FSDP's required checkpoint format: part of the choice
        return _FSDP_STRATEGY[strategy]
    return "dist_opt" if dist else "none"


#: Megatron-LM's --fp8-format choices (megatron/training/arguments.py, core_v0.8.0 to core_v0.18.0)
FP8_FORMATS = ("e4m3", "hybrid")


# ---- precision, optimizer, MoE -------------------------------------------------------------------


def _precision(r: ArgReader, ctx: ImportContext, out: Collector) -> dict[str, Any]:
    bf16, fp16 = bool(r.get("bf16")), bool(r.get("fp16"))
    if bf16 and fp16:
        raise InputError(ctx.where, ctx.label("fp16"), "and bf16 together are refused by Megatron-LM")
    if r.get("fp4"):
        if r.ns.get("fp4_recipe") in (None, "nvfp4"):
            r.get("fp4_recipe")
        return {"precision": "nvfp4"}
    fp8_format = r.get("fp8")
    if fp8_format:
        if fp8_format not in FP8_FORMATS:
            raise InputError(ctx.where, ctx.label("fp8"), f"{shown(fp8_format)} is not an FP8 format Megatron-LM "
                             f"takes ({', '.join(FP8_FORMATS)}: arguments.py --fp8-format choices; "
                             "fp8_utils.get_fp8_recipe raises for any other)")
        doc: dict[str, Any] = {"precision": "fp8"}
        if fp8_format != "hybrid":  # the job has no format: an export writes Megatron's hybrid
            out.note(f"{r.ctx.label('fp8')} {fp8_format} read as precision fp8 (the same bytes); the job has no "
                     "FP8 format, and an export writes --fp8-format hybrid (e4m3 forward, e5m2 gradients)")
        recipe = r.ns.get("fp8_recipe")
        if recipe in ("tensorwise", "delayed", "blockwise", "mxfp8"):
            doc["fp8_recipe"] = r.get("fp8_recipe")
        elif recipe == "custom":
            out.note("fp8 recipe 'custom' is not modelled: Megatron's default 'delayed' assumed")
        elif recipe is not None:
            raise InputError(ctx.where, ctx.label("fp8_recipe"), f"{shown(recipe)} is not an FP8 recipe Megatron-LM "
                             "takes (tensorwise, delayed, blockwise, mxfp8, custom: arguments.py --fp8-recipe choices)")
        if r.get("fp8_param_gather"):  # FP8 primary weights: the ledger drops their bf16 copy
            doc["fp8_param_gather"] = True
        if fp16:
            out.note("fp8 with fp16 parameters modelled as fp8 with bf16 parameters")
        return doc
    if bf16 or fp16:
        return {"precision": "bf16" if bf16 else "fp16"}
    raise InputError(ctx.where, ctx.label("bf16"), "neither bf16 nor fp16 is set: fp32 training is not modelled")


def _optimizer(r: ArgReader, out: Collector) -> dict[str, Any]:
    fp16 = bool(r.get("fp16"))
    if fp16:
        # with --fp16 the gradients stay fp16 unless --accumulate-allreduce-grads-in-fp32 (core_v0.15.0 arguments.py
        # lines 733-745 turn it on for --bf16 only; --grad-reduce-in-bf16 is read under --bf16 alone)
        r.get("grad_reduce_in_bf16")
        grads = "fp32" if r.get("accumulate_allreduce_grads_in_fp32") else "fp16"
    else:
        grads = "bf16" if r.get("grad_reduce_in_bf16") else "fp32"
        if grads == "fp32":
            r.get("accumulate_allreduce_grads_in_fp32")  # Megatron's bf16 default: fp32 accumulation
    names = ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype", "exp_avg_sq_dtype")
    if r.get("use_precision_aware_optimizer"):
        doc = {name: str(r.get(name)) for name in names}
        if grads == "bf16" or fp16:
            doc["main_grads_dtype"] = grads
        return doc
    if any(r.ns.get(n) not in (None, "fp32") for n in names):
        out.note("optimizer state dtypes have no effect without use_precision_aware_optimizer; they are listed")
    for name in names:
        if r.ns.get(name) in (None, "fp32"):
            r.get(name)
    return {"main_grads_dtype": grads} if grads == "bf16" or fp16 else {}


def _moe(r: ArgReader, out: Collector) -> dict[str, Any]:
    dispatcher = str(r.get("moe_token_dispatcher_type"))
    if dispatcher == "alltoall_seq":  # the sequence-parallel variant moves the same tokens over the EP group
        out.note(f"{r.ctx.label('moe_token_dispatcher_type')} alltoall_seq read as alltoall (the same tokens "
                 "cross the EP group; Megatron-Core removed alltoall_seq in core_v0.13)")
        dispatcher = "alltoall"
    doc: dict[str, Any] = {"token_dispatcher": dispatcher}
    if r.get("moe_enable_deepep") and dispatcher != "flex":  # Megatron-Core refuses it (transformer_config.py)
        raise InputError(r.ctx.where, r.ctx.label("moe_enable_deepep"),
                         f"DeepEP needs the flex token dispatcher, not {dispatcher!r} (Megatron-Core: 'DeepEP backend "
                         "is only supported with flex token dispatcher')")
    if r.get("moe_grouped_gemm") is False:  # None: not known (a Primus model file that was not read)
        # Megatron-Core builds SequentialMLP without it, whatever the legacy flag says (core_v0.16.0
        # extensions/transformer_engine_spec_provider.py `grouped_mlp_modules`)
        doc["grouped_gemm"] = "sequential"
        legacy = r.get("moe_use_legacy_grouped_gemm")
        label = r.ctx.label("moe_grouped_gemm")
        off = f"no {label}" if label.startswith("--") else f"{label} false"
        out.note(f"{off}: Megatron-LM runs the experts as SequentialMLP, a loop over "
                 "the local experts (moe.grouped_gemm sequential)"
                 + (f"; {r.ctx.label('moe_use_legacy_grouped_gemm')} has no effect without it" if legacy else ""))
    elif r.get("moe_use_legacy_grouped_gemm"):
        doc["grouped_gemm"] = "legacy"
    # absent, Megatron-LM permutes unfused (transformer_config.py moe_permute_fusion = False)
    doc["permute_fusion"] = bool(r.get("moe_permute_fusion"))
    capacity = r.get("moe_expert_capacity_factor")
    padded = r.get("moe_pad_expert_input_to_capacity")
    if capacity is not None and capacity > 0:
        doc["capacity_factor"] = capacity
        if not padded:
            out.note("capacity factor without padding: primus counts buffers padded to capacity (an upper bound)")
    return doc


# ---- export -------------------------------------------------------------------------------------


def args_from_job(job: Job, layout: Layout, fsdp: str = "megatron",
                  primus: bool = False) -> tuple[dict[str, Any], list[str], set[str]]:
    """Every modelled dest with an explicit value (False/None included: Primus's defaults differ from
    Megatron's), the notes on what Megatron cannot express, and the job keys written. `primus`: the
    target is AMD Primus's Megatron (it keeps options Megatron-LM removed or never had)."""
    ns, notes = model_args(job)
    more, more_notes, written = runtime_args(job, layout, fsdp, primus)
    ns.update(more)
    return ns, notes + more_notes, written
