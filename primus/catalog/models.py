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
from primus.specs.model import ModelSpec, follow_num_layers
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
        if "model_type" not in data and "architectures" not in data:
            raise InputError(str(path), "model_type", "a .json model is read as a Hugging Face config.json and"
                             " this one has neither model_type nor architectures (a model in Megatron-LM's"
                             " argument names is a YAML file)")
        return model_from_hf_config(data, str(path))
    data = load_mapping(path)
    if "model_type" in data or "architectures" in data:
        return model_from_hf_config(data, str(path))
    data.setdefault("name", path.stem)
    return parse_spec(ModelSpec, data, str(path))


def _follow_num_layers(base: ModelSpec, overrides: Mapping[str, Any], merged: dict[str, Any], where: str,
                       field: str) -> None:
    """An override of `num_layers` alone carries the base's MoE layer rule to the new depth (the first
    three dense layers of DeepSeek-V3 stay three), and the model's notes say so; a pattern without a
    rule is refused naming moe_layer_freq, which the user then overrides too."""
    layers = overrides.get("num_layers")
    if not base.is_moe or "moe_layer_freq" in overrides or isinstance(layers, bool) or not isinstance(layers, int) \
            or layers < 1 or layers == base.num_layers:
        return
    try:
        merged["moe_layer_freq"], note = follow_num_layers(base.moe_layer_freq, base.num_layers, layers)
    except ValueError as exc:
        raise InputError(where, f"{field}.num_layers", str(exc)) from None
    if note:
        merged["notes"] = "; ".join(n for n in (note, merged.get("notes")) if n)[:2000]


def resolve_model(ref: Any, where: str, field: str = "model", base_dir: Path | None = None) -> ModelSpec:
    """A model from a slug, a path (relative to `base_dir`), or `{base: <ref>, <field>: <override>}`."""
    if isinstance(ref, Mapping):
        if "base" not in ref:
            raise InputError(where, field, "a model mapping needs 'base' (a catalog name or path) plus overrides")
        base = resolve_model(ref["base"], where, f"{field}.base", base_dir)
        overrides = {k: v for k, v in ref.items() if k != "base"}
        merged = {**base.model_dump(exclude_none=True), **overrides}
        merged.pop("published", None) if overrides else None
        _follow_num_layers(base, overrides, merged, where, field)
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
        if path.is_dir():
            inside = path / "config.json"
            hint = f" (did you mean {str(inside)!r}?)" if inside.is_file() else ""
            raise InputError(where, field, f"{str(path)!r} is a directory; a model is a file, a Hugging Face"
                             f" config.json or a model YAML{hint}")
        return _load_model_file(path)
    slugs = catalog_models()
    if text not in slugs:
        raise InputError(where, field, f"unknown model {text!r}{did_you_mean(text, slugs)}; see `primus models list`")
    return _load_catalog_model(text)
