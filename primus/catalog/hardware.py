"""Resolve a `hardware` reference: catalog slug, YAML path, or `{base: <ref>, <field>: <override>}`.

Overrides name either a top-level section (deep-merged) or any leaf field by its own name when that name
is unique in the spec (`hbm_bytes`, `gpus_per_node`, `nic_bandwidth_gb_s`), so a user can say
`{base: mi300x, hbm_bytes: 200000000000}` without knowing the nesting.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from primus.errors import InputError, did_you_mean
from primus.paths import data_dir
from primus.specs.base import parse_spec
from primus.specs.hardware import ClusterSpec
from primus.yamlio import load_mapping


def catalog_hardware() -> list[str]:
    return sorted(p.stem for p in data_dir("hardware").glob("*.yaml"))


@lru_cache(maxsize=64)
def _load_catalog(slug: str) -> ClusterSpec:
    path = data_dir("hardware") / f"{slug}.yaml"
    spec = parse_spec(ClusterSpec, load_mapping(path), str(path))
    if spec.name != slug:
        raise InputError(str(path), "name", f"name {spec.name!r} does not match the file name {slug!r}")
    return spec


def _leaf_paths(data: Mapping[str, Any], prefix: tuple[str, ...] = ()) -> dict[str, list[tuple[str, ...]]]:
    out: dict[str, list[tuple[str, ...]]] = {}
    for key, value in data.items():
        path = (*prefix, key)
        out.setdefault(key, []).append(path)
        if isinstance(value, Mapping) and key != "peak_tflops":
            for sub, paths in _leaf_paths(value, path).items():
                out.setdefault(sub, []).extend(paths)
    return out


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            base[key] = _deep_merge(base[key], value)
        else:
            base[key] = value
    return base


def apply_overrides(spec: ClusterSpec, overrides: Mapping[str, Any], where: str, field: str) -> ClusterSpec:
    data = copy.deepcopy(spec.model_dump())
    leaves = _leaf_paths(data)
    for key, value in overrides.items():
        if key in data:
            if isinstance(value, Mapping) and isinstance(data[key], dict):
                data[key] = _deep_merge(data[key], value)
            else:
                data[key] = value
            continue
        paths = leaves.get(key, [])
        if not paths:
            raise InputError(where, f"{field}.{key}", f"unknown hardware field{did_you_mean(key, leaves)}")
        if len(paths) > 1:
            options = ", ".join(".".join(p) for p in paths)
            raise InputError(where, f"{field}.{key}", f"ambiguous; write it nested as one of {options}")
        target = data
        for part in paths[0][:-1]:
            target = target[part]
        target[paths[0][-1]] = value
    if overrides:
        data["name"] = f"{spec.name}+custom"
    return parse_spec(ClusterSpec, data, where, field)


# Keys every calibration profile has and no hardware entry does (primus.projection.profile.Profile).
PROFILE_KEYS = frozenset({"gemm", "attention", "hbm", "collectives", "overlap"})
# primus.measure.measured_profile.FORMAT (not imported: the measure package imports this catalog)
MEASURED_FORMAT = "primus-measured-profile"


def _other_file_kind(data: Mapping[str, Any]) -> str | None:
    """What a file given as hardware is when it is one of primus's other files: a calibration profile
    or a measured profile (`--profile` reads both); None otherwise."""
    if data.get("format") == MEASURED_FORMAT:
        return "a measured profile (for `primus project --profile`)"
    if set(data) >= PROFILE_KEYS:
        return "a calibration profile (for `--profile`)"
    return None


def resolve_hardware(ref: Any, where: str, field: str = "hardware", base_dir: Path | None = None) -> ClusterSpec:
    if isinstance(ref, Mapping):
        if "base" not in ref:
            raise InputError(where, field, "a hardware mapping needs 'base' (a catalog name or path) plus overrides")
        base = resolve_hardware(ref["base"], where, f"{field}.base", base_dir)
        return apply_overrides(base, {k: v for k, v in ref.items() if k != "base"}, where, field)
    if not isinstance(ref, str) or not ref.strip():
        raise InputError(where, field, "must be a catalog name, a path, or a mapping with 'base'")
    text = ref.strip()
    if "/" in text or text.endswith((".yaml", ".yml")):
        path = Path(text)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.exists():
            raise InputError(where, field, f"hardware file {str(path)!r} does not exist")
        data = load_mapping(path)
        kind = _other_file_kind(data)
        if kind is not None:
            raise InputError(str(path), None, f"this is {kind}, not a hardware entry (hardware/*.yaml)")
        return parse_spec(ClusterSpec, data, str(path))
    slugs = catalog_hardware()
    if text not in slugs:
        raise InputError(where, field,
                         f"unknown hardware {text!r}{did_you_mean(text, slugs)}; see `primus hardware list`")
    return _load_catalog(text)
