"""What the three launch-config translators share: the result types, the `primus-job` header, the
cluster size, and the last step of every import (merge, validate).

A launch config (a Megatron-LM argument line, an AMD Primus experiment YAML, a torchtitan TOML) says
how to run a training job but not on what: none of them names the accelerator, and only a
`torchrun` line gives the world size. Exports therefore carry the job keys the target format cannot
express in one comment line, ``# primus-job: {...JSON...}``, which the frameworks ignore and the
importer reads back; everything the format *can* express is written in the format's own option names
and never duplicated in the header. Command-line values (``--hardware``, ``--nodes``/``--gpus``) win
over the file, and the file over the header.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from primus.catalog.hardware import resolve_hardware
from primus.errors import InputError, shown
from primus.job import Job, job_from_mapping
from primus.safe_text import escape_controls
from primus.specs.base import NAME_MAX_CHARS
from primus.specs.hardware import ClusterSpec
from primus.specs.job import JobSpec
from primus.yamlio import loads_json

KINDS: tuple[str, ...] = ("megatron", "primus", "torchtitan")
#: Header keys the importer uses itself rather than merging into the job.
HEADER_ONLY = frozenset({"hardware", "nodes", "gpus", "model", "model_name"})
HEADER_TAG = "primus-job:"
#: The stack a launch format implies: a Primus experiment YAML runs on AMD Primus (which keeps options
#: Megatron-LM removed, such as GroupedMLP), a torchtitan TOML on torchtitan (the importer dates the release
#: from the file's keys, `primus.launch.torchtitan_release`); a Megatron-LM argument line keeps the default
#: stack unless its arguments date it (`primus.launch.megatron`).
IMPORT_STACKS: dict[str, str] = {"primus": "primus", "torchtitan": "torchtitan"}
MAX_VALUE_CHARS = 200


@dataclass(frozen=True)
class LaunchConfig:
    """An imported launch config: the job mapping (what a job YAML holds), the options primus does not
    model (each ``name value``, in the file's own spelling, never dropped silently), notes on how
    ambiguous or defaulted values were resolved, and the framework release whose names were read."""

    kind: str
    release: str
    job: dict[str, Any]
    unmodelled: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    source: str = ""
    model_only: bool = False  # a file of model arguments only: `job` holds just the model


@dataclass(frozen=True)
class Exported:
    """An exported launch config: the file text plus notes on what the target cannot express."""

    kind: str
    release: str
    text: str
    notes: tuple[str, ...] = ()


@dataclass
class Collector:
    """Accumulates unmodelled options and notes while a file is translated."""

    unmodelled: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def skip(self, text: str) -> None:
        self.unmodelled.append(shorten(text))

    def note(self, text: str) -> None:
        self.notes.append(text)


def shorten(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    """One line, bounded: an unmodelled value may be a long data path list."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


# ---- the primus-job header -------------------------------------------------------------------------


def header_line(doc: Mapping[str, Any]) -> str:
    return "# " + HEADER_TAG + " " + json.dumps(doc, separators=(", ", ": "), sort_keys=True)


def read_header(text: str, where: str) -> dict[str, Any]:
    """The JSON object of the first ``# primus-job:`` comment line, or {} when there is none."""
    for line in text.splitlines():
        body = line.strip()
        if not body.startswith("#"):
            continue
        body = body.lstrip("#").strip()
        if body.startswith(HEADER_TAG):
            doc = loads_json(body[len(HEADER_TAG):].strip(), where)
            if not isinstance(doc, dict):
                raise InputError(where, "primus-job", "the header must be a JSON object")
            if "model_name" in doc and not isinstance(doc["model_name"], str):
                raise InputError(where, "primus-job.model_name", "must be a string")
            for key in ("parallel", "framework"):
                if key in doc:
                    raise InputError(where, f"primus-job.{key}", "belongs in the launch options, not the header")
            return doc
    return {}


def flatten(doc: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in doc.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and key not in ("model", "hardware"):
            out.update(flatten(value, name + "."))
        else:
            out[name] = value
    return out


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for dotted, value in flat.items():
        node = out
        *parents, leaf = dotted.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def own_settings(job: Job) -> dict[str, Any]:
    """The job's settings that differ from the defaults, dotted, without what its stack supplied (the
    stack's own rule included): what the user set."""
    flat = flatten(job.spec.model_dump(mode="json", exclude_defaults=True))
    # an entry is a dotted key, or "KEY (what)": `rules (id: ...)`, `pipeline (account_for_...=True)`
    assumed = {entry.split(" (", 1)[0] for entry in job.assumed}
    stack_rules = {entry.split(" ", 1)[1].lstrip("(").split(":", 1)[0] for entry in job.assumed
                   if entry.startswith("rules (")}
    keep = {k: v for k, v in flat.items()
            if k == "rules" or not any(k == a or k.startswith(a + ".") for a in assumed)}
    if stack_rules and isinstance(keep.get("rules"), list):
        own = [r for r in keep["rules"] if not (isinstance(r, dict) and r.get("id") in stack_rules)]
        if own:
            keep["rules"] = own
        else:
            del keep["rules"]
    return keep


def residual(job: Job, written: set[str]) -> dict[str, Any]:
    """Job keys that differ from the defaults and that the target format did not write: the header.
    `parallel` and `framework` never travel (the launch options define them); the hardware always does."""
    # what the stack supplied stays with the stack (its label travels): written out, it would come back as
    # the user's own keys and outlive a later `--stack`

    def is_written(key: str) -> bool:
        return any(key == w or key.startswith(w + ".") for w in written)

    keep = {k: v for k, v in own_settings(job).items()
            if not is_written(k) and not k.startswith("parallel.") and k not in ("framework", "model")}
    keep["hardware"] = _anchored(job.spec.hardware, job.base_dir)
    keep["stack"] = job.resolved_stack.asked  # the stack travels, so import does not assume the format's
    if isinstance(job.spec.model, (str, dict)) and not is_path(job.spec.model):
        keep["model"] = job.spec.model
    else:  # a model file: its architecture is written out; its name travels here
        keep["model_name"] = job.model.name
    return nest(keep)


def _anchored(ref: Any, base_dir: Path | None) -> Any:
    """A hardware file named relative to the job file, as an absolute path: the launch config is written (and
    read back) elsewhere, where the job file's relative path would name another file or none."""
    if isinstance(ref, Mapping) and "base" in ref:
        return {**ref, "base": _anchored(ref["base"], base_dir)}
    if is_path(ref) and base_dir is not None and not Path(ref).is_absolute() and (base_dir / ref).is_file():
        return os.path.abspath(base_dir / ref)
    return ref


def derived_model_name(stem: str) -> str:
    """A model name taken from a file's name (the name is derived, not typed): its control characters shown
    escaped and cut to the length a model name may have (`primus.specs.base.Name`, one line of at most
    NAME_MAX_CHARS printable characters)."""
    return escape_controls(stem)[:NAME_MAX_CHARS] or "model"


def is_path(ref: Any) -> bool:
    """Whether a model or hardware value names a file rather than a catalog entry, as the catalogs read it
    (`primus.catalog.models.resolve_model`, `primus.catalog.hardware.resolve_hardware`): a path separator, or a
    YAML or JSON file name."""
    return isinstance(ref, str) and ("/" in ref or ref.endswith((".yaml", ".yml", ".json")))


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and key not in ("model", "hardware"):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


# ---- cluster size ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cluster:
    """The hardware reference, its spec, and the world size (with the job key that states it)."""

    hardware: Any
    spec: ClusterSpec
    gpus: int
    size_key: str  # "nodes" or "gpus"
    size_value: int
    source: str = "the command line"  # where the world size was read, for a layout that contradicts it


def resolve_cluster(where: str, out: Collector, *, cli_hardware: str | None, cli_nodes: int | None,
                    cli_gpus: int | None, header: Mapping[str, Any], file_nnodes: int | None = None,
                    file_nproc: int | None = None, base_dir: Path | None = None) -> Cluster:
    """Hardware: --hardware, else the header, else an error. Size: --nodes/--gpus, else the file's
    torchrun --nnodes × --nproc-per-node, else the header's nodes/gpus, else an error."""
    if cli_nodes is not None and cli_gpus is not None:
        raise InputError(where, None, "give at most one of --nodes and --gpus")
    hardware = cli_hardware if cli_hardware is not None else header.get("hardware")
    if hardware is None:
        raise InputError(where, "hardware", "the file does not name the accelerator; give --hardware (e.g. h100-80gb)")
    spec = resolve_hardware(hardware, where, "hardware", base_dir)
    gpn = spec.gpus_per_node
    if cli_nodes is not None or cli_gpus is not None:
        if file_nnodes is not None and file_nproc is not None:
            out.note(f"world size from the command line; the file's torchrun asks for {file_nnodes * file_nproc} GPUs")
        if cli_nodes is not None:
            return Cluster(hardware, spec, cli_nodes * gpn, "nodes", cli_nodes)
        assert cli_gpus is not None
        return _by_gpus(hardware, spec, cli_gpus)
    if file_nnodes is not None and file_nproc is not None:
        if header.get("gpus") == file_nnodes * file_nproc:  # the job said gpus: keep its spelling
            return _by_gpus(hardware, spec, file_nnodes * file_nproc)
        source = f"the file's torchrun (--nnodes {file_nnodes} x --nproc-per-node {file_nproc})"
        if file_nproc == gpn:
            return Cluster(hardware, spec, file_nnodes * gpn, "nodes", file_nnodes, source)
        return Cluster(hardware, spec, file_nnodes * file_nproc, "gpus", file_nnodes * file_nproc, source)
    if header.get("nodes") is not None:
        return Cluster(hardware, spec, _pos_int(header["nodes"], where, "primus-job.nodes") * gpn, "nodes",
                       header["nodes"], "the primus-job header")
    if header.get("gpus") is not None:
        gpus = _pos_int(header["gpus"], where, "primus-job.gpus")
        return Cluster(hardware, spec, gpus, "gpus", gpus, "the primus-job header")
    raise InputError(where, None, "the file does not give the world size; give --nodes or --gpus")


def _by_gpus(hardware: Any, spec: ClusterSpec, gpus: int) -> Cluster:
    return Cluster(hardware, spec, gpus, "gpus", gpus)


def _pos_int(value: Any, where: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(where, name, f"must be a positive integer, got {shown(value)}")
    return value


def data_parallel(world: int, tp: int, pp: int, cp: int, where: str, source: str | None = None,
                  gpus_per_node: int | None = None) -> int:
    """Megatron's data-parallel size: world / (TP × PP × CP), which must divide exactly. When the
    world size came from the file (`source`), the refusal says so and names the --nodes that holds
    the layout (Megatron-LM's GPT-3 175B example states NUM_NODES=1 for TP 8 × PP 16)."""
    denom = tp * pp * cp
    if world % denom:
        hint = ""
        if source is not None and source != "the command line":
            # the fewest whole nodes whose GPUs TP x PP x CP divides: 3 nodes of 8 for TP 3, not 1
            fewest = f"--nodes {denom // math.gcd(denom, gpus_per_node)}" if gpus_per_node else f"--gpus {denom}"
            hint = (f": the world size is {source}, which contradicts the file's own layout; give the size it runs "
                    f"at ({fewest} at the least)")
        raise InputError(where, "parallel", f"TP×PP×CP = {denom} does not divide the {world} GPUs{hint}")
    return world // denom


# ---- the end of every import ----------------------------------------------------------------------


def finish(kind: str, release: str, where: str, native: dict[str, Any], header: Mapping[str, Any],
           cluster: Cluster, out: Collector, base_dir: Path | None = None) -> LaunchConfig:
    """Merge the header's residual keys under the natively read ones, put the cluster in, validate
    the result as a job (so a bad file fails here, with one line), and order the keys as a job file."""
    extra = {k: v for k, v in header.items() if k not in HEADER_ONLY}
    merged = deep_merge(extra, native)
    merged["hardware"] = cluster.hardware
    merged.pop("nodes", None)
    merged.pop("gpus", None)
    merged[cluster.size_key] = cluster.size_value
    ordered = {k: merged[k] for k in _ORDER if k in merged}
    ordered.update({k: v for k, v in merged.items() if k not in ordered})
    if "stack" not in ordered and kind in IMPORT_STACKS:  # validated on the stack that runs the file
        ordered["stack"] = IMPORT_STACKS[kind]
    job_from_mapping(ordered, where, base_dir)
    return LaunchConfig(kind, release, ordered, tuple(out.unmodelled), tuple(out.notes), where)


_ORDER = ("model", "hardware", "nodes", "gpus", "seq_len", "global_batch_size", "precision", "fp8_recipe",
          "framework", "parallel", "schedule", "pipeline", "optimizer", "moe", "overlap", "kernels")

JOB_KEYS = frozenset(JobSpec.model_fields)
