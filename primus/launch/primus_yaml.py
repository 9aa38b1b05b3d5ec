"""AMD Primus experiment YAML (AMD-AGI/Primus, Megatron backend): read one, write one.

A Primus experiment names a trainer config and a Primus model file and lists Megatron arguments by
their argparse dest under ``modules.pre_trainer.overrides`` (see AMD-AGI/Primus
``examples/megatron/configs/MI300X/*-pretrain.yaml``). Keys absent from the overrides take Primus's
defaults, which differ from Megatron's: ``primus/configs/modules/megatron/pre_trainer.yaml`` and the
``trainer_base.yaml`` it extends (micro batch 2, global batch 16, sequence 1024, bf16, distributed
optimizer) over ``primus/configs/models/megatron/language_model.yaml`` (sequence parallel on, SwiGLU,
no linear biases, untied embeddings), all at AMD-AGI/Primus fd1eeab. ``${NAME:default}`` placeholders
take their written default (the environment is not read). The model file is read from a Primus
checkout with its ``extends:`` chain (`primus.launch.primus_models`); without one, it stands for the
catalog model of the same name; architecture keys in the overrides apply on top of it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

import yaml

from primus import __version__
from primus.errors import InputError, shown
from primus.job import Job
from primus.launch.arch import catalog_spec
from primus.launch.common import (
    Collector,
    Exported,
    LaunchConfig,
    derived_model_name,
    finish,
    header_line,
    read_header,
    residual,
    resolve_cluster,
    shorten,
)
from primus.launch.megatron_args import BY_DEST, coerce
from primus.launch.megatron_export import yarn_as_rope
from primus.launch.megatron_job import ImportContext, args_from_job, job_from_args
from primus.launch.primus_models import (
    BASE_MODEL_FILE,
    MODEL_FILES,
    MODELS_DIR,
    SLUG_OF_FILE,
    find_root,
    read_model_file,
    substitute,
)
from primus.launch.primus_published import PUBLISHED_COMMIT, published_model_file
from primus.parallel import Layout
from primus.stacks.primus_turbo import (
    DEEPEP_KEY,
    SYNC_FREE_KEY,
    SYNC_FREE_UNMODELLED,
    TURBO_GROUPED_GEMM_KEY,
    TURBO_KEY,
    is_stage,
    sync_free_moe,
)
from primus.yamlio import loads_yaml

PRIMUS_RELEASE: Final = ("AMD Primus (AMD-AGI/Primus) Megatron trainer: experiment YAML modules.pre_trainer."
                         "overrides with Megatron-LM dest names; defaults of primus/configs/modules/megatron/"
                         "pre_trainer.yaml and primus/configs/models/megatron/language_model.yaml at AMD-AGI/Primus "
                         "commit fd1eeabbad15135e3702094087e96142b4b4eacb (2026)")

PRIMUS_DEFAULTS: Final[dict[str, Any]] = {
    "micro_batch_size": 2, "global_batch_size": 16, "seq_length": 1024, "bf16": True,
    "use_distributed_optimizer": True, "use_flash_attn": True, "sequence_parallel": True, "swiglu": True,
    "add_bias_linear": False, "untie_embeddings_and_output_weights": True, "fp8_recipe": "delayed",
    # language_model.yaml says false, but model presets set it (mixtral_base.yaml, deepseek_v3_base.yaml:
    # true); with the model file unread and not one primus ships (primus_published) it is not known
    "moe_grouped_gemm": None,
}
_SECTION = "modules.pre_trainer.overrides"
#: A template's slot for the user to fill in (`model: <YOUR_MODEL_YAML>`)
TEMPLATE_SLOT: Final = re.compile(r"<[A-Z][A-Z0-9_]*>")
_METADATA = ("work_group", "user_name", "exp_name", "workspace")


def _sync_free_stage(value: Any, where: str) -> int:
    """The stage as Primus accepts it (an environment substitution has already been typed as YAML types it,
    primus_models.substitute)."""
    if not is_stage(value):
        raise InputError(where, f"{_SECTION}.{SYNC_FREE_KEY}", "must be an integer from 0 to 3 (Primus's "
                         f"sync-free MoE stages), got {shown(value)}")
    return int(value)


def _switch(key: str, value: Any, where: str) -> bool:
    """A Primus-Turbo switch: true or false, as Primus's YAML types it."""
    if not isinstance(value, bool):
        raise InputError(where, f"{_SECTION}.{key}", f"must be true or false, got {shown(value)}")
    return value


