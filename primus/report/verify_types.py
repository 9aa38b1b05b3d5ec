"""What `primus audit verify` reports, shared by its checks (`primus.report.verify`, `...verify_claims`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from primus.parallel import parallel_text as layout_text

REL_TOL = 1e-9


@dataclass(frozen=True)
class Difference:
    """One disagreement between the directory and its recomputation."""

    what: str
    seq: int | None = None
    parallel: dict[str, Any] | None = None

    def line(self) -> str:
        if self.seq is None:
            return self.what
        return f"candidate seq {self.seq} ({layout_text(self.parallel)}): {self.what}"


@dataclass
class Verification:
    checked: int = 0
    differences: list[Difference] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    not_rechecked: list[str] = field(default_factory=list)  # what verify takes as recorded, named

    @property
    def ok(self) -> bool:
        return not self.differences


def close(a: float, b: float, scale: float | None = None) -> bool:
    if a == b:
        return True
    ref = max(abs(a), abs(b), abs(scale) if scale is not None else 0.0)
    return abs(a - b) <= REL_TOL * ref
