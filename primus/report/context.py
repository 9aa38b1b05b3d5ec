"""What the report says, computed once from a run directory and handed to both templates.

Every number is formatted here, so `report.html` and `report.md` cannot disagree: the templates only
place strings. The ledger (per-stage memory) and the pipeline timeline of the best layout are
recomputed from the recorded inputs (they are not in result.json); everything else is read from
`result.json` and `audit.jsonl`.
"""

from __future__ import annotations

from typing import Any

from primus.fidelity.errorbars import range_text
from primus.memory.evaluate import MemoryModel
from primus.parallel import Layout, normalise
from primus.parallel import parallel_text as layout_text
from primus.projection import Projector
from primus.report import charts
from primus.report.pipeline import simulate, timeline_data
from primus.report.rundir import RunDir, layout_of
from primus.tuning.result import job_summary
from primus.tuning.variants import changes_text

GIB = 1024**3
WHO = {"built-in": "built-in", "job": "user (job file)", "user": "user (rule file)", "inline": "user (--rule)",
       "llm": "LLM"}


def gib(n: float | None) -> str:
    """Bytes as GiB with two decimals (the unit `primus memory` prints), or a dash for a missing value."""
    return "–" if n is None else f"{n / GIB:,.2f} GiB"


def num(x: float | None, digits: int = 0) -> str:
    """A number with thousands separators, or a dash for a missing value."""
    return "–" if x is None else f"{x:,.{digits}f}"


def _layout(parallel: dict[str, Any], is_moe: bool) -> Layout:
    return normalise(layout_of(parallel), is_moe=is_moe)


def build_context(run: RunDir) -> dict[str, Any]:
    """Everything both templates show, as strings (and the charts as SVG), in the report's order."""
    doc = run.result
    entries = run.entries
    job = run.job
    j = job_summary(job)  # the question from the recorded inputs, not result.json (audit verify compares them)
    memory = MemoryModel(job)
    capacity = memory.reserves.capacity_bytes
    legal = [e for e in entries if e.get("legal")]
    ctx: dict[str, Any] = {
        "title": f"primus tune: {j['model']} on {j['gpus']} × {j['hardware']}",
        "question": {
            "model": j["model"], "hardware": j["hardware"], "hardware_name": job.cluster.display_name or j["hardware"],
            "gpus": f"{j['gpus']:,}", "nodes": f"{j['nodes']:,}", "seq_len": f"{j['seq_len']:,}",
            "global_batch_size": f"{j['global_batch_size']:,}", "precision": j["precision"],
            "stack": j.get("stack", job.resolved_stack.label),
            "job_text": run.input_text("job.yaml").rstrip("\n"),
        },
        "mode": doc["mode"], "legal_count": f"{doc['legal_count']:,}", "scored_count": f"{doc['scored_count']:,}",
        "legal_after": f"{doc.get('legal_count_after_adopted_rules', doc['legal_count']):,}",
        "candidates_logged": f"{len(entries):,}", "illegal_logged": f"{len(entries) - len(legal):,}",
    }
    best = doc["best"]
    ctx["answer"] = _answer(doc, capacity) if best.get("parallel") else None
    ctx["variants"] = _variants(doc)
    change = precision_change_text(doc)
    ctx["fixed"] = (f"Sequence length and global batch are fixed; {change}."
                    if change else "Sequence length, global batch and precision are fixed: only the layout changes.")
    ctx["reference"] = _reference(doc)
    ctx["top"] = [{"rank": i + 1, "layout": layout_text(t["parallel"]), "tokens": num(t["tokens_per_s_per_gpu"]),
                   "step": num(t["step_time_s"], 3), "peak": gib(t["peak_bytes"]),
                   "headroom": gib(capacity - t["peak_bytes"]),
                   "mfu": num(t["mfu"] * 100, 1) if t.get("mfu") is not None else "–"}
                  for i, t in enumerate(doc.get("top", []))]
    ctx["why"] = [{"term": w["term"], "reference": num(w["reference_s"], 3), "best": num(w["best_s"], 3),
                   "delta": f"{w['delta_s']:+,.3f}"} for w in doc.get("why", []) if abs(w["delta_s"]) >= 5e-4]
    ctx["rules"] = _rules(run, entries)
    ctx["investigation"] = _investigation(doc, entries)
    ctx["stops"] = [e.get("reason", "") if e.get("kind") == "stop" else f"the LLM part early: {e.get('reason', '')}"
                    for e in doc.get("events", []) if e.get("kind") == "stop"
                    or (e.get("kind") == "llm" and e.get("status") == "stopped")]
    ctx["assumptions"] = list(doc.get("assumptions", []))
    ctx["proposers"] = _proposers(entries)
    ctx["llm"] = {"enabled": doc.get("llm", {}).get("enabled", False), "calls": doc.get("llm", {}).get("calls", 0),
                  "tokens": f"{doc.get('llm', {}).get('tokens', 0):,}", "files": run.llm_calls}
    ctx["audit"] = {"inputs": sorted(run.recorded_sums.items()),
                    "versions": sorted(run.versions.items())}
    ctx["charts"] = _charts(run, doc, entries, memory, capacity, ctx)
    return ctx


