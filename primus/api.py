"""The Python API under the CLI: the same answers `primus fit | memory | enumerate | project | tune`
print, as typed results a notebook or a script can hold, compare and serialise.

    import primus
    job = primus.load_job("examples/llama3.1-70b-mi300x.yaml")      # or a dict, as in a job file
    answer = primus.fit(job, rules=["tp <= 4"])                     # FitAnswer: .fits, .layout, .to_json()
    ledger = primus.memory_ledger(job)                              # MemoryAnswer: .report, .violated_rules
    legal = primus.enumerate_layouts(job, rank=True, top=10)        # Enumeration: .count, .rows
    speed = primus.project(job)                                     # ProjectionAnswer: .projection
    run = primus.tune(job, out="primus-tune", llm=None)             # TuneAnswer: .result, .out_dir

Every command of the CLI is a thin layer over these functions: it calls one, prints its result (or
`.to_json()` with `--format json`) and maps `.negative` to exit status 1. Bad input raises
`primus.errors.InputError` (the CLI's exit 2), an argument of the wrong type included (the API is
called with data from notebooks and scripts, which is input too). The results carry their assumptions;
nothing here prints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from primus.errors import InputError, shown
from primus.gcpause import with_paused_gc
from primus.job import Job, job_from_mapping
from primus.job import load_job as _load_job_file

if TYPE_CHECKING:
    from primus.fidelity.errorbars import ErrorBar
    from primus.measure.measured_profile import MeasuredProfile
    from primus.memory.evaluate import MemoryReport
    from primus.parallel import Layout
    from primus.projection import Projection
    from primus.solver.api import Question
    from primus.solver.fit import FitResult
    from primus.tuning.run import TuneAnswer

JobLike = Job | str | PathLike[str] | Mapping[str, Any]


def load_job(source: JobLike, *, stack: str | None = None, where: str | None = None,
             base_dir: str | PathLike[str] | None = None) -> Job:
    """A validated job from a job file's path, or from a mapping written as in a job file (relative
    model or hardware paths in a mapping resolve against `base_dir`, default the working directory).
    `stack` (NAME[@RELEASE], as `--stack`) replaces the job's `stack:`."""
    if isinstance(source, Job):
        return source if stack is None else job_from_mapping(
            {**source.as_mapping(), "stack": stack}, source.where,
            source.base_dir)
    if not isinstance(source, str | PathLike | Mapping):
        raise InputError(where or "<job>", None, f"a job is a job file's path, a mapping as in a job file or a "
                         f"primus.job.Job, not {type(source).__name__}")
    if isinstance(source, Mapping):
        return job_from_mapping(source, where or "<job>", Path(base_dir) if base_dir is not None else Path.cwd(),
                                stack)
    return _load_job_file(Path(source), stack)


def _question(job: JobLike, rules: Sequence[str], rule_files: Sequence[str | PathLike[str]],
              without: Sequence[str]) -> Question:
    from primus.projection.profile import require_precision
    from primus.solver.api import Question

    j = load_job(job)
    require_precision(j)  # a precision the hardware cannot run is bad input, as for project and tune
    return Question(j, rule_texts=_texts(rules, "rules"),
                    rule_files=tuple(str(f) for f in _texts(rule_files, "rule_files", paths=True)),
                    without=_texts(without, "without"))


def _texts(values: Any, name: str, *, paths: bool = False) -> tuple[Any, ...]:
    """A sequence of strings (or paths) given as an argument, or an InputError naming the argument."""
    kinds: tuple[type, ...] = (str, PathLike) if paths else (str,)
    if isinstance(values, str | bytes | Mapping) or not isinstance(values, Sequence | set | frozenset) \
            or not all(isinstance(v, kinds) for v in values):
        what = "paths" if paths else "strings"
        raise InputError("<arguments>", name, f"a list of {what}, not {shown(values)}")
    return tuple(values)


