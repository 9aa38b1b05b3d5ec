"""Which rules one complete layout breaks: the reason attached to every rejected proposal."""

from __future__ import annotations

from typing import Any

from primus.memory.evaluate import MemoryModel
from primus.parallel import RECOMPUTES, SHARDINGS, Layout, normalise
from primus.rules.expr import evaluate
from primus.solver.api import Question


def layout_values(question: Question, layout: Layout) -> dict[str, Any] | None:
    """Every name a rule may read, for one layout (None when the layout cannot be described: its
    sizes do not multiply to the world or the batch)."""
    s = question.space
    gbs = question.job.spec.global_batch_size
    if layout.world != s.world or gbs % (layout.mbs * layout.dp):
        return None
    if s.world % (layout.pp * layout.ep * layout.etp):
        return None
    report = MemoryModel(question.job).evaluate(layout, strict=False)
    split_ok = s.split_pairs.get((layout.pp, layout.vp))
    if split_ok is None:
        from primus.memory.shapes import split_layout

        split_ok = split_layout(question.job.model, question.job.pipeline_at(layout.pp, layout.vp), layout.pp,
                                layout.vp)[1]
    values: dict[str, Any] = {
        **s.facts, "tp": layout.tp, "pp": layout.pp, "vp": layout.vp, "cp": layout.cp, "ep": layout.ep,
        "etp": layout.etp, "dp": layout.dp, "edp": layout.edp, "mbs": layout.mbs,
        "num_microbatches": layout.num_microbatches(gbs), "sp": layout.sp,
        "recompute_num_layers": layout.recompute_num_layers or 0, "pipeline_split_ok": split_ok,
        "schedule_ok": True,
        **{f"recompute_{r}": r == layout.recompute for r in RECOMPUTES},
        **{f"sharding_{x}": x == layout.sharding for x in SHARDINGS},
        "peak_bytes": report.peak_bytes, "first_stage_bytes": report.stages[0].bytes,
        "last_stage_bytes": report.stages[-1].bytes,
    }
    for key in ("weights", "gradients", "optimizer", "activations", "other"):
        values[f"{key}_bytes"] = max(st.breakdown[key] for st in report.stages)
    return values


def violated_rules(question: Question, layout: Layout) -> list[str]:
    """Ids of the hard rules the layout breaks (definitions first); empty when it is legal."""
    layout = normalise(layout, is_moe=question.job.model.is_moe)
    s = question.space
    if layout.world != s.world:
        return ["world-size"]
    if s.world % (layout.pp * layout.ep * layout.etp):
        return ["moe-folding"]
    if question.job.spec.global_batch_size % (layout.mbs * layout.dp):
        return ["batch-divisible"]
    values = layout_values(question, layout)
    assert values is not None
    return [rule.id for rule, expr in question.ruleset.hard() if not evaluate(expr, values)]


def pinned_breaks(question: Question) -> dict[str, str]:
    """The hard rules the job's pinned layout breaks, memory aside (`primus memory` and `primus project`
    name them as `fit` does), each with the arithmetic or the rule's reason; empty when it is legal.

    Pins are read as `fit` reads them (`primus.solver.pins`): what Megatron-LM normalises (SP at TP 1)
    breaks nothing, what it refuses (VP 4 at PP 1, EP 2 for a dense model) breaks the rule that says so.
    Pins that contradict a definition name it with its arithmetic (`broken_definitions`)."""
    from primus.solver.core import broken_definitions
    from primus.solver.explain import Asker, closest_request, pins_core

    asker = Asker(question)
    contradiction = pins_core(asker)
    if contradiction:
        return broken_definitions(question, contradiction)
    found = closest_request(asker)
    breaks = found[2] if found is not None else ()
    out: dict[str, str] = {}
    for rid in breaks:
        rule = question.ruleset.by_id(rid)
        out[rid] = f"{rule.require}   ({rule.why or rule.origin})"
    return out
