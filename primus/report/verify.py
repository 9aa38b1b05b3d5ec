"""`primus audit verify DIR`: recompute every recorded candidate of a run from its recorded inputs.

A report is only as good as someone else's ability to re-check it. Every file of the directory is first
checked against the run's list of files (`SHA256SUMS`, `primus.report.manifest`). The check is
independent of the machine's catalogs and rule files: the inputs are checked against `inputs/SHA256SUMS`,
then the
job, profile and exact rule set are rebuilt from them (`RunDir`), and for every line of `audit.jsonl`:

- legality: a line recorded legal must be in the enumerated legal set under the rules in force at its
  seq (the recorded rules, plus those the search adopted before it) with the same ledger peak; a line
  recorded illegal must be outside it and break exactly the recorded rules;
- the projection: the fast projection the tuner scored with (`TuneSpace.score`: method "fast", the
  ledger's peak, no assumptions text) must give the recorded tokens/s/GPU and step time, and every
  breakdown term, within `REL_TOL` (relative; breakdown terms relative to the step time).

Then `result.json` is checked against the log (its scored count; its best layout, re-simulated), its
certificate (scope and counts), its list of layouts that need other pipeline options
(`faster_with_changed_options`, recomputed whole) and the trials of `--allow precision` and `--allow
pipeline` (`primus.report.verify_claims`), the job, error bar, the best's fields, the reference, the
speed-up, why the best wins and the mode (`primus.report.verify_recorded`, which also names what is not
re-checked), and the report files against a fresh render, whichever primus version
wrote them: a directory from another version is rendered with this one and compared (`primus report DIR`
re-renders it to this version's wording; its numbers are recomputed either way). Every difference names
the candidate (seq and layout) and the field, or the file and its first differing line.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from primus import __version__
from primus.errors import InputError
from primus.parallel import Layout, normalise
from primus.parallel import parallel_text as layout_text
from primus.projection import Projector
from primus.report.manifest import check_manifest
from primus.report.rundir import RunDir, layout_of
from primus.report.verify_claims import (
    check_allowed_pipeline,
    check_allowed_precision,
    check_certificate,
    check_leaders,
    check_variants,
)
from primus.report.verify_recorded import (
    check_adoptions,
    check_best_and_reference,
    check_catalog,
    check_error_bar,
    check_job,
    check_llm_usage,
    check_mode,
    not_rechecked,
)
from primus.report.verify_search import check_guided_search
from primus.report.verify_types import Difference, Verification, close
from primus.solver.api import Question
from primus.solver.check import violated_rules
from primus.tuning.space import Scored

BLOCK = 2_000
PARALLEL_MIN = 4_000  # below this, forking costs more than it saves

_WORKER: dict[str, Projector] = {}  # set in forked workers only


class _Epochs:
    """The legal set under the rules in force at each seq (the recorded rules plus those adopted so far)."""

    def __init__(self, run: RunDir, adoptions: list[tuple[int, Any]]) -> None:
        self.run = run
        self.adoptions = sorted(adoptions, key=lambda a: a[0])
        self._cache: dict[int, tuple[Question, dict[Layout, int]]] = {}

    def at(self, seq: int) -> tuple[Question, dict[Layout, int]]:
        k = sum(1 for s, _ in self.adoptions if s <= seq)
        hit = self._cache.get(k)
        if hit is None:
            q = self.run.question([r for _, r in self.adoptions[:k]])
            c = q.candidates
            peaks = c.cols["peak_bytes"].tolist()
            hit = self._cache[k] = (q, {c.layout(i): int(peaks[i]) for i in range(c.n)})
        return hit


def verify_run(root: Path, workers: int = 1, progress: Callable[[str], None] | None = None) -> Verification:
    """Recompute the run directory `root`; the outcome lists every difference found."""
    say = progress or (lambda _m: None)
    run = RunDir.open(root)
    out = Verification()
    listed, extra = check_manifest(run.root)
    out.differences += [Difference(d) for d in listed]
    out.notes += extra
    try:
        problems = run.input_problems()
        adoptions = run.adoptions()  # read now: the rules the search adopted are recorded in result.json
    except InputError as exc:  # a damaged file of the run is the answer "does not verify", not bad input
        field = f"{exc.field}: " if exc.field else ""
        out.differences.append(Difference(f"{_relative(exc.where, run.root)}: cannot be read: {field}{exc.reason}"))
        out.notes.append("a file the recomputation starts from cannot be read: nothing recomputed")
        return out
    if problems:
        named = {d.split(": ", 1)[0] for d in listed}  # an edited input the list of files already named
        out.differences += [Difference(p) for p in problems if p.split(": ", 1)[0] not in named]
        out.notes.append("inputs do not match their recorded sha256: nothing recomputed from them")
        return out
    entries = run.entries
    job = run.job
    out.not_rechecked = not_rechecked(run)
    out.differences += check_job(run)
    catalog = check_catalog(run)
    try:
        same_version = run.versions.get("primus") == __version__
    except InputError:
        same_version = False  # versions.json unreadable: _check_report names it
    if same_version:
        out.differences += [Difference(c) for c in catalog]
    else:
        out.notes += catalog
    epochs = _Epochs(run, adoptions)
    try:
        epochs.at(len(entries))  # every adopted rule reads against the job's names
    except InputError as exc:
        out.differences.append(Difference(f"{_relative(exc.where, run.root)}: {exc.reason}"))
        out.notes.append("a rule result.json records as adopted cannot be read: nothing recomputed")
        return out
    say(f"checking legality of {len(entries):,} candidates")
    todo: list[tuple[int, dict[str, Any], Layout, int]] = []
    for seq, e in enumerate(entries):
        if e.get("seq") != seq:
            out.differences.append(Difference(f"seq recorded {e.get('seq')!r} on line {seq + 1}", seq,
                                              e.get("parallel") if isinstance(e.get("parallel"), dict) else None))
        try:
            layout = normalise(layout_of(e.get("parallel")), is_moe=job.model.is_moe)
        except ValueError as exc:
            out.differences.append(Difference(f"parallel is not a layout: {exc}", seq, None))
            continue
        out.checked += 1
        q, legal = epochs.at(seq)
        peak = legal.get(layout)
        if e.get("legal") is True:
            if peak is None:
                why = ", ".join(violated_rules(q, layout)) or "not in the legal set"
                out.differences.append(Difference(f"recorded legal, but recomputed illegal: breaks {why}", seq,
                                                  e["parallel"]))
                continue
            if e.get("peak_bytes") != peak:
                out.differences.append(Difference(f"peak_bytes recorded {e.get('peak_bytes')!r}, recomputed {peak}",
                                                  seq, e["parallel"]))
            todo.append((seq, e, layout, peak))
        elif e.get("legal") is False:
            if peak is not None:
                out.differences.append(Difference(f"recorded illegal ({', '.join(e.get('violated_rules', []))}), "
                                                  "but recomputed legal", seq, e["parallel"]))
                continue
            broken = violated_rules(q, layout) or ["not-in-legal-set"]
            if e.get("violated_rules") != broken:
                out.differences.append(Difference(f"violated_rules recorded {e.get('violated_rules')!r}, recomputed "
                                                  f"{broken!r}", seq, e["parallel"]))
        else:
            out.differences.append(Difference(f"legal is {e.get('legal')!r}, not true or false", seq, e["parallel"]))
    say(f"recomputing {len(todo):,} projections ({workers} worker(s))")
    projector = Projector(job, run.profile)
    scores = _project_all(projector, [(lay, peak) for _, _, lay, peak in todo], workers)
    for (seq, e, _, _), (tok, step, breakdown) in zip(todo, scores, strict=True):
        out.differences += _compare(seq, e, tok, step, breakdown)
    out.differences += _check_result(run, projector, entries)
    say("re-checking result.json: best, top, certificate, faster variants, allowed changes")
    final = epochs.at(len(entries))[1]  # the legal set under every rule the search adopted: tune's last
    scored: dict[Layout, Scored] = {}
    for (_, _, layout, peak), (tok, step, breakdown) in zip(todo, scores, strict=True):
        if layout in final:
            scored.setdefault(layout, Scored(layout, tok, step, peak, breakdown))
    diffs, timed = check_leaders(run, projector, list(scored.values()))
    out.differences += diffs
    diffs, variants = check_variants(run, projector, timed[0].tokens_per_s_per_gpu if timed else None)
    out.differences += diffs
    for name, n in (("legal_count", len(epochs.at(-1)[1])), ("legal_count_after_adopted_rules", len(final))):
        if run.result.get(name) != n:
            out.differences.append(Difference(f"result.json: {name} recorded {run.result.get(name)!r}, "
                                              f"recomputed {n}"))
    out.differences += check_best_and_reference(run, projector, timed[0] if timed else None, final)
    base = epochs.at(-1)[1]  # the legal set under the recorded rules alone
    out.differences += check_mode(run, len(base), base, entries)
    out.differences += check_adoptions(run, adoptions)
    if run.result.get("mode") == "guided":
        say("re-running the guided search (its LLM calls answered from llm/)")
        out.differences += check_guided_search(run, workers)
    out.differences += check_llm_usage(run)
    bar_diffs, bar = check_error_bar(run)
    out.differences += bar_diffs
    out.differences += check_certificate(run, final, entries, variants, timed, bar)
    out.differences += check_allowed_precision(run, workers)
    out.differences += check_allowed_pipeline(run, workers)
    out.differences += _check_report(run, out.notes)
    return out


def _compare(seq: int, e: dict[str, Any], tok: float, step: float, breakdown: dict[str, float]
             ) -> list[Difference]:
    par = e["parallel"]
    diffs = []
    for name, new in (("tokens_per_s_per_gpu", tok), ("step_time_s", step)):
        old = e.get(name)
        if not isinstance(old, (int, float)) or not close(float(old), new):
            diffs.append(Difference(f"{name} recorded {old!r}, recomputed {new!r}", seq, par))
    recorded = e.get("breakdown")
    if not isinstance(recorded, dict) or set(recorded) != set(breakdown):
        diffs.append(Difference(f"breakdown terms recorded {sorted(recorded or {})}, recomputed {sorted(breakdown)}",
                                seq, par))
        return diffs
    for term in sorted(breakdown):
        old = recorded[term]
        if not isinstance(old, (int, float)) or not close(float(old), breakdown[term], step):
            diffs.append(Difference(f"breakdown.{term} recorded {old!r}, recomputed {breakdown[term]!r}", seq, par))
    return diffs


def _project_all(projector: Projector, items: Sequence[tuple[Layout, int]], workers: int
                 ) -> list[tuple[float, float, dict[str, float]]]:
    """Fast projections of many layouts, in order; forked workers over contiguous blocks (each keeps its
    caches warm across blocks) when there are enough, with results independent of the worker count."""
    if workers <= 1 or len(items) < PARALLEL_MIN:
        _WORKER["projector"] = projector
        try:
            return _project_block(list(items))
        finally:
            _WORKER.clear()
    blocks = [list(items[k:k + BLOCK]) for k in range(0, len(items), BLOCK)]
    ctx = multiprocessing.get_context("fork")
    out: list[tuple[float, float, dict[str, float]]] = []
    with ctx.Pool(workers, initializer=_set_projector, initargs=(projector,)) as pool:
        for part in pool.imap(_project_block, blocks):
            out += part
    return out


def _set_projector(projector: Projector) -> None:
    _WORKER["projector"] = projector


def _project_block(items: list[tuple[Layout, int]]) -> list[tuple[float, float, dict[str, float]]]:
    p = _WORKER["projector"]
    out = []
    for layout, peak in items:
        r = p.project(layout, "fast", peak=(peak, True), explain=False)
        out.append((r.tokens_per_s_per_gpu, r.step_time_s, dict(r.breakdown)))
    return out


def _check_result(run: RunDir, projector: Projector, entries: list[dict[str, Any]]) -> list[Difference]:
    """result.json against the log: its scored count, and its best layout re-simulated."""
    doc = run.result
    diffs = []
    scored = sum(1 for e in entries if e.get("legal") is True)
    if doc.get("scored_count") != scored:
        diffs.append(Difference(f"result.json: scored_count {doc.get('scored_count')!r}, but audit.jsonl has {scored} "
                                "scored candidates"))
    best = doc.get("best") or {}
    if best.get("parallel"):
        try:
            layout = normalise(layout_of(best["parallel"]), is_moe=run.job.model.is_moe)
        except ValueError as exc:
            return [*diffs, Difference(f"result.json: best parallel is not a layout: {exc}")]
        p = projector.project(layout, "simulate", peak=(best.get("peak_bytes", 0), True), explain=False)
        for name, new in (("tokens_per_s_per_gpu", p.tokens_per_s_per_gpu), ("step_time_s", p.step_time_s),
                          ("mfu", p.mfu)):
            old = best.get(name)
            if not isinstance(old, (int, float)) or not close(float(old), new):
                diffs.append(Difference(f"result.json: best {name} recorded {old!r}, re-simulated {new!r}"))
        peaks = {layout_text(e["parallel"]): e.get("peak_bytes") for e in entries if e.get("legal") is True}
        logged = peaks.get(layout_text(layout.as_parallel()))
        if logged != best.get("peak_bytes"):
            diffs.append(Difference(f"result.json: best peak_bytes {best.get('peak_bytes')!r} is not the logged "
                                    f"{logged!r}"))
    return diffs


def _check_report(run: RunDir, notes: list[str]) -> list[Difference]:
    """The report files against a fresh render with this primus, whatever version wrote them: a forged
    number in the report is caught even when versions.json is gone or names another version."""
    from primus.report.render import render

    if not (run.root / "report.md").exists() and not (run.root / "report.html").exists():
        notes.append("no report in the directory: nothing to compare")
        return []
    try:
        written_by = run.versions.get("primus")
    except InputError as exc:
        return [Difference(f"versions.json: cannot be read: {exc.reason}")]
    other = written_by is not None and written_by != __version__
    try:
        files = render(run)
    except InputError as exc:
        return [Difference(f"the report cannot be re-rendered: {exc.reason}")]
    diffs = []
    for rel, text in files.items():
        path = run.root / rel
        if not path.is_file():
            diffs.append(Difference(f"{rel}: missing (a fresh render writes it)"))
            continue
        old = path.read_text(encoding="utf-8", errors="replace")
        if old != text:
            how = (f"what primus {__version__} renders from this directory (written by primus {written_by}: "
                   "`primus report DIR` re-renders it with this version)" if other
                   else "a fresh render of this directory")
            diffs.append(Difference(f"{rel} differs from {how}, {first_difference(old, text)}"))
    if other and not diffs:
        notes.append(f"written by primus {written_by}; the report is what primus {__version__} renders from it")
    return diffs


def _relative(where: str, root: Path) -> str:
    """A file of the run named as the other differences name it (relative to the directory)."""
    try:
        return str(Path(where).relative_to(root))
    except ValueError:
        return where


def first_difference(old: str, new: str, width: int = 100) -> str:
    """Where two texts first differ: the line number and both lines there (shortened, quoted)."""
    a, b = old.splitlines(), new.splitlines()
    for n, (x, y) in enumerate(zip(a, b, strict=False), start=1):
        if x != y:
            k = next((i for i, (c, d) in enumerate(zip(x, y, strict=False)) if c != d), min(len(x), len(y)))
            start = max(0, k - width // 2)
            return f"first at line {n}: recorded {x[start:start + width]!r}, rendered {y[start:start + width]!r}"
    if len(a) != len(b):
        return f"lengths differ: {len(a)} line(s) recorded, {len(b)} rendered"
    return "in line endings or the final newline"
