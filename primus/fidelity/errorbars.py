"""Error bars on projections, from how wrong the projection was on runs it had not been fitted to.

`benchmarks/accuracy_tables.py` runs the leave-one-source-out procedure (`primus.fidelity.loso`):
for every source, refit each accelerator's profile without that source's runs and predict them. A
percentile of |error| of those held-out predictions (runs weighted by their source's design effect,
`loso._source_weighted`), per accelerator and dense/MoE, is the bar; its level (`loso.BAR_QUANTILE`)
is the one at which the bars cover about two runs in three of a source they were derived without
("± 6%" reads: about two runs in three of a new source land within 6%; `loso.coverage` measures it).
It writes them to `data/error_bars.yaml`; this module only
reads that file. Fallbacks, each stated in `basis`:

- an accelerator/kind whose held-out runs come from fewer than `loso.MIN_SOURCES` sources is widened to
  the bar pooled over every fitted accelerator for that kind (already so in the file);
- an accelerator/kind with no held-out runs uses the pooled bar;
- an accelerator whose shipped profile carries a same-die sibling's fitted factors (no runs of its own,
  `primus.fidelity.sibling`) gets the `transferred` bar: the same percentile of the held-out errors of
  the runs such a transfer predicted, widened like any group with too few sources;
- an accelerator whose shipped profile is neither fitted nor transferred (AMD today) gets the
  spec-derived bar: the same percentile of the *uncalibrated* projection's error over all complete
  runs, i.e. what a profile written from datasheets alone achieves.

Precision: the file also holds bars split by precision family (16-bit / low precision) where a group has
held-out runs from enough sources (`loso.precision_split`); they are used, for a caller that gives the
precision, only when the file says the split `ships` (its coverage stayed in the band in every group).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from primus.errors import InputError
from primus.yamlio import load_mapping

DATA = Path(__file__).resolve().parent / "data" / "error_bars.yaml"


@dataclass(frozen=True)
class ErrorBar:
    """± `pct` percent on tokens/s/GPU (and step time), with what it rests on."""

    pct: float
    basis: str
    fitted: bool

    def text(self) -> str:
        return f"± {self.pct:.0f}%"


@lru_cache(maxsize=4)
def _load(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        return {}
    return load_mapping(p)


def _bar(entry: dict[str, Any], fitted: bool, note: str = "") -> ErrorBar:
    return ErrorBar(float(entry["pct"]), str(entry["basis"]) + note, fitted)


def _profile_state(hardware: str) -> tuple[bool, str | None]:
    """Whether the shipped profile is fitted, and the sibling it was transferred from (if any)."""
    from primus.catalog.hardware import resolve_hardware
    from primus.projection import load_profile

    try:
        prof = load_profile(resolve_hardware(hardware, "error bar"))
    except InputError:
        return False, None
    return prof.fitted, prof.transferred_from


def error_bar(job_or_cluster_name: str, is_moe: bool, *, precision: str | None = None,
              path: str | Path | None = None) -> ErrorBar:
    """The bar for projections on accelerator `job_or_cluster_name` (a hardware name; '<base>+custom'
    counts as its base) of a dense (`is_moe` False) or MoE model, in `precision` (a job's or a published
    row's precision) when the shipped bars are split by it."""
    data = _load(str(path or DATA))
    hw = job_or_cluster_name.split("+", 1)[0]
    kind = "moe" if is_moe else "dense"
    if not data:
        return ErrorBar(50.0, "no error-bar data shipped (run benchmarks/accuracy_tables.py); 50% assumed", False)
    fitted, sibling = _profile_state(hw)
    if not fitted and sibling and kind in data.get("transferred", {}):
        return _bar(data["transferred"][kind], False,
                    f"; {hw} has no published runs: its profile carries the fitted factors of {sibling} (same die)")
    if not fitted:
        return _bar(data["spec_derived"][kind], False, f"; {hw}'s profile is spec-derived (no published runs fitted)")
    split = data.get("precision_split") or {}
    if precision and split.get("ships"):
        from primus.fidelity.loso import precision_family

        fam = precision_family(precision)
        pct = split.get("bars", {}).get(f"{hw} {kind} {fam}")
        if pct is not None:
            return ErrorBar(float(pct), f"leave-one-source-out p{data.get('quantile', 80):.0f} of |error| on {kind} "
                            f"{hw} runs in {fam} formats (runs weighted by their source's design effect)", True)
    entry = data.get("accelerators", {}).get(hw, {}).get(kind)
    if entry is not None:
        return _bar(entry, True)
    pooled = data["pooled"][kind]
    return _bar(pooled, True, f"; pooled over fitted accelerators (no held-out {kind} runs on {hw})")