def _sync_free_prerequisites(overrides: dict[str, Any], stage: int, out: Collector) -> None:
    """List what the stage turns on that primus does not model, and say when the file lacks what Primus
    requires for it (rocm_arg_validation.py: enable_primus_turbo for any stage, use_turbo_grouped_gemm from
    stage 2): a launch script may still pass those on its command line, so this is a note, not a refusal."""
    out.skip(f"{SYNC_FREE_KEY}: {stage} (read: the fused permutation"
             + (", token counts on the device, DeepEP" if stage >= 2 else "") + "; implied and not modelled: "
             + ", ".join(SYNC_FREE_UNMODELLED[stage]) + ")")
    if overrides.get(TURBO_KEY) is not True:
        out.note(f"{SYNC_FREE_KEY} {stage}: Primus requires enable_primus_turbo: true, which this file does not set")
    if stage >= 2 and overrides.get(TURBO_GROUPED_GEMM_KEY) is not True:
        out.note(f"{SYNC_FREE_KEY} {stage}: Primus requires {TURBO_GROUPED_GEMM_KEY}: true from stage 2, which this "
                 "file does not set")


def _module(doc: Any, where: str) -> tuple[str, dict[str, Any]]:
    if not isinstance(doc, dict) or not isinstance(doc.get("modules"), dict) or not doc["modules"]:
        if doc is None or doc == {}:
            found = "the file is empty"
        elif isinstance(doc, dict):
            found = f"top-level keys: {shorten(', '.join(str(k) for k in list(doc)[:6]), 80)}"
        else:
            found = f"its top level is a {type(doc).__name__}, not a mapping"
        raise InputError(where, "modules", f"not an experiment: a Primus experiment has a 'modules' mapping, this file "
                         f"has none ({found})")
    name = "pre_trainer" if "pre_trainer" in doc["modules"] else next(iter(doc["modules"]))
    module = doc["modules"][name]
    if not isinstance(module, dict):
        raise InputError(where, f"modules.{name}", "must be a mapping")
    framework = module.get("framework", "megatron")
    if framework != "megatron":
        raise InputError(where, f"modules.{name}.framework",
                         f"{framework!r}: only Primus's Megatron backend is read (use --from torchtitan for TOML)")
    return name, module


