"""Resolve a `model` reference (catalog slug, YAML path, HF config.json path, or a mapping with `base`)."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

from primus.catalog.hf import model_from_hf_config
from primus.errors import InputError, did_you_mean
from primus.paths import data_dir
from primus.specs.base import parse_spec
from primus.specs.model import ModelSpec
from primus.yamlio import load_mapping, loads_json, read_text

SLUG_CHARS = set("abcdefghijklmnopqrstuvwxyz0123456789.-_x")


def catalog_models() -> list[str]:
    """Slugs of the shipped models, sorted."""
    return sorted(p.stem for p in data_dir("models").glob("*.yaml"))


@lru_cache(maxsize=256)
def _load_catalog_model(slug: str) -> ModelSpec:
    path = data_dir("models") / f"{slug}.yaml"
    data = load_mapping(path)
    spec = parse_spec(ModelSpec, data, str(path))
    if spec.name != slug:
        raise InputError(str(path), "name", f"name {spec.name!r} does not match the file name {slug!r}")
    return spec


def _load_model_file(path: Path) -> ModelSpec:
    if path.suffix.lower() == ".json":
        data = loads_json(read_text(path), str(path))
        if not isinstance(data, dict):
            raise InputError(str(path), None, "top level must be a mapping")
        if "model_type" in data or "architectures" in data:
            return model_from_hf_config(data, str(path))
        data.setdefault("name", path.stem)
        return parse_spec(ModelSpec, data, str(path))
    data = load_mapping(path)
    if "model_type" in data or "architectures" in data:
        return model_from_hf_config(data, str(path))
    data.setdefault("name", path.stem)
    return parse_spec(ModelSpec, data, str(path))


def resolve_model(ref: Any, where: str, field: str = "model", base_dir: Path | None = None) -> ModelSpec:
    """A model from a slug, a path (relative to `base_dir`), or `{base: <ref>, <field>: <override>}`."""
    if isinstance(ref, Mapping):
        if "base" not in ref:
            raise InputError(where, field, "a model mapping needs 'base' (a catalog name or path) plus overrides")
        base = resolve_model(ref["base"], where, f"{field}.base", base_dir)
        overrides = {k: v for k, v in ref.items() if k != "base"}
        merged = {**base.model_dump(exclude_none=True), **overrides}
        merged.pop("published", None) if overrides else None
        return parse_spec(ModelSpec, merged, where, field)
    if not isinstance(ref, str) or not ref.strip():
        raise InputError(where, field, "must be a catalog name, a path, or a mapping with 'base'")
    text = ref.strip()
    looks_like_path = "/" in text or text.endswith((".yaml", ".yml", ".json"))
    if looks_like_path:
        path = Path(text)
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        if not path.exists():
            raise InputError(where, field, f"model file {str(path)!r} does not exist")
        return _load_model_file(path)
    slugs = catalog_models()
    if text not in slugs:
        raise InputError(where, field, f"unknown model {text!r}{did_you_mean(text, slugs)}; see `primus models list`")
    return _load_catalog_model(text)
