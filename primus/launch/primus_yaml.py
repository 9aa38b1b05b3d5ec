"""AMD Primus experiment YAML (AMD-AGI/Primus, Megatron backend): read one, write one.

A Primus experiment names a trainer config and a Primus model file and lists Megatron arguments by
their argparse dest under ``modules.pre_trainer.overrides`` (see AMD-AGI/Primus
``examples/megatron/configs/MI300X/*-pretrain.yaml``). Keys absent from the overrides take Primus's
defaults, which differ from Megatron's: ``primus/configs/modules/megatron/pre_trainer.yaml`` (commit
44a21d1: micro batch 2, global batch 16, sequence 1024, bf16, distributed optimizer) over
``primus/configs/models/megatron/language_model.yaml`` (commit 0158a86: sequence parallel on, SwiGLU,
no linear biases, untied embeddings). ``${NAME:default}`` placeholders take their written default
(the environment is not read). The model file is mapped to a primus catalog model when it is one of
Primus's published models; architecture keys in the overrides apply on top of it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Final

import yaml

from primus import __version__
from primus.errors import InputError
from primus.job import Job
from primus.launch.arch import catalog_spec
from primus.launch.common import (
    Collector,
    Exported,
    LaunchConfig,
    finish,
    header_line,
    read_header,
    residual,
    resolve_cluster,
    shorten,
)
from primus.launch.megatron_args import BY_DEST, coerce
from primus.launch.megatron_job import ImportContext, args_from_job, job_from_args
from primus.parallel import Layout
from primus.yamlio import loads_yaml

PRIMUS_RELEASE: Final = ("AMD Primus (AMD-AGI/Primus) Megatron trainer: experiment YAML modules.pre_trainer."
                         "overrides with Megatron-LM dest names; defaults of primus/configs/modules/megatron/"
                         "pre_trainer.yaml (44a21d1) and primus/configs/models/megatron/language_model.yaml "
                         "(0158a86)")

#: Primus model files (primus/configs/models/megatron/) that are published models in primus's catalog.
MODEL_FILES: Final[dict[str, str]] = {
    "llama2-7b": "llama2_7B.yaml", "llama2-13b": "llama2_13B.yaml", "llama3-70b": "llama3_70B.yaml",
    "llama3-8b": "llama3_8B.yaml", "llama3.1-8b": "llama3.1_8B.yaml", "llama3.1-70b": "llama3.1_70B.yaml",
    "llama3.1-405b": "llama3.1_405B.yaml", "mixtral-8x7b": "mixtral_8x7B_v0.1.yaml",
    "deepseek-v3": "deepseek_v3.yaml", "qwen3-30b-a3b": "qwen3_30B_A3B.yaml",
    "qwen3-235b-a22b": "qwen3_235B_A22B.yaml", "grok-1-314b": "grok1.yaml", "gpt-oss-120b": "gpt_oss_120b.yaml",
}
SLUG_OF_FILE: Final = {v: k for k, v in MODEL_FILES.items()}
BASE_MODEL_FILE: Final = "language_model.yaml"

PRIMUS_DEFAULTS: Final[dict[str, Any]] = {
    "micro_batch_size": 2, "global_batch_size": 16, "seq_length": 1024, "bf16": True,
    "use_distributed_optimizer": True, "use_flash_attn": True, "sequence_parallel": True, "swiglu": True,
    "add_bias_linear": False, "untie_embeddings_and_output_weights": True, "fp8_recipe": "delayed",
}
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")
_SECTION = "modules.pre_trainer.overrides"
_METADATA = ("work_group", "user_name", "exp_name", "workspace")


def _substitute(value: Any, where: str, key: str, out: Collector) -> Any:
    """``${NAME:default}`` → its default; a value that is wholly a placeholder is re-read as YAML so
    ``${PRIMUS_TP:8}`` is the integer 8 and ``${X:null}`` is null."""
    if not isinstance(value, str) or "${" not in value:
        return value

    def sub(match: re.Match[str]) -> str:
        if match.group(2) is None:
            raise InputError(where, key, f"{match.group(0)} has no default and the environment is not read")
        out.note(f"{key}: {match.group(0)} read as its default {match.group(2)!r}")
        return match.group(2)

    text = _PLACEHOLDER.sub(sub, value)
    whole = _PLACEHOLDER.fullmatch(value.strip()) is not None
    return loads_yaml(text, where) if whole and text.strip() else text


def _module(doc: Any, where: str) -> tuple[str, dict[str, Any]]:
    if not isinstance(doc, dict) or not isinstance(doc.get("modules"), dict) or not doc["modules"]:
        raise InputError(where, "modules", "a Primus experiment needs a 'modules' mapping")
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
                  gpus: int | None = None, base_dir: Path | None = None) -> LaunchConfig:
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
    for key, value in overrides.items():
        value = _substitute(value, where, f"overrides.{key}", out)
        if key in BY_DEST:
            ns[key] = coerce(BY_DEST[key], value, where, f"overrides.{key}")
        else:
            unknown.append(f"{key}: {value}")
    model_file = str(_substitute(module.get("model", BASE_MODEL_FILE), where, "model", out))
    slug = SLUG_OF_FILE.get(Path(model_file).name)
    if slug is None and model_file != BASE_MODEL_FILE:
        out.note(f"Primus model file {model_file} is not a catalog model: the overrides must give the architecture")
    for key, value in module.items():
        if key not in ("framework", "config", "model", "overrides"):
            out.skip(f"modules.{name}.{key}: {value}")
    if module.get("config", "pre_trainer.yaml") != "pre_trainer.yaml":
        out.note(f"trainer config {module.get('config')}: defaults taken from pre_trainer.yaml")
    for key in ("seq_length", "global_batch_size", "micro_batch_size"):
        if key not in ns:
            out.note(f"{key} not in the overrides: Primus's default {PRIMUS_DEFAULTS[key]}")
    cluster = resolve_cluster(where, out, cli_hardware=hardware, cli_nodes=nodes, cli_gpus=gpus, header=header,
                              base_dir=base_dir)
    ctx = ImportContext(where, cluster.gpus, PRIMUS_DEFAULTS, lambda dest: f"{_SECTION}.{dest}",
                        base=catalog_spec(slug) if slug else None, header_model=header.get("model"),
                        prefer=(slug,) if slug else (),
                        model_name=header.get("model_name") or (Path(model_file).stem if model_file != BASE_MODEL_FILE
                                                                else Path(where).stem))
    job, consumed = job_from_args(ns, ctx, out)
    for key in overrides:
        if key in ns and key not in consumed and ns[key] is not None:
            out.skip(f"{key}: {overrides[key]}")
    for item in unknown:
        out.skip(item)
    return finish("primus", PRIMUS_RELEASE, where, job, header, cluster, out, base_dir)


def _yaml_value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def export_primus(job: Job, layout: Layout) -> Exported:
    ns, notes, written = args_from_job(job, layout, fsdp="torch" if _torch_fsdp_ok(job, layout) else "megatron")
    slug = job.spec.model if isinstance(job.spec.model, str) else None
    model_file = MODEL_FILES.get(slug or "", BASE_MODEL_FILE)
    overrides = {k: _yaml_value(v) for k, v in ns.items() if v is not None}  # Primus's default is null too
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


def _torch_fsdp_ok(job: Job, layout: Layout) -> bool:
    """Primus's published FSDP configs use torch FSDP2 (use_torch_fsdp2: true); Megatron allows it only
    without PP or EP and with untied embeddings, otherwise Megatron FSDP is written."""
    return layout.pp == 1 and layout.ep == 1 and job.model.untie_embeddings_and_output_weights
