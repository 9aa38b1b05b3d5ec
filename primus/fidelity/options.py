"""Primus-LM / Primus-Turbo options a published run states, as settings of a primus job.

AMD's rows (`amd_runs_dev.csv`) list in `options` the launch options and Primus-Turbo features each run
used. `data/primus_options.yaml` names each option, the spellings the sources use, what it sets in a job
(kernels, dispatcher, optimizer state, model overrides) and its source; options with no sourced cost are
recognised and reported as not modelled, so their measured gain stays visible in the residual instead of
being fitted away. The table is data so the `primus` stack's defaults can own it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from primus.stacks.primus_turbo import is_stage, sync_free_moe

_PATH = Path(__file__).resolve().parent / "data" / "primus_options.yaml"
_FEATURES = re.compile(r"MoE_Features=\(([\d\s]+)\)")


@dataclass(frozen=True)
class PrimusOption:
    """One named option: how sources spell it and what it sets."""

    name: str
    match: tuple[str, ...]
    source: str
    job: dict[str, Any] = field(default_factory=dict)
    model: dict[str, Any] = field(default_factory=dict)
    moe_features: int | None = None
    modelled: bool = True

    def used_in(self, options: str) -> bool:
        """Whether a row's `options` text turns this option on: a spelling that is not negated ("no DeepEP",
        "without ...") and not given an off value (`=false`, `: 0`), or its MoE_Features number."""
        text = options.lower()
        if any(_turned_on(text, m.lower()) for m in self.match):
            return True
        found = _FEATURES.search(options)
        return self.moe_features is not None and found is not None and str(self.moe_features) in found.group(1).split()


#: Words that, right before a spelling, say the run did not use it ("no DeepEP", "w/o loss fusion").
_NEGATIONS = re.compile(r"(?:\bno|\bnot|\bwithout|\bw/o|\bdisable[sd]?)\s+$")
#: A value written right after a spelling (`=false`, `: 0`, ` True`).
_VALUE = re.compile(r"\s*[=:]?\s*([a-z0-9_.+-]+)")
_OFF = frozenset({"false", "0", "no", "off", "none", "disabled"})
#: Off values that also count after a bare space ("stage 0", "legacy_grouped_gemm false"); "no" and "none"
#: there begin prose too often ("DeepEP no longer syncs") to be read as a value.
_OFF_AFTER_SPACE = frozenset({"false", "0", "off", "disabled"})
#: How far before a spelling a negation word is looked for: the longest ("disabled", "without") and a space.
_NEGATION_REACH = 12
_STAGE = re.compile(r"turbo_sync_free_moe_stage\s*[=:]?\s*([^\s,;)]*)")


def _turned_on(text: str, spelling: str) -> bool:
    """Whether `spelling` occurs in `text` as a whole token (a spelling that ends in a value, such as
    "stage: 2", does not match "stage: 20"), not negated and not followed by an off value."""
    for found in re.finditer(re.escape(spelling), text):
        start, end = found.span()
        if end < len(text) and spelling[-1].isalnum() and (text[end].isalnum() or text[end] == "_"):
            continue  # a longer token: "stage: 20" for "stage: 2", "deepep_num_cu" still counts below
        if _NEGATIONS.search(text[max(0, start - _NEGATION_REACH):start]):
            continue
        value = _VALUE.match(text, end) if not spelling[-1].isdigit() else None
        if value is not None and value.group(1) in (_OFF if text[end:value.start(1)].strip() else _OFF_AFTER_SPACE):
            continue
        return True
    return False


def sync_free_stage(options: str) -> int | None:
    """The Primus-Turbo sync-free MoE stage a row's options state, if any; ValueError when it is not an
    integer from 0 to 3 (Primus refuses anything else: rocm_arg_validation.py `_get_sync_free_moe_options`)."""
    found = _STAGE.search(options.lower())
    if found is None:
        return None
    value = found.group(1)
    if not (value.isascii() and value.isdigit() and is_stage(int(value))):
        raise ValueError(f"options: turbo_sync_free_moe_stage {value or '(no value)'!r} is not an integer from 0 "
                         "to 3 (Primus's sync-free MoE stages)")
    return int(value)


@lru_cache(maxsize=1)
def primus_options() -> tuple[PrimusOption, ...]:
    """The option table (data/primus_options.yaml)."""
    raw = yaml.safe_load(_PATH.read_text(encoding="utf-8"))
    return tuple(PrimusOption(name=e["name"], match=tuple(e["match"]), source=" ".join(e["source"].split()),
                              job=e.get("job", {}), model=e.get("model", {}), moe_features=e.get("moe_features"),
                              modelled=e.get("modelled", True)) for e in raw["options"])


def merge_keys(into: dict[str, Any], keys: dict[str, Any]) -> None:
    """Merge nested job keys into `into`, in place (later keys win)."""
    for k, v in keys.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            merge_keys(into[k], v)
        elif isinstance(v, dict):
            into[k] = dict(v)
        else:
            into[k] = v


@dataclass(frozen=True)
class AppliedOptions:
    """What a row's options set: job keys, model overrides, and the names (modelled or not)."""

    job: dict[str, Any]
    model: dict[str, Any]
    modelled: tuple[str, ...]
    not_modelled: tuple[str, ...]


def apply_options(options: str, *, is_moe: bool) -> AppliedOptions:
    """The settings the options text names, in table order (MoE-only keys dropped for dense models)."""
    job: dict[str, Any] = {}
    model: dict[str, Any] = {}
    modelled: list[str] = []
    not_modelled: list[str] = []
    stage = sync_free_stage(options)  # an out-of-range stage is bad input, not a stage of its own
    for opt in primus_options():
        if not opt.used_in(options):
            continue
        keys = {k: v for k, v in opt.job.items() if is_moe or k != "moe"}
        merge_keys(job, keys)
        model.update(opt.model)
        (modelled if opt.modelled else not_modelled).append(opt.name)
    if stage and is_moe:  # however the stage is spelled, it sets what the import reads for it
        merge_keys(job, {"moe": sync_free_moe(stage)})
    return AppliedOptions(job, model, tuple(modelled), tuple(not_modelled))
