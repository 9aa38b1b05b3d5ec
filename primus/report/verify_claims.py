"""`primus audit verify`, the claims `result.json` makes beside the candidates: the certificate (its scope
and counts), the list of layouts other pipeline options make faster (whole: nothing dropped, nothing
added) and the trials of `tune --allow pipeline` and `--allow precision`.

Each is recomputed by the very functions `primus tune` used, from the recorded inputs, so there is one
source of truth and no second enumerator:

- `certificate.scope` is `primus.tuning.variants.certificate_scope` of the recorded job; its counts are
  the legal set `verify` has already enumerated for the log (under the rules in force at the end) and the
  log's scored lines; `faster_with_changed_options` (a yes/no there) follows the list below;
- `faster_with_changed_options` is `primus.tuning.variants.faster_variants` of the recorded question
  (recorded job and rules, no pins), profile and timer, with the re-simulated best as the bar and the
  reference's nearest legal fix recomputed: `primus.tuning.reference.reference_fit` of the recorded
  `reference.pins` under the recorded rules and profile, as `tune` asked it (its verdict and fix compared
  with `reference`, the fix re-simulated), so no catalog of the verifying machine is read. The fixes come
  from `primus.solver.fit.free_pipeline_fixes`, which enumerates only the pipeline sizes the job's options
  cannot split, each with PP pinned: the cost of one `primus fit` of a free job, not of the whole candidate
  set per variant;
- `allowed_changes.pipeline` (the option sets `--allow pipeline` tried and their best tokens/s/GPU) is
  re-run with `primus.tuning.run.pipeline_trials`, each trial a `Tuner` on the recorded job with the
  recorded requested options and that set, the recorded profile and rules, and the recorded
  `exhaustive_limit`: a search per option set, as `tune --allow pipeline` ran them;
- `allowed_changes.precision` (the precisions `--allow precision` tried, their best tokens/s/GPU and legal
  counts) is re-run with `primus.tuning.run.precision_trials` in the same way, on the requested job rebuilt
  from inputs/job.yaml and the recorded `requested_settings`.

A field that is missing or of the wrong type is a difference naming it (as for the log's lines): the run
directory was read, and what it claims does not re-check.
"""

from __future__ import annotations

import json
from typing import Any

from primus.errors import InputError
from primus.parallel import Layout, normalise
from primus.parallel import parallel_text as layout_text
from primus.projection import Projection, Projector
from primus.report.rundir import RunDir, layout_of
from primus.report.verify_types import Difference, close
from primus.tuning.space import Scored

VARIANT_FIELDS = ("changed", "peak_bytes")
VARIANT_NUMBERS = ("tokens_per_s_per_gpu", "step_time_s", "mfu")