def precision_change_text(doc: dict[str, Any]) -> str | None:
    """What `--allow precision` did, one sentence (tune's stdout and the report): the precision requested
    and the one chosen, and each trial's best. FP8 changes the training's numerics, so a change is said in
    words. None without the record."""
    rec = (doc.get("allowed_changes") or {}).get("precision")
    if not isinstance(rec, dict):
        return None
    trials = ", ".join(f"{t.get('precision')} {num(t.get('tokens_per_s_per_gpu'))}"
                       for t in rec.get("per_precision", []) if isinstance(t, dict))
    requested, chosen = rec.get("requested"), rec.get("chosen")
    how = (f"precision changed by --allow precision: {requested} → {chosen} (numerics change)" if chosen != requested
           else f"precision kept by --allow precision: {chosen}")
    return f"{how}; best tokens/s/GPU of each precision tried: {trials or 'none'}"


def _tight(best: dict[str, Any]) -> str | None:
    """The tight verdict in `fit`'s words when result.json records one (docs/memory.md), else None."""
    band, short = best.get("allocator_reserve_bytes"), best.get("tight_by_bytes")
    if best.get("tight") is not True or not isinstance(band, int) or not isinstance(short, int):
        return None
    return f"headroom {gib(band - short)} is less than the allocator reserve {gib(band)}"


#: what a best layout over the usable capacity means: the memory rule the search ran with is not the
#: built-in one (`--without memory`, or a job or rule file that replaces it); review 49, M5
OVER_CAPACITY = "the run's rules allow it, not the built-in memory rule (removed or replaced)"


def _answer(doc: dict[str, Any], capacity: int) -> dict[str, Any]:
    best = doc["best"]
    pct = doc.get("uncertainty_pct")
    cert = doc.get("certificate")
    out = {
        "layout": layout_text(best["parallel"]), "parallel": _axes(best["parallel"]),
        "tokens": num(best["tokens_per_s_per_gpu"]), "pm": f" ± {pct:.0f}%" if pct is not None else "",
        "basis": doc.get("uncertainty_basis") or "",
        "range": range_text(best["tokens_per_s_per_gpu"], pct) if pct is not None else None,
        "step": num(best["step_time_s"], 3),
        "mfu": num(best["mfu"] * 100, 1), "tflops": num(best["model_tflops_per_gpu"], 0),
        "peak": gib(best["peak_bytes"]), "capacity": gib(capacity), "headroom": gib(capacity - best["peak_bytes"]),
        "over": (f"{gib(best['peak_bytes'] - capacity)} OVER the usable capacity of {gib(capacity)}: {OVER_CAPACITY}"
                 if best["peak_bytes"] > capacity else None),
        "speedup": f"{doc['speedup_vs_reference']:.2f}×" if "speedup_vs_reference" in doc else None,
        "certificate": None, "claim": _claim(doc), "tight": _tight(best),
    }
    if cert:
        margin = cert.get("margin_to_runner_up_pct")
        scope = cert.get("scope")
        out["certificate"] = (
            (f"under {scope}, all {cert['legal_layouts']:,} legal layouts were scored (exhaustive): none is "
             "projected faster" if scope else
             f"all {cert['legal_layouts']:,} legal layouts were scored (exhaustive): no legal layout is projected "
             "faster")
            + f". Margin to the runner-up {num(margin, 3)}%"
            + (f" against an error bar of {pct:.0f}%" if pct is not None else " (no error bar for this hardware)")
            + ("" if cert.get("margin_exceeds_error_bar") else "; the top of the ranking is within the projection's "
               "uncertainty")
            + ("; other pipeline options make faster layouts legal (below), outside this certificate"
               if cert.get("faster_with_changed_options") else ""))
    return out


