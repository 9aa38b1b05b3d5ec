"""Unstated layout axes: the range of the projection over their legal completions.

A published run sometimes omits a layout axis (a table prints VP as "NA"; many MoE rows never name the
expert-tensor-parallel size). When no recipe of the source's stack decides it, `validate` does not pick
one value silently: it projects every legal completion (the values of the unstated axes that `primus fit`
finds legal and fitting for the published job, every other axis held at the projected layout's) and
reports the range of tokens/s/GPU beside the point. The point error keeps one stated rule,
`POINT_RULE`: the point is projected at the stack's default for the axis (the framework's behaviour
when the option is not passed), so fits, bars and summaries stay comparable from row to row; the range
says how much that rule could be off by.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from primus.errors import InputError
from primus.fidelity.jobs import completion
from primus.memory.evaluate import pinned_layout
from primus.parallel import Layout
from primus.projection import Profile, Projector
from primus.solver.api import Question

if TYPE_CHECKING:
    from primus.fidelity.validate import Prepared

#: How the point of a row with unstated axes is chosen (named in every such row's `assumed`).
POINT_RULE = "stack default"
#: Layout fields that must match the projected layout for a candidate to be a completion of it.
HELD = ("tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "sp", "recompute", "sharding", "recompute_num_layers")


@dataclass(frozen=True)
class Completions:
    """The projection over the legal completions of a row's unstated axes."""

    axes: dict[str, tuple[int, ...]]  # each unstated axis and its legal values
    tokens: tuple[float, float]  # min and max tokens/s/GPU over the completions

    def note(self, point_values: dict[str, int]) -> str:
        axes = "; ".join(f"{k} unstated, legal {{{', '.join(map(str, v))}}}" for k, v in self.axes.items())
        at = ", ".join(f"{k} {v}" for k, v in point_values.items())
        return (f"{axes}: range {self.tokens[0]:,.0f}-{self.tokens[1]:,.0f} tokens/s/GPU over the legal completions; "
                f"point at {at} (rule: {POINT_RULE})")


def legal_values(question: Question, point: Layout, unstated: Sequence[str]) -> list[dict[str, int]]:
    """Distinct values of the unstated axes among the legal layouts that agree with `point` elsewhere."""
    cands = question.candidates
    keep = [k for k in HELD if k not in unstated]
    seen: dict[tuple[int, ...], dict[str, int]] = {}
    for i in range(cands.n):
        lay = cands.layout(i)
        if all(getattr(lay, k) == getattr(point, k) for k in keep):
            key = tuple(int(getattr(lay, k)) for k in unstated)
            seen.setdefault(key, dict(zip(unstated, key, strict=True)))
    return [seen[k] for k in sorted(seen)]


def project_completions(p: Prepared, question: Question, profile: Profile) -> Completions | None:
    """The range for a row with unstated axes (None when it has none, or no completion is legal)."""
    unstated = p.jobs.unstated
    if not unstated:
        return None
    point = pinned_layout(p.jobs.project)
    values = legal_values(question, point, unstated)
    if not values:
        return None
    tokens: list[float] = []
    kept: list[dict[str, int]] = []
    for v in values:
        try:  # legal for `primus fit`; a completion the point's own settings cannot express is left out
            job = completion(p.row, p.jobs, v)
            proj = Projector(job, profile).project(pinned_layout(job), "auto", explain=False)
        except InputError:
            continue
        tokens.append(proj.tokens_per_s_per_gpu)
        kept.append(v)
    if not kept:
        return None
    axes = {k: tuple(sorted({v[k] for v in kept})) for k in unstated}
    return Completions(axes, (min(tokens), max(tokens)))
