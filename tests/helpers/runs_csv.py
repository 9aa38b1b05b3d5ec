"""Runs files for tests: rows picked from a shipped runs CSV (the dev set or the AMD rows), edited, and
written back under the same header, so a test states only the rows and fields it is about."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterable
from pathlib import Path


def read_rows(src: Path | str, keep: Callable[[dict[str, str]], bool] = lambda _row: True) -> tuple[
        list[str], list[dict[str, str]]]:
    """The header of `src` and its rows that `keep` accepts, in file order."""
    with Path(src).open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        rows = [r for r in reader if keep(r)]
        return list(reader.fieldnames or []), rows


def row_of(src: Path | str, run_id: str) -> tuple[list[str], dict[str, str]]:
    """The header of `src` and its row `run_id` (a KeyError names a run the file does not hold)."""
    fields, rows = read_rows(src, lambda r: r["run_id"] == run_id)
    if not rows:
        raise KeyError(f"{run_id} is not in {src}")
    return fields, rows[0]


def write_rows(path: Path, fields: list[str], rows: Iterable[dict[str, str]]) -> Path:
    """`rows` under the header `fields`, as a runs file at `path`."""
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path
