"""Where the shipped catalogs live: inside the wheel (primus/_data) or beside the package (editable).

Never the working directory: `primus` must behave the same wherever it is run from.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The shipped folder `models`, `hardware`, `constraints`, `examples` or `stacks`."""
    if name not in ("models", "hardware", "constraints", "examples", "stacks"):
        raise ValueError(f"unknown data folder {name!r}")
    packaged = _PACKAGE / "_data" / name
    if packaged.is_dir():
        return packaged
    return _PACKAGE.parent / name
