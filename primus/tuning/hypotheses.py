"""The deterministic hypothesis generator: what an expert would try next, read off the incumbent's
breakdown. Used when no LLM is configured, when it fails, and as a baseline the LLM must beat.

Each hypothesis is a rule in the rule language plus candidate layouts, tested exactly like an LLM's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from primus.parallel import Layout
from primus.tuning.space import Scored

# A breakdown term "dominates" when it holds at least this share of the step. A search trigger, not a
# model figure: it only decides which hypotheses are tried first.
DOMINANT_SHARE = 0.10


@dataclass(frozen=True)
class Idea:
    text: str
    predicted_effect: str
    rule_id: str
    require: str
    candidates: tuple[Layout, ...]


def _share(s: Scored, *names: str) -> float:
    return sum(s.breakdown.get(n, 0.0) for n in names) / s.step_time_s if s.step_time_s > 0 else 0.0


def ideas(incumbent: Scored, capacity_bytes: int, scaleup: int, tried: set[str]) -> list[Idea]:
    """Hypotheses for the incumbent, most promising first; ones already tried are skipped."""
    lay = incumbent.layout
    out: list[Idea] = []
    if _share(incumbent, "bubble") >= DOMINANT_SHARE and lay.pp > 1:
        out.append(Idea("the pipeline bubble dominates: fewer stages or more interleaving shrinks it",
                        "bubble share falls", "hyp-shallower-pipeline", f"pp < {lay.pp} or vp > {lay.vp}",
                        (replace(lay, vp=lay.vp * 2, schedule="interleaved"),)))
    if _share(incumbent, "tp_comm", "cp_comm") >= DOMINANT_SHARE and lay.tp * lay.cp > 1:
        out.append(Idea("tensor/context-parallel traffic dominates: smaller TP x CP groups exchange less per token",
                        "tp_comm share falls", "hyp-smaller-tp", f"tp * cp < {lay.tp * lay.cp}",
                        ()))
    if _share(incumbent, "ep_a2a") >= DOMINANT_SHARE:
        out.append(Idea("the expert all-to-all is exposed: keep EP x ETP inside the scale-up domain",
                        "ep_a2a share falls", "hyp-a2a-in-domain", f"ep * etp <= {scaleup}", ()))
    headroom = capacity_bytes - incumbent.peak_bytes
    if lay.recompute != "none" and headroom > 0.25 * capacity_bytes:
        out.append(Idea("memory headroom is unused: stop recomputing", "recompute time disappears",
                        "hyp-no-recompute", "recompute_none", (replace(lay, recompute="none"),)))
    if headroom > 0.25 * capacity_bytes:
        out.append(Idea("memory headroom is unused: larger micro-batches run more efficient GEMMs",
                        "GEMM efficiency rises, fewer microbatches", "hyp-larger-mbs", f"mbs > {lay.mbs}",
                        (replace(lay, mbs=lay.mbs * 2),)))
    if _share(incumbent, "dp_grad_reduce", "dp_param_gather", "fsdp_comm") >= DOMINANT_SHARE:
        out.append(Idea("data-parallel synchronisation is exposed: fewer, larger DP groups or deeper model "
                        "parallelism", "dp sync share falls", "hyp-less-dp", f"dp < {lay.dp}", ()))
    return [i for i in out if i.rule_id not in tried]