def _variants(doc: dict[str, Any]) -> list[dict[str, str]]:
    """Layouts legal only under other pipeline options, projected faster than the best (a run directory
    written before tune looked for them has none)."""
    best_tokens = doc["best"].get("tokens_per_s_per_gpu")
    return [{"layout": layout_text(v["parallel"]), "changes": changes_text(v["options"]),
             "tokens": num(v["tokens_per_s_per_gpu"]), "peak": gib(v["peak_bytes"]),
             "times": f"{v['tokens_per_s_per_gpu'] / best_tokens:.2f}×" if best_tokens else "–"}
            for v in doc.get("faster_with_changed_options", [])]


def _claim(doc: dict[str, Any]) -> str | None:
    """A published claim of what tuning gains over this reference, beside the gain primus projects."""
    claim = doc["reference"].get("claim")
    if not claim:
        return None
    projected = doc.get("speedup_vs_reference")
    ours = "no projected gain (no legal reference)" if projected is None else \
        f"primus projects {100 * (projected - 1):+.0f}% for its best layout"
    return f"{claim['source']} claims {claim['gain_pct']:+g}% over this reference; {ours}"


def _axes(parallel: dict[str, Any]) -> list[tuple[str, str]]:
    """The layout's axes in Megatron's order, as table cells."""
    order = ("tp", "pp", "vp", "cp", "ep", "etp", "dp", "mbs", "sp", "recompute", "sharding", "recompute_num_layers")

    def cell(v: Any) -> str:
        return ("on" if v else "off") if isinstance(v, bool) else str(v)

    return [(k, cell(parallel[k])) for k in order if k in parallel]


def _core(violated: list[str]) -> str:
    """A minimal core in words: `fit` names the job's pins as `pin:<axis>` next to the rules they clash with."""
    pins = [v.removeprefix("pin:") for v in violated if v.startswith("pin:")]
    rules = [v for v in violated if not v.startswith("pin:")]
    if not pins:
        return ", ".join(rules)
    return f"the pins {', '.join(pins)} cannot all hold with the rule(s) {', '.join(rules) or '–'}"


def _reference(doc: dict[str, Any]) -> dict[str, Any]:
    """The reference as the report states it (and its nearest legal variant when it is illegal)."""
    ref = doc["reference"]
    near = ref.get("nearest_legal")
    return {
        "origin": ref.get("origin", ""), "layout": layout_text(ref.get("parallel")), "fits": ref.get("fits"),
        "tokens": num(ref.get("tokens_per_s_per_gpu")), "peak": gib(ref.get("peak_bytes")),
        "violated": _core(ref.get("violated_rules") or []), "none": ref.get("note"),
        "near": None if not near else {"layout": layout_text(near["parallel"]), "changed": ", ".join(near["changed"]),
                                       "tokens": num(near["tokens_per_s_per_gpu"]), "peak": gib(near["peak_bytes"])},
    }


def _rules(run: RunDir, entries: list[dict[str, Any]]) -> dict[str, Any]:
    cited: dict[str, int] = {}
    for e in entries:
        for rid in e.get("violated_rules", []):
            cited[rid] = cited.get(rid, 0) + 1
    rows = [{"id": r.id, "require": r.require, "severity": r.severity if r.severity == "hard" else f"soft ({r.weight})",
             "why": r.why, "source": r.source, "who": WHO.get(r.origin, r.origin), "cited": f"{cited.get(r.id, 0):,}"}
            for r in run.rules]
    who: dict[str, int] = {}
    for r in rows:
        who[r["who"]] = who.get(r["who"], 0) + 1
    adopted = []
    for e in run.result.get("events", []):
        if e.get("kind") == "rule" and e.get("status") == "adopted":
            by = "hypothesis generator" if e.get("proposer") == "hypothesis" else "LLM"
            adopted.append({"id": e["id"], "require": e["require"], "who": by, "detail": e.get("detail", "")})
    return {"rows": rows, "by_who": sorted(who.items()), "adopted": adopted}


