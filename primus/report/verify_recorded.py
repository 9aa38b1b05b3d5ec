"""`primus audit verify`, the claims of `result.json` the report shows beside the search: the job (`job`,
`job_spec`), the error bar, the best layout's every recorded field, the reference (origin, published claim,
its numbers when it fits), the speed-up and why the best wins, and the mode against the legal count.

Each is rebuilt by the function `primus tune` wrote it with (`primus.tuning.result`: `job_summary`,
`job_spec`, `error_bar_of`, `entry`, `diff_breakdowns`; `primus.tuning.reference.find_reference`), from the
recorded inputs, so there is one source of truth. What cannot be recomputed (what an LLM endpoint said, and
the events that record it) is named by `not_rechecked`, so verify never claims more than it checked.
"""

from __future__ import annotations

from typing import Any

from primus.errors import InputError
from primus.parallel import Layout
from primus.projection import Projection, Projector
from primus.report.rundir import RunDir
from primus.report.verify_types import Difference, close

#: fields of an entry `verify._check_result` and `check_leaders` already compare
_LEADER_FIELDS = ("parallel", "tokens_per_s_per_gpu", "step_time_s", "mfu", "peak_bytes")


def check_job(run: RunDir) -> list[Difference]:
    """`result.json: job` and `job_spec` against the job rebuilt from inputs/ (the report's question and
    `export --from-tune` read them)."""
    from primus.tuning.result import _catalog_name, job_spec, job_summary

    diffs = []
    job = run.job
    expected = job_summary(job)
    diffs += _compare_mapping("result.json: job", run.result.get("job"), expected)
    spec = job_spec(job)
    mapping = run.job_mapping
    for key in ("model", "hardware"):
        spec[key] = mapping.get(key) if _catalog_name(mapping.get(key)) else f"inputs/{key}.yaml"
    recorded = run.result.get("job_spec")
    if isinstance(recorded, dict) and "rules" in recorded and "rules" in mapping:
        spec["rules"] = recorded["rules"]  # in force through inputs/rules.yaml, re-checked as the rule set
    diffs += _compare_mapping("result.json: job_spec", recorded, spec)
    return diffs


def job_mismatch(run: RunDir) -> str | None:
    """The first way `result.json`'s job differs from inputs/ (None: they agree): `report` and
    `export --from-tune` refuse such a run."""
    try:
        diffs = check_job(run)
    except InputError as exc:
        return f"{exc.where}: {exc.reason}"
    return diffs[0].what if diffs else None


def _compare_mapping(where: str, recorded: Any, expected: dict[str, Any]) -> list[Difference]:
    if not isinstance(recorded, dict):
        return [Difference(f"{where}: recorded {recorded!r}, not a mapping")]
    return [Difference(f"{where}.{k} recorded {recorded.get(k)!r}, rebuilt from inputs/ {expected.get(k)!r}")
            for k in sorted(set(recorded) | set(expected)) if recorded.get(k) != expected.get(k)]


def check_error_bar(run: RunDir) -> tuple[list[Difference], float | None]:
    """`uncertainty_pct`, its basis and `profile_fitted` recomputed (`primus.fidelity.error_bar` of the
    recorded job and profile). Returns the differences and the recomputed bar (the certificate's)."""
    from primus.tuning.result import error_bar_of

    bar = error_bar_of(run.job, run.profile)
    doc = run.result
    diffs = []
    for name, key in (("uncertainty_pct", "pct"), ("uncertainty_basis", "basis"), ("profile_fitted", "fitted")):
        if not _same(doc.get(name), bar[key]):
            diffs.append(Difference(f"result.json: {name} recorded {doc.get(name)!r}, recomputed {bar[key]!r}"))
    return diffs, bar["pct"]


def _same(old: Any, new: Any) -> bool:
    """Equal, floats within `close`, mappings and lists element by element."""
    if isinstance(new, float) and isinstance(old, (int, float)) and not isinstance(old, bool):
        return close(float(old), new)
    if isinstance(new, dict) and isinstance(old, dict):
        return set(old) == set(new) and all(_same(old[k], new[k]) for k in new)
    if isinstance(new, (list, tuple)) and isinstance(old, (list, tuple)):
        return len(old) == len(new) and all(_same(a, b) for a, b in zip(old, new, strict=True))
    return bool(old == new) and type(old) is type(new)


def _compare_entry(where: str, recorded: Any, expected: dict[str, Any], skip: tuple[str, ...]) -> list[Difference]:
    recorded = recorded if isinstance(recorded, dict) else {}
    return [Difference(f"{where}.{k} recorded {recorded.get(k)!r}, re-simulated {expected.get(k)!r}")
            for k in sorted(set(expected) | (set(recorded) & {"tight", "over_hbm", "verdict", "hidden"}))
            if k not in skip and not _same(recorded.get(k), expected.get(k))]