def _count(value: Any, name: str, low: int, high: int | None = None) -> None:
    """An integer argument in [low, high], or an InputError naming it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
        span = f"from {low:,} to {high:,}" if high is not None else f"of at least {low:,}"
        raise InputError("<arguments>", name, f"an integer {span}, not {shown(value)}")


# ---- fit -------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class FitAnswer:
    """`primus fit`: the proof of fit (or the minimal core, the bytes over and the nearest layouts)."""

    question: Question = field(repr=False)
    result: FitResult

    @property
    def job(self) -> Job:
        return self.question.job

    @property
    def fits(self) -> bool:
        return self.result.fits

    @property
    def negative(self) -> bool:
        return not self.result.fits

    @property
    def layout(self) -> Layout | None:
        return self.result.layout

    @property
    def capacity_bytes(self) -> int:
        return self.question.space.reserves.capacity_bytes

    @property
    def verdict(self) -> str:
        """fits, tight (fits with less headroom than the allocator reserve) or does not fit."""
        report = self.result.report
        if not self.fits or report is None:
            return "does not fit"
        return self.question.space.reserves.verdict(report.peak_bytes)

    def to_json(self) -> dict[str, Any]:
        return self.result.to_json(self.capacity_bytes, self.question.space.reserves)


@with_paused_gc
def fit(job: JobLike, *, rules: Sequence[str] = (), rule_files: Sequence[str | PathLike[str]] = (),
        without: Sequence[str] = ()) -> FitAnswer:
    """Prove that the job fits (free axes completed with the most headroom), or explain why not; the
    nearest legal layouts are completed by projected throughput."""
    from primus.projection.complete import speed_of
    from primus.solver.fit import fit as _fit

    q = _question(job, rules, rule_files, without)
    return FitAnswer(q, _fit(q, speed=speed_of(q.job), speed_for=speed_of))


# ---- memory ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class MemoryAnswer:
    """`primus memory`: the byte ledger of the job's pinned layout, and whether it may run at all.

    A layout that breaks a rule `fit` reads the same pins with (EP 2 for a dense model, VP 4 at PP 1,
    a global batch of no whole microbatches) does not fit, whatever its bytes: `violated_rules` names
    the rules as `fit` does, and the bytes are those of the layout the ledger reads (`notes` says which
    value each refused pin is read as). `report` is None where the pins describe no layout to count
    bytes for (TP x PP x CP not dividing the GPUs, a global batch of no whole microbatches)."""

    job: Job = field(repr=False)
    report: MemoryReport | None
    #: rule id -> the arithmetic or the rule's reason, for every hard rule the pinned layout breaks
    rule_details: dict[str, str] = field(default_factory=dict)
    #: pins the ledger reads other than as written (Megatron-LM's normalisations, refused values)
    notes: tuple[str, ...] = ()

    @property
    def violated_rules(self) -> tuple[str, ...]:
        return tuple(self.rule_details)

    @property
    def legal(self) -> bool:
        return not self.rule_details

    @property
    def fits(self) -> bool:
        """Legal and within capacity: `fit`'s answer for the same pins."""
        return self.legal and self.report is not None and self.report.fits

    @property
    def negative(self) -> bool:
        return not self.fits

    @property
    def verdict(self) -> str:
        """fits, tight or does not fit (a layout that breaks a rule does not fit)."""
        if self.report is None:
            return "does not fit"
        return self.report.reserves.verdict_fields(self.report.peak_bytes, self.legal)["verdict"]

    @property
    def assumptions(self) -> tuple[str, ...]:
        return (*self.notes, *(self.job.assumptions() if self.report is None else self.report.assumptions))

    def to_json(self) -> dict[str, Any]:
        rules = {"legal": self.legal, "violated_rules": list(self.violated_rules),
                 "rule_details": dict(self.rule_details)}
        if self.report is None:
            return {"parallel": self.job.spec.parallel.pinned(), "fits": False, "verdict": "does not fit",
                    "tight": False, "peak_bytes": None, "stages": [], **rules, "notes": list(self.notes),
                    "assumptions": list(self.assumptions)}
        doc = self.report.to_json()
        doc.update(fits=self.fits, **self.report.reserves.verdict_fields(self.report.peak_bytes, self.legal),
                   **rules, notes=list(self.notes), assumptions=list(self.assumptions))
        return doc


def memory_ledger(job: JobLike) -> MemoryAnswer:
    """Exact bytes per rank at each pipeline stage's peak for a job with every axis pinned, and the rules
    (as `fit` names them) the pinned layout breaks. Pins that break a rule are an answer (does not fit),
    as `fit` gives it, not an error: the ledger is kept where the pins still describe a layout to count
    (a schedule or layer split Megatron refuses), None where they do not. InputError only for free axes
    or pins that break no rule and still describe no layout."""
    from primus.memory.evaluate import MemoryModel, free_axes, pinned_layout
    from primus.solver.api import Question
    from primus.solver.check import pinned_breaks

    j = load_job(job)
    model = MemoryModel(j)
    try:
        report = model.evaluate(pinned_layout(j))
    except InputError:
        breaks = pinned_breaks(Question(j)) if not free_axes(j) else {}
        if not breaks:
            raise
        try:
            loose = model.evaluate(pinned_layout(j), strict=False)
        except InputError:
            return MemoryAnswer(j, None, breaks)
        return MemoryAnswer(j, loose, breaks, _pin_notes(j, loose))
    return MemoryAnswer(j, report, pinned_breaks(Question(j)), _pin_notes(j, report))