def import_primus(text: str, where: str, *, hardware: str | None = None, nodes: int | None = None,
                  gpus: int | None = None, base_dir: Path | None = None,
                  primus_root: Path | None = None) -> LaunchConfig:
    out = Collector()
    header = read_header(text, where)
    doc = loads_yaml(text, where)
    name, module = _module(doc, where)
    metadata = [key for key in doc if key in _METADATA]
    if metadata:
        out.note(f"experiment metadata not used: {', '.join(metadata)}")
    for key, value in doc.items():
        if key != "modules" and key not in _METADATA:
            out.skip(f"{key}: {value}")
    for key, value in doc["modules"].items():
        if key != name:
            out.skip(f"modules.{key}: {shorten(str(value), 60)}")
    overrides = module.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise InputError(where, f"modules.{name}.overrides", "must be a mapping")
    ns: dict[str, Any] = {}
    unknown: list[str] = []
    layer_ids: tuple[int, ...] | None = None
    sync_free_stage = 0
    deepep = False
    typed: dict[str, Any] = {}  # every override after substitution
    for key, value in overrides.items():
        value = typed[key] = substitute(value, where, f"overrides.{key}", out)
        if key == "recompute_layer_ids":
            layer_ids = _layer_ids(value, where)
        elif key == SYNC_FREE_KEY:
            sync_free_stage = _sync_free_stage(value, where)
        elif key == TURBO_KEY:  # the switch Turbo's DeepEP and sync-free MoE need; each Turbo kernel has its own key
            _switch(key, value, where)
        elif key == DEEPEP_KEY:
            deepep = _switch(key, value, where)
        elif key in BY_DEST:
            ns[key] = coerce(BY_DEST[key], value, where, f"overrides.{key}")
        else:
            unknown.append(f"{key}: {value}")
    _fp4_recipe(ns, overrides, out)
    if sync_free_stage >= 1 and ns.get("moe_permute_fusion") is False:  # the stage's options win (Primus)
        out.note(f"{_SECTION}.moe_permute_fusion false is overridden: {SYNC_FREE_KEY} {sync_free_stage} turns "
                 "the fused permutation on")
    model_file = str(substitute(module.get("model", BASE_MODEL_FILE), where, f"modules.{name}.model", out))
    if TEMPLATE_SLOT.fullmatch(model_file):  # AMD's native_hf_to_megatron_sft.template.yaml: <YOUR_MODEL_YAML>
        raise InputError(where, f"modules.{name}.model", f"not an experiment: a template ({model_file} is a slot to "
                         "fill in); import the experiment written from it")
    file_ns, slug, from_catalog = _model_file(model_file, ns, where, name, primus_root, out)
    for key, value in module.items():
        if key not in ("framework", "config", "model", "overrides"):
            out.skip(f"modules.{name}.{key}: {value}")
    if module.get("config", "pre_trainer.yaml") != "pre_trainer.yaml":
        out.note(f"trainer config {module.get('config')}: defaults taken from pre_trainer.yaml")
    for key in ("seq_length", "global_batch_size", "micro_batch_size"):
        if key not in ns and key not in file_ns:
            out.note(f"{key} not in the overrides: Primus's default {PRIMUS_DEFAULTS[key]}")
    cluster = resolve_cluster(where, out, cli_hardware=hardware, cli_nodes=nodes, cli_gpus=gpus, header=header,
                              base_dir=base_dir)
    ctx = ImportContext(where, cluster.gpus, PRIMUS_DEFAULTS, lambda dest: f"{_SECTION}.{dest}",
                        base=catalog_spec(slug) if from_catalog and slug else None,
                        header_model=header.get("model"), prefer=(slug,) if slug else (),
                        model_name=header.get("model_name") or derived_model_name(
                            Path(model_file).stem if model_file != BASE_MODEL_FILE else Path(where).stem),
                        recompute_layer_ids=layer_ids)
    job, consumed = job_from_args({**file_ns, **ns}, ctx, out)
    if sync_free_stage and "moe" in job:
        job["moe"].update(sync_free_moe(sync_free_stage))
    if (deepep or sync_free_stage >= 2) and "moe" in job:
        job["moe"]["token_dispatcher"] = "flex"
        out.note(f"{DEEPEP_KEY if deepep else f'{SYNC_FREE_KEY} {sync_free_stage}'} makes the dispatcher Megatron's "
                 "flex one with Primus-Turbo's DeepEP (moe_dispatcher_patches.py sets moe_enable_deepep and "
                 "moe_token_dispatcher_type flex)")
        if typed.get(TURBO_KEY) is not True:
            out.note(f"Primus applies {DEEPEP_KEY} only with enable_primus_turbo: true, which this file does not set")
    elif deepep:
        out.note(f"{DEEPEP_KEY} has no effect: the model has no MoE layer")
    if sync_free_stage and "moe" in job:
        _sync_free_prerequisites(typed, sync_free_stage, out)
    elif sync_free_stage:
        out.note(f"{SYNC_FREE_KEY} {sync_free_stage} has no effect: the model has no MoE layer")
    for key in overrides:
        if key in ns and key not in consumed and ns[key] is not None:
            out.skip(f"{key}: {overrides[key]}")
    for item in unknown:
        out.skip(item)
    return finish("primus", PRIMUS_RELEASE, where, job, header, cluster, out, base_dir)


#: Megatron dests that Primus's trainer config (pre_trainer.yaml and trainer_base.yaml, fd1eeab) sets: a model
#: file that repeats one does not change it (primus/core/launcher/parser.py merges the model preset into the
#: trainer config without overriding). The overrides still do.
TRAINER_KEYS: Final = frozenset({"seq_length", "make_vocab_size_divisible_by", "micro_batch_size",
                                 "global_batch_size", "bf16", "use_distributed_optimizer", "use_flash_attn",
                                 "fp8_recipe"})


#: What a model file must give when primus cannot read it and has no catalog model for it.
_ARCHITECTURE = ("num_layers", "hidden_size", "num_attention_heads")