def check_leaders(run: RunDir, projector: Projector, scored: list[Scored]) -> tuple[list[Difference], list[Projection]]:
    """`result.json: best` and `top` against what `tune` picks from the log's scores (`scored`: the
    recomputed fast scores of the logged layouts in the final legal set): the fast ranking, its first
    `resimulate_top` re-timed by simulation (`primus.tuning.result.leaders`). Returns the differences and
    the re-timed leaders, fastest first (the best, then the certificate's runner-up)."""
    from primus.projection.complete import fastest_first
    from primus.tuning.agent import TuneSettings
    from primus.tuning.result import leaders

    settings = TuneSettings()  # `tune` has no option for how many leaders it re-times or shows
    order = fastest_first(scored)
    timed = leaders(order, lambda s: projector.project(s.layout, "simulate", peak=(s.peak_bytes, True),
                                                       explain=False), settings.resimulate_top)
    expected = [(p.layout, p.tokens_per_s_per_gpu, p.step_time_s) for p, _ in timed[:settings.top_k]]
    expected += [(s.layout, s.tokens_per_s_per_gpu, s.step_time_s) for s in order[len(timed):settings.top_k]]
    doc = run.result
    diffs = []
    best = doc.get("best")
    best = best if isinstance(best, dict) else {}
    want = expected[0][0].as_parallel() if expected else None
    if best.get("parallel") != want:
        diffs.append(Difference(f"result.json: best parallel recorded {_text(best.get('parallel'))}, but the fastest "
                                f"of the log's scores re-timed is {_text(want)}"))
    top = doc.get("top")
    if not isinstance(top, list):
        return [*diffs, Difference(f"result.json: top recorded {top!r}, not a list")], [p for p, _ in timed]
    if len(top) != len(expected):
        diffs.append(Difference(f"result.json: top lists {len(top)} layouts, recomputed {len(expected)}"))
    for k, (old, (layout, tok, step)) in enumerate(zip(top, expected, strict=False)):
        old = old if isinstance(old, dict) else {}
        if old.get("parallel") != layout.as_parallel():
            diffs.append(Difference(f"result.json: top[{k}] parallel recorded {_text(old.get('parallel'))}, "
                                    f"recomputed {_text(layout.as_parallel())}"))
            continue
        for name, new in (("tokens_per_s_per_gpu", tok), ("step_time_s", step)):
            value = old.get(name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not close(float(value), new):
                diffs.append(Difference(f"result.json: top[{k}] {name} recorded {value!r}, recomputed {new!r}"))
    return diffs, [p for p, _ in timed]


def _text(parallel: Any) -> str:
    try:
        return layout_text(parallel) if parallel is not None else "none"
    except (TypeError, KeyError, AttributeError, ValueError):
        return repr(parallel)


def check_certificate(run: RunDir, legal: dict[Layout, int], entries: list[dict[str, Any]],
                      variants: list[dict[str, Any]] | None, timed: list[Projection], bar: float | None
                      ) -> list[Difference]:
    """`result.json: certificate` against the recorded job (scope), the final legal set `legal` and the log
    (counts), the re-timed leaders `timed` (the margin to the runner-up), the recomputed error bar `bar`
    (`verify_recorded.check_error_bar`) and the recomputed list of faster variants (`variants`; None when it
    could not be)."""
    from primus.tuning.variants import certificate_scope

    doc = run.result
    cert = doc.get("certificate")
    where = "result.json: certificate"
    if cert is None:
        best = doc.get("best")
        if doc.get("mode") == "exhaustive" and isinstance(best, dict) and best.get("parallel"):
            return [Difference(f"{where}: missing, though the search was exhaustive and found a best layout")]
        return []
    if not isinstance(cert, dict):
        return [Difference(f"{where}: not a mapping")]
    diffs = []
    scored = len({lay for e in entries if e.get("legal") is True and (lay := _logged(e, run)) in legal})
    expected: dict[str, Any] = {"scope": certificate_scope(run.job), "legal_layouts": len(legal), "scored": scored,
                                "every_legal_layout_scored": scored == len(legal),
                                "error_bar_pct": bar}
    if variants is not None:
        expected["faster_with_changed_options"] = bool(variants)
    margin = ((timed[0].tokens_per_s_per_gpu / timed[1].tokens_per_s_per_gpu - 1) * 100 if len(timed) > 1
              else None)
    expected["margin_exceeds_error_bar"] = margin is not None and isinstance(bar, (int, float)) and margin > bar
    for name, value in expected.items():
        if cert.get(name) != value or type(cert.get(name)) is not type(value):
            diffs.append(Difference(f"{where}.{name} recorded {cert.get(name)!r}, recomputed {value!r}"))
    old = cert.get("margin_to_runner_up_pct")
    if margin is None or old is None:
        if old is not margin:
            diffs.append(Difference(f"{where}.margin_to_runner_up_pct recorded {old!r}, recomputed {margin!r}"))
    elif not isinstance(old, (int, float)) or isinstance(old, bool) or not close(float(old), margin):
        diffs.append(Difference(f"{where}.margin_to_runner_up_pct recorded {old!r}, recomputed {margin!r}"))
    return diffs


def _logged(e: dict[str, Any], run: RunDir) -> Layout | None:
    try:
        return normalise(layout_of(e.get("parallel")), is_moe=run.job.model.is_moe)
    except ValueError:
        return None


def check_variants(run: RunDir, projector: Projector, best_tokens: float | None
                   ) -> tuple[list[Difference], list[dict[str, Any]] | None]:
    """`result.json: faster_with_changed_options` against the list `tune` computes from the recorded
    inputs: the same entries in the same order, each with the same options, peak and numbers. Returns the
    differences and the recomputed list (None when the reference's fit cannot be recomputed)."""
    from primus.tuning.variants import faster_variants

    where = "result.json: faster_with_changed_options"
    diffs, usable, near = _nearest_fix(run, projector)
    if not usable:
        return diffs, None
    recomputed = faster_variants(run.question(), projector, near, best_tokens)
    recorded = run.result.get("faster_with_changed_options")
    if not isinstance(recorded, list):
        return [*diffs, Difference(f"{where}: recorded {recorded!r}, not a list")], recomputed
    return [*diffs, *_compare_lists(where, recorded, recomputed)], recomputed


def _key(v: Any) -> str | None:
    """A variant's identity: its layout and its option changes (None for an entry that has neither)."""
    if not isinstance(v, dict):
        return None
    return json.dumps([v.get("parallel"), v.get("options")], sort_keys=True, default=repr)


def _compare_lists(where: str, recorded: list[Any], recomputed: list[dict[str, Any]]) -> list[Difference]:
    """Entries matched by layout and options: each recomputed one the record lacks is named missing, each
    recorded one not recomputed is named, matched ones are compared field by field, and the order must
    be the recomputed one (fastest first)."""
    mine = {_key(v): k for k, v in enumerate(recomputed)}
    theirs = {_key(v): k for k, v in enumerate(recorded) if _key(v) is not None}
    diffs = []
    for k, v in enumerate(recomputed):
        if _key(v) not in theirs:
            diffs.append(Difference(f"{where}: missing {_variant_text(v)} (recomputed [{k}] of {len(recomputed)}; "
                                    f"{len(recorded)} recorded)"))
    for k, v in enumerate(recorded):
        at = f"{where}[{k}]"
        if _key(v) not in mine:
            diffs.append(Difference(f"{at}: not among the {len(recomputed)} recomputed: {_variant_text(v)}"))
            continue
        diffs += _compare_variant(at, v, recomputed[mine[_key(v)]])
    order = [mine[_key(v)] for v in recorded if _key(v) in mine]
    if order != sorted(order):
        diffs.append(Difference(f"{where}: not fastest first (recorded in the recomputed order {order})"))
    return diffs


def _variant_text(v: Any) -> str:
    from primus.tuning.variants import changes_text

    if not isinstance(v, dict):
        return repr(v)
    try:
        lay = layout_text(v.get("parallel"))
    except (TypeError, KeyError, AttributeError):
        lay = repr(v.get("parallel"))
    options = v.get("options")
    opts = changes_text(options) if isinstance(options, dict) else repr(options)
    return f"{lay} with {opts} at {v.get('tokens_per_s_per_gpu')!r} tokens/s/GPU"


def _compare_variant(where: str, old: Any, new: dict[str, Any]) -> list[Difference]:
    if not isinstance(old, dict):
        return [Difference(f"{where}: recorded {old!r}, recomputed {_variant_text(new)}")]
    diffs = []
    for name in VARIANT_FIELDS:
        if old.get(name) != new[name]:
            diffs.append(Difference(f"{where}: {name} recorded {old.get(name)!r}, recomputed {new[name]!r}"))
    for name in VARIANT_NUMBERS:
        value = old.get(name)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not close(float(value), new[name]):
            diffs.append(Difference(f"{where}: {name} recorded {value!r}, re-simulated {new[name]!r}"))
    return diffs


def _nearest_fix(run: RunDir, projector: Projector
                 ) -> tuple[list[Difference], bool, tuple[Layout, int, dict[str, Any]] | None]:
    """The reference's fit recomputed from the run directory alone: `fit` of the recorded pins
    (`reference.pins`: the job's, or the published recipe's layout as `tune` found it in its catalog) under
    the recorded rules and profile (`primus.tuning.reference.reference_fit`, as `tune` ran it). Its verdict
    (`fits`, `violated_rules`) and its nearest legal fix (`nearest_legal`: layout, options, pins changed,
    peak) must be the recorded ones, and the fix re-simulates to its recorded numbers. Returns
    (differences, usable, fix): fix is the recomputed fix when it sets options (the list of faster variants
    takes it), else None; usable False when the recorded pins cannot be asked about."""
    from primus.tuning.reference import NO_REFERENCE, reference_fit

    where = "result.json: reference"
    ref = run.result.get("reference")
    ref = ref if isinstance(ref, dict) else {}
    origin, pins = ref.get("origin"), ref.get("pins")
    if not isinstance(pins, dict) or not isinstance(origin, str):
        return [Difference(f"{where}: pins recorded {pins!r} and origin {origin!r}, not a mapping and a text (a run "
                           "written before primus recorded the pins: the nearest legal fix cannot be recomputed)")], \
            False, None
    diffs = []
    own = dict(run.job.spec.parallel.pinned())
    if not origin.startswith("recipe: ") and pins != own:
        diffs.append(Difference(f"{where}.pins recorded {pins!r}, but the job pins {own!r} (origin {origin!r})"))
    try:
        result = reference_fit(run.question(), pins, run.profile)
    except (InputError, ValueError, TypeError, KeyError) as exc:
        return [*diffs, Difference(f"{where}.pins recorded {pins!r}, not pins of the job: {exc}")], False, None
    compared = origin != NO_REFERENCE
    fits = result.fits if compared else None
    if ref.get("fits") is not fits:
        diffs.append(Difference(f"{where}.fits recorded {ref.get('fits')!r}, recomputed {fits!r}"))
    if compared and not result.fits and ref.get("violated_rules") != list(result.violated_rules):
        diffs.append(Difference(f"{where}.violated_rules recorded {ref.get('violated_rules')!r}, recomputed "
                                f"{list(result.violated_rules)!r}"))
    alt = result.alternatives[0] if compared and not result.fits and result.alternatives else None
    near = ref.get("nearest_legal")
    where = f"{where}.nearest_legal"
    if alt is None:
        if near is not None:
            shown = _text(near.get("parallel")) if isinstance(near, dict) else repr(near)
            diffs.append(Difference(f"{where}: recorded {shown}, but the reference's fit recomputed has none"))
        return diffs, True, None
    expected: dict[str, Any] = {"parallel": alt.layout.as_parallel(), "options": dict(alt.options),
                                "changed": list(alt.changed), "peak_bytes": alt.peak_bytes}
    if not isinstance(near, dict):
        return [*diffs, Difference(f"{where}: recorded {near!r}, recomputed {layout_text(alt.layout.as_parallel())} "
                                   f"changing {', '.join(alt.changed)}")], True, _fix(alt)
    for name, value in expected.items():
        if near.get(name) != value:
            diffs.append(Difference(f"{where}: {name} recorded {_shown(name, near.get(name))}, recomputed "
                                    f"{_shown(name, value)}"))
    diffs += _resimulated(run, projector, where, near, alt.layout, alt.peak_bytes, dict(alt.options))
    return diffs, True, _fix(alt)


def _fix(alt: Any) -> tuple[Layout, int, dict[str, Any]] | None:
    """The nearest fix as the list of faster variants takes it: only one that sets job options."""
    return (alt.layout, alt.peak_bytes, dict(alt.options)) if alt.options else None


def _shown(name: str, value: Any) -> str:
    return _text(value) if name == "parallel" else repr(value)


def _resimulated(run: RunDir, projector: Projector, where: str, near: dict[str, Any], layout: Layout, peak: int,
                 options: dict[str, Any]) -> list[Difference]:
    """The recorded numbers of the nearest fix against its simulation under its own job (options applied)."""
    from primus.projection.project import projector_for
    from primus.solver.options import apply_options

    job = apply_options(run.job, options) if options else run.job
    p = projector_for(job, projector.profile, projector.timer).project(layout, "simulate", peak=(peak, True),
                                                                        explain=False)
    diffs = []
    for name, new in (("tokens_per_s_per_gpu", p.tokens_per_s_per_gpu), ("step_time_s", p.step_time_s)):
        old = near.get(name)
        if not isinstance(old, (int, float)) or isinstance(old, bool) or not close(float(old), new):
            diffs.append(Difference(f"{where}: {name} recorded {old!r}, re-simulated {new!r}"))
    return diffs


def _allowed_record(run: RunDir, kind: str) -> Any:
    """`result.json: allowed_changes.<kind>` as recorded, or None."""
    allowed = run.result.get("allowed_changes")
    return allowed.get(kind) if isinstance(allowed, dict) else None


def _missing_record(run: RunDir, where: str, note: str, kind: str, what: str) -> list[Difference]:
    """No record of an `--allow` change: a difference only when inputs/job.yaml says the change was made."""
    from primus.tuning.run import tune_notes

    if note in tune_notes(run.input_text("job.yaml")):
        return [Difference(f"{where}: missing, though inputs/job.yaml says `--allow {kind}` changed its {what}")]
    return []


def check_allowed_pipeline(run: RunDir, workers: int) -> list[Difference]:
    """`result.json: allowed_changes.pipeline` re-run: the recorded job must be the requested options with
    the chosen changes, the option sets tried must be those `pipeline_trials` tries, each with the best
    tokens/s/GPU its search gives, and the chosen set the fastest. A job file that says `--allow
    pipeline` changed it needs the record."""
    from primus.tuning.run import PIPELINE_CHANGED_NOTE

    where = "result.json: allowed_changes.pipeline"
    record = _allowed_record(run, "pipeline")
    if record is None:
        return _missing_record(run, where, PIPELINE_CHANGED_NOTE, "pipeline", "pipeline options")
    try:
        requested, chosen, limit, recorded = _record(record)
    except ValueError as exc:
        return [Difference(f"{where}: {exc}")]
    return _rerun(run, where, requested, chosen, limit, recorded, workers)


def _record(record: Any) -> tuple[dict[str, Any], dict[str, Any], int, list[dict[str, Any]]]:
    """The fields of `allowed_changes.pipeline`, each of the type `tune` writes (ValueError naming one)."""
    if not isinstance(record, dict):
        raise ValueError(f"recorded {record!r}, not a mapping")
    for name in ("requested", "chosen"):
        if not isinstance(record.get(name), dict) or not all(
                isinstance(k, str) and k.startswith("pipeline.") for k in record[name]):
            raise ValueError(f"{name} recorded {record.get(name)!r}, not a mapping of pipeline options")
    limit = record.get("exhaustive_limit")
    if type(limit) is not int or limit < 0:
        raise ValueError(f"exhaustive_limit recorded {limit!r}, not a count (a run written before it was "
                         "recorded cannot be re-run)")
    trials = record.get("per_option_set")
    if not isinstance(trials, list) or not all(isinstance(t, dict) for t in trials):
        raise ValueError(f"per_option_set recorded {trials!r}, not a list of mappings")
    return record["requested"], record["chosen"], limit, trials


def _rerun(run: RunDir, where: str, requested: dict[str, Any], chosen: dict[str, Any], limit: int,
           recorded: list[dict[str, Any]], workers: int) -> list[Difference]:
    from primus.tuning.agent import Tuner, TuneSettings
    from primus.tuning.run import pipeline_mapping, pipeline_trials, pipeline_winner, requested_pipeline

    base = _with_requested_pipeline(run.job_mapping, requested)
    diffs = []
    try:
        job = run.job_with(base)
        final = run.job_with(pipeline_mapping(base, chosen))
    except InputError as exc:
        return [Difference(f"{where}: the requested options with the chosen changes are not a job: {exc.reason}")]
    if requested_pipeline(job) != requested:
        diffs.append(Difference(f"{where}: requested {requested!r} holds defaults; recomputed "
                                f"{requested_pipeline(job)!r}"))
    if final.spec.pipeline != run.job.spec.pipeline:
        diffs.append(Difference(f"{where}: chosen {chosen!r} applied to the requested options is not the pipeline "
                                "of inputs/job.yaml"))
    settings = TuneSettings(exhaustive_limit=limit, workers=workers)

    def tune(trial: Any) -> dict[str, Any]:
        return Tuner(trial, settings, profile=run.profile, rules=run.rules).run()

    trials = pipeline_trials(job, lambda options: run.job_with(pipeline_mapping(base, options)), tune)
    for k in range(max(len(trials), len(recorded))):
        at = f"{where}.per_option_set[{k}]"
        if k >= len(recorded):
            diffs.append(Difference(f"{where}.per_option_set: {len(recorded)} recorded, {len(trials)} re-run: "
                                    f"missing [{k}] {trials[k][0]!r} at {trials[k][2]!r} tokens/s/GPU"))
            continue
        if k >= len(trials):
            diffs.append(Difference(f"{at}: not among the {len(trials)} option sets re-run: {recorded[k]!r}"))
            continue
        options, _, tokens = trials[k]
        if recorded[k].get("options") != options:
            diffs.append(Difference(f"{at}: options recorded {recorded[k].get('options')!r}, re-run {options!r}"))
            continue
        value = recorded[k].get("tokens_per_s_per_gpu")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not close(float(value), tokens):
            diffs.append(Difference(f"{at}: tokens_per_s_per_gpu recorded {value!r}, re-run {tokens!r}"))
    winner = pipeline_winner(trials)
    if trials[winner][0] != chosen:
        diffs.append(Difference(f"{where}: chosen {chosen!r}, but the fastest option set re-run is "
                                f"{trials[winner][0]!r}"))
    return diffs


def _with_requested_pipeline(data: dict[str, Any], requested: dict[str, Any]) -> dict[str, Any]:
    """A job mapping with the pipeline options `--allow pipeline` recorded as requested (`pipeline.X`)."""
    return {**data, "pipeline": {k.removeprefix("pipeline."): v for k, v in requested.items()}}


def check_allowed_precision(run: RunDir, workers: int) -> list[Difference]:
    """`result.json: allowed_changes.precision` re-run: the requested job is inputs/job.yaml (before any
    pipeline change) with the recorded requested precision settings; its precision settings must be those
    with the chosen change; the precisions tried must be those `precision_trials` tries, each with the best
    tokens/s/GPU and legal count its search gives, and the chosen one the fastest. A job file that says
    `--allow precision` changed it needs the record."""
    from primus.tuning.run import PRECISION_CHANGED_NOTE

    where = "result.json: allowed_changes.precision"
    record = _allowed_record(run, "precision")
    if record is None:
        return _missing_record(run, where, PRECISION_CHANGED_NOTE, "precision", "precision")
    try:
        fields = _precision_record(record)
    except ValueError as exc:
        return [Difference(f"{where}: {exc}")]
    pipeline = _allowed_record(run, "pipeline")
    data = run.job_mapping  # the file the precision change wrote: inputs/job.yaml before a pipeline change
    if isinstance(pipeline, dict) and isinstance(pipeline.get("requested"), dict):
        data = _with_requested_pipeline(data, pipeline["requested"])
    return _rerun_precision(run, where, data, *fields, workers)


def _precision_record(record: Any) -> tuple[str, dict[str, Any], str, int, list[dict[str, Any]]]:
    """The fields of `allowed_changes.precision`, each of the type `tune` writes (ValueError naming one)."""
    from primus.tuning.run import PRECISION_FIELDS

    if not isinstance(record, dict):
        raise ValueError(f"recorded {record!r}, not a mapping")
    for name in ("requested", "chosen"):
        if not isinstance(record.get(name), str):
            raise ValueError(f"{name} recorded {record.get(name)!r}, not a precision")
    settings = record.get("requested_settings")
    if not isinstance(settings, dict) or not set(settings) <= set(PRECISION_FIELDS):
        raise ValueError(f"requested_settings recorded {settings!r}, not a mapping of "
                         f"{', '.join(PRECISION_FIELDS)} (a run written before it was recorded cannot be re-run)")
    limit = record.get("exhaustive_limit")
    if type(limit) is not int or limit < 0:
        raise ValueError(f"exhaustive_limit recorded {limit!r}, not a count (a run written before it was "
                         "recorded cannot be re-run)")
    trials = record.get("per_precision")
    if not isinstance(trials, list) or not all(isinstance(t, dict) for t in trials):
        raise ValueError(f"per_precision recorded {trials!r}, not a list of mappings")
    return record["requested"], settings, record["chosen"], limit, trials


def _rerun_precision(run: RunDir, where: str, data: dict[str, Any], requested: str, settings: dict[str, Any],
                     chosen: str, limit: int, recorded: list[dict[str, Any]], workers: int) -> list[Difference]:
    from primus.tuning.agent import Tuner, TuneSettings
    from primus.tuning.run import (
        PRECISION_FIELDS,
        precision_mapping,
        precision_trials,
        precision_winner,
        requested_precision,
    )

    base = {**{k: v for k, v in data.items() if k not in PRECISION_FIELDS}, **settings}
    try:
        job = run.job_with(base)
    except InputError as exc:
        return [Difference(f"{where}: the requested precision settings {settings!r} are not a job: {exc.reason}")]
    diffs = []
    if job.spec.precision != requested:
        diffs.append(Difference(f"{where}: requested {requested!r}, but requested_settings {settings!r} make the "
                                f"job {job.spec.precision!r}"))
    written = requested_precision(data)
    expected = settings if chosen == job.spec.precision else {"precision": chosen}
    if written != expected:
        diffs.append(Difference(f"{where}: inputs/job.yaml's precision settings {written!r} are not the requested "
                                f"{settings!r} with the chosen {chosen!r} ({expected!r})"))
    tune_settings = TuneSettings(exhaustive_limit=limit, workers=workers)

    def tune(trial: Any) -> dict[str, Any]:
        return Tuner(trial, tune_settings, profile=run.profile, rules=run.rules).run()

    trials = precision_trials(job, lambda p: run.job_with(precision_mapping(base, p)), tune)
    for k in range(max(len(trials), len(recorded))):
        at = f"{where}.per_precision[{k}]"
        if k >= len(recorded):
            t = trials[k]
            diffs.append(Difference(f"{where}.per_precision: {len(recorded)} recorded, {len(trials)} re-run: missing "
                                    f"[{k}] {t.precision} at {t.tokens_per_s_per_gpu!r} tokens/s/GPU"))
            continue
        if k >= len(trials):
            diffs.append(Difference(f"{at}: not among the {len(trials)} precisions re-run: {recorded[k]!r}"))
            continue
        t = trials[k]
        if recorded[k].get("precision") != t.precision:
            diffs.append(Difference(f"{at}: precision recorded {recorded[k].get('precision')!r}, re-run "
                                    f"{t.precision!r}"))
            continue
        value = recorded[k].get("tokens_per_s_per_gpu")
        if not isinstance(value, (int, float)) or isinstance(value, bool) or not close(float(value),
                                                                                       t.tokens_per_s_per_gpu):
            diffs.append(Difference(f"{at}: tokens_per_s_per_gpu recorded {value!r}, re-run "
                                    f"{t.tokens_per_s_per_gpu!r}"))
        count = recorded[k].get("legal_count")
        if count != t.legal_count or type(count) is not int:
            diffs.append(Difference(f"{at}: legal_count recorded {count!r}, re-run {t.legal_count}"))
    fastest = trials[precision_winner(trials)].precision
    if fastest != chosen:
        diffs.append(Difference(f"{where}: chosen {chosen!r}, but the fastest precision re-run is {fastest!r}"))
    return diffs
