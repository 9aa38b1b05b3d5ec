"""AMD Primus model files: find the checkout, read a model file and the files it `extends:`.

A Primus experiment names a model file (``model: mixtral_8x22B_v0.1.yaml``, possibly a placeholder
``${PRIMUS_MODEL:gpt_oss_120B}.yaml``) that Primus loads from ``primus/configs/models/megatron/``
(``PresetLoader.load`` in ``primus/core/launcher/parser.py``) and merges with the files it extends,
bases first, each later file winning, the file itself last (``_apply_extends`` in
``primus/core/config/yaml_loader.py``; AMD-AGI/Primus fd1eeab). This module does the same statically:
inside a checkout (found from the experiment file's own path, or given as ``--primus-root``) the
model is what its files say; without one, a table maps Primus's published model files to catalog
models, and the import says which file it could not read.

Model files of models that are not transformer decoders (``model_type: mamba``, ``is_hybrid_model``,
LFM2's convolution layers) are refused: "not supported: KIND".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from primus.errors import InputError
from primus.launch.common import Collector
from primus.yamlio import loads_yaml, read_text

MODELS_DIR: Final = Path("primus/configs/models/megatron")
BASE_MODEL_FILE: Final = "language_model.yaml"
MAX_CHAIN: Final = 32  # files in one extends chain; Primus's deepest is 6 (a loop guard, not a limit users meet)

#: Primus model files (AMD-AGI/Primus fd1eeab, primus/configs/models/megatron/) whose model is a primus
#: catalog model: used when there is no checkout to read the file from. Names as Primus spells them.
MODEL_FILES: Final[dict[str, str]] = {
    "llama2-7b": "llama2_7B.yaml", "llama2-13b": "llama2_13B.yaml", "llama2-70b": "llama2_70B.yaml",
    "llama3-8b": "llama3_8B.yaml", "llama3-70b": "llama3_70B.yaml", "llama3.1-8b": "llama3.1_8B.yaml",
    "llama3.1-70b": "llama3.1_70B.yaml", "llama3.1-405b": "llama3.1_405B.yaml",
    "mixtral-8x7b": "mixtral_8x7B_v0.1.yaml", "mixtral-8x22b": "mixtral_8x22B_v0.1.yaml",
    "deepseek-v3": "deepseek_v3.yaml", "qwen3-30b-a3b": "qwen3_30B_A3B.yaml",
    "qwen3-235b-a22b": "qwen3_235B_A22B.yaml", "grok-1-314b": "grok1.yaml", "gpt-oss-120b": "gpt_oss_120B.yaml",
    "kimi-k2": "kimi_k2.yaml", "deepseek-v2-lite": "deepseek_v2_lite.yaml", "gpt-oss-20b": "gpt_oss_20B.yaml",
}
SLUG_OF_FILE: Final = {v: k for k, v in MODEL_FILES.items()}

_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")


@dataclass(frozen=True)
class ModelFile:
    """A model file as Primus merges it: the keys, the files read (leaf first), and the root."""

    name: str
    values: dict[str, Any]
    chain: tuple[str, ...]
    root: Path


def substitute(value: Any, where: str, key: str, out: Collector) -> Any:
    """``${NAME:default}`` → its default (the environment is not read); a value that is wholly a
    placeholder is re-read as a YAML scalar, as Primus's loader converts it (``${PRIMUS_TP:8}`` is 8)."""
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


def find_root(experiment: Path | None, given: Path | None, where: str) -> Path | None:
    """The Primus checkout: `given` (it must hold primus/configs/models/megatron), else the nearest
    parent of the experiment file that does, else None."""
    if given is not None:
        if not (given / MODELS_DIR).is_dir():
            raise InputError(where, "--primus-root", f"{given} has no {MODELS_DIR} (not a Primus checkout)")
        return given
    if experiment is None:
        return None
    for parent in experiment.resolve().parents:
        if (parent / MODELS_DIR).is_dir():
            return parent
    return None


def read_model_file(root: Path, name: str, where: str, out: Collector) -> ModelFile | None:
    """The model file `name` of the checkout merged with what it extends; None when it is not there."""
    folder = root / MODELS_DIR
    path = folder / name
    if not path.is_file():
        return None
    chain: list[str] = []
    values = _merged(path, folder, where, out, chain, set())
    _refuse_non_decoder(name, values, chain, where)
    return ModelFile(name, values, tuple(chain), root)


def _merged(path: Path, folder: Path, where: str, out: Collector, chain: list[str], seen: set[Path]) -> dict[str, Any]:
    resolved = path.resolve()
    if resolved in seen or len(chain) >= MAX_CHAIN:
        raise InputError(str(path), "extends", "the extends chain loops or is too long")
    seen.add(resolved)
    if not resolved.is_relative_to(folder.resolve()):
        raise InputError(str(path), "extends", "points outside primus/configs/models/megatron")
    if not path.is_file():
        raise InputError(where, "extends", f"{path.name} (extended by {chain[-1] if chain else '?'}) is not in "
                         f"{folder}")
    doc = loads_yaml(read_text(path), str(path)) or {}
    if not isinstance(doc, dict):
        raise InputError(str(path), None, "a Primus model file must be a mapping")
    chain.append(path.name)
    parents = doc.get("extends") or []
    if isinstance(parents, str):
        parents = [parents]
    merged: dict[str, Any] = {}
    for parent in parents:
        merged.update(_merged(path.parent / str(parent), folder, where, out, chain, seen))
    merged.update({k: substitute(v, str(path), k, out) for k, v in doc.items() if k != "extends"})
    return merged


def _refuse_non_decoder(name: str, values: dict[str, Any], chain: list[str], where: str) -> None:
    """Mamba, hybrid and linear-attention models, and LFM2's convolution layers, are not transformer
    decoders: refused with "not supported: KIND" (the exit status is 2)."""
    kind = None
    if values.get("model_type", "gpt") != "gpt":
        kind = f"{values['model_type']} (model_type; Mamba or linear-attention layers)"
    elif values.get("is_hybrid_model") or values.get("hybrid_override_pattern"):
        kind = "hybrid (Mamba or linear-attention layers)"
    elif values.get("linear_attention_freq"):
        kind = "hybrid (linear-attention layers, Gated DeltaNet)"
    elif values.get("lfm_layer_types"):
        kind = "hybrid (LFM2 convolution layers)"
    elif any(part.startswith("diffusion") for part in Path(name).parts):
        kind = "diffusion (not a language model)"
    if kind is not None:
        raise InputError(where, "model", f"not supported: {kind}; {name} ({' < '.join(chain)})")
