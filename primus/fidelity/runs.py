"""Published measured runs: the `runs_dev.csv` schema, read into typed rows.

The schema is `../shared/ground_truth/README.md`'s: one row per published training run with the
configuration its source states and what it measured. Any CSV with those columns is accepted (the
development set, a held-out set, a user's own measurements); a missing column is an input error,
an unparsable cell makes only that row unprojectable (with the reason, which names the column and
quotes a bounded excerpt of the cell), never the whole file.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from primus.errors import InputError, shown

#: Columns a runs file must have (the development set's schema).
REQUIRED: tuple[str, ...] = (
    "run_id", "source", "model", "layers", "hidden", "ffn", "heads", "kv_heads", "vocab", "experts", "topk",
    "gpu", "num_gpus", "precision", "tp", "pp", "vp", "cp", "ep", "etp", "dp", "sp", "sharding", "mbs", "gbs",
    "seq_len", "recompute", "tokens_per_s_per_gpu", "tokens_per_s_per_gpu_derived", "peak_memory_gib",
    "flags", "complete",
)
MAX_BYTES = 64 * 2**20  # a runs file is a table of measurements, not a data set
#: The largest integer a float holds with every smaller one (IEEE 754 double: a 53-bit significand).
MAX_FLOAT_EXACT = 2**53
_DIGITS = re.compile(r"\+?[0-9]+")
#: A whole number as a spreadsheet writes it (8.0, 1e3): ASCII digits only, so that Python's float() does
#: not read "1_2" (digit grouping) or full-width digits as numbers a CSV never meant
_DECIMAL = re.compile(r"\+?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
MAX_ROWS = 100_000
#: `_202412_`, `_2025-06_`, `_20250613_` between the hardware and entity parts of a benchmark file name
#: "recompute_layer_ids 0,1,2,4" / "recompute_layer_ids: \"0,1,2\"" in a row's notes
_LAYER_IDS = re.compile(r"recompute_layer_ids\W*((?:\d+\s*,\s*)*\d+)")
#: "layout Et|(tt|)*14,t|(tt|)*15,tL" or "layout (Et|t|(tt|)*29,tL)" in a row's options
_LAYOUT = re.compile(r"\blayout \(?(E[EtmL|()*,0-9]*)")
_DATED_FILE = re.compile(r"_(20\d\d)-?(0[1-9]|1[0-2])(?:-?\d\d)?_[^_/]+\.md$")


@dataclass(frozen=True)
class RunRow:
    """One published run, cells as written (stripped strings); typed accessors parse on demand."""

    cells: dict[str, str]
    line: int
    flags: frozenset[str] = field(default_factory=frozenset)

    def __getitem__(self, key: str) -> str:
        return self.cells.get(key, "")

    @property
    def run_id(self) -> str:
        return self["run_id"]

    @property
    def source(self) -> str:
        return self["source"]

    @property
    def complete(self) -> bool:
        return self["complete"].lower() == "true"

    def integer(self, key: str) -> int | None:
        """The cell as a positive integer, None when empty; ValueError naming the column and the cell
        (a bounded excerpt) when it is not one. Digits are read exactly (a float would turn a 150-digit
        count into another number); a whole number written with a decimal point or an exponent
        (``8.0``, ``1e3``) is accepted as spreadsheets write it, but only up to `MAX_FLOAT_EXACT`,
        beyond which a float no longer holds every integer."""
        text = self[key]
        if not text:
            return None
        bad = ValueError(f"column {key!r} must be a positive integer, got {shown(text)}")
        if _DIGITS.fullmatch(text):
            try:
                value = int(text)
            except ValueError:  # over Python's 4,300-digit conversion limit
                raise bad from None
        else:
            if not _DECIMAL.fullmatch(text):
                raise bad
            number = float(text)
            if not number.is_integer() or abs(number) > MAX_FLOAT_EXACT:
                raise bad
            value = int(number)
        if value < 1:
            raise bad
        return value

    def number(self, key: str) -> float | None:
        """The cell as a positive float, None when empty or not a positive number (`measurement`'s reading,
        where that one names the bad cell)."""
        try:
            return self.measurement(key)
        except ValueError:
            return None

    def boolean(self, key: str) -> bool | None:
        text = self[key].lower()
        if text in ("true", "1", "yes"):
            return True
        if text in ("false", "0", "no"):
            return False
        return None

    def measurement(self, key: str) -> float | None:
        """A measured figure: None when the cell is empty; ValueError naming the column and the cell when
        it is not a finite positive number (a typo or `inf` would otherwise pass for "not measured", or
        reach the fit as an infinite error)."""
        text = self[key]
        if not text:
            return None
        value = float(text) if _DECIMAL.fullmatch(text) else math.nan  # ASCII digits, as `integer` reads them
        if not math.isfinite(value) or value <= 0:
            raise ValueError(f"column {key!r} must be a finite positive number, got {shown(text)}")
        return value

    @property
    def measured_tokens(self) -> float | None:
        """Measured tokens/s/GPU: the published figure, else the one derived from step time."""
        return self.measurement("tokens_per_s_per_gpu") or self.measurement("tokens_per_s_per_gpu_derived")

    @property
    def measured_peak_gib(self) -> float | None:
        return self.measurement("peak_memory_gib")

    @property
    def published(self) -> str | None:
        """Year and month ("2024-12") the run was published, from the file name of its `url` when that
        follows torchtitan's benchmark naming rule `[model/theme]_[hardware]_[date/time]_[entity].md`
        (pytorch/torchtitan benchmarks/README.md); None otherwise."""
        match = _DATED_FILE.search(self["url"].rsplit("/", 1)[-1])
        return f"{match.group(1)}-{match.group(2)}" if match else None

    @property
    def recompute_method(self) -> str | None:
        """Megatron's `--recompute-method` as stated (block, uniform), None when the row does not say;
        ValueError for anything else. Optional column (AMD rows)."""
        text = self["recompute_method"].lower()
        if text and text not in ("block", "uniform"):
            raise ValueError(f"column 'recompute_method' must be block or uniform, got {text!r}")
        return text or None

    @property
    def recompute_layer_ids(self) -> tuple[int, ...] | None:
        """Primus's `--recompute_layer_ids` when the row's flags say the source recomputed a listed set of
        layers: from a `recompute_layer_ids` column, else from `notes` ("recompute_layer_ids 0,1,2,...");
        ValueError when flagged but not named (the projection would otherwise guess)."""
        if "recompute_layer_ids" not in self.flags:
            return None
        text = self["recompute_layer_ids"]
        if not text:
            match = _LAYER_IDS.search(self["notes"])
            text = match.group(1) if match else ""
        ids = tuple(int(x) for x in re.findall(r"\d+", text))
        if not ids:
            raise ValueError("flag recompute_layer_ids is set but neither the recompute_layer_ids column nor the "
                             "notes name the layers")
        return ids

    @property
    def pipeline_layout(self) -> str | None:
        """An explicit Megatron `pipeline_model_parallel_layout` the source states in `options`
        ("layout Et|(tt|)*14,t|(tt|)*15,tL"), None otherwise."""
        match = _LAYOUT.search(self["options"])
        if not match:
            return None
        text = match.group(1).rstrip(";,")
        while text.endswith(")") and text.count(")") > text.count("("):
            text = text[:-1]  # the closing bracket of "layout (…)"
        return text

    @property
    def is_moe(self) -> bool:
        experts = self.number("experts")
        return experts is not None and experts > 1

    def as_dict(self) -> dict[str, Any]:
        return dict(self.cells)


def read_runs(path: str | Path) -> list[RunRow]:
    """Every row of a runs CSV (complete or not), in file order."""
    p = Path(path)
    if not p.is_file():
        raise InputError(str(p), None, "runs file does not exist")
    if p.stat().st_size > MAX_BYTES:
        raise InputError(str(p), None, f"runs file is larger than {MAX_BYTES // 2**20} MiB")
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(str(p), None, f"not UTF-8 text ({exc.reason})") from None
    reader = csv.DictReader(text.splitlines())
    rows: list[RunRow] = []
    try:  # the csv module refuses a field over its limit (128 KiB) and a NUL byte: input errors, one line
        header = reader.fieldnames or []
        twice = sorted({c for c in header if header.count(c) > 1})
        if twice:  # DictReader would keep the last of the two cells without a word
            raise InputError(str(p), f"column {twice[0]!r}", "appears twice in the header")
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise InputError(str(p), None, f"missing column(s) {', '.join(missing)} (expected the runs_dev.csv "
                             "schema)")
        for i, raw in enumerate(reader):
            if i >= MAX_ROWS:
                raise InputError(str(p), None, f"more than {MAX_ROWS} rows")
            if None in raw or any(v is None for v in raw.values()):  # DictReader's marks of a ragged row
                raise InputError(str(p), f"line {reader.line_num}",
                                 f"{'more' if None in raw else 'fewer'} fields than the header's {len(header)} "
                                 "(a truncated or over-long row)")
            cells = {k: (v or "").strip() for k, v in raw.items() if k is not None}
            if cells.get("complete", "").lower() not in ("true", "false", ""):  # else silently not complete
                raise InputError(str(p), f"line {reader.line_num}",
                                 f"column 'complete' must be true or false, got {shown(cells['complete'])}")
            flags = frozenset(f for f in cells.get("flags", "").split(";") if f)
            rows.append(RunRow(cells, i + 2, flags))
    except csv.Error as exc:
        raise InputError(str(p), f"line {reader.line_num + 1}", f"not CSV ({exc})") from None
    ids = [r.run_id for r in rows]
    dup = sorted({x for x in ids if ids.count(x) > 1}) if len(set(ids)) != len(ids) else []
    if dup:
        raise InputError(str(p), "run_id", f"duplicate run_id {dup[0]!r}")
    return rows


def bundled_amd_runs_path() -> Path:
    """AMD's published Instinct runs shipped with primus: ground_truth/amd_runs_dev.csv, with the layer ids
    of its one listed-layer recompute row added to that row's notes from the same source (see the row)."""
    return Path(__file__).resolve().parent / "data" / "amd_runs_dev.csv"


def bundled_runs_path() -> Path:
    """The development set shipped with primus (a copy of ground_truth/runs_dev.csv, published data)."""
    return Path(__file__).resolve().parent / "data" / "runs_dev.csv"
