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
        """Whether a row's `options` text names this option (a spelling, or its MoE_Features number)."""
        text = options.lower()
        if any(m.lower() in text for m in self.match):
            return True
        found = _FEATURES.search(options)
        return self.moe_features is not None and found is not None and str(self.moe_features) in found.group(1).split()


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
    for opt in primus_options():
        if not opt.used_in(options):
            continue
        keys = {k: v for k, v in opt.job.items() if is_moe or k != "moe"}
        merge_keys(job, keys)
        model.update(opt.model)
        (modelled if opt.modelled else not_modelled).append(opt.name)
    return AppliedOptions(job, model, tuple(modelled), tuple(not_modelled))
