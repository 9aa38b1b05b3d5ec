"""Error statistics of a validation: overall and by source, accelerator, precision, dense vs MoE.

Percentiles use the nearest-rank definition on |error| (no interpolation), so a reported p90 is an
error some row actually has. Korthikanti et al. 2022's A100 rows get their own mean absolute error,
the figure Calculon reports on the same runs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from primus.fidelity.validate import RowResult

KORTHIKANTI = "korthikanti2022"


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in [0, 100]) of `values`; nan when empty."""
    if not values:
        return math.nan
    xs = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(xs)))
    return xs[rank - 1]


def weighted_percentile(values: Sequence[float], weights: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of `values` where each value counts `weight` times: the smallest value
    whose cumulative weight reaches q% of the total; nan when empty."""
    if not values:
        return math.nan
    pairs = sorted(zip(values, weights, strict=True))
    total = sum(w for _, w in pairs)
    acc = 0.0
    for value, w in pairs:
        acc += w
        if acc >= q / 100.0 * total * (1.0 - 1e-12):
            return value
    return pairs[-1][0]


def median(values: Sequence[float]) -> float:
    if not values:
        return math.nan
    xs = sorted(values)
    n = len(xs)
    mid = n // 2
    return xs[mid] if n % 2 else 0.5 * (xs[mid - 1] + xs[mid])


def describe(errors: Sequence[float]) -> dict[str, Any]:
    """n, median / p68 / p90 / max of |error| and the signed mean (all in percent)."""
    ab = [abs(e) for e in errors]
    return {"n": len(errors), "median_abs_pct": median(ab), "p68_abs_pct": percentile(ab, 68),
            "p90_abs_pct": percentile(ab, 90), "max_abs_pct": max(ab) if ab else math.nan,
            "mean_signed_pct": sum(errors) / len(errors) if errors else math.nan}


def grouped(results: Iterable[RowResult], key: Callable[[RowResult], str]) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[float]] = {}
    for r in results:
        groups.setdefault(key(r), []).append(r.error_pct)
    return {k: describe(v) for k, v in sorted(groups.items())}


_CONTRADICTIONS = Path(__file__).resolve().parent / "data" / "self_contradictions.yaml"


def self_contradictions() -> dict[str, str]:
    """run_id -> the contradiction, for published rows whose source contradicts itself on a setting that
    decides memory (`data/self_contradictions.yaml`)."""
    raw = yaml.safe_load(_CONTRADICTIONS.read_text(encoding="utf-8"))
    return {c["run_id"]: " ".join(c["contradiction"].split()) for c in raw["contradictions"]}


def summarise(results: Sequence[RowResult], complete: int, unprojected: int) -> dict[str, Any]:
    """The validation summary (JSON-ready)."""
    errors = [r.error_pct for r in results]
    mem = [e for e in (r.memory_error_pct for r in results) if e is not None]
    kort = [abs(r.error_pct) for r in results if r.source.lower().startswith(KORTHIKANTI)]
    checked = [r for r in results if r.fits is not None]
    contradictions = self_contradictions()
    oom = [r.run_id for r in checked if r.fits is False and r.run_id not in contradictions]
    out: dict[str, Any] = {
        "complete_rows": complete,
        "projected_rows": len(results),
        "unprojected_rows": unprojected,
        "coverage_pct": 100.0 * len(results) / complete if complete else math.nan,
        "tokens_per_s_per_gpu": describe(errors),
        "by_source": grouped(results, lambda r: r.source),
        "by_accelerator": grouped(results, lambda r: r.accelerator),
        "by_precision": grouped(results, lambda r: r.precision),
        "by_kind": grouped(results, lambda r: "moe" if r.moe else "dense"),
        "korthikanti2022_a100_mean_abs_pct": sum(kort) / len(kort) if kort else math.nan,
        "korthikanti2022_rows": len(kort),
        "peak_memory": describe(mem),
        "fit_checked_rows": len(checked),
        "false_oom": len(oom),
        "false_oom_runs": oom,
        "false_oom_self_contradictory": {r.run_id: contradictions[r.run_id] for r in checked
                                         if r.fits is False and r.run_id in contradictions},
        "false_oom_as_typed": sum(1 for r in checked if r.fits_as_typed is False),
        "false_oom_as_typed_runs": [r.run_id for r in checked if r.fits_as_typed is False],
        "escalated_rows": sum(1 for r in results if r.escalated),
        "escalated_pct": 100.0 * sum(1 for r in results if r.escalated) / len(results) if results else math.nan,
        "escalated_runs": [r.run_id for r in results if r.escalated],
    }
    return out
