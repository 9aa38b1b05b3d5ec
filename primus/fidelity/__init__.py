"""Fidelity: how close projections come to published measurements, and how sure a projection is.

    from primus.fidelity import validate, read_runs, error_bar
    report = validate(read_runs("runs_dev.csv"))     # per-row errors, summary, unprojected rows
    bar = error_bar("h100-80gb", is_moe=False)        # ErrorBar(pct, basis, fitted)

Modules: `runs` (the runs CSV schema), `defaults` (one rule per source for unstated settings),
`jobs` (a row as primus jobs), `validate` (project and compare), `stats` (summaries), `fitter` and
`calibrate` (fit a profile to runs), `loso` (leave-one-source-out), `errorbars` (the shipped bars).
"""

from primus.fidelity.errorbars import ErrorBar, error_bar
from primus.fidelity.runs import RunRow, bundled_runs_path, read_runs
from primus.fidelity.validate import RowResult, Unprojected, ValidationReport, validate

__all__ = ["ErrorBar", "RowResult", "RunRow", "Unprojected", "ValidationReport", "bundled_runs_path",
           "error_bar", "read_runs", "validate"]
