"""torchtitan TOML job configs: read one, write one.

Names follow torchtitan's JobConfig (``torchtitan/config/job_config.py``, pytorch/torchtitan, the v0.2
line of 2025: ``[parallelism] expert_tensor_parallel_degree``, ``[quantize.linear.float8]``,
``[compile] enable``, ``training.dtype``); the v0.1 spellings ``[float8]`` and converter ``float8`` are
read too, and so is 2024's ``enable_float8_linear`` switch (`FLOAT8_SWITCHES`). torchtitan semantics
primus follows: FSDP over ``data_parallel_shard_degree`` (-1 = the
ranks left over), DDP over ``data_parallel_replicate_degree``, sequence parallel whenever TP > 1,
``local_batch_size`` is the per-rank batch (split into ``pipeline_parallel_microbatch_size``
microbatches under PP), ``selective_ac_option = "op"`` is op-level selective checkpointing and an
integer N checkpoints every N-th block whole, and the embedding and output layers count as
``pipeline_parallel_first/last_stage_less_layers`` layers in the pipeline split.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, Final

from primus import __version__
from primus.errors import InputError, shown
from primus.job import Job
from primus.launch.arch import build_model, catalog_spec, model_reference
from primus.launch.arch import spec_fields as spec_of
from primus.launch.common import (
    Collector,
    Exported,
    LaunchConfig,
    finish,
    header_line,
    read_header,
    residual,
    resolve_cluster,
)
from primus.launch.option_names import check_field
from primus.launch.torchtitan_2024 import KEYS_2024, LAUNCH_2024, UNTIL_MONTH, tables_2024
from primus.launch.torchtitan_cli import CLI_COMMIT, NO_ETP, export_weights, registry_line
from primus.launch.torchtitan_flavors import FAMILIES, NOT_LANGUAGE, package_dir, read_flavor, spec_fields
from primus.launch.torchtitan_registry import read_registry
from primus.launch.torchtitan_release import (
    LESS_LAYERS_SINCE,
    TOML_UNTIL,
    predates,
    registry_release,
    torchtitan_release,
)
from primus.memory.recompute import recomputed_layers
from primus.parallel import Layout
from primus.schedule.torchtitan_split import layers_per_stage
from primus.specs.model import ModelSpec

TORCHTITAN_RELEASE: Final = ("torchtitan v0.2 JobConfig TOML (torchtitan/config/job_config.py, pytorch/torchtitan "
                             "2025; v0.1 [float8] spellings and 2024's enable_float8_linear also read)")
#: torchtitan (model.name, model.flavor) -> catalog models with that architecture (first = default).
FLAVORS: Final[dict[tuple[str, str], tuple[str, ...]]] = {
    ("llama3", "8B"): ("llama3.1-8b", "llama3-8b"), ("llama3", "70B"): ("llama3.1-70b", "llama3-70b"),
    ("llama3", "405B"): ("llama3.1-405b",), ("deepseek_v3", "671B"): ("deepseek-v3",),
    ("qwen3", "30B-A3B"): ("qwen3-30b-a3b",), ("qwen3", "235B-A22B"): ("qwen3-235b-a22b",),
    ("gpt_oss", "20b"): ("gpt-oss-20b",), ("gpt_oss", "120b"): ("gpt-oss-120b",),
}
#: The job keys a v0.2 TOML (and the registry line) states, and those a pipeline adds: an import reads them
#: back, so they need no `# primus-job:` header.
WRITTEN: Final = frozenset({"seq_len", "global_batch_size", "precision", "fp8_recipe", "optimizer",
                            "moe.token_dispatcher", "overlap.tp_comm", "framework", "kernels.eager_cross_entropy"})
PIPELINE_WRITTEN: Final = frozenset({"pipeline.account_for_embedding_in_pipeline_split",
                                     "pipeline.account_for_loss_in_pipeline_split"})
SINGLE_STAGE: Final = ("1F1B", "GPipe")
LOOPED: Final = ("Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble", "DualPipeV")
FLOAT8: Final = ("float8", "quantize.linear.float8")
MX: Final = ("mx", "quantize.linear.mx")
#: The switch of torchtitan's Float8Linear before ``model.converters`` (pytorch/torchtitan #823, 57387af,
#: 2025-02-15, removed the last one), newest first: ``[float8] enable_float8_linear`` (since #496,
#: 40f79d7, 2024-07-30), ``training.enable_float8_linear`` (since #466, 69fe8de, 2024-07-17) and
#: ``training.enable_fp8_linear`` (#413, a4b2ee3, 2024-07-16).
FLOAT8_SWITCHES: Final = ("float8.enable_float8_linear", "training.enable_float8_linear",
                          "training.enable_fp8_linear")
#: The per-tensor scaling of those releases, ``dynamic`` (the default: torchao's tensorwise dynamic
#: scaling) or ``delayed``, for input, weight and grad_output: under [float8] since #489/#496
#: (2024-07-30), ``training.float8_scaling_type_*`` for the day before; delayed scaling was deleted by
#: #812 (2271b63, 2025-01-31).
FLOAT8_SCALING: Final = tuple(f"{prefix}{tensor}"
                              for prefix in ("float8.scaling_type_", "training.float8_scaling_type_")
                              for tensor in ("input", "weight", "grad_output"))


#: Keys of torchtitan's earlier JobConfig (torchtitan/config_manager.py, pytorch/torchtitan commit 57387af
#: of February 2025: ``training.batch_size`` and the parallel degrees under [training] and
#: [experimental]) and the key of the current schema each one became. Read under the new name, noted.
OLD_KEYS: Final[dict[str, str]] = {
    "training.batch_size": "training.local_batch_size",
    "training.data_parallel_replicate_degree": "parallelism.data_parallel_replicate_degree",
    "training.data_parallel_shard_degree": "parallelism.data_parallel_shard_degree",
    "training.tensor_parallel_degree": "parallelism.tensor_parallel_degree",
    "experimental.context_parallel_degree": "parallelism.context_parallel_degree",
    "experimental.pipeline_parallel_degree": "parallelism.pipeline_parallel_degree",
    "experimental.pipeline_parallel_schedule": "parallelism.pipeline_parallel_schedule",
    "experimental.enable_async_tensor_parallel": "parallelism.enable_async_tensor_parallel",
}
OLD_MICROBATCHES: Final = "experimental.pipeline_parallel_microbatches"


class _Toml:
    """The parsed file as dotted keys; reads record what was used."""

    def __init__(self, doc: dict[str, Any], where: str) -> None:  # a parsed TOML, or a registry's TOML-shaped keys
        self.flat: dict[str, Any] = {}
        self._walk(doc, "")
        self.written = frozenset(self.flat)  # the keys as the file spells them (they date it)
        self.used: set[str] = set()
        self.renamed: list[str] = []
        self.chunked_loss = False  # a registry config's ChunkedLossWrapper
        for old, new in OLD_KEYS.items():
            if old in self.flat:
                if new in self.flat:
                    raise InputError(where, old, f"and {new} both given (the same setting in two releases)")
                self.flat[new] = self.flat.pop(old)
                self.renamed.append(f"{old} read as {new} (torchtitan's earlier JobConfig)")

    def _walk(self, doc: dict[str, Any], prefix: str) -> None:
        for key, value in doc.items():
            if isinstance(value, dict):
                self._walk(value, f"{prefix}{key}.")
            else:
                self.flat[f"{prefix}{key}"] = value

    def get(self, key: str, default: Any = None) -> Any:
        if key in self.flat:
            self.used.add(key)
            return self.flat[key]
        return default

    def int(self, key: str, default: int, where: str, low: int = 1) -> int:
        value = self.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InputError(where, key, f"must be an integer >= {low}, got {shown(value)}")
        return value


def import_torchtitan(text: str, where: str, *, hardware: str | None = None, nodes: int | None = None,
                      gpus: int | None = None, base_dir: Path | None = None) -> LaunchConfig:
    header = read_header(text, where)
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(where, None, f"invalid TOML: {exc}") from None
    except ValueError:  # tomllib converts every integer, and Python refuses those of over 4,300 digits
        raise InputError(where, None, "invalid TOML: an integer too long to convert") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise InputError(where, None, "invalid TOML: nested too deeply") from None
    try:
        return _import(_Toml(doc, where), header, where, Collector(), hardware, nodes, gpus, base_dir)
    except RecursionError:  # a document tomllib could still parse, too deep to walk
        raise InputError(where, None, "invalid TOML: nested too deeply") from None


def import_torchtitan_registry(path: Path, config: str, *, hardware: str | None = None, nodes: int | None = None,
                               gpus: int | None = None) -> LaunchConfig:
    """A config function of torchtitan's ``config_registry.py`` (torchtitan after #2386), read with
    `ast` and never run (`primus.launch.torchtitan_registry`), imported as its TOML would be."""
    where = f"{path}:{config}"
    package, registry = read_registry(path, config, where)
    out = Collector()
    for item in registry.unresolved:
        out.note(item if item.startswith("not read") else f"not read (not a literal): {item}")
    t = _Toml(registry.doc, where)
    t.chunked_loss = registry.chunked_loss
    if registry.chunked_loss:
        out.note("ChunkedLossWrapper: the loss runs chunk by chunk over the sequence and never holds the whole "
                 "[tokens, vocab] logits; modelled as a fused cross-entropy (no eager fp32 logits)")
    out.note(f"config {config} of {package}'s config registry, read statically (torchtitan after #2386, "
             "pytorch/torchtitan 9810191)")
    return _import(t, {}, where, out, hardware, nodes, gpus, path.parent, registry_release())


def _import(t: _Toml, header: dict[str, Any], where: str, out: Collector, hardware: str | None, nodes: int | None,
            gpus: int | None, base_dir: Path | None, release: tuple[str, str] | None = None) -> LaunchConfig:
    """`release`: the stack and how it was decided, when the form of the file (a registry) decides it."""
    for note in t.renamed:
        out.note(note)
    if "job.description" in t.flat:
        out.note(f"job description: {t.get('job.description')}")
    name, flavor = str(t.get("model.name", "llama3")), str(t.get("model.flavor", "debugmodel"))
    slug, model = _model(name, flavor, header, where, out)
    mtp = t.int("model.num_mtp_layers", 0, where, low=0)
    if mtp:  # model_registry(..., num_mtp_layers=N): DeepSeek-V3's MTP blocks, as Megatron-LM builds them
        model = build_model({**spec_of(model), "mtp_num_layers": mtp}, where)
        slug, how = model_reference(model, name=f"{name}-{flavor}-mtp{mtp}", where=where)
        out.note(f"num_mtp_layers {mtp}: {mtp} multi-token-prediction block(s) (enorm, hnorm, the 2h-to-h eh_proj, "
                 f"a copy of the last layer, a norm; torchtitan deepseek_v3 _build_mtp_layers) and their loss; {how}")
    cluster = resolve_cluster(where, out, cli_hardware=hardware, cli_nodes=nodes, cli_gpus=gpus, header=header,
                              base_dir=base_dir)
    job: dict[str, Any] = {"model": slug, "seq_len": t.int("training.seq_len", 2048, where)}
    job.update(_precision(t, where, out))
    par, local, dp = _parallel(t, cluster.gpus, model.num_layers, model.is_moe, where, out)
    gbs = t.get("training.global_batch_size", -1)
    gbs = local * dp if gbs in (-1, None) else gbs
    if isinstance(gbs, bool) or not isinstance(gbs, int) or gbs < 1 or gbs % (local * dp):
        raise InputError(where, "training.global_batch_size", f"{gbs} is not a multiple of local batch × DP")
    job["global_batch_size"] = gbs
    job["framework"] = "torchtitan"
    if "stack" not in header:  # a `# primus-job:` header's stack wins
        job["stack"], how = release or torchtitan_release(t.written, where)
        out.note(how)
    job["parallel"] = par
    if par["pp"] > 1:
        less = 0 if predates(t.written, LESS_LAYERS_SINCE) else 1  # before #1416 the layers alone were split
        first = t.int("parallelism.pipeline_parallel_first_stage_less_layers", less, where, low=0)
        last = t.int("parallelism.pipeline_parallel_last_stage_less_layers", less, where, low=0)
        if first > 1 or last > 1:
            out.note("first/last stage lighter by more than one layer: modelled as one layer each")
        if not predates(t.written, LESS_LAYERS_SINCE):  # the weighted split: its weights stated, 0 included
            job["pipeline"] = {"account_for_embedding_in_pipeline_split": bool(first),
                               "account_for_loss_in_pipeline_split": bool(last)}
    if t.get("training.dtype", "float32") == "bfloat16":
        job["optimizer"] = {k: "bf16" for k in ("main_grads_dtype", "main_params_dtype", "exp_avg_dtype",
                                                "exp_avg_sq_dtype")}
    if model.is_moe:
        backend = t.get("parallelism.expert_parallel_comm_backend", "standard")
        job["moe"] = {"token_dispatcher": "flex" if backend == "deepep" else "alltoall"}
    tp_comm = bool(t.get("parallelism.enable_async_tensor_parallel", False))
    job["overlap"] = {"tp_comm": tp_comm}
    if not _loss_compiled(t):
        job["kernels"] = {"eager_cross_entropy": True}
        out.note("loss not compiled: eager PyTorch cross-entropy (its backward holds two more fp32 logit tensors)")
    for key, value in t.flat.items():
        if key not in t.used:
            check_field(key, where)
            out.skip(f"{key} = {json.dumps(value)}")
    out.note(f"model {slug if isinstance(slug, str) else slug['name']} from torchtitan flavor {name} {flavor}")
    return finish("torchtitan", TORCHTITAN_RELEASE, where, job, header, cluster, out, base_dir)


def _model(name: str, flavor: str, header: dict[str, Any], where: str, out: Collector) -> tuple[Any, ModelSpec]:
    """The job's model for a flavor: a catalog model from the table, else the flavor's own arguments
    read from the torchtitan checkout the file lives in (`primus.launch.torchtitan_flavors`)."""
    if name in NOT_LANGUAGE:
        raise InputError(where, "model.name", f"not supported: {NOT_LANGUAGE[name]}; primus models decoder LLMs")
    slugs = FLAVORS.get((name, flavor))
    if slugs is not None:
        named = header.get("model")
        slug = named if isinstance(named, str) and named in slugs else slugs[0]
        return slug, catalog_spec(slug)
    package = package_dir(Path(where), name) if where else None
    if package is None or name not in FAMILIES:
        known = ", ".join(f"{n} {f}" for n, f in FLAVORS)
        raise InputError(where, "model.flavor", f"{name} {flavor} is not a flavor primus maps to a model ({known}); "
                         f"inside a torchtitan checkout the flavors of {', '.join(FAMILIES)} are read from the code")
    cls, args = read_flavor(package, flavor, where)
    spec = build_model(spec_fields(name, args, where), where)
    ref, how = model_reference(spec, name=f"{name}-{flavor}", where=where)
    out.note(f"flavor {flavor} read from {package / '__init__.py'} ({cls}, statically); {how}")
    return ref, spec


def _loss_compiled(t: _Toml) -> bool:
    """torchtitan compiles the loss when compile is on and "loss" is among `compile.components` (the
    default); v0.1's `training.compile` compiled model and loss alike. A chunked loss never holds the
    whole logits either."""
    if t.chunked_loss:
        return True
    enabled = t.get("compile.enable")
    if enabled is None:
        enabled = t.get("training.compile", False)
    components = t.get("compile.components", ["model", "loss"])
    return enabled is True and isinstance(components, list) and "loss" in components


def _legacy_float8(t: _Toml, where: str, out: Collector) -> dict[str, Any] | None:
    """Float8 as torchtitan switched it before ``model.converters`` (`FLOAT8_SWITCHES`): torchao's
    Float8Linear with dynamic (tensorwise) scaling unless a scaling type says ``delayed``. None when no
    switch is given or it is false."""
    enabled = False
    for key in FLOAT8_SWITCHES:
        value = t.get(key)
        if value is None:
            continue
        if not isinstance(value, bool):
            raise InputError(where, key, f"must be true or false, got {shown(value)}")
        enabled = enabled or value
    scaling = {}
    for key in FLOAT8_SCALING:
        value = t.get(key)
        if value is None:
            continue
        if value not in ("dynamic", "delayed"):
            raise InputError(where, key, f"must be \"dynamic\" or \"delayed\", got {shown(value)}")
        scaling[key] = value
    if not enabled:
        for key, value in scaling.items():
            out.skip(f"{key} = {json.dumps(value)} (float8 is not enabled)")
        return None
    delayed = sorted(k for k, v in scaling.items() if v == "delayed")
    if delayed and len(delayed) < 3:
        out.note(f"float8 delayed scaling on {', '.join(delayed)} only: modelled as delayed scaling throughout")
    recipe = "delayed" if delayed else "tensorwise"
    out.note(f"float8 enabled the pre-2025 way (torchao Float8Linear, {recipe} scaling; pytorch/torchtitan #823 "
             "replaced the switch by model.converters on 2025-02-15)")
    return {"precision": "fp8", "fp8_recipe": recipe}


def _precision(t: _Toml, where: str, out: Collector) -> dict[str, Any]:
    converters = t.get("model.converters", [])
    if isinstance(converters, str):
        converters = [c.strip() for c in converters.split(",") if c.strip()]
    doc: dict[str, Any] = _legacy_float8(t, where, out) or {"precision": "bf16"}
    for conv in converters:
        if conv in FLOAT8:
            recipe = t.get("quantize.linear.float8.recipe_name") or t.get("float8.recipe_name") or "tensorwise"
            doc = {"precision": "fp8", "fp8_recipe": "tensorwise" if recipe == "tensorwise" else "blockwise"}
            if recipe != "tensorwise":
                out.note(f"float8 recipe {recipe} modelled as blockwise scaling (the nearest primus recipe)")
        elif conv in MX:
            t.get("quantize.linear.mx.recipe_name") or t.get("mx.recipe_name")
            doc = {"precision": "fp8", "fp8_recipe": "mxfp8"}
        else:
            out.skip(f"model.converters: {conv}")
    if t.get("training.mixed_precision_param", "bfloat16") != "bfloat16":
        out.note("mixed_precision_param float32 is not modelled: bf16 compute assumed")
    return doc


def _parallel(t: _Toml, world: int, num_layers: int, is_moe: bool, where: str,
              out: Collector) -> tuple[dict[str, Any], int, int]:
    tp = t.int("parallelism.tensor_parallel_degree", 1, where)
    pp = t.int("parallelism.pipeline_parallel_degree", 1, where)
    cp = t.int("parallelism.context_parallel_degree", 1, where)
    rep = t.int("parallelism.data_parallel_replicate_degree", 1, where)
    shard = t.int("parallelism.data_parallel_shard_degree", -1, where, low=-1)
    if shard in (-1, 0):
        if world % (tp * pp * cp * rep):
            raise InputError(where, "parallelism",
                             f"TP×PP×CP×replicate = {tp * pp * cp * rep} does not divide the {world} GPUs")
        shard = world // (tp * pp * cp * rep)
    dp = rep * shard
    if tp * pp * cp * dp != world:
        raise InputError(where, "parallelism", f"TP×PP×CP×DP = {tp * pp * cp * dp} but the job has {world} GPUs")
    if rep > 1 and shard > 1:
        out.note(f"HSDP (replicate {rep} × shard {shard}) modelled as FSDP over all {dp} data-parallel ranks")
    sharding = "fsdp" if shard > 1 or dp == 1 else "none"
    local = t.int("training.local_batch_size", 8, where)
    vp, mbs = 1, local
    if pp > 1:
        if OLD_MICROBATCHES in t.flat and "parallelism.pipeline_parallel_microbatch_size" not in t.flat:
            count = t.int(OLD_MICROBATCHES, 1, where)
            if local % count:
                raise InputError(where, OLD_MICROBATCHES, f"{count} microbatches do not divide the batch {local}")
            t.flat["parallelism.pipeline_parallel_microbatch_size"] = local // count
            out.note(f"{OLD_MICROBATCHES} = {count}: microbatch size {local // count}")
        mbs = t.int("parallelism.pipeline_parallel_microbatch_size", 1, where)
        if local % mbs:
            raise InputError(where, "parallelism.pipeline_parallel_microbatch_size", f"does not divide {local}")
        schedule = str(t.get("parallelism.pipeline_parallel_schedule", "1F1B"))
        if schedule == "GPipe":
            out.skip("parallelism.pipeline_parallel_schedule = GPipe (modelled as 1F1B: GPipe holds more)")
        if schedule in LOOPED:
            first = t.int("parallelism.pipeline_parallel_first_stage_less_layers", 1, where, low=0)
            last = t.int("parallelism.pipeline_parallel_last_stage_less_layers", 1, where, low=0)
            per_stage = t.get("parallelism.pipeline_parallel_layers_per_stage")
            stages = -(-(num_layers + first + last) // per_stage) if isinstance(per_stage, int) and per_stage > 0 \
                else 2 * pp
            if stages % pp:
                raise InputError(where, "parallelism.pipeline_parallel_layers_per_stage",
                                 f"gives {stages} stages, not a multiple of PP {pp}")
            vp = stages // pp
        elif schedule not in SINGLE_STAGE:
            raise InputError(where, "parallelism.pipeline_parallel_schedule", f"{schedule!r} is not modelled")
    ep = t.int("parallelism.expert_parallel_degree", 1, where) if is_moe else 1
    etp = t.int("parallelism.expert_tensor_parallel_degree", 1, where) if is_moe else 1
    par: dict[str, Any] = {"tp": tp, "pp": pp, "vp": vp, "cp": cp, "ep": ep, "etp": etp, "dp": dp, "mbs": mbs,
                           "sp": tp > 1}
    par.update(_recompute(t, num_layers // (pp * vp), where, out))
    par["sharding"] = sharding
    return par, local, dp


def _recompute(t: _Toml, chunk_layers: int, where: str, out: Collector) -> dict[str, Any]:
    mode = t.get("activation_checkpoint.mode", "selective")
    if mode == "none":
        return {"recompute": "none"}
    if mode == "full":
        return {"recompute": "full"}
    if mode == "memory_budget":
        out.skip("activation_checkpoint.mode = memory_budget (modelled as no recompute: an upper bound)")
        return {"recompute": "none"}
    if mode != "selective":
        raise InputError(where, "activation_checkpoint.mode", f"unknown mode {mode!r}")
    option = str(t.get("activation_checkpoint.selective_ac_option", "2"))
    if option == "op":
        return {"recompute": "selective"}
    if not option.isdigit() or int(option) < 1:
        raise InputError(where, "activation_checkpoint.selective_ac_option",
                         f"must be 'op' or an integer, got {option!r}")
    every = int(option)
    k = chunk_layers // every
    out.note(f"every {every}-th block checkpointed whole: modelled as full recompute of {k} block(s) per "
             "pipeline chunk (block method)")
    return {"recompute": "full", "recompute_method": "block", "recompute_num_layers": k} if k else {"recompute": "none"}


# ---- export -------------------------------------------------------------------------------------


def _flavor(job: Job) -> tuple[str, str]:
    ref = job.spec.model
    for key, slugs in FLAVORS.items():
        if ref in slugs:
            return key
    names = ", ".join(s for slugs in FLAVORS.values() for s in slugs)
    raise InputError(job.where, "model", f"torchtitan names models by flavor; primus maps these: {names}")


def export_torchtitan(job: Job, layout: Layout) -> Exported:
    """The job as a torchtitan TOML in the keys of its stack's release: a job on torchtitan@2024.12 gets
    December 2024's (`primus.launch.torchtitan_2024`), one on the release after #2386 the registry form
    as its launch line, any other the v0.2 JobConfig (the newest TOML torchtitan, v0.2.2, which the
    importer dates to torchtitan@2025.04, the release it belongs to)."""
    spec, where = job.spec, job.where
    name, flavor = _flavor(job)
    notes: list[str] = []
    stack = job.resolved_stack
    if stack.name == "torchtitan" and stack.release < UNTIL_MONTH:
        return _export_2024(job, layout, name, flavor, notes)
    if layout.tp > 1 and not layout.sp:
        raise InputError(where, "parallel.sp", "torchtitan always uses sequence parallel with TP")
    if layout.sharding in ("dist_opt", "zero2"):
        raise InputError(where, "parallel.sharding", f"{layout.sharding} has no torchtitan equivalent (fsdp or none)")
    if job.model.is_moe and layout.etp not in (1, layout.tp):
        raise InputError(where, "parallel.etp", "torchtitan supports ETP 1 or ETP = TP only")
    if spec.pipeline.layout or spec.pipeline.decoder_first_pipeline_num_layers \
            or spec.pipeline.decoder_last_pipeline_num_layers:
        raise InputError(where, "pipeline", "explicit stage layouts have no torchtitan equivalent")
    tables: dict[str, dict[str, Any]] = {
        "job": {"description": f"{job.model.name} on {job.num_gpus} x {job.cluster.name} (primus export)"},
        "model": {"name": name, "flavor": flavor},
        "training": {"local_batch_size": layout.mbs, "global_batch_size": spec.global_batch_size,
                     "seq_len": spec.seq_len},
        "parallelism": {"data_parallel_replicate_degree": layout.dp if layout.sharding == "none" else 1,
                        "data_parallel_shard_degree": 1 if layout.sharding == "none" else layout.dp,
                        "tensor_parallel_degree": layout.tp, "pipeline_parallel_degree": layout.pp,
                        "context_parallel_degree": layout.cp},
    }
    par = tables["parallelism"]
    if layout.pp > 1:
        emb, loss = export_weights(job, layout, notes)
        tables["training"]["local_batch_size"] = spec.global_batch_size // layout.dp
        par.update(pipeline_parallel_schedule="Interleaved1F1B" if layout.vp > 1 else "1F1B",
                   pipeline_parallel_microbatch_size=layout.mbs,
                   pipeline_parallel_first_stage_less_layers=int(emb),
                   pipeline_parallel_last_stage_less_layers=int(loss))
        if layout.vp > 2:  # two stages per rank are the multi-stage schedules' default
            total, stages = job.model.num_layers + emb + loss, layout.pp * layout.vp
            per_stage = layers_per_stage(total, stages)
            if per_stage is None:
                raise InputError(where, "parallel.vp", f"no pipeline_parallel_layers_per_stage makes {stages} stages "
                                 f"of {total} layers (the embedding and the output counted)")
            par["pipeline_parallel_layers_per_stage"] = per_stage
    if job.model.is_moe:
        par.update(expert_parallel_degree=layout.ep, expert_tensor_parallel_degree=layout.etp)
        if spec.moe.token_dispatcher == "flex":
            par["expert_parallel_comm_backend"] = "deepep"
        elif spec.moe.token_dispatcher == "allgather":
            notes.append("moe.token_dispatcher allgather has no torchtitan equivalent: all-to-all written")
    async_tp = spec.overlap.tp_comm and layout.tp > 1
    if async_tp:
        par["enable_async_tensor_parallel"] = True  # needs torch.compile
    if not spec.kernels.eager_cross_entropy:
        tables["compile"] = {"enable": True, "components": ["model", "loss"]}
    else:  # the loss stays eager; the blocks are compiled, as the stack's kernel profile times them
        tables["compile"] = {"enable": True, "components": ["model"]}
        if not async_tp:
            notes.append("compile.components = [\"model\"]: the loss stays eager (kernels.eager_cross_entropy) and the "
                         "blocks are compiled, as the stack's pytorch-compile kernels were timed; torchtitan with "
                         "compile off runs them eager, which primus does not time")
    tables["activation_checkpoint"] = _checkpoint(job, layout)
    tables.update(_quantize(job, tables["model"], notes))
    opt = spec.optimizer
    dtypes = {opt.main_grads_dtype, opt.main_params_dtype, opt.exp_avg_dtype, opt.exp_avg_sq_dtype}
    if dtypes == {"bf16"}:
        tables["training"]["dtype"] = "bfloat16"
    elif dtypes != {"fp32"}:
        raise InputError(where, "optimizer", "torchtitan keeps optimizer state all fp32 or all bf16 (training.dtype)")
    written = set(WRITTEN) | (PIPELINE_WRITTEN if layout.pp > 1 else set())
    torchrun = _torchrun(job)
    if stack.name == "torchtitan" and stack.release >= TOML_UNTIL[0][:7].replace("-", "."):
        registry, cli_notes = registry_line(job, layout, name, flavor)
        notes += cli_notes
        notes.append(f"stack {stack.label} reads no TOML (pytorch/torchtitan {TOML_UNTIL[1]}): launch the registry "
                     "form above; the keys below load in torchtitan up to v0.2.2")
        launch = [f"# Launch ({stack.label}): {torchrun} {registry}",
                  "#   (checkpointing, compile and converters as that registry config sets them: check them)"]
    else:
        launch = [f"# Launch: {torchrun} -m torchtitan.train --job.config_file <this file>",
                  "# This file loads in torchtitan up to v0.2.2. torchtitan after #2386 (9810191) has no TOML configs:"]
        if job.model.is_moe and layout.etp != 1:
            launch.append(f"#   no registry form: {NO_ETP}")
        else:
            launch += [f"#   at {CLI_COMMIT}: {registry_line(job, layout, name, flavor)[0]}",
                       "#   (checkpointing, compile and converters as that registry config sets them: check them)"]
    lines = [f"# torchtitan job config for {job.model.name} on {job.num_gpus} x {job.cluster.name}, written by "
             f"primus {__version__}.", f"# Keys: {TORCHTITAN_RELEASE}.", *launch,
             *[f"# note: {n}" for n in notes], header_line(residual(job, written))]
    for table, values in tables.items():
        lines += ["", f"[{table}]", *[f"{k} = {_toml(v)}" for k, v in values.items()]]
    return Exported("torchtitan", TORCHTITAN_RELEASE, "\n".join(lines) + "\n", tuple(notes))


def _torchrun(job: Job) -> str:
    return f"torchrun --nnodes {job.num_nodes} --nproc-per-node {min(job.num_gpus, job.cluster.gpus_per_node)}"


def _export_2024(job: Job, layout: Layout, name: str, flavor: str, notes: list[str]) -> Exported:
    """The TOML of a job on torchtitan@2024.12, in the keys of pytorch/torchtitan 9dec370."""
    if layout.tp > 1 and not layout.sp:
        raise InputError(job.where, "parallel.sp", "torchtitan always uses sequence parallel with TP")
    if layout.sharding in ("dist_opt", "zero2"):
        raise InputError(job.where, "parallel.sharding",
                         f"{layout.sharding} has no torchtitan equivalent (fsdp or none)")
    if job.spec.pipeline.layout or job.spec.pipeline.decoder_first_pipeline_num_layers \
            or job.spec.pipeline.decoder_last_pipeline_num_layers:
        raise InputError(job.where, "pipeline", "explicit stage layouts have no torchtitan equivalent")
    tables: dict[str, dict[str, Any]] = {
        "job": {"description": f"{job.model.name} on {job.num_gpus} x {job.cluster.name} (primus export)"},
        "model": {"name": name, "flavor": flavor},
        **tables_2024(job, layout, _checkpoint(job, layout), notes)}
    written = {"seq_len", "global_batch_size", "precision", "fp8_recipe", "framework", "overlap.tp_comm"}
    if layout.pp > 1:
        written |= {"pipeline.account_for_embedding_in_pipeline_split", "pipeline.account_for_loss_in_pipeline_split"}
    lines = [f"# torchtitan job config for {job.model.name} on {job.num_gpus} x {job.cluster.name}, written by "
             f"primus {__version__}.", f"# Keys: {KEYS_2024}.",
             f"# Launch ({job.resolved_stack.label}): {_torchrun(job)} {LAUNCH_2024}",
             *[f"# note: {n}" for n in notes], header_line(residual(job, written))]
    for table, values in tables.items():
        lines += ["", f"[{table}]", *[f"{k} = {_toml(v)}" for k, v in values.items()]]
    return Exported("torchtitan", KEYS_2024, "\n".join(lines) + "\n", tuple(notes))


def _checkpoint(job: Job, layout: Layout) -> dict[str, Any]:
    if layout.recompute == "none":
        return {"mode": "none"}
    if layout.recompute == "selective":
        modules = job.spec.parallel.recompute_modules
        if modules is not None and tuple(modules) != ("core_attn",):
            raise InputError(job.where, "parallel.recompute_modules",
                             f"Megatron-Core recompute modules {', '.join(modules)} have no torchtitan equivalent "
                             "(its selective checkpointing is op-level)")
        return {"mode": "selective", "selective_ac_option": "op"}
    method, k = job.spec.parallel.recompute_method or "uniform", layout.recompute_num_layers or 1
    if method == "uniform" and k == 1:
        return {"mode": "full"}
    chunk = job.model.num_layers // (layout.pp * layout.vp)
    k = recomputed_layers(k, chunk) if method == "block" else k
    every = chunk // k if method == "block" and k else 0
    if not every or chunk // every != k:
        raise InputError(job.where, "parallel.recompute_num_layers",
                         f"{method} recompute of {k} layer(s) has no torchtitan equivalent (every N-th block)")
    return {"mode": "selective", "selective_ac_option": str(every)}


def _quantize(job: Job, model_table: dict[str, Any], notes: list[str]) -> dict[str, dict[str, Any]]:
    precision, recipe = job.spec.precision, job.spec.effective_fp8_recipe
    if precision == "bf16":
        return {}
    if precision != "fp8" or (recipe == "delayed" and job.spec.fp8_recipe is not None):
        raise InputError(job.where, "precision", f"{precision} {recipe or ''} has no torchtitan recipe".strip())
    if recipe == "mxfp8":
        model_table["converters"] = ["quantize.linear.mx"]
        return {"quantize.linear.mx": {"recipe_name": "mxfp8_cublas"}}
    model_table["converters"] = ["quantize.linear.float8"]
    if recipe == "blockwise":
        notes.append("fp8 blockwise written as torchtitan's rowwise recipe (the nearest)")
    elif recipe == "delayed":
        notes.append("fp8 without a recipe written as tensorwise, torchtitan's default (delayed scaling is gone)")
    return {"quantize.linear.float8": {"recipe_name": "rowwise" if recipe == "blockwise" else "tensorwise"}}


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value))
