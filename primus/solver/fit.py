"""`fit`: a proof that a job fits, or the minimal reason it does not and the nearest configs that do.

A proof is the ledger's per-stage bytes of the pinned layout (or, with free axes, of the legal
completion with the most headroom) together with every rule it satisfies and the ledger's
assumptions. A refusal is a minimal set of conflicting rules and pins: CP-SAT's sufficient
assumptions for infeasibility, shrunk by deletion until removing any member makes the question
feasible; plus the bytes over capacity, the nearest legal layouts (fewest pinned axes changed) and,
when nothing at all fits, the smallest node count at which something would.

Job options that keep every parallel axis are tried first (`primus.solver.options`): when PP is pinned
and the refusal involves the pipeline split or memory, pipeline split accounting, first/last stage
layer counts and a layout string (at PP 1, every pipeline option unset); when it involves memory,
partial full recompute (the fewest layers per virtual stage, Megatron's block method) and PyTorch's
expandable-segments allocator. A fix that keeps every pin ranks before one that changes a pin
(`primus.solver.suggest.rank_key`).

A nearest layout changes some pins; the axes the job leaves free are then completed. Least memory is
the wrong completion to suggest (it picks CP 32 over DP 32 for a 70B model), so when the caller gives a
`speed` (projected tokens/s/GPU of a layout; the CLI passes the projection oracle's) each suggestion is
the fastest completion of its pin assignment (found best-first when `speed` has an admissible
`bound`), and says how fast. The solver itself knows nothing of projection: without `speed` the
completion with the least memory is shown.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from primus.job import Job
from primus.memory.evaluate import MemoryModel, MemoryReport
from primus.memory.ledger import Reserves
from primus.parallel import Layout
from primus.solver.api import Question
from primus.solver.core import broken_definitions, certify
from primus.solver.explain import (
    Asker,
    closest_request,
    explain_structural,
    further_cores,
    minimal_core,
    nearest_levels,
    pins_core,
)
from primus.solver.minsize import largest_size_below, smallest_size
from primus.solver.options import (
    ALLOCATOR_FIX_VENDORS,
    EXPANDABLE_SEGMENTS,
    PARTIAL_RECOMPUTE_FROM,
    apply_options,
    partial_recompute,
    pipeline_candidates,
    recompute_search_job,
    unset_at_pp,
)
from primus.solver.pins import PIN_AXES, normalisation_notes
from primus.solver.space import Space, widest_chunk
from primus.solver.suggest import Alternative, Speed, fastest_groups, labelled, rank_key
from primus.solver.vector import Candidates

MAX_ALTERNATIVES = 5
#: Pin assignments projected before the fastest MAX_ALTERNATIVES are shown (nearest first, least memory
#: next): a search budget that keeps a refusal well under a second, not a modelling constant.
SCORED_GROUPS = 4 * MAX_ALTERNATIVES


@dataclass(frozen=True)
class FitResult:
    fits: bool
    layout: Layout | None  # the proof (fits) or the closest evaluation of the request (does not fit)
    report: MemoryReport | None
    #: the rules (memory aside) the closest evaluation breaks, when no layout holding the pins passes them
    request_breaks: tuple[str, ...] = ()
    satisfied_rules: tuple[str, ...] = ()
    violated_rules: tuple[str, ...] = ()
    #: the conflicts left once the pins of the core (and of each one before) are changed (`further_cores`)
    further_cores: tuple[tuple[str, ...], ...] = ()
    alternatives: tuple[Alternative, ...] = ()
    #: the nearest size above the job's at which some layout fits, when none does here (the smallest
    #: size that fits when `size_below` is None)
    min_gpus: int | None = None
    min_nodes_note: str | None = None
    size_below: int | None = None  # the nearest size below the job's at which some layout fits
    sizes_searched: bool = False
    gpus_per_node: int = 8
    completed_axes: tuple[str, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: rule id -> the arithmetic behind a broken definition in the core (pinned TP8 × PP4 × DP4 = 128 ≠ 16)
    core_details: dict[str, str] = field(default_factory=dict)
    #: what the answer assumes: the evaluated layout's full list, else (a refusal with no layout to
    #: evaluate) the stack and the capacity, which hold whatever the layout
    assumptions: tuple[str, ...] = ()

    @property
    def min_nodes(self) -> int | None:
        """Nodes the smallest fitting size occupies (a sub-node size occupies one)."""
        return None if self.min_gpus is None else -(-self.min_gpus // self.gpus_per_node)

    def to_json(self, capacity: int, reserves: Reserves | None = None) -> dict[str, Any]:
        """The fit document; with the job's `reserves`, also the three-way verdict: `verdict` (fits,
        tight, does not fit), `tight` and `tight_by_bytes` (how far the headroom falls short of the
        allocator reserve), and `over_hbm` (the peak exceeds the device's raw memory too)."""
        doc: dict[str, Any] = {"fits": self.fits}
        r = self.report
        if reserves is not None and r is not None:
            doc.update(reserves.verdict_fields(r.peak_bytes, self.fits))
        doc["parallel"] = self.layout.as_parallel() if self.layout else None
        doc["completed_axes"] = list(self.completed_axes)
        doc["peak_bytes"] = r.peak_bytes if r else None
        doc["capacity_bytes"] = capacity
        doc["headroom_bytes"] = (capacity - r.peak_bytes) if r else None
        doc["stages"] = [
            {"stage": s.stage, "params": s.params, "bytes": s.bytes, "over_capacity_bytes": max(0, s.bytes - capacity),
             "breakdown": s.breakdown, "dominant_terms": dominant_terms(s.terms)}
            for s in r.stages] if r else []
        doc["satisfied_rules"] = list(self.satisfied_rules)
        doc["violated_rules"] = list(self.violated_rules)
        if not self.fits:
            doc["further_conflicts"] = [list(c) for c in self.further_cores]
        if self.core_details:
            doc["core_details"] = dict(self.core_details)
        if not self.fits:
            doc["closest_breaks"] = list(self.request_breaks)
        doc["alternatives"] = [
            {"parallel": a.layout.as_parallel(), "peak_bytes": a.peak_bytes, "headroom_bytes": a.headroom_bytes,
             "changed": list(a.changed), "pins_changed": list(a.pins_changed), "options": dict(a.options),
             "tight": a.tight,
             **({"tokens_per_s_per_gpu": a.tokens_per_s_per_gpu} if a.tokens_per_s_per_gpu is not None else {})}
            for a in self.alternatives]
        if self.sizes_searched:
            doc["nearest_sizes"] = {"below": self.size_below, "above": self.min_gpus}
        if self.size_below is None and (self.min_gpus is not None or self.min_nodes_note):
            doc["min_gpus"] = self.min_gpus
            doc["min_nodes"] = self.min_nodes
            if self.min_nodes_note:
                doc["min_nodes_note"] = self.min_nodes_note
        doc["assumptions"] = list(self.assumptions)
        doc["notes"] = list(self.notes)
        return doc


def dominant_terms(terms: dict[str, int], k: int = 3) -> list[dict[str, Any]]:
    ranked = sorted(terms.items(), key=lambda kv: (-kv[1], kv[0]))[:k]
    return [{"term": name, "bytes": value} for name, value in ranked if value > 0]


def meaningful_free_axes(question: Question) -> tuple[str, ...]:
    """Axes the job leaves free that mean something for this model (EP/ETP only for MoE)."""
    axes = ["tp", "pp", "vp", "cp", "mbs", "sp", "recompute", "sharding"]
    if question.job.model.is_moe:
        axes[4:4] = ["ep", "etp"]
    return tuple(a for a in axes if a not in question.pins)


def fit(question: Question, certify_core: bool = False, speed: Speed | None = None,
        speed_for: Callable[[Job], Speed | None] | None = None) -> FitResult:
    """`speed`: projected tokens/s/GPU of a layout of this job; `speed_for`: the same for a variant of
    the job (an option fix), so option fixes are completed and ranked like axis changes."""
    job = question.job
    hard_ids = tuple(r.id for r, _ in question.ruleset.hard())
    free = meaningful_free_axes(question)
    mm = MemoryModel(job)
    best = question.most_headroom()
    if best is not None:
        proof = mm.evaluate(best.layout, strict=False)
        said = _normalised(question, best.layout)
        return FitResult(True, best.layout, proof, satisfied_rules=hard_ids, completed_axes=free, notes=said,
                         assumptions=(*said, *proof.assumptions))
    asker = Asker(question)
    details: dict[str, str] = {}
    contradiction = pins_core(asker)
    if contradiction:  # the pins contradict a definition before any rule or byte is read
        details = broken_definitions(question, contradiction)
        core = (*details, *contradiction)
    else:
        core = explain_structural(asker, minimal_core(asker))
    further = further_cores(asker, core) if not contradiction else ()
    notes: list[str] = []
    if certify_core and core:
        certified = certify(question, tuple(n for n in core if n.startswith("pin:") or n in asker.names))
        notes.append("core certified by CP-SAT (INFEASIBLE under its assumption literals)" if certified
                     else "CP-SAT did NOT confirm this core")
    found = closest_request(asker, core)
    request = found[0].layout(found[1]) if found is not None else None
    request_breaks = found[2] if found is not None else ()
    report = mm.evaluate(request, strict=False) if request is not None else None
    capacity = question.space.reserves.capacity_bytes
    fixes = option_fixes(question, core, speed_for)
    alternatives = nearest_alternatives(asker, fixes, capacity, speed, speed_for)
    min_gpus: int | None = None
    below: int | None = None
    note: str | None = None
    searched = not alternatives or not question.pins  # a free job's only fixes are options: sizes too
    if searched:
        min_gpus, note = smallest_size(question)
        below = largest_size_below(question)
    said = _normalised(question, request) if request is not None else ()
    return FitResult(False, request, report, request_breaks=request_breaks, violated_rules=core, further_cores=further,
                     gpus_per_node=job.cluster.gpus_per_node,
                     alternatives=alternatives, completed_axes=free,
                     min_gpus=min_gpus, min_nodes_note=note, size_below=below, sizes_searched=searched,
                     notes=(*said, *notes), core_details=details,
                     assumptions=(*said, *(report.assumptions if report is not None
                                           else mm.layout_free_assumptions())))


def _normalised(question: Question, layout: Layout) -> tuple[str, ...]:
    """The pins the evaluated layout takes as Megatron-LM normalises them (`normalisation_notes`)."""
    return normalisation_notes(question.pins, layout.as_parallel(), question.job.model.name,
                               question.job.model.is_moe)


def nearest_alternatives(asker: Asker, fixes: list[Alternative], capacity: int, speed: Speed | None,
                         speed_for: Callable[[Job], Speed | None] | None = None) -> tuple[Alternative, ...]:
    """The option `fixes` and the nearest pin assignments' fastest completions, at most MAX_ALTERNATIVES
    in rank order (`rank_key`: tight fixes last, then fewest pins changed, then fastest). The
    SCORED_GROUPS nearest assignments are the candidates (only the first MAX_ALTERNATIVES without
    `speed`); a level of k changed pins is enumerated and scored only while the list has room for fixes
    that are not tight, since each of its fixes ranks after every such fix with fewer changes. The best
    fix that keeps every pin stays in the list even when tight (in the last place). A fix at PP 1 drops
    the job's pipeline options (`one_stage`), re-sized and re-projected (`speed_for`) without them."""
    pins, band = asker.q.pins, asker.q.space.reserves.tight_band_bytes
    chosen = [one_stage(asker.q.job, a, speed_for) for a in fixes]
    budget = MAX_ALTERNATIVES if speed is None else SCORED_GROUPS

    def roomy() -> int:  # a tight fix ranks after every roomy one, so only roomy fixes fill the list
        return sum(1 for a in chosen if not a.tight)

    levels = nearest_levels(asker)
    while budget > 0 and roomy() < MAX_ALTERNATIVES:
        level = next(levels, None)
        if level is None:
            break
        level = level[:budget]
        budget -= len(level)
        groups = [(rows, tuple(p[4:] for p in changed)) for rows, changed in level]
        found = fastest_groups(groups, MAX_ALTERNATIVES - roomy(), capacity, speed)
        chosen += [one_stage(asker.q.job, labelled(a, pins, PIN_AXES, band), speed_for) for a in found]
    ranked = sorted(chosen, key=rank_key)
    shown = ranked[:MAX_ALTERNATIVES]
    keeper = next((a for a in ranked if a.keeps_pins), None)
    if keeper is not None and keeper not in shown:  # a tight fix that keeps the user's layout stays in view
        shown = [*shown[:MAX_ALTERNATIVES - 1], keeper]
    return tuple(shown)


def one_stage(job: Job, a: Alternative, speed_for: Callable[[Job], Speed | None] | None) -> Alternative:
    """`a` as the job it describes at PP 1: no pipeline option survives on one stage
    (`primus.solver.options.unset_at_pp`), so a fix whose layout has PP 1 unsets every pipeline option
    the job (with the fix's own options) still sets, names each (`pipeline.X unset`), and is sized by the
    ledger and projected (`speed_for`, as `project` shows it) for the job with them unset: the bytes and
    the number of that job file. The layers sit as they did (one stage holds them all whatever the
    options), so the layout stays legal; above PP 1, and where nothing is left to unset, `a` as it is."""
    unset = unset_at_pp(apply_options(job, a.options), a.layout.pp)
    if not unset:
        return a
    options = {**a.options, **unset}
    variant = apply_options(job, options)
    peak = MemoryModel(variant).evaluate(a.layout, strict=False).peak_bytes
    tokens = a.tokens_per_s_per_gpu
    speed = speed_for(variant) if speed_for is not None and tokens is not None else None
    if speed is not None:
        tokens = getattr(speed, "final", speed)(a.layout, peak)
    return replace(a, peak_bytes=peak, headroom_bytes=a.headroom_bytes + a.peak_bytes - peak,
                   changed=(*a.changed, *unset), options=options, tokens_per_s_per_gpu=tokens)


def option_fixes(question: Question, core: tuple[str, ...],
                 speed_for: Callable[[Job], Speed | None] | None) -> list[Alternative]:
    """Job options under which the pinned axes become legal (see `primus.solver.options`): pipeline
    split options when the refusal involves the pipeline split or memory and PP is pinned above 1, or
    the pipeline split and PP is pinned to 1 (every pipeline option unset: none means anything on one
    stage) or free (`free_pipeline_fixes`);
    partial full recompute (`recompute_num_layers` layers per virtual stage, Megatron's block method)
    when it involves memory and the pinned recompute is none or selective; PyTorch's expandable-segments
    allocator when it involves memory, the job's stack runs the default allocator on an NVIDIA device, and
    the evidence gives that allocator a smaller reserve (`stacks/allocators.yaml`; while the two figures are
    equal, switching gains no bytes and is not offered)."""
    pp = question.pins.get("pp")
    capacity = question.space.reserves.capacity_bytes
    out: list[Alternative] = []
    split_sets: list[dict[str, Any]] = []  # pipeline options that split the layers but do not fit alone
    if isinstance(pp, int) and ("pipeline-split" in core or (pp > 1 and "memory" in core)):
        vp = question.pins.get("vp")
        for options in pipeline_candidates(question.job, pp, [vp if isinstance(vp, int) else 1]):
            variant = question.with_job(apply_options(question.job, options))
            c = variant.candidates
            if c.n == 0:
                split_sets.append(options)
                continue
            out += _completed(variant.job, c, options, capacity, speed_for, question.pins)
    elif pp is None and "pipeline-split" in core:
        out += free_pipeline_fixes(question, capacity, speed_for)
    job = question.job
    if "memory" in core and not job.expandable_segments and job.cluster.accelerator.vendor in ALLOCATOR_FIX_VENDORS:
        variant = question.with_job(apply_options(job, EXPANDABLE_SEGMENTS))
        roomier = variant.space.reserves.capacity_bytes > capacity  # else switching gains no bytes
        if roomier and variant.candidates.n:  # the same layouts, against a smaller allocator reserve
            out += _completed(variant.job, variant.candidates, EXPANDABLE_SEGMENTS,
                              variant.space.reserves.capacity_bytes, speed_for, question.pins)
    if ("memory" in core and question.pins.get("recompute") in PARTIAL_RECOMPUTE_FROM
            and job.spec.parallel.recompute_modules is None):  # a chosen selective module set stays the user's
        for base in split_sets if "pipeline-split" in core else [{}]:
            fix = _recompute_fix(question, base, capacity, speed_for)
            if fix:
                out += fix
                break
    return out


def free_pipeline_fixes(question: Question, capacity: int,
                         speed_for: Callable[[Job], Speed | None] | None) -> list[Alternative]:
    """With PP free: for each pipeline size the job's options cannot split the layers over, but at which
    every other rule (memory included) holds for some layout when the split is set aside, the least
    intrusive pipeline option that splits them (`pipeline_candidates`), completed like a pinned PP's.
    Llama 3.1 8B on 96 GPUs at global batch 64 needs a factor 3 that only PP can hold, and 32 layers do
    not split over 3 stages evenly; first and last stages of 11 layers do. PP 1 is one of those sizes
    when the job sets first/last stage sizes or a layout string, and its fix unsets them all."""
    vp = question.pins.get("vp")
    vps = [vp if isinstance(vp, int) else 1]
    rules = [r for r in Asker(question).hard if r != "pipeline-split"]
    out: list[Alternative] = []
    for pp in question.space.pp_values:
        if question.space.split_pairs.get((pp, vps[0]), False):
            continue
        pinned = question.with_pins({**question.pins, "pp": pp})
        asker = Asker(pinned)
        if not asker.feasible([*rules, *(f"pin:{a}" for a in asker.pins)]):
            continue
        for options in pipeline_candidates(question.job, pp, vps):
            variant = question.with_job(apply_options(question.job, options)).with_pins(pinned.pins)
            c = variant.candidates
            if c.n:
                out += _completed(variant.job, c, options, capacity, speed_for, question.pins)
                break
    return out


def _completed(job: Job, c: Candidates, options: dict[str, Any], capacity: int,
               speed_for: Callable[[Job], Speed | None] | None, pins: dict[str, Any]) -> list[Alternative]:
    """An option fix: the fastest completion of `c`, the legal layouts of `job` (the job with the options
    set), or its least-memory one without a projection. Completions with room come first: a tight one
    (less headroom than the allocator's reserve) is taken only when no completion has room, since a
    tight fix ranks after every fix with room and the option itself is what the user asked about."""
    speed = speed_for(job) if speed_for is not None else None
    band = Space(job).reserves.tight_band_bytes  # the job with the options set: its own allocator's reserve
    roomy = capacity - c.cols["peak_bytes"] >= band
    if roomy.any():
        c = c.take(roomy)
    order = np.lexsort((np.arange(c.n), c.cols["peak_bytes"]))  # least memory first, as for axis changes
    return [labelled(a, pins, PIN_AXES, band)
            for a in fastest_groups([(c.take(order), tuple(options))], 1, capacity, speed, [options])]


def _recompute_fix(question: Question, base: dict[str, Any], capacity: int,
                   speed_for: Callable[[Job], Speed | None] | None) -> list[Alternative]:
    """The fewest layers per virtual stage that full recompute (block method) must re-run for the pinned
    layout (with the `base` options) to fit: one enumeration with `recompute_num_layers` searched, the
    least count kept, then its fastest completion. Nothing when no count fits."""
    searched = recompute_search_job(apply_options(question.job, base))
    variant = question.with_job(searched).with_pins({**question.pins, "recompute": "full"})
    c = variant.candidates
    counts = c.cols["recompute_num_layers"]
    c = c.take(counts < np.array([widest_chunk(searched, int(p), int(v)) for p, v in
                                  zip(c.cols["pp"], c.cols["vp"], strict=True)], dtype=np.int64))
    if c.n == 0:  # only recomputing every layer fits: that is full recompute, an axis change
        return []
    counts = c.cols["recompute_num_layers"]
    n = int(counts.min())
    options = {**base, **partial_recompute(n)}
    return _completed(apply_options(question.job, options), c.take(counts == n), options, capacity, speed_for,
                      question.pins)


def nodes_text(gpus: int, gpus_per_node: int) -> str:
    """A size in GPUs and in nodes: '16 GPUs (2 nodes of 8)', '2 GPUs (part of 1 node of 8)'."""
    nodes = -(-gpus // gpus_per_node)
    noun = "GPU" if gpus == 1 else "GPUs"
    if gpus % gpus_per_node:
        return f"{gpus:,} {noun} (part of 1 node of {gpus_per_node})"
    return f"{gpus:,} {noun} ({nodes:,} node{'s' if nodes > 1 else ''} of {gpus_per_node})"


def sizes_text(result: FitResult, gpus: int, gpn: int) -> str:
    """The nearest sizes at which a layout fits, below and above the job's, in GPUs and nodes."""
    here = f"no layout fits on {nodes_text(gpus, gpn)}"
    below, above = result.size_below, result.min_gpus
    if below is not None and above is not None:
        return (f"{here}; the nearest sizes at which one does: {nodes_text(below, gpn)} below, "
                f"{nodes_text(above, gpn)} above")
    if below is not None:
        return f"{here}; the nearest size at which one does: {nodes_text(below, gpn)} below; " + (
            result.min_nodes_note or "none above")
    if above is not None:
        return f"{here}; the smallest size at which one does: {nodes_text(above, gpn)}"
    return f"{here}; none smaller does either, and {result.min_nodes_note or 'no larger size was found'}"
