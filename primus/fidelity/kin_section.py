"""docs/accuracy.md: why a format with too few runs moves with its kin (`calibrate.KIN`), and what that did to
the NVFP4 rows, the format it was written for (issue 19, the held-out tail)."""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Sequence

from primus.fidelity.calibrate import KIN
from primus.fidelity.validate import ValidationReport

#: The NVFP4 rows as the profiles fitted before this rule projected them (recorded when it landed,
#: 2026-12-05): the format then kept the spec's assumed plateau beside fitted kin.
BEFORE = ("dev MB26.06 Llama 3.1 405B NVFP4: GB300 +23.4%, GB200 +13.3%; held out: 16 rows, median |error| 22.3%, "
          "mean signed +19.0%")


def _nvfp4(report: ValidationReport | None) -> list[float]:
    return [] if report is None else [r.error_pct for r in report.rows if r.precision.lower() == "nvfp4"]


def _figures(errors: Sequence[float]) -> str:
    if not errors:
        return "none"
    return (f"{len(errors)} rows, median |error| {statistics.median(abs(e) for e in errors):.1f}%, "
            f"mean signed {statistics.fmean(errors):+.1f}%")


def kin_paragraph(report: ValidationReport, heldout: ValidationReport | None) -> list[str]:
    """The paragraph under the fitted-profiles table."""
    pairs = ", ".join(f"{a} with {', '.join(b)}" for a, b in sorted(KIN.items()) if a < b[0])
    dev = ", ".join(f"{r.accelerator} {r.error_pct:+.1f}%" for r in report.rows if r.precision.lower() == "nvfp4")
    text = (f"A group named `gemm.X (+Y)` also moves format Y, which too few runs use to be fitted on its own, by "
            f"X's factor: Y runs the same kind of kernel as X with another scaling ({pairs}; "
            "`primus.fidelity.calibrate.KIN`). Left at its spec value, Y would be projected as if the accelerator "
            "reached its datasheet plateau in that format alone while its kin sits a fitted factor away; NVFP4's "
            "spec value (0.55 of the dense FP4 peak on B200/GB200, 0.50 on B300/GB300) is assumed, not measured. "
            "A format with no fitted kin (GB300's BF16 and FP8, two runs each) keeps its spec value. "
            f"NVFP4 rows now: dev {dev or 'none'}; held out {_figures(_nvfp4(heldout))}. "
            f"Before this rule: {BEFORE}.")
    return textwrap.wrap(text, 110, break_on_hyphens=False)
