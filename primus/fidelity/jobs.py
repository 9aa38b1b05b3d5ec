"""A published run row, turned into primus jobs: the one to project and the one to check for fit.

The row's cells are pins; empty cells follow the source's stack (`stacks/`, `primus.fidelity.defaults`).
Two jobs come out of a row:

- the *projection* job pins every axis (stated cells, else the stack's value; when the stack's
  recompute does not fit, it is escalated to the lightest setting the ledger says fits, and the change
  is recorded in `escalated`);
- the *fit* job is the job file a user would type: the published layout, the settings the source
  states and `stack:` of its source, read through the same path as `primus fit JOB` (`published_job`);
  what the source did not state stays free, so `fit` answers "could this run have fitted?" — it ran.

A model slug outside the catalog is rebuilt from the architecture columns when that is unambiguous: a
catalog model with the same dimensions, or a catalog model of the same family (name prefix) whose
architecture conventions (activation, norm, positions, attention kind) carry over, with the
dimensions overridden. Anything else is refused with the reason. A catalog slug whose architecture
columns contradict it (a Llama-405B row named gpt3-175b) is refused too, naming each column with the
catalog's value: either the name or the columns are wrong, and projecting the name would score a run of
another model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from primus.catalog.hardware import catalog_hardware
from primus.catalog.models import _load_catalog_model, catalog_models
from primus.errors import InputError
from primus.fidelity.defaults import RECOMPUTE_LADDER, SourceRule, rule_for
from primus.fidelity.options import apply_options, merge_keys
from primus.fidelity.runs import RunRow
from primus.job import Job, job_from_mapping
from primus.memory.evaluate import MemoryModel, pinned_layout
from primus.memory.shapes import layout_for
from primus.specs.job import PipelineOptions
from primus.specs.model import ModelSpec
from primus.stacks.apply import pipeline_split, recipe_origin, stack_split
from primus.stacks.schema import loss_kernels

PRECISIONS: dict[str, tuple[str, str | None]] = {
    "bf16": ("bf16", None), "fp16": ("fp16", None), "fp8": ("fp8", ""), "fp8-block": ("fp8", "blockwise"),
    "fp8-rowwise": ("fp8", "blockwise"), "mxfp8": ("fp8", "mxfp8"), "nvfp4": ("nvfp4", None),
}
SHARDINGS = ("none", "zero1", "dist_opt", "zero2", "fsdp")
RECOMPUTES = ("none", "selective", "full")


class Unprojectable(Exception):
    """A row primus cannot turn into a job; `reason` is one line."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class RowJobs:
    """The jobs of one row and what was assumed to build them."""

    project: Job
    fit: Job
    rule: SourceRule
    assumed: tuple[str, ...]
    escalated: tuple[str, ...] = ()
    unstated: tuple[str, ...] = ()  # layout axes the source omits and no stack recipe decides (see completions)


def _family(slug: str) -> str:
    """A model family: the leading letters of the name ('llama3.1-8b', 'llama-3-9b' -> 'llama')."""
    match = re.match(r"[a-z]+", slug)
    return match.group(0) if match else slug


def _conventions(spec: ModelSpec) -> tuple[Any, ...]:
    """What a dimension override cannot say: activation, norm, positions, biases, tying, attention kind."""
    return (spec.swiglu, spec.squared_relu, spec.normalization, spec.position_embedding_type,
            spec.untie_embeddings_and_output_weights, spec.add_bias_linear, spec.qk_layernorm,
            spec.multi_latent_attention, spec.window_size)


def _arch(row: RunRow) -> dict[str, int | None]:
    keys = {"layers": "num_layers", "hidden": "hidden_size", "heads": "num_attention_heads",
            "kv_heads": "num_query_groups", "vocab": "vocab_size", "experts": "num_experts",
            "topk": "moe_router_topk", "ffn": "ffn"}
    out: dict[str, int | None] = {}
    for col, name in keys.items():
        try:
            out[name] = row.integer(col)
        except ValueError as exc:
            raise Unprojectable(str(exc)) from None
    return out


