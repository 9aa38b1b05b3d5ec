"""Two published runs that differ only in micro-batch size split a step into a per-token and a fixed part.

Why: a projection error of the same fraction at every MBS says the per-token work is priced wrongly; an
error that shrinks as MBS grows says a fixed cost is missing (per step, or per microbatch at a fixed number
of microbatches). Two rows of one configuration at two MBS with the same number of microbatches give, for
the measured and the projected step alike, the line step = fixed + slope × tokens per GPU per step. The
AMD section of docs/accuracy.md prints both lines for each such pair (issue 19: the DeepSeek-V2-Lite rows),
so the reader sees which part of the step the projection misses instead of a single percentage.

Rows pair when everything `validate` reports about them agrees except MBS (and so GBS, tokens and step):
source, model, accelerator, precision, GPUs, stack, the layout's other axes, the microbatch count and the
settings the row's job assumed (Primus options not modelled included). A group with more than one row at
one MBS is ambiguous and pairs nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from primus.fidelity.validate import RowResult


@dataclass(frozen=True)
class StepLine:
    """step = fixed_s + slope_s_per_token × tokens per GPU per step, measured and projected."""

    run_ids: tuple[str, str]
    mbs: tuple[int, int]
    measured_slope_s_per_token: float
    measured_fixed_s: float
    projected_slope_s_per_token: float
    projected_fixed_s: float
    #: seconds the measured fixed part moves when either row's measured throughput moves by 1% (the larger
    #: of the two): two points fix a line only as well as they repeat
    fixed_s_per_pct: float


def _tokens_per_gpu_step(r: RowResult) -> float:
    """Tokens one GPU processes per step: the projection's throughput times its step time."""
    return r.predicted * r.step_time_s


def _line(t1: float, s1: float, t2: float, s2: float) -> tuple[float, float]:
    slope = (s2 - s1) / (t2 - t1)
    return slope, s1 - slope * t1


def mbs_pairs(rows: Sequence[RowResult]) -> list[StepLine]:
    """The step lines of every pair of rows that differ only in MBS (see the module docstring)."""
    groups: dict[tuple[object, ...], list[RowResult]] = {}
    for r in rows:
        if r.num_microbatches is None:
            continue
        layout = tuple(sorted((k, v) for k, v in r.layout.items() if k != "mbs"))
        key = (r.source, r.model, r.accelerator, r.precision, r.num_gpus, r.stack, layout, r.num_microbatches,
               r.assumed)
        groups.setdefault(key, []).append(r)
    out: list[StepLine] = []
    for members in groups.values():
        sizes = [int(r.layout["mbs"]) for r in members]
        if len(members) != 2 or len(set(sizes)) != 2:
            continue
        a, b = sorted(members, key=lambda r: int(r.layout["mbs"]))
        ta, tb = _tokens_per_gpu_step(a), _tokens_per_gpu_step(b)
        m_slope, m_fixed = _line(ta, ta / a.measured, tb, tb / b.measured)
        p_slope, p_fixed = _line(ta, a.step_time_s, tb, b.step_time_s)
        # fixed = s_a − slope·t_a with slope = (s_b − s_a)/(t_b − t_a): ∂fixed/∂s_a = t_b/(t_b − t_a),
        # ∂fixed/∂s_b = −t_a/(t_b − t_a); a 1% throughput change moves a step by about 1%
        sens = max(0.01 * (ta / a.measured) * tb, 0.01 * (tb / b.measured) * ta) / (tb - ta)
        out.append(StepLine((a.run_id, b.run_id), (int(a.layout["mbs"]), int(b.layout["mbs"])),
                            m_slope, m_fixed, p_slope, p_fixed, sens))
    return sorted(out, key=lambda s: s.run_ids)