def _model_file(model_file: str, ns: dict[str, Any], where: str, module: str, primus_root: Path | None,
                out: Collector) -> tuple[dict[str, Any], str | None, bool]:
    """The Megatron arguments of the experiment's model file, read with its `extends:` chain from the
    Primus checkout, else from the copy of the published file primus ships (`primus_published`: the same
    job with or without a checkout), the catalog model it stands for, if any, and whether that catalog
    model gives the architecture (only when neither has the file and the overrides give it)."""
    slug = SLUG_OF_FILE.get(Path(model_file).name)
    root = find_root(Path(where), primus_root, where)
    found = read_model_file(root, model_file, where, out) if root is not None else None
    if found is not None:
        out.note(f"model file {model_file} read from the Primus checkout {root} ({' < '.join(found.chain)})")
    elif model_file != BASE_MODEL_FILE:
        missing = (f"{model_file} is not in {root / MODELS_DIR}" if root is not None else
                   f"no Primus checkout holds {model_file} (none found above the experiment file; give --primus-root)")
        found = published_model_file(model_file, where, out)
        if found is not None:
            out.note(f"{missing}: read as published at AMD-AGI/Primus {PUBLISHED_COMMIT[:7]} (the copy primus ships, "
                     f"{' < '.join(found.chain)})")
        elif not all(key in ns for key in _ARCHITECTURE):
            known = ", ".join(sorted(SLUG_OF_FILE))
            raise InputError(where, f"modules.{module}.model", f"{missing}, and it is not one of the model files "
                             f"primus ships ({known}); the overrides do not give the architecture either")
        else:
            out.note(f"{missing}: the overrides give the architecture")
    if found is None:
        return {}, None, False
    file_ns: dict[str, Any] = {}
    for key, value in found.values.items():
        if key in TRAINER_KEYS:
            out.note(f"{model_file}: {key}: {value} is not used: Primus keeps the trainer config's value when "
                     "the model file repeats a key (merge_namespace, allow_override=False)")
        elif key in BY_DEST:
            file_ns[key] = coerce(BY_DEST[key], value, where, f"{model_file}: {key}")
    return file_ns, slug, False