def _dims(spec: ModelSpec) -> dict[str, int | None]:
    """The catalog model's values of the architecture columns (`ffn` is the expert width of an MoE model)."""
    ffn = spec.moe_ffn_hidden_size if spec.num_experts else spec.ffn_hidden_size
    return {"num_layers": spec.num_layers, "hidden_size": spec.hidden_size, "ffn": ffn,
            "num_attention_heads": spec.num_attention_heads,
            "num_query_groups": spec.num_query_groups or spec.num_attention_heads, "vocab_size": spec.vocab_size,
            "num_experts": spec.num_experts, "moe_router_topk": spec.moe_router_topk}


def _same_dims(spec: ModelSpec, arch: dict[str, int | None]) -> bool:
    return all(arch[k] is None or arch[k] == v for k, v in _dims(spec).items() if k in arch)


#: the CSV column of each architecture field, as a contradiction names it
_COLUMNS = {"num_layers": "layers", "hidden_size": "hidden", "ffn": "ffn", "num_attention_heads": "heads",
            "num_query_groups": "kv_heads", "vocab_size": "vocab", "num_experts": "experts", "moe_router_topk": "topk"}


def _contradictions(spec: ModelSpec, arch: dict[str, int | None], tp: int | None) -> tuple[list[str], list[str]]:
    """The architecture columns that contradict the named catalog model (`column value (catalog value)`),
    and notes for a vocabulary that differs only as Megatron pads it: MT-NLG's 50,272 is gpt-530b's
    51,200 padded to a multiple of 128 × TP 8, the same embedding table."""
    wrong: list[str] = []
    notes: list[str] = []
    for key, have in _dims(spec).items():
        given = arch.get(key)
        if given is None or given == have:
            continue
        if key == "vocab_size":
            multiple = spec.make_vocab_size_divisible_by * (tp or 1)
            if -(-given // multiple) * multiple == spec.padded_vocab_size(tp or 1):
                notes.append(f"vocab {given:,} is the catalog's {spec.vocab_size:,} as Megatron pads it at TP"
                             f" {tp or 1}")
                continue
        wrong.append(f"{_COLUMNS[key]} {given:,} ({'none' if have is None else f'{have:,}'})")
    return wrong, notes


def model_ref(row: RunRow) -> tuple[Any, list[str]]:
    """The job's `model` for a row: the catalog slug (with a proxy's layer count and a learned position
    table long enough for the run), or a rebuild from the architecture columns."""
    slug = row["model"].lower()
    arch = _arch(row)
    seq = row.integer("seq_len")
    notes: list[str] = []
    slugs = catalog_models()
    if slug in slugs:
        base = _load_catalog_model(slug)
        over: dict[str, Any] = {}
        proxy = "proxy" in row.flags and arch["num_layers"] and arch["num_layers"] != base.num_layers
        wrong, vocab_notes = _contradictions(base, {**arch, "num_layers": None} if proxy else arch, _int(row, "tp"))
        if wrong:
            raise Unprojectable(f"the architecture columns contradict catalog model {slug!r}: " + ", ".join(wrong)
                                + " (catalog values in brackets); fix the model name or the columns")
        notes += vocab_notes
        if proxy:
            over["num_layers"] = arch["num_layers"]
            notes.append(f"reduced-layer proxy: {arch['num_layers']} layers")
    else:
        matches = [s for s in slugs if _same_dims(_load_catalog_model(s), arch)]
        family = [s for s in slugs if _family(s) == _family(slug) and not _load_catalog_model(s).num_experts]
        if len({_conventions(_load_catalog_model(s)) for s in family}) > 1:
            family = []  # the family's models disagree on conventions the columns do not give
        family.sort(key=lambda s: (_load_catalog_model(s).vocab_size != arch["vocab_size"], s))
        needed = ("num_layers", "hidden_size", "num_attention_heads", "vocab_size", "ffn")
        if any(arch[k] is None for k in needed):
            raise Unprojectable(f"model {slug!r} is not in the catalog and its architecture columns are incomplete")
        if matches:
            base = _load_catalog_model(matches[0])
            over = {}
            notes.append(f"model {slug!r} built as catalog {matches[0]!r} (same dimensions)")
        elif family and (arch["num_experts"] or 0) <= 1:
            base = _load_catalog_model(family[0])
            over = {"num_layers": arch["num_layers"], "hidden_size": arch["hidden_size"],
                    "ffn_hidden_size": arch["ffn"], "num_attention_heads": arch["num_attention_heads"],
                    "num_query_groups": arch["num_query_groups"] or arch["num_attention_heads"],
                    "vocab_size": arch["vocab_size"], "kv_channels": None}
            notes.append(f"model {slug!r} built from its architecture columns with {family[0]!r}'s conventions")
        else:
            raise Unprojectable(f"model {slug!r} is not in the catalog and its architecture columns are ambiguous "
                                "(no catalog model of the same family and dimensions)")
    if base.position_embedding_type == "learned_absolute" and seq and seq > (base.max_position_embeddings or 0):
        over["max_position_embeddings"] = seq
    if not over:
        return base.name, notes
    return {"base": base.name, **over}, notes


def _hardware(row: RunRow) -> str:
    gpu = row["gpu"].lower()
    if gpu not in catalog_hardware():
        raise Unprojectable(f"accelerator {gpu!r} is not in the hardware catalog")
    return gpu


def _int(row: RunRow, key: str) -> int | None:
    try:
        return row.integer(key)
    except ValueError as exc:
        raise Unprojectable(str(exc)) from None


def _sizes(row: RunRow) -> tuple[int, int, int, int, str, str | None]:
    """GPUs, global batch, sequence, micro-batch and (precision, fp8 recipe) of a row, which every job
    built from it needs (Unprojectable when one is missing)."""
    gpus, gbs, seq, mbs = (_int(row, k) for k in ("num_gpus", "gbs", "seq_len", "mbs"))
    if not (gpus and gbs and seq and mbs):
        raise Unprojectable("num_gpus, gbs, seq_len and mbs are all needed")
    prec = row["precision"].lower()
    if prec not in PRECISIONS:
        raise Unprojectable(f"precision {prec!r} is not one of {', '.join(PRECISIONS)}")
    precision, recipe = PRECISIONS[prec]
    return gpus, gbs, seq, mbs, precision, recipe


def build(row: RunRow) -> RowJobs:
    """Both jobs of a row (Unprojectable with the reason when the row cannot be built)."""
    rule = rule_for(row.source, row.published, row.flags)
    assumed: list[str] = []
    gpus, gbs, seq, mbs, precision, recipe = _sizes(row)
    stated_recipe = [r for r in ("tensorwise", "delayed", "blockwise", "mxfp8") if f"fp8_recipe_{r}" in row.flags]
    if recipe == "" and stated_recipe:
        recipe = stated_recipe[0]  # the recipe the source's config sets (flag fp8_recipe_<name>)
    elif recipe == "":
        recipe = rule.fp8_recipe
        assumed.append(f"fp8 recipe {recipe} (stack default)")
    model, notes = model_ref(row)
    assumed += notes
    hardware = _hardware(row)
    tp, pp, cp = (_int(row, k) or 1 for k in ("tp", "pp", "cp"))
    is_moe = row.is_moe
    ep, etp = (_int(row, "ep") or 1, _int(row, "etp")) if is_moe else (1, 1)
    if etp is None:
        etp = tp if rule.etp_is_tp else 1
        assumed.append(f"etp {etp} (stack default)")
    if is_moe and (gpus % pp or (gpus // pp) % (ep * etp)):  # Megatron-Core: world = pp × ep × etp × edp
        raise Unprojectable(f"ep {ep} × etp {etp} does not divide the {gpus // pp} GPUs of each of the pp {pp} "
                            "stages: the layout cannot run")
    vp = _int(row, "vp")
    stated = {"tp": tp, "pp": pp, "vp": vp if pp > 1 else 1, "cp": cp, "ep": ep if is_moe else None,
              "etp": _int(row, "etp") if is_moe else None, "mbs": mbs, "gpus": gpus, "gbs": gbs}
    shipped = rule.stack.recipe_for(row["model"].lower(), hardware, row["precision"].lower(), stated)
    unstated: list[str] = ["etp"] if is_moe and _int(row, "etp") is None else []
    if vp is None and pp > 1 and shipped is not None and shipped.settings.vp:
        vp = shipped.settings.vp
        assumed.append(f"vp {vp} (the stack's recipe: {shipped.source})")
    elif vp is None and pp > 1:
        vp = rule.vp
        assumed.append(f"vp {vp} (stack default)")
        unstated.insert(0, "vp")
    sp = row.boolean("sp")
    if sp is None:
        sp = rule.sp_with_tp and tp > 1
        assumed.append(f"sp {'on' if sp else 'off'} (stack default)")
    sharding = row["sharding"].lower()
    if not sharding and shipped is not None and shipped.settings.sharding:
        sharding = shipped.settings.sharding
        assumed.append(f"sharding {sharding} (the stack's recipe: {shipped.source})")
    elif not sharding:
        sharding = rule.sharding
        assumed.append(f"sharding {sharding} (stack default)")
    if sharding not in SHARDINGS:
        raise Unprojectable(f"sharding {sharding!r} is not one of {', '.join(SHARDINGS)}")
    recompute = row["recompute"].lower()
    if recompute and recompute not in RECOMPUTES:
        raise Unprojectable(f"recompute {recompute!r} is not one of {', '.join(RECOMPUTES)}")
    try:
        cluster_domain = _scaleup(hardware)
    except InputError as exc:
        raise Unprojectable(exc.reason) from None
    keys = rule.job_keys(tp=tp, scaleup_domain=cluster_domain, is_moe=is_moe, precision=precision)
    if shipped is not None and shipped.settings.cross_entropy:  # the row's own options still win below
        ce = shipped.settings.cross_entropy
        keys["kernels"].update(loss_kernels(ce))
        assumed.append(f"cross-entropy {ce} (the stack's recipe: {shipped.source})")
    if is_moe and shipped is not None and shipped.settings.moe_a2a_overlap is not None:
        keys["overlap"]["moe_a2a"] = shipped.settings.moe_a2a_overlap
        assumed.append(f"MoE all-to-all overlap {'on' if shipped.settings.moe_a2a_overlap else 'off'} "
                       f"(the stack's recipe: {shipped.source})")
    if is_moe and shipped is not None and shipped.settings.moe_dispatcher is not None:
        keys.setdefault("moe", {})["token_dispatcher"] = shipped.settings.moe_dispatcher
        assumed.append(f"MoE dispatcher {shipped.settings.moe_dispatcher} (the stack's recipe: {shipped.source})")
    if is_moe and shipped is not None and shipped.settings.moe_grouped_gemm is not None:
        keys.setdefault("moe", {})["grouped_gemm"] = shipped.settings.moe_grouped_gemm
        assumed.append(f"experts {shipped.settings.moe_grouped_gemm} (the stack's recipe: {shipped.source})")
    model = _with_options(row, keys, model, assumed)
    if is_moe and "tokendrop" in row.flags:
        keys.setdefault("moe", {})["capacity_factor"] = 1.0
        assumed.append("token dropping at capacity factor 1.0 (flag tokendrop)")
    pins: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "mbs": mbs, "sp": sp, "sharding": sharding,
                            **_recompute_pins(row, recompute)}
    if pp > 1:
        pins["vp"] = vp
    if is_moe:
        pins.update(ep=ep, etp=etp)
    stack_recompute = rule.recompute
    if not recompute and shipped is not None and shipped.settings.recompute:
        stack_recompute = shipped.settings.recompute
        recipe_keys = ("recompute_num_layers", "recompute_method", "recompute_modules")
        for key in recipe_keys:
            if getattr(shipped.settings, key) is not None:
                value = getattr(shipped.settings, key)
                pins[key] = list(value) if isinstance(value, tuple) else value
        named = [f"{k}={list(pins[k]) if k == 'recompute_modules' else pins[k]}" for k in recipe_keys if k in pins]
        if shipped.settings.selective_recompute:
            named.append(f"selective_recompute={shipped.settings.selective_recompute}")
        assumed.append(" ".join([f"recompute {stack_recompute}", *named])
                       + f" (the stack's recipe: {shipped.source})")
    base: dict[str, Any] = {"stack": rule.stack.label, "model": model, "hardware": hardware, "gpus": gpus,
                            "seq_len": seq, "global_batch_size": gbs, "precision": precision, **keys}
    if shipped is not None and shipped.settings.cpu_offloading_num_layers and not recompute:
        offload = shipped.settings.cpu_offloading_num_layers
        base["cpu_offloading"] = {"num_layers": offload}
        assumed.append(f"CPU activation offloading of {offload} layers (the stack's recipe: {shipped.source})")
    if shipped is not None and shipped.settings.selective_recompute:
        base["selective_recompute"] = shipped.settings.selective_recompute
        if recompute:  # the row states recompute; what selective keeps is still the recipe's
            assumed.append(f"selective_recompute={shipped.settings.selective_recompute} (the stack's recipe: "
                           f"{shipped.source})")
    stated_layout = row.pipeline_layout if pp > 1 else None
    pipeline, why = (({"layout": stated_layout}, "") if stated_layout
                     else _pipeline_options(rule, model, pp, vp or 1, row.run_id))
    if pipeline:
        base["pipeline"] = pipeline
    if pipeline and not stated_layout:
        assumed.append("pipeline split: " + ", ".join(f"{k}={v}" for k, v in pipeline.items()) + f" ({why})")
    if recipe:
        base["fp8_recipe"] = recipe
    where = f"{row.run_id} (line {row.line})"
    escalated: list[str] = []
    try:
        fit_job = job_from_mapping(published_job(row), where)
        project_job = _with_recompute(base, pins, recompute or stack_recompute, where, assumed,
                                      escalated if not recompute else None)
    except InputError as exc:
        raise Unprojectable(_reason(exc)) from None
    return RowJobs(project_job, fit_job, rule, tuple(assumed), tuple(escalated), tuple(unstated))


#: The job field each runs-file column becomes (`published_job`), so that a job's refusal names the column.
COLUMN_OF: dict[str, str] = {
    "gpus": "num_gpus", "global_batch_size": "gbs", "seq_len": "seq_len", "parallel.tp": "tp",
    "parallel.pp": "pp", "parallel.vp": "vp", "parallel.cp": "cp", "parallel.ep": "ep", "parallel.etp": "etp",
    "parallel.mbs": "mbs", "parallel.recompute_num_layers": "recompute_num_layers",
    "model.num_layers": "layers", "model.hidden_size": "hidden", "model.ffn_hidden_size": "ffn",
    "model.num_attention_heads": "heads", "model.num_query_groups": "kv_heads", "model.vocab_size": "vocab",
}


def _reason(exc: InputError) -> str:
    """A job's refusal as a row's reason: the column its field came from, when one did."""
    if exc.field is None:
        return exc.reason
    column = COLUMN_OF.get(exc.field)
    return f"column {column!r} (job {exc.field}): {exc.reason}" if column else f"{exc.field}: {exc.reason}"


def completion(row: RunRow, jobs: RowJobs, values: dict[str, int]) -> Job:
    """The projection job with the unstated axes set to `values` (one legal completion); a new VP gets the
    stack's pipeline split for it, as the point did."""
    spec = jobs.project.spec
    updates: dict[str, Any] = {"parallel": {**spec.parallel.model_dump(exclude_none=True), **values}}
    if "vp" in values and not row.pipeline_layout:
        split, _ = _pipeline_options(jobs.rule, spec.model, spec.parallel.pp or 1, values["vp"], row.run_id)
        updates["pipeline"] = split  # replaces the point's split (empty: Megatron's even split)
    return jobs.project.with_spec(**updates)


def published_job(row: RunRow) -> dict[str, Any]:
    """The job file a user would type for a published run: its layout and the settings its source
    states, and `stack:` of its source. Everything else comes from the stack when the file is read."""
    rule = rule_for(row.source, row.published, row.flags)
    gpus, gbs, seq, mbs, precision, recipe = _sizes(row)
    model, _ = model_ref(row)
    tp, pp, cp = (_int(row, k) or 1 for k in ("tp", "pp", "cp"))
    pins: dict[str, Any] = {"tp": tp, "pp": pp, "cp": cp, "mbs": mbs}
    if row.is_moe:
        pins["ep"] = _int(row, "ep") or 1
        if row["etp"]:
            pins["etp"] = _int(row, "etp")
    if pp > 1 and row["vp"]:
        pins["vp"] = _int(row, "vp")
    sp = row.boolean("sp")
    if sp is not None and "sp_assumed" not in row.flags:
        pins["sp"] = sp
    if row["sharding"] and not row.boolean("sharding_assumed"):
        pins["sharding"] = row["sharding"].lower()
    recompute = row["recompute"].lower()
    if recompute and not row.boolean("recompute_assumed"):
        pins.update(recompute=recompute, **_recompute_pins(row, recompute))
    keys: dict[str, Any] = {}
    model = _with_options(row, keys, model, [])  # launch options the source states (AMD rows)
    job: dict[str, Any] = {"stack": rule.stack.label, "model": model, "hardware": _hardware(row), "gpus": gpus,
                           "seq_len": seq, "global_batch_size": gbs, "precision": precision, **keys,
                           "parallel": pins}
    stated = [r for r in ("tensorwise", "delayed", "blockwise", "mxfp8") if f"fp8_recipe_{r}" in row.flags]
    if recipe or (precision == "fp8" and stated):
        job["fp8_recipe"] = recipe or stated[0]
    if row.is_moe and "tokendrop" in row.flags:
        job.setdefault("moe", {})["capacity_factor"] = 1.0
    if pp > 1 and row.pipeline_layout:
        job["pipeline"] = {"layout": row.pipeline_layout}
    return job


def _pipeline_options(rule: SourceRule, model: Any, pp: int, vp: int, where: str) -> tuple[dict[str, Any], str]:
    """How the source's recipes split the layers over PP × VP chunks, and why: the layout the model's
    recipe names there, else, when the layers do not divide evenly, the stack's split
    (`primus.stacks.apply.pipeline_split`); for a stack that only splits evenly, the same fallback,
    recorded as assumed by the caller."""
    if pp == 1:
        return {}, ""
    from primus.catalog.models import resolve_model

    spec = resolve_model(model, where)
    split, named = stack_split(rule.stack, spec, pp, vp)
    if named is not None:
        return split, recipe_origin(named)
    uneven = "the even split does not divide the layers"
    if split or rule.stack["pipeline_split"] != "even":
        return split, uneven
    try:
        layout_for(spec, PipelineOptions(), pp, vp)
        return {}, ""
    except InputError:
        fallback = replace(rule.stack, values={**rule.stack.values, "pipeline_split": "even_else_accounted"})
        return pipeline_split(fallback, spec, pp, vp), uneven


def _with_options(row: RunRow, keys: dict[str, Any], model: Any, assumed: list[str]) -> Any:
    """Merge the Primus options the row states (`primus.fidelity.options`) into the job keys; the model
    reference, with any architecture override they make."""
    try:
        opts = apply_options(row["options"], is_moe=row.is_moe)
    except ValueError as exc:
        raise Unprojectable(str(exc)) from None
    merge_keys(keys, opts.job)
    if opts.modelled:
        assumed.append("Primus options: " + ", ".join(opts.modelled))
    if opts.not_modelled:
        assumed.append("Primus options not modelled (no sourced cost): " + ", ".join(opts.not_modelled))
    if not opts.model:
        return model
    return {**model, **opts.model} if isinstance(model, dict) else {"base": model, **opts.model}


def _recompute_pins(row: RunRow, recompute: str) -> dict[str, Any]:
    """What a row states about which layers full recompute covers: Megatron's method and layer count,
    or Primus's listed layer ids (`primus.memory.recompute`)."""
    if recompute != "full":
        return {}
    try:
        method, count, ids = row.recompute_method, row.integer("recompute_num_layers"), row.recompute_layer_ids
    except ValueError as exc:
        raise Unprojectable(str(exc)) from None
    out: dict[str, Any] = {}
    if ids is not None:
        out["recompute_layer_ids"] = ids
    elif method:
        out["recompute_method"] = method
    if count and ids is None:
        out["recompute_num_layers"] = count
    return out


def _scaleup(hardware: str) -> int:
    from primus.catalog.hardware import resolve_hardware

    return resolve_hardware(hardware, "runs", "gpu").scaleup.domain_size


def _fits(job: Job) -> bool:
    return MemoryModel(job).evaluate(pinned_layout(job), strict=False).fits


def _with_recompute(base: dict[str, Any], pins: dict[str, Any], recompute: str, where: str,
                    assumed: list[str], escalated: list[str] | None) -> Job:
    """The projection job: every axis pinned. A stated recompute is kept. The stack's recompute
    (`escalated` given) is kept when it fits; otherwise the first setting the ledger says fits of the
    heavier ones (selective, full recompute of the fewest layers per chunk by the block method, full
    of every layer), recorded in `escalated` with the reason. A recipe that offloads activations to host
    memory first offloads more layers (Megatron-Core runs offloading only without recompute)."""
    first = job_from_mapping({**base, "parallel": {**pins, "recompute": recompute}}, where)
    if escalated is None:
        return first
    if _fits(first):
        if not any(a.startswith("recompute ") for a in assumed):
            assumed.append(f"recompute {recompute} (stack default)")
        return first
    why = f"recompute {recompute} does not fit (peak {_peak_gib(first):.2f} GiB over capacity)"
    offloaded = first.spec.cpu_offloading.offloaded_layers
    if offloaded and recompute == "none":
        more = _more_offload(base, pins, offloaded, first.model.num_layers, where)
        if more is not None:
            escalated.append(f"CPU offloading {offloaded} -> {more.spec.cpu_offloading.num_layers} layers "
                             f"(fewest that fit; Megatron-Core offloads only without recompute): {why}")
            return more
        base = {k: v for k, v in base.items() if k != "cpu_offloading"}  # recompute excludes offloading
        why += f"; nor does offloading {first.model.num_layers - 1} layers"
    ladder = RECOMPUTE_LADDER[RECOMPUTE_LADDER.index(recompute) + 1:] if recompute in RECOMPUTE_LADDER else ()
    for option in ladder:
        job = job_from_mapping({**base, "parallel": {**pins, "recompute": option}}, where)
        if _fits(job):
            escalated.append(f"recompute {recompute} -> {option}: {why}")
            return job

    def block(k: int) -> Job:
        return job_from_mapping({**base, "parallel": {**pins, "recompute": "full", "recompute_method": "block",
                                                       "recompute_num_layers": k}}, where)

    full = job_from_mapping({**base, "parallel": {**pins, "recompute": "full"}}, where)
    per_chunk = -(-full.model.num_layers // (pins["pp"] * pins.get("vp", 1)))
    lo, hi = 1, per_chunk
    if per_chunk > 1 and _fits(block(per_chunk - 1)):
        while lo < hi:  # memory falls as k grows: the fewest recomputed layers that fit
            mid = (lo + hi) // 2
            if _fits(block(mid)):
                hi = mid
            else:
                lo = mid + 1
        if lo < per_chunk:
            escalated.append(f"recompute {recompute} -> full, block method, {lo} of {per_chunk} layers per chunk "
                             f"(fewest that fit): {why}")
            return block(lo)
    escalated.append(f"recompute {recompute} -> full" + ("" if _fits(full) else " (even full does not fit)")
                     + f": {why}")
    return full


def _more_offload(base: dict[str, Any], pins: dict[str, Any], offloaded: int, num_layers: int,
                  where: str) -> Job | None:
    """The job offloading the fewest more layers (up to all but one, Megatron-Core's limit) that fits at
    recompute none, or None when none does."""

    def job(k: int) -> Job:
        return job_from_mapping({**base, "cpu_offloading": {"num_layers": k},
                                 "parallel": {**pins, "recompute": "none"}}, where)

    lo, hi = offloaded + 1, num_layers - 1
    if lo > hi or not _fits(job(hi)):
        return None
    while lo < hi:  # memory falls as more layers are offloaded
        mid = (lo + hi) // 2
        if _fits(job(mid)):
            hi = mid
        else:
            lo = mid + 1
    return job(lo)


def _peak_gib(job: Job) -> float:
    return float(MemoryModel(job).evaluate(pinned_layout(job), strict=False).peak_bytes) / 2**30