def check_best_and_reference(run: RunDir, projector: Projector, best: Projection | None,
                             final: dict[Layout, int]) -> list[Difference]:
    """The best's every field (tight, over_hbm, hidden, model TFLOPs, breakdown) and `assumptions`; the
    reference's origin and claim (`find_reference` of the recorded job, rules and profile, with this
    version's recipes), its numbers re-simulated when it fits; `why` and `speedup_vs_reference`."""
    from primus.tuning.reference import find_reference
    from primus.tuning.result import diff_breakdowns, entry

    doc = run.result
    diffs: list[Difference] = []
    best_p = None
    if best is not None:
        best_p = projector.project(best.layout, "simulate", peak=(final.get(best.layout, best.peak_bytes), True))
        diffs += _compare_entry("result.json: best", doc.get("best"), entry(best_p, None, True, []), _LEADER_FIELDS)
        if not _same(doc.get("assumptions"), list(best_p.assumptions)):
            diffs.append(Difference(f"result.json: assumptions recorded {doc.get('assumptions')!r}, recomputed "
                                    f"{list(best_p.assumptions)!r}"))
    ref = find_reference(run.job, run.question(), run.profile)
    rec = doc.get("reference")
    rec = rec if isinstance(rec, dict) else {}
    where = "result.json: reference"
    if rec.get("origin") != ref.origin:
        diffs.append(Difference(f"{where}.origin recorded {rec.get('origin')!r}, recomputed {ref.origin!r}"))
    claim = dict(ref.claim) if ref.claim is not None else None
    if rec.get("claim") != claim:
        diffs.append(Difference(f"{where}.claim recorded {rec.get('claim')!r}, recomputed {claim!r} (this "
                                "version's recipes)"))
    ref_p = _reference_projection(run, projector, ref, final)
    if ref.compared and ref.layout is not None and ref.fit.fits and ref_p is not None:
        diffs += _compare_entry(where, rec, entry(ref_p, None, True, []), ("peak_bytes",))
    if best_p is not None and ref_p is not None:
        why, speedup = diff_breakdowns(best_p, ref_p), best_p.tokens_per_s_per_gpu / ref_p.tokens_per_s_per_gpu
    else:
        why, speedup = None, None
    if not _same(doc.get("why"), why):
        diffs.append(Difference(f"result.json: why recorded {doc.get('why')!r}, recomputed {why!r}"))
    if not _same(doc.get("speedup_vs_reference"), speedup):
        diffs.append(Difference(f"result.json: speedup_vs_reference recorded {doc.get('speedup_vs_reference')!r}, "
                                f"recomputed {speedup!r}"))
    return diffs


def _reference_projection(run: RunDir, projector: Projector, ref: Any, final: dict[Layout, int]
                          ) -> Projection | None:
    """The reference's projection as `build_result` makes it: the reference itself when it fits, else its
    nearest legal fix under its own options."""
    if not ref.compared:
        return None
    if ref.layout is not None and ref.fit.fits:
        peak = final.get(ref.layout)
        return projector.project(ref.layout, "simulate", peak=(peak, True) if peak is not None else None)
    if not ref.fit.alternatives:
        return None
    near = ref.fit.alternatives[0]
    proj = projector
    if near.options:
        from primus.projection.project import projector_for
        from primus.solver.options import apply_options

        proj = projector_for(apply_options(run.job, near.options), projector.profile, projector.timer)
    return proj.project(near.layout, "simulate", peak=(near.peak_bytes, True))


def not_rechecked(run: RunDir) -> list[str]:
    """What verify takes as recorded, one line each, printed as "not re-checked: ..."."""
    out = ["the inputs themselves (inputs/*.yaml are checked against their sha256, built-in rules and a "
           "catalog accelerator against this version's; the rest is what the run was asked)"]
    if run.llm_calls:
        out.append(f"the LLM transcripts ({len(run.llm_calls)} file(s) in llm/): what an endpoint said cannot be "
                   "recomputed")
    out.append("the events' texts (proposals, reasons, faults): records of the search and of the endpoint; only "
               "the rules they adopted are re-checked (none in an exhaustive run, the guided re-run's own, the "
               "legal counts), and the llm usage block against the transcripts")
    return out


def check_llm_usage(run: RunDir) -> list[Difference]:
    """`result.json: llm.calls` and `llm.tokens` against the transcripts in llm/ (one file per call, each
    with its tokens): the two records must agree, though neither can be recomputed."""
    import json

    llm = run.result.get("llm")
    if not isinstance(llm, dict):
        return [Difference(f"result.json: llm recorded {llm!r}, not a mapping")]
    tokens = 0
    for name in run.llm_calls:
        try:
            used = json.loads((run.root / "llm" / name).read_text(encoding="utf-8")).get("tokens") or 0
        except (OSError, ValueError, AttributeError):
            return [Difference(f"llm/{name}: not a JSON mapping")]
        tokens += used if isinstance(used, int) else 0
    return [Difference(f"result.json: llm.{k} recorded {llm.get(k)!r}, but llm/ holds {n:,}")
            for k, n in (("calls", len(run.llm_calls)), ("tokens", tokens)) if llm.get(k) != n]


