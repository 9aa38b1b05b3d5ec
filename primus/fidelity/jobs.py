"""A published run row, turned into primus jobs: the one to project and the one to check for fit.

The row's cells are pins; empty cells follow the source's rule (`primus.fidelity.defaults`). Two jobs
come out of a row:

- the *projection* job pins every axis (stated cells, else the rule's default; recompute left empty
  climbs the rule's ladder to the lightest setting the ledger says fits);
- the *fit* job pins only what the source stated (cells not marked assumed) and leaves the rest free,
  so `primus fit` answers "could this published run have fitted at all?" — a run that ran must.

A model slug outside the catalog is rebuilt from the architecture columns when that is unambiguous: a
catalog model with the same dimensions, or a catalog model of the same family (name prefix) whose
architecture conventions (activation, norm, positions, attention kind) carry over, with the
dimensions overridden. Anything else is refused with the reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
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
from primus.specs.model import ModelSpec

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


def _same_dims(spec: ModelSpec, arch: dict[str, int | None]) -> bool:
    ffn = spec.moe_ffn_hidden_size if spec.num_experts else spec.ffn_hidden_size
    have = {"num_layers": spec.num_layers, "hidden_size": spec.hidden_size, "vocab_size": spec.vocab_size,
            "num_attention_heads": spec.num_attention_heads, "num_experts": spec.num_experts,
            "moe_router_topk": spec.moe_router_topk, "ffn": ffn,
            "num_query_groups": spec.num_query_groups or spec.num_attention_heads}
    return all(arch[k] is None or arch[k] == v for k, v in have.items() if k in arch)


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
        if "proxy" in row.flags and arch["num_layers"] and arch["num_layers"] != base.num_layers:
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


def build(row: RunRow) -> RowJobs:
    """Both jobs of a row (Unprojectable with the reason when the row cannot be built)."""
    rule = rule_for(row.source, row.published)
    assumed: list[str] = []
    gpus, gbs, seq, mbs = (_int(row, k) for k in ("num_gpus", "gbs", "seq_len", "mbs"))
    if not (gpus and gbs and seq and mbs):
        raise Unprojectable("num_gpus, gbs, seq_len and mbs are all needed")
    prec = row["precision"].lower()
    if prec not in PRECISIONS:
        raise Unprojectable(f"precision {prec!r} is not one of {', '.join(PRECISIONS)}")
    precision, recipe = PRECISIONS[prec]
    stated_recipe = [r for r in ("tensorwise", "delayed", "blockwise", "mxfp8") if f"fp8_recipe_{r}" in row.flags]
    if recipe == "" and stated_recipe:
        recipe = stated_recipe[0]  # the recipe the source's config sets (flag fp8_recipe_<name>)
    elif recipe == "":
        recipe = rule.fp8_recipe
        assumed.append(f"fp8 recipe {recipe} (source default)")
    model, notes = model_ref(row)
    assumed += notes
    hardware = _hardware(row)
    tp, pp, cp = (_int(row, k) or 1 for k in ("tp", "pp", "cp"))
    is_moe = row.is_moe
    ep, etp = (_int(row, "ep") or 1, _int(row, "etp")) if is_moe else (1, 1)
    if etp is None:
        etp = tp if rule.etp_is_tp else 1
        assumed.append(f"etp {etp} (source default)")
    vp = _int(row, "vp")
    if vp is None and pp > 1:
        vp = rule.vp
        assumed.append(f"vp {vp} (source default)")
    sp = row.boolean("sp")
    if sp is None:
        sp = rule.sp_with_tp and tp > 1
        assumed.append(f"sp {'on' if sp else 'off'} (source default)")
    sharding = row["sharding"].lower() or rule.sharding
    if sharding not in SHARDINGS:
        raise Unprojectable(f"sharding {sharding!r} is not one of {', '.join(SHARDINGS)}")
    if not row["sharding"]:
        assumed.append(f"sharding {sharding} (source default)")
    recompute = row["recompute"].lower()
    if recompute and recompute not in RECOMPUTES:
        raise Unprojectable(f"recompute {recompute!r} is not one of {', '.join(RECOMPUTES)}")
    try:
        cluster_domain = _scaleup(hardware)
    except InputError as exc:
        raise Unprojectable(exc.reason) from None
    keys = rule.job_keys(tp=tp, scaleup_domain=cluster_domain, is_moe=is_moe)
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
    base: dict[str, Any] = {"model": model, "hardware": hardware, "gpus": gpus, "seq_len": seq,
                            "global_batch_size": gbs, "precision": precision, **keys}
    stated_layout = row.pipeline_layout if pp > 1 else None
    pipeline = {"layout": stated_layout} if stated_layout else _pipeline_options(model, pp, vp or 1, row.run_id)
    if pipeline:
        base["pipeline"] = pipeline
    if pipeline and not stated_layout:
        assumed.append("pipeline split: " + ", ".join(f"{k}={v}" for k, v in pipeline.items())
                       + " (the even split does not divide the layers)")
    if recipe:
        base["fp8_recipe"] = recipe
    where = f"{row.run_id} (line {row.line})"
    try:
        fit_job = job_from_mapping({**base, "parallel": _stated(row, pins, recompute)}, where)
        project_job = _with_recompute(base, pins, recompute or rule.recompute, where, assumed)
    except InputError as exc:
        raise Unprojectable(exc.reason if exc.field is None else f"{exc.field}: {exc.reason}") from None
    return RowJobs(project_job, fit_job, rule, tuple(assumed))


def _pipeline_options(model: Any, pp: int, vp: int, where: str) -> dict[str, Any]:
    """How the recipe splits layers that do not divide evenly over PP × VP chunks: NeMo and Megatron-Bridge
    count the embedding and the loss as layers (Llama 3.1 405B, Qwen3 recipes) or give an explicit
    `pipeline_model_parallel_layout` (DeepSeek-V3); the even split when it works, else the first of those
    that Megatron accepts, else the most balanced explicit layout."""
    if pp == 1:
        return {}
    from primus.catalog.models import resolve_model
    from primus.specs.job import PipelineOptions

    spec = resolve_model(model, where)
    options = PipelineOptions()
    try:
        layout_for(spec, options, pp, vp)
        return {}
    except InputError:
        pass
    accounted = {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}
    try:
        layout_for(spec, PipelineOptions(**accounted), pp, vp)
        return accounted
    except InputError:
        pass
    return {"layout": recipe_layout(spec.num_layers, pp, vp, spec.mtp_num_layers)}


def recipe_layout(num_layers: int, pp: int, vp: int, mtp_layers: int = 0) -> str:
    """An explicit `pipeline_model_parallel_layout` as the recipes write them when the layers do not
    divide: chunk sizes differ by at most one, and the extra layers go to the middle pipeline ranks,
    never to the first rank (it holds the most in-flight microbatches) nor the last one (it holds the
    output layer and the loss) while another rank can take them (e.g. DeepSeek-V3's
    "Et*4|(t*4|)*14tmL" in Megatron-Bridge)."""
    chunks = pp * vp
    base, extra = divmod(num_layers, chunks)
    ranks = sorted(range(pp), key=lambda r: (r in (0, pp - 1), abs(2 * r - (pp - 1)), r))
    order = [v * pp + r for r in ranks for v in range(vp)]
    counts = [base] * chunks
    for c in order[:extra]:
        counts[c] += 1
    parts = []
    for c, n in enumerate(counts):
        text = ("E" if c == 0 else "") + ("t" * n if n <= 1 else f"t*{n}")
        if c == chunks - 1:
            text += "m" * mtp_layers + "L"
        parts.append(text)
    return "|".join(parts)


def _with_options(row: RunRow, keys: dict[str, Any], model: Any, assumed: list[str]) -> Any:
    """Merge the Primus options the row states (`primus.fidelity.options`) into the job keys; the model
    reference, with any architecture override they make."""
    opts = apply_options(row["options"], is_moe=row.is_moe)
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


def _stated(row: RunRow, pins: dict[str, Any], recompute: str) -> dict[str, Any]:
    """The pins a source actually stated: cells present and not marked assumed."""
    out = dict(pins)
    if not row["vp"]:
        out.pop("vp", None)
    if row.boolean("sp") is None or "sp_assumed" in row.flags:
        out.pop("sp", None)
    if not row["sharding"] or row.boolean("sharding_assumed"):
        out.pop("sharding", None)
    if not row["etp"]:
        out.pop("etp", None)
    if recompute and not row.boolean("recompute_assumed"):
        out["recompute"] = recompute
    return out


def _fits(job: Job) -> bool:
    return MemoryModel(job).evaluate(pinned_layout(job), strict=False).fits


def _with_recompute(base: dict[str, Any], pins: dict[str, Any], recompute: str, where: str,
                    assumed: list[str]) -> Job:
    """The projection job: every axis pinned. "ladder" keeps the first setting the ledger says fits of:
    none, selective, full recompute (block method) of the fewest layers per chunk, full of every layer."""
    if recompute != "ladder":
        return job_from_mapping({**base, "parallel": {**pins, "recompute": recompute}}, where)
    for option in RECOMPUTE_LADDER:
        job = job_from_mapping({**base, "parallel": {**pins, "recompute": option}}, where)
        if _fits(job):
            assumed.append(f"recompute {option} (lightest that fits; source default none)")
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
            assumed.append(f"recompute full, block method, {lo} of {per_chunk} layers per chunk (fewest that fit)")
            return block(lo)
    assumed.append("recompute full (lightest that fits)" if _fits(full)
                   else "recompute full (nothing lighter fits; even full does not)")
    return full