def _layer_ids(value: Any, where: str) -> tuple[int, ...] | None:
    """Primus's ``recompute_layer_ids``: null, a list of global layer ids, or the same as a
    comma-separated string ("0,1,2": patches/recompute_layer_patches.py splits it)."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else None
    field = f"{_SECTION}.recompute_layer_ids"
    if items is None:
        raise InputError(where, field, "must be a list of layer ids or a comma-separated string")
    ids: list[int] = []
    for item in items:
        text = str(item).strip()
        if not text:
            continue
        if isinstance(item, bool) or not text.isdigit() or len(text) > 9:
            raise InputError(where, field, f"{shorten(text, 40)!r} is not a layer id (a non-negative integer)")
        ids.append(int(text))
    if not ids:
        raise InputError(where, field, "must not be empty (Primus refuses an empty list)")
    return tuple(ids)


def _fp4_recipe(ns: dict[str, Any], overrides: dict[str, Any], out: Collector) -> None:
    """Primus's ``fp4_recipe`` (nvfp4 or mxfp4): primus models NVFP4 (16-element blocks, an fp8 scale
    each); MXFP4's 32-element blocks with e8m0 scales hold fewer scale bytes, so it is noted, not
    silently taken as NVFP4."""
    recipe = overrides.get("fp4_recipe")
    if ns.get("fp4") and recipe not in (None, "nvfp4"):
        out.note(f"fp4_recipe {recipe}: modelled as nvfp4 (the scale bytes differ: 1 per 32 weights for mxfp4, "
                 "1 per 16 for nvfp4, an upper bound)")
        ns.pop("fp4_recipe", None)


def _yaml_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def export_primus(job: Job, layout: Layout) -> Exported:
    ns, notes, written = args_from_job(job, layout, fsdp="torch" if _torch_fsdp_ok(job, layout) else "megatron",
                                       primus=True)
    if job.model.position_embedding_type == "yarn":
        notes.append(yarn_as_rope(job.model.yarn_rotary_scaling_factor, "AMD Primus's Megatron"))
    slug = job.spec.model if isinstance(job.spec.model, str) else None
    model_file = MODEL_FILES.get(slug or "", BASE_MODEL_FILE)
    overrides = {k: _yaml_value(v) for k, v in ns.items() if v is not None}  # Primus's default is null too
    # ...but not the model file's: a key it sets that the job leaves at Megatron's default is written as null
    # (Primus's gpt_oss_120B.yaml, from deepseek_v2_base.yaml, sets moe_shared_expert_intermediate_size 2880;
    # gpt-oss has no shared expert), which import reads back as the default
    published = published_model_file(model_file, job.where, Collector())
    for key, value in (published.values.items() if published is not None else ()):
        if value is not None and key in ns and ns[key] is None and key in BY_DEST:
            overrides[key] = None
            notes.append(f"{key}: null written over {model_file}'s {shown(value)} (the job leaves it at Megatron's "
                         "default)")
    if job.model.is_moe and job.spec.moe.token_dispatcher == "flex":  # Primus-Turbo's DeepEP, as import reads it
        overrides.update({TURBO_KEY: True, DEEPEP_KEY: True})
    if job.model.is_moe and job.spec.moe.sync_free:
        written |= _sync_free_overrides(job, overrides, notes)
    body = {
        "work_group": "amd", "user_name": "root",
        "exp_name": f"{job.model.name}-{job.num_gpus}x{job.cluster.name}",
        "workspace": "./output",
        "modules": {"pre_trainer": {"framework": "megatron", "config": "pre_trainer.yaml", "model": model_file,
                                    "overrides": overrides}},
    }
    lines = [f"# Primus experiment for {job.model.name} on {job.num_gpus} x {job.cluster.name}, written by primus "
             f"{__version__}.",
             f"# Keys: {PRIMUS_RELEASE}.",
             f"# Launch with NNODES={job.num_nodes} (GPUS_PER_NODE={job.cluster.gpus_per_node}); the architecture "
             "is written out in the overrides, so it does not depend on the model file's contents.",
             *[f"# note: {n}" for n in notes],
             header_line(residual(job, written))]
    text = "\n".join(lines) + "\n" + yaml.safe_dump(body, sort_keys=False, default_flow_style=False)
    return Exported("primus", PRIMUS_RELEASE, text, tuple(notes))


#: The stage an export writes for `moe.sync_free`: the lowest that keeps the token counts on the device.
SYNC_FREE_EXPORT_STAGE: Final = 2


def _sync_free_overrides(job: Job, overrides: dict[str, Any], notes: list[str]) -> set[str]:
    """`moe.sync_free` as Primus launches it: stage 2 of `turbo_sync_free_moe_stage`, with what Primus
    requires beside it (enable_primus_turbo; use_turbo_grouped_gemm from stage 2: rocm_arg_validation.py).
    Stage 2 also makes the dispatcher flex (DeepEP), so a job with another dispatcher cannot be written
    as sync-free: it is noted, and the `# primus-job:` header keeps the key. Returns the keys written."""
    stage = SYNC_FREE_EXPORT_STAGE
    if sync_free_moe(stage)["token_dispatcher"] != job.spec.moe.token_dispatcher:
        notes.append(f"moe.sync_free not written: Primus's {SYNC_FREE_KEY} {stage} also makes the dispatcher flex "
                     f"(DeepEP), and this job's is {job.spec.moe.token_dispatcher}")
        return set()
    overrides.update({TURBO_KEY: True, SYNC_FREE_KEY: stage, TURBO_GROUPED_GEMM_KEY: True})
    notes.append(f"{SYNC_FREE_KEY} {stage} also turns on {', '.join(SYNC_FREE_UNMODELLED[stage])}, which primus "
                 "does not model")
    return {"moe.sync_free"}


def _torch_fsdp_ok(job: Job, layout: Layout) -> bool:
    """Primus's published FSDP configs use torch FSDP2 (use_torch_fsdp2: true); Megatron allows it only
    without PP or EP, with untied embeddings and without the precision-aware optimizer (which needs the
    distributed optimizer FSDP2 refuses), otherwise Megatron FSDP is written."""
    return (layout.pp == 1 and layout.ep == 1 and job.model.untie_embeddings_and_output_weights
            and not job.spec.optimizer.precision_aware)
