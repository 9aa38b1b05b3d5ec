"""Export only what `primus fit` accepts: the check `primus export` and the import sweep share.

A launch that the framework refuses (a pipeline split Megatron-LM asserts on) or that runs out of
memory is worse than none. When the pipeline split is the only structural refusal and Megatron's
embedding/loss accounting (``--account-for-embedding/loss-in-pipeline-split``) makes it legal, the
check says so (`ExportCheck.split_added`, the job with those options, and fit's refusal of the job as
written): `primus export` refuses the job as written and names the fix (`--fix` writes it when asked);
the import sweep (benchmarks/megatron_validate.py) writes the amended job and counts it apart.
"""

from __future__ import annotations

from dataclasses import dataclass

from primus.errors import InputError
from primus.job import Job, job_from_mapping
from primus.solver.fit import FitResult
from primus.specs.job import ACCOUNTING_OPTIONS, STAGE_SIZE_OPTIONS

#: The pipeline options that let a layer count split into PP x VP chunks (Megatron-LM's
#: --account-for-embedding/loss-in-pipeline-split): tried when fit's only structural refusal is the split.
SPLIT_OPTIONS = ACCOUNTING_OPTIONS
SPLIT_NOTE = ("the pipeline split is legal only with the embedding and the loss counted as layers "
              "(--account-for-embedding/loss-in-pipeline-split)")


@dataclass(frozen=True)
class ExportCheck:
    """The job to export (with the split options when they made it legal), fit's answer on it, and
    whether the split options were added. ``result`` is None when axes are free (export says what
    to pin)."""

    job: Job
    result: FitResult | None
    split_added: bool = False
    split_ok: bool = True  # False: Megatron cannot split the layers over PP x VP, with or without the options
    refused: FitResult | None = None  # with split_added: fit's answer on the job as written (it does not fit)

    @property
    def fits(self) -> bool:
        return self.result is None or self.result.fits


def check_for_export(job: Job) -> ExportCheck:
    """fit's verdict on a pinned job, retried with the pipeline split options when only the split is
    refused."""
    from primus.solver.api import Question
    from primus.solver.fit import fit

    try:
        result = fit(Question(job))
    except InputError as exc:
        if "are free" in exc.reason:
            return ExportCheck(job, None)
        raise
    if result.fits:
        return ExportCheck(job, result)
    if "pipeline-split" in result.violated_rules and _accounting_may_be_added(job):
        data = job.spec.model_dump(mode="json", exclude_none=True)
        data.setdefault("pipeline", {}).update(dict.fromkeys(SPLIT_OPTIONS, True))
        with_split = job_from_mapping(data, job.where, job.base_dir)
        split_result = fit(Question(with_split))
        if split_result.fits:
            return ExportCheck(with_split, split_result, split_added=True, refused=result)
    return ExportCheck(job, result)


def split_for_export(job: Job) -> ExportCheck:
    """The structural part of `check_for_export` alone (no memory, no search: fast): the job with the
    pipeline split options when Megatron cannot split its layers over PP x VP without them and can
    with them. ``result`` is None: fit was not asked."""
    from primus.memory.evaluate import pinned_layout
    from primus.memory.shapes import split_layout

    layout = pinned_layout(job)
    if split_layout(job.model, job.pipeline_at(layout.pp, layout.vp), layout.pp, layout.vp)[1]:
        return ExportCheck(job, None)
    if not _accounting_may_be_added(job):
        return ExportCheck(job, None, split_ok=False)
    data = job.spec.model_dump(mode="json", exclude_none=True)
    data.setdefault("pipeline", {}).update(dict.fromkeys(SPLIT_OPTIONS, True))
    with_split = job_from_mapping(data, job.where, job.base_dir)
    if split_layout(with_split.model, with_split.spec.pipeline, layout.pp, layout.vp)[1]:
        return ExportCheck(with_split, None, split_added=True)
    return ExportCheck(job, None, split_ok=False)


def _accounting_may_be_added(job: Job) -> bool:
    """Whether the embedding/loss accounting is a retry for this job: not all of it is on yet, and the
    job gives no other split mechanism (a layout or first/last stage sizes), which Megatron-Core's
    TransformerConfig refuses beside it (`primus.job._check_one_split_mechanism`)."""
    pipe = job.spec.pipeline
    other = pipe.layout is not None or any(getattr(pipe, f) is not None for f in STAGE_SIZE_OPTIONS)
    return not other and not all(getattr(pipe, o) for o in SPLIT_OPTIONS)
