"""Leave-one-source-out: how well the calibrated projection predicts a source it never saw.

For every source S and every accelerator A that S ran on: fit A's profile to all complete runs on A
except S's (`primus.fidelity.calibrate`), then predict S's runs on A. When no other source ran on A,
the spec-derived profile predicts them (nothing to fit). The held-out errors are the honest measure
of a fitted profile's accuracy, and the basis of the error bars (`primus.fidelity.errorbars`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from primus.fidelity.calibrate import calibrate, load_spec_profile
from primus.fidelity.stats import describe, percentile
from primus.fidelity.validate import Prepared


@dataclass(frozen=True)
class HeldOut:
    run_id: str
    source: str
    accelerator: str
    moe: bool
    error_pct: float
    fitted_on: int  # runs the profile was fitted to (0: spec-derived)


def _accelerator(p: Prepared) -> str:
    return p.jobs.project.cluster.name.split("+")[0]


def leave_one_source_out(prepared: Sequence[Prepared], *, sources: Sequence[str] | None = None,
                         progress: Callable[[str], None] | None = None) -> list[HeldOut]:
    """Held-out predictions of every run of `sources` (default: every source in `prepared`)."""
    names = sorted({p.row.source for p in prepared}) if sources is None else list(sources)
    out: list[HeldOut] = []
    for source in names:
        held = [p for p in prepared if p.row.source == source]
        for acc in sorted({_accelerator(p) for p in held}):
            train = [p for p in prepared if _accelerator(p) == acc and p.row.source != source]
            spec = load_spec_profile(acc)
            profile = calibrate(spec, train, date="loso").profile if train else spec
            if progress is not None:
                progress(f"{source} on {acc}: fitted on {len(train)} runs of other sources")
            for p in held:
                if _accelerator(p) != acc:
                    continue
                pred = p.project(profile.for_stack(p.jobs.rule.stack), "auto").tokens_per_s_per_gpu
                measured = p.row.measured_tokens
                assert measured is not None
                out.append(HeldOut(p.row.run_id, source, acc, p.jobs.project.model.is_moe,
                                   100.0 * (pred / measured - 1.0), len(train)))
    return out


def loso_summary(held: Sequence[HeldOut]) -> dict[str, Any]:
    """Overall and per-source statistics of the held-out errors."""
    by_source: dict[str, list[float]] = {}
    for h in held:
        by_source.setdefault(h.source, []).append(h.error_pct)
    return {"overall": describe([h.error_pct for h in held]),
            "by_source": {k: describe(v) for k, v in sorted(by_source.items())}}


def error_bar_table(held: Sequence[HeldOut], quantile: float = 68.0) -> dict[str, Any]:
    """Per accelerator and kind: the `quantile` of |held-out error| and how many runs it rests on;
    and the same pooled over accelerators."""
    acc: dict[str, dict[str, list[float]]] = {}
    pooled: dict[str, list[float]] = {"dense": [], "moe": []}
    for h in held:
        kind = "moe" if h.moe else "dense"
        acc.setdefault(h.accelerator, {}).setdefault(kind, []).append(abs(h.error_pct))
        pooled[kind].append(abs(h.error_pct))

    def entry(values: list[float], what: str) -> dict[str, Any]:
        q = percentile(values, quantile) if values else math.nan
        return {"pct": round(q, 1), "n": len(values),
                "basis": f"leave-one-source-out p{quantile:.0f} of |error| on {len(values)} {what}"}

    return {
        "accelerators": {a: {k: entry(v, f"{k} {a} runs") for k, v in sorted(kinds.items())}
                         for a, kinds in sorted(acc.items())},
        "pooled": {k: entry(v, f"{k} runs on all fitted accelerators") for k, v in pooled.items() if v},
    }
