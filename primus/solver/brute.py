"""A plain-Python brute force over the same rules: the reference the fast engines are measured against.

It walks the product of axis values one layout at a time, evaluates each rule with the scalar
interpreter and the scalar ledger, and keeps what passes. Slow by design; used by tests (agreement on
small spaces) and by `benchmarks/bench_enumerate.py` (the speed-up of the vectorised engine).
"""

from __future__ import annotations

import itertools
from typing import Any

from primus.memory.evaluate import MemoryModel
from primus.parallel import RECOMPUTES, SHARDINGS, Layout, normalise
from primus.rules.expr import evaluate, names
from primus.solver.api import Question
from primus.solver.pins import PIN_AXES
from primus.solver.space import MEMORY_DOCS


def brute_force(question: Question) -> list[tuple[Layout, int]]:
    s = question.space
    job = question.job
    gbs = job.spec.global_batch_size
    mm = MemoryModel(job)
    hard = question.ruleset.hard()
    structural = [(r, e) for r, e in hard if not (names(e) & set(MEMORY_DOCS))]
    memory_rules = [(r, e) for r, e in hard if names(e) & set(MEMORY_DOCS)]
    out: list[tuple[Layout, int]] = []
    for tp, cp, pp in itertools.product(s.tp_values, s.cp_values, s.pp_values):
        if s.world % (tp * cp * pp):
            continue
        dp = s.world // (tp * cp * pp)
        for (p, vp), split_ok in s.split_pairs.items():
            if p != pp:
                continue
            n_values = s.recompute_layer_values_at(pp, vp)
            for ep, etp in itertools.product(s.ep_values, s.etp_values):
                if s.world % (pp * ep * etp):
                    continue
                edp = s.world // (pp * ep * etp)
                for mbs in s.mbs_values:
                    if gbs % (mbs * dp):
                        continue
                    m = gbs // (mbs * dp)
                    for sp in (False, True):
                        if sp and tp == 1:
                            continue
                        for rec in RECOMPUTES:
                            for n in (n_values if (rec == "full" and n_values) else [0]):
                                for sharding in SHARDINGS:
                                    layout = Layout(tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=etp, dp=dp, mbs=mbs,
                                                    sp=sp, recompute=rec, sharding=sharding,
                                                    recompute_num_layers=n or None)
                                    values: dict[str, Any] = {
                                        **s.facts, "tp": tp, "pp": pp, "vp": vp, "cp": cp, "ep": ep, "etp": etp,
                                        "dp": dp, "edp": edp, "mbs": mbs, "num_microbatches": m, "sp": sp,
                                        "recompute_num_layers": n, "pipeline_split_ok": split_ok,
                                        **{f"recompute_{r}": r == rec for r in RECOMPUTES},
                                        **{f"sharding_{x}": x == sharding for x in SHARDINGS},
                                    }
                                    if not _pins_ok(question, layout):
                                        continue
                                    if not all(evaluate(e, values) for _, e in structural):
                                        continue
                                    report = mm.evaluate(layout, strict=False)
                                    values.update(_memory_values(report))
                                    if all(evaluate(e, values) for _, e in memory_rules):
                                        out.append((normalise(layout, is_moe=job.model.is_moe), report.peak_bytes))
    out.sort(key=lambda item: item[0].key())
    return out


def _memory_values(report: Any) -> dict[str, int]:
    values = {"peak_bytes": report.peak_bytes, "first_stage_bytes": report.stages[0].bytes,
              "last_stage_bytes": report.stages[-1].bytes}
    for key in ("weights", "gradients", "optimizer", "activations", "other"):
        values[f"{key}_bytes"] = max(st.breakdown[key] for st in report.stages)
    return values


def _pins_ok(question: Question, layout: Layout) -> bool:
    got = layout.as_parallel()
    for axis in PIN_AXES:
        if axis not in question.pins:
            continue
        want = question.pins[axis]
        if axis == "etp" and not question.job.model.is_moe:
            continue
        if axis == "sp" and want and layout.tp == 1:
            continue
        if axis == "sharding" and want == "zero1":
            want = "dist_opt"
        if axis == "recompute_num_layers" and layout.recompute != "full":
            continue
        if got.get(axis) != want:
            return False
    return True
