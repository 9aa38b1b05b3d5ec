"""Entry points: export a job as a launch config, import a launch config as a job.

`fit`, `memory` and `project` call `job_from_launch` for ``--from KIND FILE``; `primus export` and
`primus import` call `export_job` and `import_launch`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from primus.errors import InputError
from primus.job import Job, job_from_mapping
from primus.launch.common import IMPORT_STACKS, KINDS, Exported, LaunchConfig, is_path
from primus.launch.megatron import export_megatron, import_megatron
from primus.launch.primus_yaml import export_primus, import_primus
from primus.launch.target import on_target_stack
from primus.launch.torchtitan import export_torchtitan, import_torchtitan
from primus.memory.evaluate import pinned_layout
from primus.parallel import Layout
from primus.solver.pins import normalisation_notes
from primus.stacks.core import DEFAULT_STACK, resolve_stack
from primus.stacks.megatron_release import TE_LOSS_REFUSED_FROM, megatron_target
from primus.yamlio import load_mapping, read_text

_IMPORTERS: dict[str, Callable[..., LaunchConfig]] = {
    "megatron": import_megatron, "primus": import_primus, "torchtitan": import_torchtitan}
_EXPORTERS: dict[str, Callable[[Job, Layout], Exported]] = {
    "megatron": export_megatron, "primus": export_primus, "torchtitan": export_torchtitan}


def _kind(kind: str) -> str:
    if kind not in KINDS:
        raise InputError("launch", "kind", f"unknown launch format {kind!r} (one of {', '.join(KINDS)})")
    return kind


def import_launch(kind: str, path: str | Path, *, hardware: str | None = None, nodes: int | None = None,
                  gpus: int | None = None, primus_root: str | Path | None = None,
                  stack: str | None = None) -> LaunchConfig:
    """Read a launch config file as a job. Bad files raise InputError (one line: file, field, reason).
    `primus_root` is the AMD Primus checkout whose model files a Primus experiment names (found from
    the file's path when not given); `stack` (NAME[@RELEASE], from ``--stack``) replaces the stack the
    import chose (`with_stack`)."""
    p = Path(path)
    text = read_text(p)
    hardware = hardware_beside(hardware, p.parent)
    extra: dict[str, Any] = {}
    if primus_root is not None:
        if _kind(kind) != "primus":
            raise InputError("command line", "--primus-root", "goes with Primus experiment files only")
        extra["primus_root"] = Path(primus_root)
    config = _IMPORTERS[_kind(kind)](text, str(p), hardware=hardware, nodes=nodes, gpus=gpus, base_dir=p.parent,
                                     **extra)
    implied = IMPORT_STACKS.get(kind)
    if implied is not None and "stack" not in config.job:  # a `# primus-job:` header's stack wins
        config.job["stack"] = implied
    return config if stack is None else with_stack(config, stack, p.parent)


def hardware_beside(hardware: str | None, base_dir: Path) -> str | None:
    """``--hardware FILE`` names a file where the user stands; the imported job resolves its paths beside the
    launch file (or registry), so such a file is named from there. A catalog name, or a path that is no file
    here, is left as typed; the file is named by its path, not its link target."""
    if hardware is None or not is_path(hardware) or not Path(hardware).is_file():
        return hardware
    return os.path.relpath(os.path.abspath(hardware), os.path.abspath(base_dir))


def with_stack(config: LaunchConfig, stack: str, base_dir: Path | None = None) -> LaunchConfig:
    """The imported job on the stack ``--stack`` names, as on every command that reads a job: it
    replaces the stack the file implied or its header gave (said in a note), and the job is validated
    again on it (one line, exit 2, when it does not hold there). A model definition has no job to carry
    a stack: refused."""
    resolved = resolve_stack(stack, "--stack", None)
    if config.model_only:
        raise InputError("--stack", None, f"{config.source} defines a model only; a stack goes with a job")
    chosen = config.job.get("stack", DEFAULT_STACK)
    framework = str(config.job.get("framework", "megatron"))
    if resolved.values["framework"] != framework:  # a torchtitan TOML on Megatron-LM's defaults, or the reverse
        raise InputError("--stack", None, f"{resolved.label} runs {resolved.values['framework']} jobs, and "
                         f"{config.source} is a {framework} launch file (the import chose {chosen}): give a stack "
                         f"of the file's framework")
    job = {**config.job, "stack": stack}
    job_from_mapping(job, config.source, base_dir)
    note = f"stack {stack} from --stack, replacing {chosen} (the import's choice)"
    return replace(config, job=job, notes=(*config.notes, note))




def job_from_launch(kind: str, path: str | Path, hardware: str | None = None, nodes: int | None = None,
                    gpus: int | None = None, primus_root: str | Path | None = None) -> tuple[dict[str, Any], list[str]]:
    """The job mapping a launch config describes, and the options primus does not model ("name value",
    as written in the file). The mapping validates as a job (`primus.job.job_from_mapping`)."""
    config = import_launch(kind, path, hardware=hardware, nodes=nodes, gpus=gpus, primus_root=primus_root)
    if config.model_only:
        raise InputError(str(path), None, "defines a model only (no launch line, no global batch size)")
    return config.job, list(config.unmodelled)


def load_launch_job(kind: str, path: str | Path, hardware: str | None = None, nodes: int | None = None,
                    gpus: int | None = None, primus_root: str | Path | None = None,
                    stack: str | None = None) -> tuple[Job, LaunchConfig]:
    """The resolved Job of a launch config, with the import record (unmodelled options, notes)."""
    config = import_launch(kind, path, hardware=hardware, nodes=nodes, gpus=gpus, primus_root=primus_root,
                           stack=stack)
    p = Path(path)
    if config.model_only:
        raise InputError(str(p), None, "defines a model only (no launch line, no global batch size): use "
                         "`primus import` for its `model:` value and write a job around it")
    return job_from_mapping(config.job, str(p), p.parent), config


#: Megatron-LM's own launcher refuses Transformer Engine's fused cross-entropy from `TE_LOSS_REFUSED_FROM` on;
#: Megatron-Core (which Megatron-Bridge and NeMo drive) only warns, and AMD Primus's Megatron accepts it.
TE_LOSS_REFUSED = (f"NVIDIA/Megatron-LM {TE_LOSS_REFUSED_FROM} megatron/training/arguments.py lines 1528-1532 refuse "
                   "--cross-entropy-fusion-impl te with --cross-entropy-loss-fusion ('stability issues'; #5115)")


def launchable(job: Job, kind: str) -> tuple[Job, tuple[str, ...]]:
    """The job as the target launches it, and why it differs: on the target's stack without the settings
    its framework lacks (`primus.launch.target`); and a Megatron-LM release that refuses Transformer
    Engine's fused loss (`TE_LOSS_REFUSED_FROM` on) runs it with its native kernel, which keeps one more
    bf16 logit tensor in the loss's backward than Transformer Engine's in-place one, so the export is
    checked (and written) as that job. An earlier release runs the user's loss as given."""
    job, moved = on_target_stack(job, _kind(kind))
    if kind != "megatron":
        return job, moved
    target = megatron_target(job.resolved_stack, job.where)  # a release the line cannot be written for is refused
    k = job.spec.kernels
    if not (k.cross_entropy_fusion and k.cross_entropy_fusion_impl == "te") or target.before(TE_LOSS_REFUSED_FROM):
        return job, moved
    native = job.with_spec(kernels={**k.model_dump(), "cross_entropy_fusion_impl": "native"})
    return native, (*moved, f"cross-entropy written as Megatron-Core's native fused kernel, not Transformer Engine's, "
                    f"for {target.tag}: {TE_LOSS_REFUSED}; the native kernel keeps one more bf16 logit tensor in the "
                    "loss's backward, and the export is checked as written",)


def export_job(job: Job, kind: str, layout: Layout | None = None) -> Exported:
    """A launch config for a job whose parallel axes are all pinned (or for `layout`, e.g. a completion
    found by `fit`). Settings the target rejects raise InputError; ones it cannot express are noted."""
    job, notes = launchable(job, kind)
    if layout is None:
        try:
            layout = pinned_layout(job)
        except InputError as exc:
            if "are free" not in exc.reason:
                raise
            free = exc.reason.split(" are free")[0]
            raise InputError(exc.where, exc.field, f"{free} are free: a launch config needs every axis; pin "
                             "them, export a tune result, or use --complete (fit's layout of most headroom)") from None
    exported = _EXPORTERS[_kind(kind)](job, layout)
    notes = (*notes, *normalisation_notes(job.spec.parallel.pinned(), layout.as_parallel(), job.model.name,
                                          job.model.is_moe))
    return replace(exported, notes=(*notes, *exported.notes)) if notes else exported


def tune_job(path: str | Path) -> Job:
    """The job of a tune result: ``{"job_spec" or "job": {...job mapping...}, "best": {"parallel": {...}}}``
    — the job with its `parallel` replaced by the best layout (a `schedule` there moves to the job's).

    `primus tune` writes the job it ran under `job_spec` (every option, the size once) and a summary
    under `job` (for the report: both `nodes` and `gpus`); a result with only `job` is read with its
    `gpus` when it gives both, since they agree."""
    p = Path(path)
    doc = load_mapping(p)
    job, best = doc.get("job_spec", doc.get("job")), doc.get("best")
    if not isinstance(job, Mapping):
        raise InputError(str(p), "job", "a tune result needs the job mapping under 'job'")
    if "job_spec" not in doc and "nodes" in job and "gpus" in job:
        job = {k: v for k, v in job.items() if k != "nodes"}
    if not isinstance(best, Mapping) or not isinstance(best.get("parallel"), Mapping):
        raise InputError(str(p), "best.parallel", "a tune result needs the chosen layout under 'best.parallel'")
    parallel = dict(best["parallel"])
    data = dict(job)
    schedule = parallel.pop("schedule", None)
    if schedule is not None:
        data["schedule"] = schedule
    data["parallel"] = parallel
    return job_from_mapping(data, str(p), p.parent)


def axes_job(fields: Mapping[str, Any], base: Job | None = None, stack: str | None = None) -> Job:
    """A job from command-line values: the top-level keys (model, hardware, nodes|gpus, seq_len,
    global_batch_size, precision, fp8_recipe) and the parallel axes, over `base` when given; `stack`
    (``--stack``) replaces its stack."""
    if fields.get("nodes") is not None and fields.get("gpus") is not None:
        raise InputError("command line", "--nodes", "give --nodes or --gpus, not both")
    data: dict[str, Any] = base.as_mapping() if base else {}
    if base is not None:
        data["model"], data["hardware"] = base.spec.model, base.spec.hardware
    if stack is not None:
        data["stack"] = stack
    parallel = dict(data.get("parallel", {}))
    for key, value in fields.items():
        if value is None:
            continue
        if key in ("nodes", "gpus"):
            data.pop("nodes", None)
            data.pop("gpus", None)
        if key in _PARALLEL_KEYS:
            parallel[key] = value
        else:
            data[key] = value
    data["parallel"] = parallel
    where = base.where if base else "command line"
    return job_from_mapping(data, where, base.base_dir if base else Path.cwd())


_PARALLEL_KEYS = frozenset({"tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "sp", "recompute", "sharding",
                            "recompute_num_layers", "recompute_method"})
