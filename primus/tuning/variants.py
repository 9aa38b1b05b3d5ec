"""Layouts that need other pipeline options than the job's, projected beside tune's answer.

Tune searches the legal set of the job as written: its pipeline options (`pipeline:`: a layout string,
first/last stage layer counts, counting the embedding or the loss in the split) are the user's and
decide which pipeline sizes split the layers at all. A Megatron user who pinned first and last stages of
14 layers for Llama 3.1 405B (126 layers) leaves PP 8 no legal split; counting the embedding and the loss
as layers (128) splits it over every power of two; first/last stage sizes and a layout string of more
than one stage leave no PP 1 at all, which every pipeline option unset splits (none means anything on one
stage: `primus.solver.options._pipeline_options`). Such layouts are outside the searched set, so the
certificate speaks of the job's pipeline options only, and they are reported beside it as what `fit`
offers for a split the job's options cannot make (`primus.solver.fit.free_pipeline_fixes`: for each
pipeline size the job's options cannot split, the least intrusive option set that splits it and its
fastest completion), plus the reference's nearest legal variant when that changes options. Each is
re-timed by simulation under its own job, so the numbers compare with the best's; the ones projected
faster than the best are kept, fastest first, with every pipeline option they change named.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from primus.job import Job
from primus.parallel import Layout
from primus.projection import Projection, Projector
from primus.projection.complete import Speed, fastest_key
from primus.projection.project import projector_for
from primus.solver.api import Question
from primus.solver.fit import free_pipeline_fixes
from primus.solver.options import apply_options, pipeline_difference
from primus.solver.suggest import option_text
from primus.stacks.apply import search_split_text

if TYPE_CHECKING:
    from primus.tuning.agent import Tuner
    from primus.tuning.reference import Reference


def pipeline_changes(job: Job, options: dict[str, Any]) -> dict[str, Any]:
    """Every pipeline option (`pipeline.X`) whose value differs between the job and the job with
    `options` set, at its new value (None: the setting is dropped). Setting these on the job gives the
    variant back (`apply_options` sets each named option; fit's pipeline fixes already name every option
    they change, `primus.solver.options.pipeline_difference`, and a reference fix may carry others)."""
    return dict(sorted(pipeline_difference(job, apply_options(job, options).spec.pipeline).items()))


def pipeline_options_text(job: Job) -> str:
    """The job's pipeline options as the certificate scopes its claim to them."""
    set_ = job.spec.pipeline.model_dump(exclude_defaults=True)
    if not set_:
        recipes = search_split_text(job.split_stack, job.model) if job.split_stack is not None else None
        return "none set: " + (recipes or "Megatron's default split")
    return ", ".join(option_text(f"pipeline.{k}", v) for k, v in sorted(set_.items()))


def changes_text(options: dict[str, Any]) -> str:
    """A variant's pipeline option changes in words: `pipeline.X=value`, or `pipeline.X unset` for a
    setting of the job's that the variant drops."""
    return ", ".join(option_text(k, v) for k, v in options.items())


def certificate_scope(job: Job) -> str:
    """What the certificate's claim covers (`certificate.scope`): the job's pipeline options. `primus audit
    verify` recomputes it from the recorded job, so an edited scope is named."""
    return f"the job's pipeline options ({pipeline_options_text(job)})"


def faster_with_options(tuner: Tuner, reference: Reference, best_tokens: float | None) -> list[dict[str, Any]]:
    """Layouts legal only under other pipeline options, projected faster than the best (fastest first)."""
    near = reference.fit.alternatives[0] if reference.compared and not reference.fit.fits and \
        reference.fit.alternatives else None
    fix = (near.layout, near.peak_bytes, dict(near.options)) if near is not None else None
    # the recorded rules: `audit verify` rebuilds the same question
    return faster_variants(tuner.base_space.question, tuner.projector, fix, best_tokens)


def faster_variants(question: Question, base: Projector, near: tuple[Layout, int, dict[str, Any]] | None,
                    best_tokens: float | None) -> list[dict[str, Any]]:
    """The list `faster_with_changed_options`: fit's pipeline fixes for the job of `question` (its rules,
    no pins) and `near` (the reference's nearest legal fix, when it changes pipeline options), each
    re-simulated under its own job with `base`'s profile and timer, those faster than `best_tokens` kept
    (all when None), fastest first. `tune` and `audit verify` both call this: the recorded list is
    re-checked whole (nothing dropped, nothing added) against what the same solver and projection give."""
    job = question.job

    def speed_for(variant: Job) -> Speed:
        return Speed(projector_for(variant, base.profile, base.timer))

    found: list[tuple[Layout, int, dict[str, Any]]] = [
        (a.layout, a.peak_bytes, a.options)
        for a in free_pipeline_fixes(question, question.space.reserves.capacity_bytes, speed_for)]
    if near is not None and any(k.startswith("pipeline.") for k in near[2]):
        found.append(near)
    kept: list[tuple[Projection, dict[str, Any], int]] = []
    seen: set[tuple[Layout, str]] = set()
    for layout, peak, options in found:
        changes = pipeline_changes(job, options)
        key = (layout, repr(sorted(changes.items())))
        if not changes or key in seen:
            continue
        seen.add(key)
        variant = apply_options(job, changes)
        p = projector_for(variant, base.profile, base.timer).project(layout, "simulate", peak=(peak, True),
                                                                     explain=False)
        if best_tokens is None or p.tokens_per_s_per_gpu > best_tokens:
            kept.append((p, changes, peak))
    kept.sort(key=lambda k: fastest_key(k[0]))
    return [{"parallel": p.layout.as_parallel(), "options": changes, "changed": list(changes),
             "tokens_per_s_per_gpu": p.tokens_per_s_per_gpu, "step_time_s": p.step_time_s, "mfu": p.mfu,
             "peak_bytes": peak} for p, changes, peak in kept]