def _pin_notes(job: Job, report: MemoryReport) -> tuple[str, ...]:
    """The pins the ledger read other than as written (Megatron-LM's normalisations, refused values)."""
    from primus.solver.pins import normalisation_notes, refused_pin_notes

    pins, parallel = job.spec.parallel.pinned(), report.layout.as_parallel()
    return (*normalisation_notes(pins, parallel, job.model.name, job.model.is_moe),
            *refused_pin_notes(pins, parallel))


# ---- enumerate -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Enumeration:
    """`primus enumerate`: how many legal layouts there are, and the rows asked for (canonical order,
    or by headroom with `top`, or by projected throughput with `rank`)."""

    count: int
    rows: tuple[dict[str, Any], ...]
    ranked: bool
    uncertainty: ErrorBar | None = None
    #: the job's stack and release, and every setting it supplied (as `fit` and `project` list them)
    assumptions: tuple[str, ...] = ()
    #: only the number was asked for (`count_only`, `--count`): the document has no `layouts`
    counted_only: bool = False

    @property
    def negative(self) -> bool:
        return self.count == 0

    def to_json(self) -> dict[str, Any]:
        """The `--format json` document (`--count`: the count and the assumptions, no layouts)."""
        if self.counted_only:
            return {"count": self.count, "assumptions": list(self.assumptions)}
        doc: dict[str, Any] = {"count": self.count, "layouts": [dict(r) for r in self.rows]}
        if self.uncertainty is not None:
            doc.update(uncertainty_pct=self.uncertainty.pct, uncertainty_basis=self.uncertainty.basis)
        doc["assumptions"] = list(self.assumptions)
        return doc


@with_paused_gc
def enumerate_layouts(job: JobLike, *, rules: Sequence[str] = (), rule_files: Sequence[str | PathLike[str]] = (),
                      without: Sequence[str] = (), top: int | None = None, rank: bool = False,
                      count_only: bool = False) -> Enumeration:
    """Every legal layout over the job's free axes (or only their number, with `count_only`)."""
    import numpy as np

    if top is not None:
        _count(top, "top", 1)
    q = _question(job, rules, rule_files, without)
    c = q.candidates
    n = c.n
    if count_only:
        return Enumeration(n, (), False, assumptions=tuple(q.job.assumptions()), counted_only=True)
    capacity = q.space.reserves.capacity_bytes
    projections: list[Projection] = []
    bar = None
    if rank:
        from primus.fidelity.errorbars import error_bar
        from primus.projection import rank_layouts

        bar = error_bar(q.job.cluster.name, q.job.model.is_moe, precision=q.job.spec.precision)
        projections = rank_layouts(q.job, q.legal())
        index = {tuple(sorted(p.items())): i for i, p in enumerate(c.parallel_dicts())}
        order = [index[tuple(sorted(p.layout.as_parallel().items()))] for p in projections]
        if top:
            order, projections = order[:top], projections[:top]
        c = c.take(np.array(order, dtype=np.int64))
    elif top is not None:
        c = c.take(np.lexsort((np.arange(n), c.cols["peak_bytes"]))[:top])
    peaks = c.cols["peak_bytes"].tolist()
    stages = c.cols["peak_stage"].tolist()
    rows = [{"parallel": p, "peak_bytes": peak, "headroom_bytes": capacity - peak, "peak_stage": st}
            for p, peak, st in zip(c.parallel_dicts(), peaks, stages, strict=True)]
    for row, p in zip(rows, projections, strict=False):
        row.update(tokens_per_s_per_gpu=p.tokens_per_s_per_gpu, step_time_s=p.step_time_s, mfu=p.mfu,
                   uncertainty_pct=bar.pct if bar is not None else None, timing=p.timing)
    return Enumeration(n, tuple(rows), rank, bar, tuple(q.job.assumptions()))


# ---- project ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ProjectionAnswer:
    """`primus project`: the projection of the pinned layout (free axes: the fastest legal completion),
    its error bar, and what a measured profile contributed. `fits` is False, with `reason`, when no
    legal layout fits (then `projection` is the pinned layout's, if every axis was pinned)."""

    job: Job = field(repr=False)
    projection: Projection | None
    uncertainty: ErrorBar
    fits: bool = True
    reason: str | None = None
    measured: MeasuredProfile | None = field(default=None, repr=False)

    @property
    def negative(self) -> bool:
        return not self.fits

    @property
    def measured_note(self) -> dict[str, Any] | None:
        if self.measured is None:
            return None
        return {**self.measured.summary(), "mismatch": self.measured.mismatch(self.job.cluster)}

    def to_json(self) -> dict[str, Any]:
        bar = self.uncertainty
        doc: dict[str, Any] = {}
        if self.projection is not None:
            lo, hi = bar.measured_range(self.projection.tokens_per_s_per_gpu)
            doc = {**self.projection.to_json(), "uncertainty_pct": bar.pct, "uncertainty_basis": bar.basis,
                   "uncertainty_fitted": bar.fitted, "uncertainty_tokens_per_s_per_gpu": [lo, hi]}
        if self.measured is not None:
            doc["measured_profile"] = self.measured_note
        if not self.fits:
            doc.update(fits=False, reason=self.reason)
        return doc


