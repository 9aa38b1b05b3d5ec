"""How a stack fills in what a job file leaves out.

The stack's settings go *under* the job's own keys: anything the job writes wins. Settings are the
keys that are not parallel axes (dtypes, overlap, kernels, the MoE dispatcher, the fp8 recipe, the
framework). Axes the job leaves free stay free for `fit`, `enumerate` and `tune` to choose, except:

- sharding, when the framework does not offer every kind (torchtitan, llm-foundry and NeMo AutoModel
  shard with FSDP only): a hard rule `stack-sharding`, which `tune` keeps when it releases the pins;
- the pipeline split, when PP (and VP) are pinned, the decoder layers do not divide evenly and the
  stack's recipes count the embedding and the loss as layers (Megatron-Bridge, NeMo).

Every key the stack set is returned by name, so `job show` and reports can list it as assumed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from primus.errors import InputError
from primus.memory.activations import implied_selective
from primus.stacks.core import Stack
from primus.stacks.schema import ModelPipelineLayout, loss_kernels

ACCOUNTED = {"account_for_embedding_in_pipeline_split": True, "account_for_loss_in_pipeline_split": True}


def setting_keys(stack: Stack, *, precision: str, scaleup_domain: int, tp: int | None = None,
                 is_moe: bool = True) -> dict[str, Any]:
    """The job keys a stack sets. With `tp` known, TP-comm overlap is on only when TP > 1 (as the
    recipes set it); with `is_moe` False, no all-to-all overlap."""
    v = stack.values
    ce = v["cross_entropy"]
    grads = main_grads_dtype(stack, precision)
    keys: dict[str, Any] = {
        "framework": v["framework"],
        "optimizer": {"main_grads_dtype": grads, "main_params_dtype": v["optimizer_state_dtype"],
                      "exp_avg_dtype": v["optimizer_state_dtype"], "exp_avg_sq_dtype": v["optimizer_state_dtype"]},
        "overlap": {"grad_reduce": v["grad_reduce_overlap"], "param_gather": v["param_gather_overlap"],
                    "tp_comm": bool(v["tp_comm_overlap"]) and (tp is None or tp > 1),
                    "moe_a2a": bool(v["moe_a2a_overlap"]) and is_moe},
        # a compiled loss keeps neither the fused nor the eager buffers: the ledger's default form
        "kernels": {"flash_attention": v["flash_attention"], **loss_kernels(str(ce))},
        "moe": {"token_dispatcher": dispatcher(stack, scaleup_domain)},
    }
    if v.get("moe_permute_fusion") is not None and is_moe:
        keys["moe"]["permute_fusion"] = bool(v["moe_permute_fusion"])
    if v.get("moe_unfused_permute_syncs") is not None and is_moe:
        keys["moe"]["unfused_permute_syncs"] = int(v["moe_unfused_permute_syncs"])
    selective = v["selective_recompute"]  # set only where it is not the framework's own mode
    if selective != implied_selective(str(v["framework"])):
        keys["selective_recompute"] = selective
    if precision == "fp8":
        keys["fp8_recipe"] = v["fp8_recipe"]
        keys["fp8_param_gather"] = bool(v["fp8_param_gather"])
    return keys


def main_grads_dtype(stack: Stack, precision: str) -> str:
    """The stack's main-gradient dtype at `precision`. Megatron accumulates and reduces gradients in fp32 only
    for --bf16 (core_v0.15.0 arguments.py lines 733-745 set accumulate_allreduce_grads_in_fp32 under args.bf16
    alone); with --fp16 the DDP buffer holds the parameters' dtype (distributed_data_parallel.py line 168:
    grad_dtype = torch.float if grad_reduce_in_fp32 else param.dtype) unless --accumulate-allreduce-grads-in-fp32
    is given. Each stack states what its fp16 runs keep (`main_grads_dtype_fp16`: fp16 for Megatron-Core's DDP,
    fp32 for the 2022 papers' all-reduce; null where the stack's `main_grads_dtype` holds for fp16 too)."""
    grads = str(stack.values["main_grads_dtype"])
    if precision == "fp16" and stack.values.get("main_grads_dtype_fp16") is not None:
        return str(stack.values["main_grads_dtype_fp16"])
    return grads


def dispatcher(stack: Stack, scaleup_domain: int) -> str:
    """The MoE dispatcher by hardware: the stack's scale-up choice on NVL72-class domains (> 8 GPUs)."""
    big = stack.values.get("moe_dispatcher_scaleup")
    return str(big if big and scaleup_domain > 8 else stack.values["moe_dispatcher"])


