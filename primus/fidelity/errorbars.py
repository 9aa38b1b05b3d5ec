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
  `primus.fidelity.sibling`) gets the bar of the held-out runs *that sibling's* factors predicted, of
  the same kind (`loso.sibling_bar`, computed from the file's `held_out` list; H800 takes H100's, never
  the B200 runs GB200's factors predicted), widened like any group with too few sources; with no such
  run, the widest bar below;
- an accelerator whose shipped profile is neither fitted nor transferred (AMD today) gets the
  spec-derived bar: the same percentile of the *uncalibrated* projection's error over all complete
  runs, i.e. what a profile written from datasheets alone achieves.

The bar follows the profile the projection used, not only the accelerator (review 48): a `--profile` that
is the shipped one (or a stack view of it) gets the bars above; a spec-derived one the spec-derived bar;
a transferred one its sibling's bar; a calibration of the user's own, or kernel times from a measured
profile, have no held-out errors, and get the widest bar with evidence behind it for the accelerator and
kind (spec-derived, pooled or the accelerator's own fitted bar), with a basis that says so.

Precision: the file also holds bars split by precision family (16-bit / low precision) where a group has
held-out runs from enough sources (`loso.precision_split`); they are used, for a caller that gives the
precision, only when the file says the split `ships` (its coverage stayed in the band in every group).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from primus.errors import InputError
from primus.yamlio import load_mapping

if TYPE_CHECKING:
    from primus.projection.profile import Profile

DATA = Path(__file__).resolve().parent / "data" / "error_bars.yaml"


@dataclass(frozen=True)
class ErrorBar:
    """± `pct` percent on tokens/s/GPU (and step time), with what it rests on."""

    pct: float
    basis: str
    fitted: bool

    def text(self) -> str:
        return f"± {self.pct:.0f}%"

    def measured_range(self, projected: float) -> tuple[float, float | None]:
        """The measured values whose error lies within the bar (see `measured_range`)."""
        return measured_range(projected, self.pct)


def measured_range(projected: float, pct: float) -> tuple[float, float | None]:
    """The measured values a projection of `projected` errs by at most `pct` percent against.

    The error is projected / measured − 1 (as `primus validate` counts it), so |error| ≤ b puts the
    measured value between projected / (1 + b) and projected / (1 − b): not symmetric about the
    projection, and with no upper end once b reaches 100% (an under-projection can err by at most
    −100%, so a bar that wide says nothing of how much faster a run may be). Read as a range of
    tokens/s/GPU, "1,377 ± 148%" is "555 or more", not the negative lower end the ± suggests.
    """
    b = pct / 100.0
    return projected / (1.0 + b), (projected / (1.0 - b) if b < 1.0 else None)


def range_text(projected: float, pct: float, unit: str = "tokens/s/GPU") -> str:
    """`measured_range` in words: "9,962 to 11,233 tokens/s/GPU", or "555 tokens/s/GPU or more"."""
    lo, hi = measured_range(projected, pct)
    return f"{lo:,.0f} {unit} or more" if hi is None else f"{lo:,.0f} to {hi:,.0f} {unit}"


@lru_cache(maxsize=4)
def _load(path: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        return {}
    return load_mapping(p)


def _bar(entry: dict[str, Any], fitted: bool, note: str = "") -> ErrorBar:
    return ErrorBar(float(entry["pct"]), str(entry["basis"]) + note, fitted)


def _shipped(hardware: str) -> Profile | None:
    """The shipped profile of `hardware` (None: not in the catalog, or no profile ships)."""
    from primus.catalog.hardware import resolve_hardware
    from primus.projection import load_profile

    try:
        return load_profile(resolve_hardware(hardware, "error bar"))
    except InputError:
        return None


def _is_shipped(profile: Profile, shipped: Profile | None) -> bool:
    """Whether `profile` is the shipped one (or one of its stack views, `Profile.for_stack`), whose held-out
    errors the file holds; compared by content, so the shipped file passed as --profile counts too."""
    if shipped is None:
        return False
    mine = profile.model_dump()
    return any(mine == view.model_dump() for view in (shipped, *(shipped.for_stack(s) for s in shipped.stacks)))


@lru_cache(maxsize=32)
def _sibling_entry(path: str, sibling: str, is_moe: bool) -> dict[str, Any] | None:
    from primus.fidelity.loso import BAR_QUANTILE, held_from_rows, sibling_bar

    data = _load(path)
    return sibling_bar(held_from_rows(data.get("held_out") or []), sibling, is_moe,
                       float(data.get("quantile", BAR_QUANTILE)))


def _widest(data: dict[str, Any], hw: str, kind: str, why: str) -> ErrorBar:
    """For a profile no held-out run measures: the widest bar with evidence behind it for this accelerator
    and kind (the spec-derived bar, the pooled fitted bar, the accelerator's own fitted bar), never a
    narrower one by default; `why` says why no bar of its own exists."""
    options = [data["spec_derived"][kind], data["pooled"][kind]]
    own = data.get("accelerators", {}).get(hw, {}).get(kind)
    if own is not None:
        options.append(own)
    entry = max(options, key=lambda e: float(e["pct"]))
    return ErrorBar(float(entry["pct"]), f"{why}; the widest {kind} bar with evidence behind it is shown instead: "
                    f"{entry['basis']}", False)


def _transferred(data: dict[str, Any], path: str, hw: str, kind: str, sibling: str, whose: str) -> ErrorBar:
    """A profile carrying `sibling`'s fitted factors: the bar of the held-out runs those factors predicted."""
    note = f"{whose} carries the fitted factors of {sibling} (same die)"
    entry = _sibling_entry(path, sibling, kind == "moe")
    if entry is None:
        return _widest(data, hw, kind, f"{note}, and no held-out {kind} run was predicted with {sibling}'s factors")
    return _bar(entry, False, f"; {note}")


def _given(data: dict[str, Any], path: str, hw: str, kind: str, profile: Profile) -> ErrorBar:
    """The bar of a profile passed by the user (not the shipped one)."""
    if profile.transferred_from:
        return _transferred(data, path, hw, kind, profile.transferred_from, "the profile given")
    if not profile.fitted:
        return _bar(data["spec_derived"][kind], False, "; the profile given is spec-derived (not fitted)")
    rec = profile.calibration
    fit = "" if rec is None else f" (fitted on {len(rec.runs)} runs)"
    return _widest(data, hw, kind, f"the profile given is a calibration of its own{fit}, not the shipped fit: no "
                   "held-out run measures its error (its in-sample residuals are no such measure)")


def error_bar(job_or_cluster_name: str, is_moe: bool, *, precision: str | None = None,
              profile: Profile | None = None, measured: str | None = None,
              path: str | Path | None = None) -> ErrorBar:
    """The bar for projections on accelerator `job_or_cluster_name` (a hardware name; '<base>+custom'
    counts as its base) of a dense (`is_moe` False) or MoE model, in `precision` (a job's or a published
    row's precision) when the shipped bars are split by it. `profile`: the calibration profile the
    projection used (None: the shipped one); `measured`: what measured profile timed the kernels, if one
    did (its device, and any mismatch with the job's). The one place that decides the bar: project, tune,
    enumerate --rank and validate all ask here."""
    where = str(path or DATA)
    data = _load(where)
    hw = job_or_cluster_name.split("+", 1)[0]
    kind = "moe" if is_moe else "dense"
    if not data:
        return ErrorBar(50.0, "no error-bar data shipped (run benchmarks/accuracy_tables.py); 50% assumed", False)
    if measured is not None:
        return _widest(data, hw, kind, f"kernel times from a measured profile ({measured}): no published run was "
                       "projected with one, so no held-out error measures it (docs/measurement.md compares measured "
                       "profiles with torch runs on CPU only)")
    shipped = _shipped(hw)
    if profile is not None and not _is_shipped(profile, shipped):
        return _given(data, where, hw, kind, profile)
    if shipped is not None and not shipped.fitted and shipped.transferred_from:
        return _transferred(data, where, hw, kind, shipped.transferred_from,
                            f"{hw} has no published runs: its profile")
    if shipped is None or not shipped.fitted:
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
