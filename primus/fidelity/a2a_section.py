"""The docs/accuracy.md section on the MoE all-to-all overlap that Megatron-Bridge's workload presets set.

Issue 19 asks for the tail modelled per stack release from sources, with the per-group table before and
after. Until this release the Megatron-Bridge presets' `moe_a2a_overlap` was read but listed as not
modelled, so every Megatron-Bridge MoE row was projected with the all-to-all exposed; the stack recipes
now carry it (`RecipeSettings.moe_a2a_overlap`, written by benchmarks/bridge_recipes.py) and `validate`
turns on `overlap.moe_a2a` for the rows whose preset sets it. The figures before are those of the previous
docs/accuracy.md (commit c07c15e), kept here as history; the figures after are computed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from primus.fidelity.accuracy_sections import _f, _wrap
from primus.fidelity.heldout_bridge import heldout_figures
from primus.fidelity.validate import ValidationReport
from primus.stacks.core import resolve_stack

#: the previous page's figures (docs/accuracy.md at c07c15e): dev in-sample, leave-one-source-out, coverage,
#: held-out median / p90
BEFORE_FIGURES = {"dev median": 4.3, "dev p90": 18.7, "dev LOSO median": 6.0, "dev LOSO p90": 24.4,
                  "dev LOSO coverage": 64.9, "held-out median": 12.6, "held-out p90": 57.6}
#: the previous page's dev table by accelerator (median |error| %, p90 %)
BEFORE_DEV_ACCELERATOR = {"a100-80gb": (3.5, 11.5), "b200": (43.4, 122.2), "gb200": (9.2, 25.6),
                          "gb300": (10.4, 25.0), "h100-80gb": (3.7, 14.4), "h100-96gb-500w": (9.1, 13.8),
                          "h200": (3.4, 4.3)}
#: the previous page's held-out table by model (median |error| %, p90 %)
BEFORE_HELDOUT_MODEL = {"deepseek-v3": (10.5, 29.3), "gpt-oss-120b": (59.2, 88.8), "kimi-k2": (10.8, 16.4),
                        "llama3-70b": (6.6, 34.2), "llama3-8b": (11.7, 13.9), "llama3.1-405b": (10.6, 25.2),
                        "qwen3-235b-a22b": (15.3, 38.7), "qwen3-30b-a3b": (17.9, 29.5)}

TEXT = (
    "Megatron-Bridge's workload presets turn on the MoE all-to-all overlap per model, GPU and precision "
    "(`moe_a2a_overlap=True`, which the preset scripts turn into comm_overlap.overlap_moe_expert_parallel_comm "
    "with delay_wgrad_compute: v0.2.0 scripts/performance/utils/helpers.py set_moe_a2a_overlap_overrides, "
    "v0.3.0 to v0.5.1 overrides.py _set_moe_a2a_overlap_overrides; v0.6.0's perf_recipes set it directly). "
    "The release a preset first sets it in matters: Qwen3-30B-A3B on GB300 in MXFP8 is "
    "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB300_FP8_CS_V1 without it in v0.3.0 and v0.4.0 and adds it (with full-iteration "
    "CUDA graphs, the CuTe DSL fused grouped MLP and FP8 attention) in v0.5.0, and the tables measure 31,470 "
    "tokens/s/GPU in 26.04 and 45,275 in 26.06. Until this release primus read the flag and listed it as not "
    "modelled, so every Megatron-Bridge MoE row was projected with its all-to-all exposed and the fitted "
    "all-to-all efficiencies absorbed the difference. The stack recipes now carry it "
    "(`moe_a2a_overlap` in stacks/megatron-bridge.yaml, {n} recipe entries), `validate` turns on "
    "`overlap.moe_a2a` for a row whose preset sets it, and the profiles were refitted, with the share of the "
    "all-to-all the overlap hides (overlap.moe_a2a, a starting guess of 0.6 until now) a parameter group of its own "
    "where at least three runs overlap (primus.fidelity.calibrate: H100 only). What else those presets "
    "set (CUDA graphs, fused grouped MLP, FP8 attention) stays named and unmodelled; the HybridEP/DeepEP "
    "backends are read as the dispatcher each run used (next section)."
)


def snapshot_rows(snaps: Sequence[Mapping[str, tuple[float, float]]],
                  now: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Table rows of (median, p90) |error| per key: each earlier page's figures, then now's."""
    out = []
    for key in sorted(set(now).union(*snaps)):
        cur = now.get(key, {})
        meds = [_f(s[key][0]) if key in s else "-" for s in snaps] + [_f(cur.get("median_abs_pct"))]
        p90s = [_f(s[key][1]) if key in s else "-" for s in snaps] + [_f(cur.get("p90_abs_pct"))]
        out.append(f"| {key} | {' | '.join(meds)} | {' | '.join(p90s)} |")
    return out


def _pair_rows(before: Mapping[str, tuple[float, float]], after: Mapping[str, Mapping[str, Any]]) -> list[str]:
    return snapshot_rows([before], after)


def headline_figures(report: ValidationReport, bars: Mapping[str, Any],
                     held: Mapping[str, Any] | None) -> dict[str, Any]:
    """The figures a before/after section compares: dev in-sample, leave-one-source-out, coverage, held-out."""
    t = report.summary["tokens_per_s_per_gpu"]
    loso = bars.get("loso", {}).get("overall", {})
    cover = bars.get("coverage", {}).get("overall", {})
    return {"dev median": t["median_abs_pct"], "dev p90": t["p90_abs_pct"],
            "dev LOSO median": loso.get("median_abs_pct"), "dev LOSO p90": loso.get("p90_abs_pct"),
            "dev LOSO coverage": cover.get("pct"),
            "held-out median": held["median_abs_pct"] if held else None,
            "held-out p90": held["p90_abs_pct"] if held else None}


def a2a_overlap_section(report: ValidationReport, bars: Mapping[str, Any],
                        heldout: ValidationReport | None) -> list[str]:
    """Before and after figures of reading the presets' MoE all-to-all overlap."""
    held = heldout_figures(heldout) if heldout is not None else None
    after = headline_figures(report, bars, held)
    n = sum(1 for r in resolve_stack("megatron-bridge").recipes if r.settings.moe_a2a_overlap)
    lines = ["## MoE all-to-all overlap from the presets", "", *_wrap(TEXT.format(n=n), 110), "",
             "| figure (%) | before | after |", "|---|---:|---:|"]
    lines += [f"| {k} | {_f(v)} | {_f(after[k])} |" for k, v in BEFORE_FIGURES.items()]
    lines += ["", "Development set by accelerator (in-sample):", "",
              "| accelerator | median before | median after | p90 before | p90 after |", "|---|---:|---:|---:|---:|",
              *_pair_rows(BEFORE_DEV_ACCELERATOR, report.summary["by_accelerator"])]
    if held:
        lines += ["", "Held-out Megatron-Bridge rows by model:", "",
                  "| model | median before | median after | p90 before | p90 after |", "|---|---:|---:|---:|---:|",
                  *_pair_rows(BEFORE_HELDOUT_MODEL, held["models"])]
    lines += ["", *_wrap(
        "The rows it moves most are the 26.06 and later GB200/GB300 MXFP8 MoE presets, which set the overlap: "
        "DeepSeek-V3, Qwen3-235B-A22B and Qwen3-30B-A3B read 17-26% slow before and within about 13% after. "
        "gpt-oss-120b moves the other way: its GB200/GB300 presets set the overlap too, and its over-projection "
        "grows (section above); no gpt-oss term was added.", 110)]
    return lines