def _under(defaults: Mapping[str, Any], data: Mapping[str, Any], path: str, applied: list[str]) -> dict[str, Any]:
    """`data` over `defaults`, recording each default that was used."""
    out = dict(data)
    for key, value in defaults.items():
        here = f"{path}{key}"
        if key not in data:
            out[key] = value
            applied.append(here)
        elif isinstance(value, Mapping) and isinstance(data[key], Mapping):
            out[key] = _under(value, data[key], here + ".", applied)
    return out


def apply_stack(stack: Stack, data: Mapping[str, Any], *, scaleup_domain: int) -> tuple[dict[str, Any], list[str]]:
    """The job mapping with the stack's settings under it, and the dotted keys the stack supplied."""
    precision = data.get("precision", "bf16")
    parallel = data.get("parallel")
    tp = parallel.get("tp") if isinstance(parallel, Mapping) else None
    defaults = setting_keys(stack, precision=str(precision), scaleup_domain=scaleup_domain,
                            tp=tp if isinstance(tp, int) else None)
    kernels = data.get("kernels")
    if isinstance(kernels, Mapping) and ("cross_entropy_fusion" in kernels or "eager_cross_entropy" in kernels):
        for key in ("cross_entropy_fusion", "eager_cross_entropy"):  # the job chose its loss (a fused one
            defaults["kernels"].pop(key)  # still runs the stack's kernel unless it names one)
    applied: list[str] = []
    merged = _under(defaults, data, "", applied)
    rule = sharding_rule(stack)
    written = data.get("rules") or []
    if rule is not None and not any(isinstance(r, Mapping) and r.get("id") == rule["id"] for r in written):
        merged["rules"] = [*(data.get("rules") or []), rule]
        applied.append(f"rules ({rule['id']}: {rule['require']})")
    return merged, applied


#: Every sharding the ledger models; a stack offering fewer adds a rule (not a pin, so that `tune`,
#: which releases the job's pins, still searches only what the framework can run).
ALL_SHARDINGS = ("none", "zero1", "dist_opt", "zero2", "fsdp")


def sharding_rule(stack: Stack) -> dict[str, str] | None:
    """The hard rule limiting `sharding` to what the framework offers (zero1 is dist_opt's axis)."""
    choices = {"dist_opt" if c == "zero1" else c for c in stack.values["sharding_choices"]}
    if choices >= {"dist_opt" if c == "zero1" else c for c in ALL_SHARDINGS}:
        return None
    return {"id": "stack-sharding", "why": f"{stack.label} shards with {', '.join(sorted(choices))} only",
            "source": _short(stack.sources["sharding_choices"]),
            "require": " or ".join(f"sharding_{c}" for c in sorted(choices))}


def _short(text: str, limit: int = 480) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


#: What makes a model the one a recipe's layout was written for, whatever it is called (a Hugging Face
#: config.json of DeepSeek-V3 is named after its folder): the layers the layout places and their kind.
ARCHITECTURE = ("num_layers", "mtp_num_layers", "hidden_size", "num_attention_heads", "num_experts",
                "moe_ffn_hidden_size", "multi_latent_attention", "vocab_size")


def _recipe_model(stack: Stack, spec: Any) -> str | None:
    """The model of the stack's `pipeline_layouts` that `spec` is: by catalog name, else by architecture
    (`ARCHITECTURE`) against the catalog entry of that name."""
    from primus.catalog.models import resolve_model

    names = sorted({r.model for r in stack.pipeline_layouts})
    if spec.name in names:
        return str(spec.name)
    mine = tuple(getattr(spec, f, None) for f in ARCHITECTURE)
    for name in names:
        try:
            known = resolve_model(name, "stack pipeline_layouts")
        except InputError:
            continue
        if tuple(getattr(known, f, None) for f in ARCHITECTURE) == mine:
            return name
    return None


def model_pipeline_layout(stack: Stack, spec: Any, pp: int, vp: int) -> ModelPipelineLayout | None:
    """The layout the stack's recipe for this model names at PP x VP (`Stack.pipeline_layout_for`), when
    it fits the model as given (a model whose layers were overridden falls back to the stack's split)."""
    from primus.memory.shapes import layout_for
    from primus.specs.job import PipelineOptions

    if pp == 1 or not stack.pipeline_layouts:
        return None
    model = _recipe_model(stack, spec)
    named = stack.pipeline_layout_for(model, pp, vp) if model is not None else None
    if named is None:
        return None
    if named.mtp_from_model:
        tail = "m" * (spec.mtp_num_layers or 0) + "L"
        named = named.model_copy(update={"layout": re.sub(r"m(\*\d+)?L$|L$", tail, named.layout)})
    try:
        layout_for(spec, PipelineOptions(layout=named.layout), pp, vp)
    except InputError:
        return None
    return named


