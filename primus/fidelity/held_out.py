"""The leave-one-source-out section of `primus validate`: how the calibrated projection does on a source
it never saw, computed from the runs file at hand (not read from the figures shipped with primus).

Every accelerator's profile is refitted without each source in turn (`leave_one_source_out`), so the
section costs one calibration per source and accelerator: about 70 CPU seconds for the development set,
spread over `--workers` processes (one source each), which is why `validate --no-loso` skips it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from primus.fidelity.loso import COVERAGE_BAND, coverage, leave_one_source_out, loso_summary, out_of_band
from primus.fidelity.validate import Prepared


def held_out_section(prepared: Sequence[Prepared], progress: Callable[[str], None] | None = None,
                     workers: int = 1) -> dict[str, Any]:
    """`summary.leave_one_source_out` of the validate document: the held-out error statistics (overall and
    by source), the coverage of the error bars derived without each source (overall, dense/MoE, and each
    accelerator × kind group), the groups of at least `loso.SPLIT_MIN_RUNS` runs whose coverage falls
    outside COVERAGE_BAND with what decides it (`loso.out_of_band`), and each row's held-out error."""
    held = leave_one_source_out(prepared, progress=progress, workers=workers)
    return {**loso_summary(held), "coverage": coverage(held), "coverage_band_pct": list(COVERAGE_BAND),
            "coverage_groups_outside_band": out_of_band(held),
            "rows": [{"run_id": h.run_id, "source": h.source, "accelerator": h.accelerator,
                      "held_out_error_pct": h.error_pct, "fitted_on": h.fitted_on,
                      **({"transferred_from": h.transferred_from} if h.transferred_from else {})}
                     for h in held]}