def check_catalog(run: RunDir) -> list[str]:
    """Built-in rules (`origin: built-in` in inputs/rules.yaml) against this version's constraints/, and
    inputs/hardware.yaml against the catalog accelerator job.yaml names: each way they differ, one line
    (a difference for a run this version wrote, a note for another version's)."""
    import yaml

    from primus.catalog.hardware import resolve_hardware
    from primus.solver.ruleset import builtin_rules
    from primus.tuning.result import _catalog_name

    out = []
    shipped = {r.id: r for r in builtin_rules()}
    for r in run.rules:
        if r.origin != "built-in":
            continue
        mine = shipped.get(r.id)
        if mine is None:
            out.append(f"inputs/rules.yaml: built-in rule {r.id!r} is not one of this version's constraints/")
            continue
        for name in ("require", "why", "source", "severity", "weight"):
            if getattr(r, name) != getattr(mine, name):
                out.append(f"inputs/rules.yaml: built-in rule {r.id!r} {name} recorded {getattr(r, name)!r}, "
                           f"constraints/ has {getattr(mine, name)!r}")
    hardware = run.job_mapping.get("hardware")
    if isinstance(hardware, str) and _catalog_name(hardware):
        catalog = resolve_hardware(hardware, str(run.root / "inputs" / "job.yaml")).model_dump(mode="json")
        recorded = yaml.safe_load(run.input_text("hardware.yaml"))
        if isinstance(recorded, dict):
            out += [f"inputs/hardware.yaml: {k} recorded {a!r}, the catalog's {hardware!r} has {b!r}"
                    for k, a, b in _leaf_differences(recorded, catalog, "")]
    return out


def _leaf_differences(a: Any, b: Any, path: str) -> list[tuple[str, Any, Any]]:
    """Where two parsed documents differ, by dotted path to the innermost differing value."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b), key=str)
                for d in _leaf_differences(a.get(k), b.get(k), f"{path}.{k}" if path else str(k))]
    return [] if a == b else [(path, a, b)]


def check_mode(run: RunDir, legal_count: int, final: dict[Layout, int], entries: list[dict[str, Any]]
               ) -> list[Difference]:
    """`mode` against the recorded `exhaustive_limit` and the recomputed legal count (`Tuner.run`: empty when
    nothing is legal, else exhaustive when the legal set is at most the limit), and an exhaustive log holding
    every legal layout."""
    from primus.parallel import normalise
    from primus.report.rundir import layout_of

    doc = run.result
    mode, limit = doc.get("mode"), doc.get("exhaustive_limit")
    diffs = []
    if not isinstance(limit, int) or isinstance(limit, bool):
        diffs.append(Difference(f"result.json: exhaustive_limit recorded {limit!r}, not an integer (a run written "
                                "before primus recorded it: the mode cannot be re-checked)"))
    else:
        want = "empty" if legal_count == 0 else "exhaustive" if legal_count <= limit else "guided"
        if mode != want:
            diffs.append(Difference(f"result.json: mode recorded {mode!r}, but {legal_count:,} legal layouts under "
                                    f"the recorded exhaustive_limit {limit:,} make it {want!r}"))
    if mode == "exhaustive":
        logged = set()
        for e in entries:
            if e.get("legal") is True:
                try:
                    logged.add(normalise(layout_of(e.get("parallel")), is_moe=run.job.model.is_moe))
                except ValueError:
                    continue
        missing = [lay for lay in final if lay not in logged]
        if missing:
            diffs.append(Difference(f"result.json: mode is exhaustive, but {len(missing):,} legal layout(s) are not "
                                    f"in audit.jsonl, e.g. {missing[0].as_parallel()!r}"))
    return diffs


def check_adoptions(run: RunDir, adoptions: list[tuple[int, Any]]) -> list[Difference]:
    """The rules result.json's events record as adopted: none in a run that scored every legal layout
    (exhaustive, or empty: `Tuner.run` asks no hypothesis there), and the same rules, in order, as its
    `adopted_rules`. A guided run's adoptions are re-derived by its re-run (`verify_search`)."""
    doc = run.result
    diffs = []
    mode = doc.get("mode")
    if adoptions and mode in ("exhaustive", "empty"):
        names = ", ".join(repr(r.id) for _, r in adoptions[:3])
        diffs.append(Difference(f"result.json: events record {len(adoptions)} adopted rule(s) ({names}), but a run "
                                f"in mode {mode!r} scores every legal layout and adopts none"))
    expected = [{"id": r.id, "require": r.require} for _, r in adoptions]
    recorded = doc.get("adopted_rules")
    got = ([{"id": r.get("id"), "require": r.get("require")} if isinstance(r, dict) else r for r in recorded]
           if isinstance(recorded, list) else recorded)
    if got != expected:
        diffs.append(Difference(f"result.json: adopted_rules recorded {recorded!r}, but its events adopt "
                                f"{expected!r}"))
    return diffs