def _outcome(e: dict[str, Any]) -> str:
    return f"{e.get('status', '')}: {e.get('detail') or e.get('reason') or ''}".rstrip(": ")


def _investigation(doc: dict[str, Any], entries: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Hypotheses, rules and candidates proposed during the search, in order, with their outcomes."""
    events = doc.get("events", [])
    rows: list[dict[str, str]] = []
    skip: set[int] = set()
    for k, e in enumerate(events):
        if k in skip:
            continue
        kind, rnd = e.get("kind"), str(e.get("round", ""))
        if kind == "hypothesis":
            outcome = ""
            nxt = events[k + 1] if k + 1 < len(events) else None
            if nxt is not None and nxt.get("kind") == "rule" and nxt.get("proposer") == "hypothesis":
                outcome = _outcome(nxt)
                skip.add(k + 1)
            rows.append({"round": rnd, "who": "hypothesis generator",
                         "what": f"{e.get('text', '')} (expected: {e.get('predicted_effect', '')}; rule "
                                 f"{e.get('rule', '')!r})", "outcome": outcome})
        elif kind == "rule":
            who = "hypothesis generator" if e.get("proposer") == "hypothesis" else "LLM"
            rows.append({"round": rnd, "who": who, "what": f"rule {e.get('id')}: {e.get('require')!r}",
                         "outcome": _outcome(e)})
        elif kind == "llm":
            status = e.get("status", "")
            what = "; ".join(e.get("hypotheses", [])) if status == "accepted" else (
                f"LLM call {e['call']}" if "call" in e else "LLM call")
            detail = (f"accepted: {e.get('rules', 0)} rule(s), {e.get('candidates', 0)} candidate(s)"
                      if status == "accepted" else f"{status}: {e.get('reason', '')}")
            rows.append({"round": rnd, "who": "LLM", "what": what or "(no hypotheses)", "outcome": detail})
        elif kind == "candidate":
            rows.append({"round": rnd, "who": str(e.get("proposer", "")).replace("llm", "LLM"),
                         "what": f"candidate {layout_text(e.get('parallel'))}", "outcome": _outcome(e)})
    for e in entries:
        if e.get("proposer") in ("llm", "hypothesis"):
            who = "LLM" if e["proposer"] == "llm" else "hypothesis generator"
            outcome = (f"{num(e['tokens_per_s_per_gpu'])} tokens/s/GPU" if e.get("legal")
                       else "illegal: breaks " + ", ".join(e.get("violated_rules", [])))
            rows.append({"round": str(e.get("round", "")), "who": who,
                         "what": f"candidate {layout_text(e['parallel'])} (seq {e['seq']})", "outcome": outcome})
    return rows


def _proposers(entries: list[dict[str, Any]]) -> list[dict[str, str]]:
    by: dict[str, list[int]] = {}
    for e in entries:
        name = str(e.get("proposer", "")).split(":")[0]
        counts = by.setdefault(name, [0, 0])
        counts[0 if e.get("legal") else 1] += 1
    return [{"proposer": k, "scored": f"{v[0]:,}", "illegal": f"{v[1]:,}"} for k, v in sorted(by.items())]


def _charts(run: RunDir, doc: dict[str, Any], entries: list[dict[str, Any]], memory: MemoryModel, capacity: int,
            ctx: dict[str, Any]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    best = doc["best"]
    is_moe = run.job.model.is_moe
    if best.get("parallel"):
        layout = _layout(best["parallel"], is_moe)
        report = memory.evaluate(layout, strict=False)
        stages = [(f"stage {s.stage}", {k: int(v) for k, v in s.breakdown.items()}) for s in report.stages]
        ctx["stages"] = [{"stage": str(s.stage), **{k: gib(s.breakdown[k]) for k, _ in charts.MEMORY_KINDS},
                          "total": gib(s.bytes)} for s in report.stages]
        side = "OVER" if report.peak_bytes > capacity else "under"
        out["memory"] = {"svg": charts.memory_chart(stages, capacity, memory.reserves.hbm_bytes),
                         "caption": f"Per-stage bytes of the best layout at each stage's peak; the largest, "
                                    f"{gib(report.peak_bytes)}, is {side} the capacity of {gib(capacity)} (HBM "
                                    f"{gib(memory.reserves.hbm_bytes)} less the runtime and fragmentation reserves)."}
        p, timing = simulate(Projector(run.job, run.profile), layout, (best["peak_bytes"], True))
        svg = charts.timeline_chart(timeline_data(timing, p.step_time_s), layout_text(best["parallel"]))
        out["timeline"] = {"svg": svg,
                           "caption": f"One step of the best layout as the projection's discrete-event simulation "
                                      f"times it: {p.num_microbatches} microbatches through PP {layout.pp} × VP "
                                      f"{layout.vp}; step {p.step_time_s:.3f} s."}
    legal = [e for e in entries if e.get("legal")]
    points = [((capacity - e["peak_bytes"]) / GIB, float(e["tokens_per_s_per_gpu"])) for e in legal]

    def tip(i: int) -> str:
        e = legal[i]
        return f"{layout_text(e['parallel'])}: {num(e['tokens_per_s_per_gpu'])} tokens/s/GPU (seq {e['seq']})"

    out["scatter"] = {"svg": charts.scatter_chart(points, _marks(doc, legal, capacity), tip),
                      "caption": "Each scored candidate's fast projection against its memory headroom (capacity less "
                                 "the ledger's peak). The best and the reference are marked at the same fast "
                                 "projection, which the headline numbers refine by simulation."}
    steps, markers = _progress(doc, entries)
    out["progress"] = {"svg": charts.progress_chart(steps, len(legal), markers),
                       "caption": f"Best projected throughput after each candidate scored ({doc['mode']} search)."}
    return out


def _marks(doc: dict[str, Any], legal: list[dict[str, Any]], capacity: int) -> list[charts.Mark]:
    """The best, the reference (or its nearest legal variant) and the proposals, at their logged fast
    projection when the log has them."""
    marks = []
    for e in legal:
        if e["proposer"] in ("llm", "hypothesis"):
            marks.append(charts.Mark((capacity - e["peak_bytes"]) / GIB, float(e["tokens_per_s_per_gpu"]),
                                     e["proposer"], f"{e['proposer']} proposal: {layout_text(e['parallel'])}"))
    ref = doc["reference"]
    target: dict[str, Any] | None = ref if ref.get("fits") else ref.get("nearest_legal")
    label = "reference" if ref.get("fits") else "reference's nearest legal variant"
    for what, kind, name in ((target, "reference", label), (doc["best"], "best", "best")):
        if what is not None and what.get("parallel"):
            hit = next((e for e in legal if e["parallel"] == what["parallel"]), None)
            src = hit if hit is not None else what
            marks.append(charts.Mark((capacity - src["peak_bytes"]) / GIB, float(src["tokens_per_s_per_gpu"]), kind,
                                     f"{name}: {layout_text(what['parallel'])}"))
    return marks


def _progress(doc: dict[str, Any], entries: list[dict[str, Any]]
              ) -> tuple[list[tuple[int, float]], list[tuple[int, str]]]:
    """The best-so-far steps (candidates scored, tokens/s/GPU) and the investigations' positions."""
    steps: list[tuple[int, float]] = []
    scored_before = [0]
    best = 0.0
    for e in entries:
        n = scored_before[-1] + (1 if e.get("legal") else 0)
        scored_before.append(n)
        if e.get("legal") and e["tokens_per_s_per_gpu"] > best:
            best = e["tokens_per_s_per_gpu"]
            steps.append((n, best))
    markers: list[tuple[int, str]] = []
    for e in doc.get("events", []):
        kind = e.get("kind")
        label = "hypotheses" if kind == "hypothesis" else "LLM" if kind == "llm" and e.get("status") != "off" else None
        seq = e.get("seq")
        if label and isinstance(seq, int) and 0 <= seq < len(scored_before):
            mark = (scored_before[seq], label)
            if mark not in markers:
                markers.append(mark)
    return steps, markers


__all__ = ["build_context", "gib", "layout_text", "num"]
