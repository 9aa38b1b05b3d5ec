"""`validate`: project every complete published run and compare with what was measured.

For each complete row: build its jobs (`primus.fidelity.jobs`), project the pinned layout with the
accelerator's shipped profile (for the source's software stack), and report predicted against
measured tokens/s/GPU (`error_pct` = 100 × (predicted / measured − 1)) and, where the source
published it, the ledger's peak memory against the measured peak. Each row carries `fits`: whether
the run fits at its stated settings and its stack's defaults or recipe for everything else (the
projected job before any escalation), and `fits_as_typed`: what `primus fit` says of the job file a
user would type for the run (its layout, the settings its source states and its source's `stack:`;
unstated axes free). A run that ran must fit, so a `False` is a false out-of-memory verdict, counted
in the summary; a row whose source contradicts itself (`data/self_contradictions.yaml`) is counted
apart, with the contradiction. `escalated` lists the settings the projection changed from the stack's
value to make the run fit (empty when none), counted separately. A row whose source leaves a layout
axis unstated, with no stack recipe to decide it, also carries the range of the projection over
that axis's legal completions (`primus.fidelity.completions`).

Rows that cannot be projected are listed with the reason, never dropped.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from primus.errors import InputError
from primus.fidelity.completions import POINT_RULE, Completions, project_completions
from primus.fidelity.errorbars import error_bar
from primus.fidelity.jobs import RowJobs, Unprojectable, build
from primus.fidelity.runs import RunRow
from primus.fidelity.stats import summarise
from primus.memory.evaluate import MemoryModel, pinned_layout
from primus.parallel import Layout
from primus.projection import Profile, Projector, load_profile
from primus.projection.report import Projection
from primus.solver.api import Question

GIB = 2**30
# A measured rate whose model FLOPs (Megatron's convention, as `project` counts them) exceed this share
# of the accelerator's dense peak for the run's precision cannot have been measured: the peak is the
# ceiling by definition. The development set's highest is 0.64 (MPT 7B on A100, seq 2048).
MAX_IMPLIED_MFU = 1.0
# And one below this share is not a training measurement either: the lowest of the 379 published runs shipped
# (development, held-out and AMD) is 0.048 (Megatron-Bridge 25.11 Qwen3-30B-A3B on 8 B200 at MBS 1), a
# hundred times this; below it a rate of 1e-310 would make the error overflow to infinity (review of
# 2026-12-06), which no JSON document can hold.
MIN_IMPLIED_MFU = 1e-4


@dataclass(frozen=True)
class RowResult:
    """One projected run."""

    run_id: str
    source: str
    accelerator: str
    precision: str
    moe: bool
    model: str
    num_gpus: int
    measured: float
    predicted: float
    step_time_s: float
    predicted_peak_gib: float
    measured_peak_gib: float | None
    fits: bool | None  # at the stated settings and the stack's defaults or recipe (before escalation)
    layout: dict[str, Any]
    stack: str
    assumed: tuple[str, ...]
    error_bar_pct: float | None = None  # the ± `primus project` prints for this run (primus.fidelity.errorbars)
    escalated: tuple[str, ...] = ()
    completions: Completions | None = None  # the range over the legal values of unstated axes
    fits_as_typed: bool | None = None  # what `primus fit` says of the job file, unstated axes free
    num_microbatches: int | None = None  # per step and pipeline (GBS / (MBS × DP)), as projected

    @property
    def range_error_pct(self) -> tuple[float, float] | None:
        if self.completions is None:
            return None
        lo, hi = self.completions.tokens
        return 100.0 * (lo / self.measured - 1.0), 100.0 * (hi / self.measured - 1.0)

    @property
    def error_pct(self) -> float:
        return 100.0 * (self.predicted / self.measured - 1.0)

    @property
    def memory_error_pct(self) -> float | None:
        if self.measured_peak_gib is None:
            return None
        return 100.0 * (self.predicted_peak_gib / self.measured_peak_gib - 1.0)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run_id": self.run_id, "source": self.source, "accelerator": self.accelerator,
            "precision": self.precision, "moe": self.moe, "model": self.model, "num_gpus": self.num_gpus,
            "predicted_tokens_per_s_per_gpu": self.predicted, "measured_tokens_per_s_per_gpu": self.measured,
            "error_pct": self.error_pct, "error_bar_pct": self.error_bar_pct, "step_time_s": self.step_time_s,
            "fits": self.fits, "fits_as_typed": self.fits_as_typed,
            "predicted_peak_gib": self.predicted_peak_gib,
        }
        if self.measured_peak_gib is not None:
            out["measured_peak_gib"] = self.measured_peak_gib
            out["memory_error_pct"] = self.memory_error_pct
        out["parallel"] = self.layout
        out["stack"] = self.stack
        if self.completions is not None and self.range_error_pct is not None:
            out["range_tokens_per_s_per_gpu"] = list(self.completions.tokens)
            out["range_error_pct"] = list(self.range_error_pct)
            out["unstated_axes"] = {k: list(v) for k, v in self.completions.axes.items()}
            out["point_rule"] = POINT_RULE
        out["assumed"] = list(self.assumed)
        out["escalated"] = list(self.escalated)
        return out


@dataclass(frozen=True)
class Unprojected:
    run_id: str
    source: str
    reason: str

    def to_json(self) -> dict[str, str]:
        return {"run_id": self.run_id, "source": self.source, "reason": self.reason}


@dataclass(frozen=True)
class ValidationReport:
    runs_file: str
    complete: int
    rows: tuple[RowResult, ...]
    unprojected: tuple[Unprojected, ...]
    summary: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready (statistics of empty groups are null, not NaN)."""
        doc = {"runs_file": self.runs_file, "complete_rows": self.complete,
               "rows": [r.to_json() for r in self.rows],
               "unprojected": [u.to_json() for u in self.unprojected],
               "summary": self.summary}
        return _no_nan(doc)