def recipe_layout_note(stack: Stack, spec: Any, layout: str | None, pp: int, vp: int) -> str | None:
    """The assumption line for a job whose pipeline layout is the one the stack's recipe names at PP x VP
    (what the result rests on: the split decides the bottleneck stage); None otherwise."""
    named = model_pipeline_layout(stack, spec, pp, vp) if layout is not None else None
    if named is None or layout != named.layout:
        return None
    return f"pipeline layout {named.layout} at PP {pp} x VP {vp}: {stack.label}'s recipe for {named.model} " \
           "(primus stacks show)"


def recipe_origin(named: ModelPipelineLayout) -> str:
    """Where a recipe's layout comes from, as a job's assumptions say it."""
    return f"the stack's recipe for {named.model}: {named.source}"


def stack_split(stack: Stack, spec: Any, pp: int, vp: int) -> tuple[dict[str, Any], ModelPipelineLayout | None]:
    """The `pipeline` options the stack's recipes use for `spec` at PP x VP, and the recipe layout they are
    when they are one: the layout the model's recipe names there (`model_pipeline_layout`, as
    Megatron-Bridge's DeepSeek-V3 recipe sets it before anything else); {} when the even split works or
    the stack only splits evenly; the embedding and the loss counted as layers when that divides; else an
    explicit layout with the extra layers off the first and last stages."""
    from primus.memory.shapes import layout_for
    from primus.specs.job import PipelineOptions

    named = model_pipeline_layout(stack, spec, pp, vp)
    if named is not None:
        return {"layout": named.layout}, named
    if pp == 1 or stack.values["pipeline_split"] != "even_else_accounted":
        return {}, None  # even, or torchtitan's own split, which `Job.pipeline_at` computes at every PP x VP
    try:
        layout_for(spec, PipelineOptions(), pp, vp)
        return {}, None
    except InputError:
        pass
    try:
        layout_for(spec, PipelineOptions(**ACCOUNTED), pp, vp)
        return dict(ACCOUNTED), None
    except InputError:
        pass
    return {"layout": recipe_layout(spec.num_layers, pp, vp, spec.mtp_num_layers)}, None


def search_split(stack: Stack, spec: Any, pp: int, vp: int) -> dict[str, Any]:
    """The `pipeline` options the stack gives the model at a PP x VP that a search tries, for a job that
    leaves the split to it: the layout the model's recipe names there (Megatron-Bridge's DeepSeek-V3 recipe
    sets it from its `layout_map` for the (PP, VP) it is run at), else none, Megatron's even split (which
    the rule `pipeline-split` refuses where the layers do not divide). Unlike `stack_split`, which sizes a
    pinned PP the way the stack's published runs were split, nothing stack-wide: the embedding and loss
    accounting is set per model by the recipes that use it (Llama 3.1 405B's, Qwen3's), not by every
    recipe of the stack, and a recipe that names no layout leaves the split to Megatron (Bridge's
    `set_deepseek_v3_pipeline_model_parallel_layout` sets nothing for a (PP, VP) its map lacks), so a search
    counts as legal no split that no recipe writes."""
    named = model_pipeline_layout(stack, spec, pp, vp)
    return {"layout": named.layout} if named is not None else {}


def search_split_text(stack: Stack, spec: Any) -> str | None:
    """What `search_split` does for this model on this stack, in words; None when it leaves every PP x VP to
    Megatron's even split."""
    named = _recipe_model(stack, spec) if stack.pipeline_layouts else None
    if named is None or not any(stack.pipeline_layout_for(named, r.pp, r.vp) is not None
                                for r in stack.pipeline_layouts if r.model == named):
        return None  # no layout of this model's recipe holds for the release asked for
    return f"the layouts {stack.label}'s recipe for {named} names (primus stacks show), else Megatron's default split"


def pipeline_split(stack: Stack, spec: Any, pp: int, vp: int) -> dict[str, Any]:
    """The `pipeline` options of `stack_split`."""
    return stack_split(stack, spec, pp, vp)[0]


def recipe_layout(num_layers: int, pp: int, vp: int, mtp_layers: int = 0) -> str:
    """An explicit `pipeline_model_parallel_layout` as the recipes write them when the layers do not
    divide: chunk sizes differ by at most one, and the extra layers go to the middle pipeline ranks,
    never to the first rank (it holds the most in-flight microbatches) nor the last one (it holds the
    output layer and the loss) while another rank can take them. A model whose recipe names its own
    layout (Megatron-Bridge's DeepSeek-V3 "Et*4|(t*4|)*14tmL") gets that one (`model_pipeline_layout`)."""
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
