"""Megatron-LM's argument names and torchtitan's JobConfig fields, to tell a misspelt option from a real
one primus does not model.

Megatron-LM's parser is built with ``allow_abbrev=False`` and exits on an unrecognized argument
(core_v0.18.0 megatron/training/arguments.py lines 127-142), so a misspelt ``--tensor-model-paralel-size 8``
stops the launch; primus read it as an unmodelled option and proved the job at TP 1. The import refuses
an argument that no release primus targets has (``data/megatron_options.txt``) when it is one spelling
slip from one that does (a near match, or the same name with underscores), naming the real one. An
unknown name far from every real one (a fork's option, a custom ``extra_args_provider``'s) stays an
unmodelled note, as before.

torchtitan's ConfigManager refuses a TOML key that is no JobConfig field ("Invalid field names",
v0.2.2 torchtitan/config/manager.py lines 165-170): a key with a part that no JobConfig of its history
has (``data/torchtitan_fields.txt``) and that is one slip from one that does is refused the same way.
"""

from __future__ import annotations

import difflib
from functools import cache
from pathlib import Path
from typing import Final

from primus.errors import InputError
from primus.launch.megatron_args import BY_FLAG
from primus.stacks.megatron_release import RELEASES

OPTIONS_FILE: Final = Path(__file__).resolve().parent / "data" / "megatron_options.txt"
FIELDS_FILE: Final = Path(__file__).resolve().parent / "data" / "torchtitan_fields.txt"
#: difflib's similarity ratio from which an unknown name is read as a misspelling of a real one: a one-letter
#: slip scores above it from 10 characters on (``--num-layer``/``--num-layers`` 0.957,
#: ``--tensor-model-paralel-size`` 0.982); distinct real options score well below it (``--fp8-margin``/
#: ``--fp8-format`` 0.667, ``--num-layers``/``--num-experts`` 0.72).
SLIP_RATIO: Final = 0.9


@cache
def megatron_options() -> frozenset[str]:
    """Every argument name of `RELEASES` (the data file's lines), with the ones primus writes."""
    lines = OPTIONS_FILE.read_text(encoding="utf-8").splitlines()
    return frozenset(x for x in lines if x.startswith("--")) | frozenset(BY_FLAG)


@cache
def torchtitan_fields() -> frozenset[str]:
    """Every JobConfig field name of torchtitan's history (the data file's lines)."""
    lines = FIELDS_FILE.read_text(encoding="utf-8").splitlines()
    return frozenset(x for x in lines if x and not x.startswith("#"))


def _near(name: str, known: frozenset[str]) -> str | None:
    if name in known:
        return None
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=SLIP_RATIO)
    return close[0] if close else None


def near_option(name: str) -> str | None:
    """The real Megatron-LM argument an unknown `name` misspells, or None (a real name, or none near)."""
    known = megatron_options()
    dashed = "--" + name[2:].replace("_", "-")
    if name not in known and dashed in known:
        return dashed
    return _near(name, known)


def near_field(key: str) -> str | None:
    """The real torchtitan key a dotted TOML `key` misspells (one part replaced), or None."""
    parts = key.split(".")
    for i, part in enumerate(parts):
        real = _near(part, torchtitan_fields())
        if real is not None:
            return ".".join([*parts[:i], real, *parts[i + 1:]])
    return None


def check_option(name: str, where: str) -> None:
    """Refuse (exit 2, one line) an argument name Megatron-LM would exit on that misspells a real one."""
    real = near_option(name)
    if real is not None:
        raise InputError(where, name, f"is not a Megatron-LM argument ({RELEASES[0]} to {RELEASES[-1]} exit on it: "
                         f"'unrecognized arguments'); did you mean {real}?")


def check_field(key: str, where: str) -> None:
    """Refuse (exit 2, one line) a TOML key torchtitan refuses that misspells a real one."""
    real = near_field(key)
    if real is not None:
        raise InputError(where, key, f"is not a torchtitan JobConfig field (ConfigManager raises 'Invalid field "
                         f"names'); did you mean {real}?")
