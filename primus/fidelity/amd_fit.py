"""Whether AMD's published runs allow a fitted MI300X / MI325X / MI355X profile (issue 19).

`primus calibrate` can fit any accelerator with two or more complete runs. For AMD's rows
(`data/amd_runs_dev.csv`) the question is whether the fit would generalise, so this check fits each
AMD accelerator to all its rows (in-sample) and, source by source, refits without the source and
predicts it (`primus.fidelity.loso`), beside the spec-derived profile's error on the same rows.

The rule (`ships_fitted`): a fitted AMD profile ships only when its leave-one-source-out median |error|
beats the spec-derived profile's on the same rows; otherwise the profile stays spec-derived, says so in
its provenance, and carries the spec-derived error bar. A fit that wins only in-sample has learnt the
rows, not the hardware.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from primus.fidelity.calibrate import calibrate, load_spec_profile
from primus.fidelity.loso import leave_one_source_out
from primus.fidelity.stats import describe
from primus.fidelity.validate import Prepared


def _accelerator(p: Prepared) -> str:
    return p.jobs.project.cluster.name.split("+")[0]


def fit_check(prepared: Sequence[Prepared]) -> dict[str, Any]:
    """Per accelerator: runs, sources, in-sample factors and median, spec-derived median; and overall the
    held-out (leave-one-source-out) errors per row with their summary, and the spec-derived summary."""
    spec_err: dict[str, float] = {}
    for p in prepared:
        prof = load_spec_profile(_accelerator(p)).for_stack(p.jobs.rule.kernels)
        measured = p.row.measured_tokens
        assert measured is not None
        spec_err[p.row.run_id] = 100.0 * (p.project(prof, "auto").tokens_per_s_per_gpu / measured - 1.0)
    per_hw: dict[str, Any] = {}
    for hw in sorted({_accelerator(p) for p in prepared}):
        mine = [p for p in prepared if _accelerator(p) == hw]
        entry: dict[str, Any] = {"runs": len(mine), "sources": len({p.row.source for p in mine}),
                                 "spec_median_abs_pct": describe([spec_err[p.row.run_id] for p in mine])[
                                     "median_abs_pct"]}
        if len(mine) >= 2:
            fit = calibrate(load_spec_profile(hw), mine, date="amd-fit-check")
            entry["factors"] = {k: round(v, 3) for k, v in fit.factors.items()}
            entry["in_sample_median_abs_pct"] = describe(list(fit.residuals_pct.values()))["median_abs_pct"]
        per_hw[hw] = entry
    held = leave_one_source_out(list(prepared))
    return {
        "accelerators": per_hw,
        "held_out": {h.run_id: round(h.error_pct, 1) for h in held},
        "held_out_summary": describe([h.error_pct for h in held]),
        "spec_summary": describe(list(spec_err.values())),
    }


def ships_fitted(check: dict[str, Any]) -> bool:
    """The rule: ship fitted AMD profiles only if held-out beats spec-derived on the same rows."""
    return bool(check["held_out_summary"]["median_abs_pct"] < check["spec_summary"]["median_abs_pct"])
