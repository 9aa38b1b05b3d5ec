"""What `primus tune` answers: the best layout with its proof and projection ± error, the reference
(or its nearest legal variant), the top-k, why the best wins, a certificate for exhaustive runs (scoped to
the job's pipeline options) and the layouts other pipeline options make legal that are projected faster
(`primus.tuning.variants`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from primus.job import Job
from primus.projection import Projection
from primus.projection.complete import fastest_key
from primus.tuning.investigate import Investigation
from primus.tuning.reference import NO_REFERENCE_NOTE, Reference
from primus.tuning.space import Scored, layout_key
from primus.tuning.variants import certificate_scope, faster_with_options

if TYPE_CHECKING:
    from primus.tuning.agent import Tuner

#: The TuneSettings fields that decide which candidates a guided search considers (result.json `search`).
SEARCH_SETTINGS = ("per_round", "stall_rounds", "max_rounds")


def error_bar(tuner: Tuner) -> dict[str, Any]:
    """The projection's uncertainty for this accelerator, model kind and the profile the tuner projects
    with (`primus.fidelity.error_bar`, the one rule project and validate follow too)."""
    return error_bar_of(tuner.job, tuner.profile)


def error_bar_of(job: Job, profile: Any) -> dict[str, Any]:
    """`error_bar` of a job and profile: `primus audit verify` recomputes the recorded bar with it."""
    import importlib

    try:
        fidelity_error_bar = importlib.import_module("primus.fidelity").error_bar
    except (ImportError, AttributeError):
        return {"pct": None, "basis": "no error bars available", "fitted": False}
    bar = fidelity_error_bar(job.cluster.name, job.model.is_moe, precision=job.spec.precision, profile=profile)
    return {"pct": bar.pct, "basis": bar.basis, "fitted": bar.fitted}


def _entry(p: Projection | None, scored: Scored | None, fits: bool, violated: list[str]) -> dict[str, Any]:
    """A layout as result.json records it (`best`, `top`, `reference`; `audit verify` rebuilds them)."""
    if p is None and scored is None:
        return {"parallel": None, "fits": fits, "tokens_per_s_per_gpu": None, "step_time_s": None,
                "peak_bytes": None, "violated_rules": violated}
    layout = p.layout if p is not None else scored.layout  # type: ignore[union-attr]
    out: dict[str, Any] = {"parallel": layout.as_parallel(), "fits": fits,
                           "tokens_per_s_per_gpu": (p.tokens_per_s_per_gpu if p else scored.tokens_per_s_per_gpu)  # type: ignore[union-attr]
                           if fits else None,
                           "step_time_s": p.step_time_s if p else scored.step_time_s,  # type: ignore[union-attr]
                           "peak_bytes": p.peak_bytes if p else scored.peak_bytes,  # type: ignore[union-attr]
                           "violated_rules": violated}
    if p is not None:
        out.update(mfu=p.mfu, model_tflops_per_gpu=p.model_tflops_per_gpu, breakdown=dict(p.breakdown),
                   hidden=dict(p.hidden))
        if fits:  # fit's verdict fields: a tight layout says so (docs/memory.md)
            out.update(p.verdict_fields)
    return out


def diff_breakdowns(best: Projection, ref: Projection) -> list[dict[str, Any]]:
    """Why the best wins: the per-term change of exposed seconds, largest first."""
    names = sorted(set(best.breakdown) | set(ref.breakdown))
    deltas = {n: best.breakdown.get(n, 0.0) - ref.breakdown.get(n, 0.0) for n in names}
    ordered = sorted((n for n in names if deltas[n] != 0), key=lambda n: (-abs(deltas[n]), n))
    return [{"term": n, "reference_s": ref.breakdown.get(n, 0.0), "best_s": best.breakdown.get(n, 0.0),
             "delta_s": deltas[n]} for n in ordered]


def job_summary(job: Job) -> dict[str, Any]:
    """result.json's `job`: what the report's question names (`audit verify` rebuilds it from inputs/)."""
    return {"model": job.model.name, "hardware": job.cluster.name, "gpus": job.num_gpus, "nodes": job.num_nodes,
            "seq_len": job.spec.seq_len, "global_batch_size": job.spec.global_batch_size,
            "precision": job.spec.precision, "stack": job.resolved_stack.label}


def job_spec(job: Job) -> dict[str, Any]:
    """The job as tune ran it, as a job mapping (`primus export --from-tune` reads it back): every option
    the user set is kept, and the size is given once (`gpus`). A model or hardware given by a path or
    with overrides points at the resolved copy in the run directory (`inputs/model.yaml`,
    `inputs/hardware.yaml`, relative to `result.json`)."""
    data = job.spec.model_dump(mode="json", exclude_defaults=True, exclude_none=True)
    data.pop("nodes", None)
    data["gpus"] = job.num_gpus
    for key, copy in (("model", "inputs/model.yaml"), ("hardware", "inputs/hardware.yaml")):
        ref = getattr(job.spec, key)
        if not _catalog_name(ref):
            data[key] = copy
    return data


def _catalog_name(ref: object) -> bool:
    """A catalog name, as opposed to a path or a mapping (the test `resolve_model` applies)."""
    return isinstance(ref, str) and "/" not in ref and not ref.strip().endswith((".yaml", ".yml", ".json"))


def leaders(order: Sequence[Scored], simulate: Callable[[Scored], Projection], n: int
            ) -> list[tuple[Projection, Scored]]:
    """The first `n` of the fast ranking `order` re-timed with the full pipeline simulation, fastest first:
    the fast path ranks, the simulation decides. The first is the best, the second the certificate's
    runner-up. `primus audit verify` calls this on the log's scores, so the best it checks is the one
    `tune` would pick from them."""
    timed = [(simulate(s), s) for s in order[:n]]
    timed.sort(key=lambda ps: fastest_key(ps[0]))
    return timed


def build_result(tuner: Tuner, reference: Reference, mode: str, investigation: Investigation) -> dict[str, Any]:
    from primus.tuning.agent import ranked

    space = tuner.space
    legal_scores = [s for s in tuner.scores.values() if space.find(s.layout) is not None]
    order = ranked(legal_scores)
    timed = leaders(order, lambda s: space.explain(s.layout, "simulate"), tuner.settings.resimulate_top)
    bar = error_bar(tuner)
    doc: dict[str, Any] = {
        "job": job_summary(tuner.job),
        "job_spec": job_spec(tuner.job),
        "mode": mode,
        "exhaustive_limit": tuner.settings.exhaustive_limit,  # with legal_count, what decided the mode
        # what decides which candidates a guided search considers: `audit verify` re-runs it with these
        "search": {k: getattr(tuner.settings, k) for k in SEARCH_SETTINGS},
        "legal_count": tuner.base_space.count,
        "legal_count_after_adopted_rules": space.count,
        "scored_count": len(tuner.scores),
        "uncertainty_pct": bar["pct"],
        "uncertainty_basis": bar["basis"],
        "profile_fitted": bar["fitted"],
    }
    best_p = timed[0][0] if timed else None
    doc["best"] = _entry(best_p, None, best_p is not None, [])
    # the reference, or its nearest legal variant
    ref_fit = reference.fit
    ref_entry: dict[str, Any]
    ref_p: Projection | None = None
    if not reference.compared:
        ref_entry = {**_entry(None, None, False, []), "fits": None, "note": NO_REFERENCE_NOTE}
    elif reference.layout is not None and ref_fit.fits:
        ref_p = space.explain(reference.layout, "simulate") if space.find(reference.layout) is not None else \
            tuner.projector.project(reference.layout, "simulate")
        ref_entry = _entry(ref_p, None, True, [])
    else:
        req = ref_fit.layout
        req_p = tuner.projector.project(req, "auto", peak=(ref_fit.report.peak_bytes, False)) if (
            req is not None and ref_fit.report is not None) else None
        ref_entry = _entry(req_p, None, False, list(ref_fit.violated_rules))
        if ref_fit.alternatives:
            near = ref_fit.alternatives[0]
            proj = tuner.projector
            if near.options:  # a fix that sets job options (a pipeline split, partial recompute): its own job
                from primus.projection.project import projector_for
                from primus.solver.options import apply_options

                proj = projector_for(apply_options(tuner.job, near.options), tuner.projector.profile,
                                     tuner.projector.timer)
            ref_p = proj.project(near.layout, "simulate", peak=(near.peak_bytes, True))
            ref_entry["nearest_legal"] = {**_entry(ref_p, None, True, []), "changed": list(near.changed),
                                          "options": dict(near.options)}
    ref_entry["origin"] = reference.origin
    ref_entry["pins"] = dict(reference.pins)  # what `audit verify` recomputes the fit from
    if reference.claim is not None:
        ref_entry["claim"] = dict(reference.claim)
    doc["reference"] = ref_entry
    doc["top"] = [_entry(p, None, True, []) for p, _ in timed[: tuner.settings.top_k]]
    if len(order) > len(timed):
        doc["top"] += [_entry(None, s, True, []) for s in order[len(timed): tuner.settings.top_k]]
    if best_p is not None and ref_p is not None:
        doc["why"] = diff_breakdowns(best_p, ref_p)
        doc["speedup_vs_reference"] = best_p.tokens_per_s_per_gpu / ref_p.tokens_per_s_per_gpu
    # layouts the job's own pipeline options cannot split, under the options `fit` offers: the certificate
    # does not cover them, so those projected faster than the best are named beside it
    doc["faster_with_changed_options"] = faster_with_options(
        tuner, reference, best_p.tokens_per_s_per_gpu if best_p is not None else None)
    if mode == "exhaustive" and len(timed) >= 1:
        runner = timed[1][0] if len(timed) > 1 else None
        margin = ((best_p.tokens_per_s_per_gpu / runner.tokens_per_s_per_gpu - 1) * 100  # type: ignore[union-attr]
                  if runner is not None else None)
        doc["certificate"] = {
            "scope": certificate_scope(tuner.job),
            "legal_layouts": space.count,
            "scored": sum(1 for lay in space.layouts if layout_key(lay) in tuner.scores),
            "every_legal_layout_scored": all(layout_key(lay) in tuner.scores for lay in space.layouts),
            "margin_to_runner_up_pct": margin,
            "error_bar_pct": bar["pct"],
            "margin_exceeds_error_bar": (margin is not None and bar["pct"] is not None and margin > bar["pct"]),
            "faster_with_changed_options": bool(doc["faster_with_changed_options"]),
        }
    doc["adopted_rules"] = [{"id": r.id, "require": r.require, "origin": r.origin} for r in tuner.adopted_rules]
    doc["events"] = tuner.log.events
    doc["llm"] = {"enabled": investigation.settings.enabled,
                  "calls": investigation.client.calls if investigation.client else 0,
                  "tokens": investigation.client.tokens if investigation.client else 0,
                  "faults": investigation.faults, "stopped_early": investigation.stopped}
    doc["assumptions"] = list(best_p.assumptions) if best_p is not None else []
    return doc


entry = _entry  # the public name `audit verify` rebuilds result.json's entries with