@with_paused_gc
def project(job: JobLike, *, profile: str | PathLike[str] | None = None,
            allow_device_mismatch: bool = False) -> ProjectionAnswer:
    """Step time, tokens/s/GPU, MFU and the exposed-time breakdown; `profile` is a calibration profile
    YAML or a measured profile JSON (`primus measure`)."""
    from primus.fidelity.errorbars import error_bar
    from primus.measure.measured_profile import resolve_profile_option
    from primus.projection import NothingFits, complete_and_project

    j = load_job(job)
    calib, timer, measured = resolve_profile_option(j.cluster, None if profile is None else str(profile),
                                                    allow_device_mismatch)
    bar = error_bar(j.cluster.name, j.model.is_moe, precision=j.spec.precision, profile=calib,
                    measured=None if measured is None else measured.bar_note(j.cluster))
    try:
        p = complete_and_project(j, calib, timer=timer)
    except NothingFits as exc:
        return ProjectionAnswer(j, exc.projection, bar, fits=False, reason=exc.reason, measured=measured)
    return ProjectionAnswer(j, p, bar, measured=measured)


# ---- tune ------------------------------------------------------------------------------------------

def tune(job: JobLike, *, out: str | PathLike[str] = "primus-tune", rules: Sequence[str] = (),
         rule_files: Sequence[str | PathLike[str]] = (), without: Sequence[str] = (),
         exhaustive_limit: int = 200_000, llm: str | None = None, llm_model: str = "gpt-4o-mini",
         llm_calls: int = 4, llm_timeout_s: float = 60.0, api_key: str | None = None,
         allow: Sequence[str] = (), workers: int | None = None, stack: str | None = None,
         progress: Callable[[str], None] | None = None) -> TuneAnswer:
    """The fastest legal layout, its proof and why it beats the reference, written to the run directory
    `out` (which must be new, empty, or a run directory of tune's own). `llm` is an OpenAI-compatible
    base URL (None: no LLM; nothing is read from the environment here). `stack` (NAME[@RELEASE], as
    `--stack`) replaces the job's `stack:`."""
    from primus.processes import WORKERS_RANGE, default_workers
    from primus.tuning.agent import TuneSettings
    from primus.tuning.llm import LlmSettings
    from primus.tuning.run import check_options, job_text_with_stack, run_tune
    from primus.yamlio import read_text

    if not isinstance(out, str | PathLike):
        raise InputError("<arguments>", "out", f"a directory's path, not {shown(out)}")
    if workers is not None:
        _count(workers, "workers", *WORKERS_RANGE)
    if api_key is not None and not isinstance(api_key, str):
        raise InputError("<arguments>", "api_key", "a string")
    if progress is not None and not callable(progress):
        raise InputError("<arguments>", "progress", f"a function of one string, not {shown(progress)}")
    check_options({"job_file": None, "stack": stack, "rule_texts": list(_texts(rules, "rules")),
                   "rule_files": [str(f) for f in _texts(rule_files, "rule_files", paths=True)],
                   "without": list(_texts(without, "without")), "exhaustive_limit": exhaustive_limit,
                   "llm_mode": "none", "llm_base_url": llm, "llm_model": llm_model, "llm_calls": llm_calls,
                   "llm_timeout": llm_timeout_s, "allow": list(_texts(allow, "allow"))}, "<arguments>")
    j = load_job(job, stack=stack)
    path = Path(job) if isinstance(job, (str, PathLike)) else Path(j.where) if Path(j.where).is_file() else None
    text = job_text_with_stack(read_text(path), stack) if path is not None else yaml.safe_dump(
        j.as_mapping(), sort_keys=False)
    options = {"job_file": str(path.resolve()) if path is not None else None, "stack": stack, "rule_texts": list(rules),
               "rule_files": [str(Path(f).resolve()) for f in rule_files], "without": list(without),
               "exhaustive_limit": exhaustive_limit, "llm_mode": "auto" if llm else "none", "llm_base_url": llm,
               "llm_model": llm_model, "llm_calls": llm_calls, "llm_timeout": llm_timeout_s, "allow": list(allow)}
    settings = TuneSettings(exhaustive_limit=exhaustive_limit, workers=workers or default_workers(),
                            llm=LlmSettings(base_url=llm, model=llm_model, api_key=api_key, max_calls=llm_calls,
                                            timeout_s=llm_timeout_s))
    return run_tune(j, text, Path(out), settings, options=options, say=progress or (lambda m: None))