def _no_nan(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _no_nan(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_no_nan(v) for v in obj]
    return obj


ProfileFor = Callable[[RowJobs], Profile]


def shipped_profile(jobs: RowJobs) -> Profile:
    """The accelerator's shipped profile as seen by the row's software stack."""
    return load_profile(jobs.project.cluster).for_stack(jobs.rule.kernels)


@dataclass
class Prepared:
    """A row built once; projected under any profile (what a fitter does thousands of times). The
    layout and the ledger's answer do not depend on the profile, so they are computed once."""

    row: RunRow
    jobs: RowJobs
    _layout: Layout | None = None
    _peak: tuple[int, bool] | None = None

    @property
    def fits_at_stack(self) -> bool:
        """Whether the run fits at its stated settings and its stack's defaults or recipe: no setting was
        escalated, and the projected job's busiest stage is within capacity."""
        if self._peak is None:
            job = self.jobs.project
            self._layout = pinned_layout(job)
            report = MemoryModel(job).evaluate(self._layout, strict=False)
            self._peak = (report.peak_bytes, report.fits)
        return not self.jobs.escalated and self._peak[1]

    def project(self, profile: Profile, method: str = "auto") -> Projection:
        """`method` "fast" (closed form or the bottleneck bound, within 2% of the simulation) is what a
        fitter uses; "auto" is what `primus project` reports."""
        job = self.jobs.project
        if self._layout is None or self._peak is None:
            self._layout = pinned_layout(job)
            report = MemoryModel(job).evaluate(self._layout, strict=False)
            self._peak = (report.peak_bytes, report.fits)
        return Projector(job, profile).project(self._layout, method, peak=self._peak, explain=False)


def prepare(rows: Iterable[RunRow]) -> tuple[list[Prepared], list[Unprojected]]:
    """Build the jobs of every complete row; the ones that cannot be built come back with the reason."""
    ok: list[Prepared] = []
    bad: list[Unprojected] = []
    for row in rows:
        if not row.complete:
            continue
        if not row.source:
            bad.append(Unprojected(row.run_id, row.source, "column 'source' is empty (every figure groups by it)"))
            continue
        try:
            measured, _ = row.measured_tokens, row.measured_peak_gib
        except ValueError as exc:
            bad.append(Unprojected(row.run_id, row.source, str(exc)))
            continue
        if measured is None:
            bad.append(Unprojected(row.run_id, row.source, "no measured tokens/s/GPU (nor step time to derive it)"))
            continue
        try:
            jobs = build(row)
        except Unprojectable as exc:
            bad.append(Unprojected(row.run_id, row.source, exc.reason))
            continue
        ceiling = MAX_IMPLIED_MFU * peak_tokens(jobs)
        if measured > ceiling:
            bad.append(Unprojected(row.run_id, row.source, f"measured {measured:,.6g} tokens/s/GPU is more than the "
                                   f"{ceiling:,.0f} the accelerator's dense peak allows (MFU 100%): not a measurement"))
            continue
        floor = MIN_IMPLIED_MFU * peak_tokens(jobs)
        if measured < floor:
            bad.append(Unprojected(row.run_id, row.source, f"measured {measured:,.6g} tokens/s/GPU is less than "
                                   f"{floor:,.3g}, an MFU of {MIN_IMPLIED_MFU:.2%} on the accelerator's dense peak: "
                                   "not a training measurement"))
            continue
        ok.append(Prepared(row, jobs))
    return ok, bad


def peak_tokens(jobs: RowJobs) -> float:
    """Tokens/s/GPU at 100% MFU: the dense peak of the run's precision over the model FLOPs per token
    (Megatron's convention), as `project` computes MFU."""
    from primus.projection.report import peak_dtype
    from primus.specs.flops import flops_per_token

    job = jobs.project
    peak = job.cluster.accelerator.peak_flops(peak_dtype(job.spec.precision))
    return peak / flops_per_token(job.model, job.spec.seq_len).training


def fits_published(jobs: RowJobs) -> bool:
    """What `primus fit` says of the published config, unstated axes free."""
    return Question(jobs.fit).most_headroom() is not None


def result_of(p: Prepared, projection: Projection, fits_as_typed: bool | None,
              completions: Completions | None = None, profile: Profile | None = None) -> RowResult:
    """The row's result; its error bar is the one `profile` (the profile it was projected with; None:
    the shipped one) gets from `error_bar`, as `primus project --profile` would print it."""
    row, jobs = p.row, p.jobs
    measured = row.measured_tokens
    assert measured is not None
    assumed = jobs.assumed
    if completions is not None:
        point = {k: int(getattr(projection.layout, k)) for k in completions.axes}
        assumed = (*assumed, completions.note(point))
    return RowResult(
        run_id=row.run_id, source=row.source, accelerator=jobs.project.cluster.name, precision=row["precision"],
        moe=jobs.project.model.is_moe, model=row["model"], num_gpus=jobs.project.num_gpus, measured=measured,
        predicted=projection.tokens_per_s_per_gpu, step_time_s=projection.step_time_s,
        predicted_peak_gib=projection.peak_bytes / GIB, measured_peak_gib=row.measured_peak_gib,
        fits=p.fits_at_stack if fits_as_typed is not None else None, fits_as_typed=fits_as_typed,
        layout=projection.layout.as_parallel(), stack=jobs.rule.name, assumed=assumed,
        escalated=jobs.escalated, error_bar_pct=error_bar(jobs.project.cluster.name, jobs.project.model.is_moe,
                                                              precision=row["precision"], profile=profile).pct,
        completions=completions, num_microbatches=projection.num_microbatches)


def validate(rows: Sequence[RunRow], runs_file: str = "", *, profile_for: ProfileFor = shipped_profile,
             check_fit: bool = True) -> ValidationReport:
    """Project every complete row; summarise the errors (see `primus.fidelity.stats.summarise`)."""
    prepared, unprojected = prepare(rows)
    results: list[RowResult] = []
    for p in prepared:
        try:
            profile = profile_for(p.jobs)
            projection = p.project(profile)
        except InputError as exc:
            unprojected.append(Unprojected(p.row.run_id, p.row.source, exc.reason))
            continue
        fits: bool | None = None
        completions: Completions | None = None
        if check_fit:  # `primus fit` on the published job; its legal layouts give the unstated axes' range
            question = Question(p.jobs.fit)
            fits = question.most_headroom() is not None
            completions = project_completions(p, question, profile)
        results.append(result_of(p, projection, fits, completions, profile))
    complete = sum(1 for r in rows if r.complete)
    summary = summarise(results, complete, len(unprojected))
    return ValidationReport(runs_file, complete, tuple(results), tuple(unprojected), summary)


def errors_by_id(results: Iterable[RowResult]) -> Mapping[str, float]:
    return {r.run_id: r.error_pct for r in results}
