"""Sections of docs/accuracy.md about error bars and AMD's published runs (`accuracy_doc.render`).

Error bars: each bar, what it rests on (runs, sources, widened or not) and its leave-one-source-out
coverage. AMD: the complete rows of `amd_runs_dev.csv` projected with the shipped (spec-derived) MI300X /
MI325X / MI355X profiles, reported apart from the development set, with the bar a spec-derived profile
carries and how many AMD rows it covers.
"""

from __future__ import annotations

import functools
import math
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from primus.fidelity.loso import AGGREGATES, SPLIT_MIN_RUNS, held_from_rows, is_large_group, out_of_band
from primus.fidelity.mbs_pairs import mbs_pairs
from primus.fidelity.stats import percentile
from primus.fidelity.validate import ValidationReport

#: Markdown joins wrapped lines with a space: a break at a hyphen would split a run id or a word.
_wrap = functools.partial(textwrap.wrap, break_on_hyphens=False)

#: AMD rows as issue 19 found them before this work (same file, same profiles): five of eleven complete
#: rows projected (DeepSeek-V2-Lite not in the catalog), the DeepSeek-V3 rows with every layer recomputed.
AMD_BEFORE = (("amdperf_mi325x_llama31_8b_fp8_8n", -9.3), ("moe2_mi355x_dsv3_32n_default", -29.5),
              ("moe2_mi355x_dsv3_32n_tuned", -31.3), ("moe2_qwen3_30b_best", -6.3), ("moe2_qwen3_30b_turbo", -11.5))
#: The release before the legacy grouped GEMM's BF16 experts (docs/accuracy.md of 2026-12-04, commit f8157f8):
#: all 11 rows projected, median |error| 11.5%.
AMD_GROUPED_GEMM_MEDIAN = 11.5
#: The release before MI355X's scale-up collectives took ROCm/cvs's expected bus bandwidths (docs/accuracy.md at
#: commit 1ad04b8): median |error| 11.1%.
AMD_PREVIOUS_MEDIAN = 11.1
#: |per-token slope error| under which the AMD section says a pair's per-token work is priced right: 5%, the
#: release-to-release drift of one configuration's throughput (ground_truth README, "the noise floor").
PER_TOKEN_AGREES_PCT = 5.0


def _f(x: Any, digits: int = 1, sign: bool = False) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _esc(text: str) -> str:
    return text.replace("|", "\\|")


_CONFLICTS = Path(__file__).resolve().parent / "data" / "data_conflicts.yaml"


def data_conflicts() -> dict[str, str]:
    """run_id -> evidence, for published rows flagged as conflicting with the rest of the data set."""
    raw = yaml.safe_load(_CONFLICTS.read_text(encoding="utf-8"))
    return {c["run_id"]: " ".join(c["evidence"].split()) for c in raw["conflicts"]}


def conflict_section(report: ValidationReport, bars: Mapping[str, Any]) -> list[str]:
    held = {h["run_id"]: h["error_pct"] for h in bars.get("held_out", [])}
    rows = {r.run_id: r for r in report.rows}
    lines = ["## Published-data conflicts", "",
             *_wrap("Rows whose measurement disagrees with the rest of the data set beyond what hardware or "
                            "settings explain (`primus/fidelity/data/data_conflicts.yaml`). They stay in every "
                            "figure on this page, the fits and the error bars included.", 110), "",
             "| run | error % | held-out error % | evidence |", "|---|---:|---:|---|"]
    for run_id, evidence in data_conflicts().items():
        r = rows.get(run_id)
        lines.append(f"| {_esc(run_id)} | {_f(r.error_pct if r else None, sign=True)} | "
                     f"{_f(held.get(run_id), sign=True)} | {_esc(evidence)} |")
    return lines


#: What the sources say runs for gpt-oss (issue 19 item 1): what is modelled, and what is not.
GPT_OSS_KERNELS = (
    "Attention (learnable sink logit per head, 128-token sliding window on every other layer, head dim 64) runs "
    "on cuDNN fused attention, not on a fallback: Megatron-Core passes softmax_type to Transformer Engine; TE's "
    "backend selection rules FlashAttention out for any non-vanilla softmax and keeps cuDNN's F16 "
    "arbitrary-seqlen kernel from cuDNN 9.13.1 (sliding window from 9.2), which every Megatron-Bridge container "
    "from 25.11 has (TE v2.12 dot_product_attention/utils.py lines 706-740, fused_attn.cpp lines 442-447); on "
    "Hopper and Blackwell TE prefers cuDNN for vanilla softmax too, so Qwen3 runs the same backend. No source "
    "says the sink path is slower, and attention is 3-10% of these rows' projected step.\n"
    "The experts are where gpt-oss differs. Its model provider sets biases on every projection, quick-GeGLU "
    "clamped at 7 (`activation_func_clamp_value`) and bias_activation_fusion (Megatron-Bridge v0.3.0 "
    "gpt_oss_provider.py lines 51, 79-84; v0.4.0 gpt_oss_bridge.py lines 62, 73, 82-84), so in every release "
    "from 25.11 to 26.06 Megatron-Core's TEGroupedMLP (core_v0.15-core_v0.18: the same code) does eager work "
    "around its fused kernels that Qwen3's SwiGLU experts do not: fused_bias_geglu.py "
    "`weighted_bias_quick_geglu_impl` (lines 410-442) chunks the 2f-wide FC1 output, clamps both halves and "
    "concatenates them before the compiled GLU, in forward and backward, and keeps the concatenated copy for "
    "backward; `TEGroupedMLP._apply_bias` (core_v0.16.0 experts.py lines 608-626) adds the FC2 biases in a Python "
    "loop over the local experts (`t + b * p` per expert, then a cat), in fp32 when the flex dispatcher's "
    "probabilities are fp32 (token_dispatcher.py lines 1028-1034), with two kernels per expert forward and four "
    "backward. Both are now priced (`primus.projection.ops._megatron_expert_extras`, memory-bound bytes and host "
    "launches; the ledger keeps the clamped copy unless `moe_act` is recomputed). Megatron-Bridge 26.06 and later "
    "build the MXFP8 experts of their GB200/GB300 presets from Transformer Engine's fused ops instead "
    "(`cutedsl_fused_grouped_mlp`: Megatron-Core core_v0.18.0 experts.py lines 268-524, TE v2.16 "
    "ops/fused/forward_grouped_mlp.py: one cuDNN CuTe-DSL grouped GEMM with the clamped GLU and the biases "
    "inside, MXFP8 on compute capability 10.x only, expert TP 1); the stack's recipes read it as "
    "`moe.grouped_gemm: te_fused`, which pays none of that eager work and no GLU kernel of its own (it runs in "
    "the FC1 grouped GEMM's epilogue). Effect, against the commit before (76697e8, kin rule only): held-out "
    "gpt-oss rows median |error| 58.3% to 41.3%, the held-out p90 58.3% to 41.3% (median 8.8% to 9.2%: the "
    "refit moved other rows); dev MB25.11 H100 +15.2% to -11.0%, MB25.11 B200 +86.6% to +75.5%; the 26.06 "
    "MXFP8 dev rows, which run the fused experts, +38.1%/+41.4% to +44.5%/+46.8% (the fused GLU is faster).\n"
    "Two more terms from the same sources are priced now (before: 3050f03). gpt-oss's RoPE is YaRN-scaled "
    "(catalog and HF `rope_scaling`: position_embedding_type yarn, yarn_rotary_scaling_factor 32), and Megatron "
    "runs its fused RoPE kernel for position embedding type 'rope' only: Megatron-LM arguments.py (core_v0.15.0 "
    "lines 1004-1005) and Megatron-Bridge `validate_rope_fusion_compatibility` (gpt_provider.py `provide`, "
    "v0.2.0 to v0.6.0) turn apply_rope_fusion off for any other type, and Megatron-LM's own gpt-oss example "
    "(examples/gptoss/02_train.sh) passes --no-rope-fusion. Megatron-Core's eager `_apply_rotary_pos_emb_bshd` "
    "(rope_utils.py lines 92-126) then moves 6 times the fused kernel's bytes forward and 7 times backward "
    "on q and k (`primus.projection.ops.rotary_op`; `kernels.rope_fusion` states --no-rope-fusion for any "
    "model). And `weighted_bias_quick_geglu_impl` builds `torch.tensor(linear_offset, device=...)` on every call "
    "(fused_bias_geglu.py line 434, core_v0.15.0 to core_v0.18.0), a blocking copy: PyTorch synchronises the "
    "stream for a host-to-device copy that is not non_blocking (aten/src/ATen/native/cuda/Copy.cu "
    "`copy_kernel_cuda`, `memcpy_and_sync`; pytorch/pytorch issues 120996 and 190217), so TEGroupedMLP's clamped "
    "GLU costs one more host round trip (`host.moe_layer_us`) per MoE layer forward, and one per recompute of "
    "`moe_act`. The fused grouped MLP (te_fused) pays neither the round trip nor the GLU's eager work. Effect: "
    "held-out gpt-oss median |error| 41.3% to 35.1%, held-out median 9.2% to 8.5% and p90 41.3% to 35.6%; dev "
    "MB26.06 GB300/GB200 MXFP8 +44.5%/+46.8% to +36.7%/+39.9%, MB25.11 B200 +75.5% to +70.6%, MB25.11 H100 "
    "-11.0% to -16.2%. The attention output bias's unfused bias-dropout-add (Megatron-Bridge GPTOSSProvider "
    "bias_dropout_fusion False) is left out: two more passes over the hidden state forward (dropout at p 0 is no "
    "kernel), about 0.1% of a step. Together with the priced terms, a source-only estimate put all of it near "
    "8-10% of a GB300 step, so most of the remaining +35% to +70% is still unexplained: head-dim-64 attention "
    "efficiency and the BF16 grouped-GEMM rate at widths 2880/5760 have no published figure (that cuDNN skips the "
    "tiles outside a sliding window, as the projection assumes, is what cudnn-frontend pull request 505 measures "
    "for cuDNN's SM120 backward: window 511 in 31% of the causal time at sequence 4096, head dim 64, where the "
    "band holds 23% of the causal keys). No per-model factor was fitted. NVIDIA's own model TFLOP/s for "
    "gpt-oss undercount the "
    "expert FFN through 26.04.01 (flop_utils.py applied the GLU's 3/2 only to SiLU; v0.5.0 line 443 fixed it), "
    "so those figures are not comparable across releases; primus compares tokens/s/GPU. How fast the "
    "memory-bound kernels above run is the next section's subject."
)


def gpt_oss_section() -> list[str]:
    out = ["## gpt-oss: which kernels run", ""]
    for i, para in enumerate(GPT_OSS_KERNELS.split("\n")):
        out += ([""] if i else []) + _wrap(para, 110)
    return out


def _precision_split_lines(split: Mapping[str, Any] | None) -> list[str]:
    """What splitting the bars by precision family (where a group has enough sources) does to coverage."""
    if not split:
        return []
    bars = ", ".join(f"{k} ±{_f(v)}%" for k, v in split.get("bars", {}).items()) or "none"
    misses = ", ".join(f"{k} {_f(v)}%" for k, v in split.get("misses", {}).items())
    cov = split.get("coverage", {}).get("overall", {})
    verdict = ("every group of 10 or more runs stays in 60-80%, so the split bars are used for a job that states "
               "its precision" if split.get("ships") else
               f"it leaves {misses} outside 60-80%, so the bars are not split by precision")
    return ["", *_wrap(
        "Split by precision family (16-bit; FP8/FP4) where an accelerator x kind x family group has held-out runs "
        f"from at least 3 sources ({bars}), with the family groups counted as coverage groups of their own: "
        f"overall coverage {_f(cov.get('pct'))}%; {verdict}.", 110)]


def errorbar_section(bars: Mapping[str, Any]) -> list[str]:
    q = bars.get("quantile", 68)
    lines = [
        "## Error bars",
        "",
        *_wrap(
            "`primus.fidelity.error_bar(hardware, is_moe)` (shown by `primus project`, `primus enumerate --rank` and "
            f"as `error_bar_pct` on every `primus validate` row): the {q:.0f}th percentile of |held-out error| per "
            "accelerator and dense/MoE, so that the bars cover about two runs in three of a source they never saw "
            "(the coverage below measures it). A new source is what a user is, and runs of one source err alike, "
            "so runs are weighted by their source's design effect (Kish): a source of n runs whose errors "
            "correlate at rho carries the evidence of n / (1 + (n - 1) rho) independent runs, each run weighing "
            "1 / (1 + (n - 1) rho). rho is not chosen but estimated from the held-out errors the bars are derived "
            "from, as the intraclass correlation ICC(1) of |error| by source (one-way analysis of variance; "
            f"{_f(bars.get('source_correlation'), digits=3)} on all of them): at 1 every source would count as one "
            "run, at 0 every run alike. (Weighting every source equally, rho = 1, let one BLOOM run outweigh "
            "Korthikanti's seven agreeing A100 runs and held the A100 dense bar at BLOOM's +22%, covering 94% of "
            "MosaicML's held-out runs.) A group whose held-out runs come from fewer than 3 "
            "sources is widened to the pooled bar of its kind (never narrowed by it). An accelerator with no "
            "runs of its own whose profile carries a same-die sibling's factors gets the bar of the held-out runs "
            "that sibling's factors predicted, of its kind (widened alike; the `transferred` row below pools every "
            "sibling); with none, the widest bar below for its kind. Accelerators without a fitted or transferred "
            "profile (AMD's) get the spec-derived bar: the same percentile of the uncalibrated projection's error "
            "over every complete run. The bar follows the profile a projection used: `--profile` with a "
            "spec-derived profile gets the spec-derived bar; a calibration of the user's own or a measured profile, "
            "which no held-out run measures, gets the widest bar with evidence behind it for its accelerator and "
            "kind, and its basis says so.", 110),
        *_precision_split_lines(bars.get("precision_split")),
        "",
        "| accelerator | kind | ± % | runs | sources | note |",
        "|---|---|---:|---:|---:|---|",
    ]
    for acc, kinds in bars.get("accelerators", {}).items():
        for kind, e in kinds.items():
            note = f"widened (own: ±{_f(e.get('own_pct'))}%)" if e.get("widened") else ""
            lines.append(f"| {acc} | {kind} | {_f(e['pct'])} | {e['n']} | {e.get('sources', '-')} | {note} |")
    for kind, e in bars.get("pooled", {}).items():
        lines.append(f"| pooled (fitted) | {kind} | {_f(e['pct'])} | {e['n']} | {e.get('sources', '-')} | |")
    for kind, e in bars.get("transferred", {}).items():
        note = f"widened (own: ±{_f(e.get('own_pct'))}%)" if e.get("widened") else ""
        lines.append(f"| sibling's factors | {kind} | {_f(e['pct'])} | {e['n']} | {e.get('sources', '-')} | {note} |")
    for kind, e in bars.get("spec_derived", {}).items():
        lines.append(f"| spec-derived profiles | {kind} | {_f(e['pct'])} | {e['n']} | {e.get('sources', '-')} | |")
    cov = bars.get("coverage", {})
    if cov:
        lines += ["", "Coverage, leave one source out: for each source, the bars are derived from the other sources'",
                  "held-out errors, and its runs are counted inside or outside their own bar. Target: 60-80%.", "",
                  "| group | runs inside their bar | runs | coverage % |", "|---|---:|---:|---:|"]
        order = [*AGGREGATES, *sorted(k for k in cov if k not in AGGREGATES)]
        for key in order:
            c = cov.get(key)
            if c is None or not (key in AGGREGATES or is_large_group(key, c)):
                continue
            lines.append(f"| {key} | {c['inside']} | {c['n']} | {_f(c['pct'])} |")
        for g in out_of_band(held_from_rows(bars["held_out"]), q) if bars.get("held_out") else []:
            how = "too wide for these runs, never too narrow" if g["over"] else "too narrow"
            lines += ["", *_wrap(
                f"**{g['group']} is outside 60-80% ({_f(g['pct'])}%).** {g['source_runs']} of its {g['runs']} runs "
                f"come from {g['source']}; held out, they are judged by a ±{_f(g['bar_pct'])}% bar resting on "
                f"{g['bar_sources']} source(s), while their median |error| is {_f(g['median_abs_pct'])}%: the bar is "
                f"{how}. Not adjusted: a group's bar rests on the sources that remain, weighted as every bar is.", 110)]
        small = [k for k in cov if not (k in AGGREGATES or is_large_group(k, cov[k]))]
        if small:
            lines += ["", *_wrap(f"Groups with fewer than {SPLIT_MIN_RUNS} runs ({', '.join(sorted(small))}) "
                                         "are counted in the overall figure only: too few runs for a coverage of "
                                         "their own.", 110)]
    return lines


def _fit_check_lines(check: Mapping[str, Any] | None) -> list[str]:
    """The calibration check of `primus.fidelity.amd_fit` as a table and the rule's verdict."""
    if not check:
        return []
    lines = ["Calibration where the rows allow (`primus.fidelity.amd_fit`): each AMD accelerator with two or more",
             "complete rows is fitted to them (in-sample), and every source is predicted by a profile refitted without",
             "it (leave one source out); a fitted AMD profile ships only when that held-out error beats the",
             "spec-derived profile's on the same rows.", "",
             "| accelerator | runs | sources | spec-derived median % | fitted groups (in-sample) | in-sample median %"
             " |",
             "|---|---:|---:|---:|---|---:|"]
    for hw, e in check["accelerators"].items():
        groups = ", ".join(f"{k} ×{v:.2f}" for k, v in e.get("factors", {}).items()) or "too few rows to fit"
        lines.append(f"| {hw} | {e['runs']} | {e['sources']} | {_f(e['spec_median_abs_pct'])} | {groups} | "
                     f"{_f(e.get('in_sample_median_abs_pct'))} |")
    held, spec = check["held_out_summary"], check["spec_summary"]
    verdict = ("beats it: the fitted profiles ship" if held["median_abs_pct"] < spec["median_abs_pct"]
               else "does not beat it: the profiles stay spec-derived and say so")
    lines += ["", *_wrap(
        f"Leave one source out on these {held['n']} rows: median |error| {_f(held['median_abs_pct'])}%, p90 "
        f"{_f(held['p90_abs_pct'])}%, against {_f(spec['median_abs_pct'])}% and {_f(spec['p90_abs_pct'])}% for the "
        f"spec-derived profiles; the fit {verdict}. Held-out errors: "
        + ", ".join(f"{k} {_f(v, sign=True)}%" for k, v in check["held_out"].items()) + ".", 110,)]
    return lines


def amd_section(amd: ValidationReport | None, bars: Mapping[str, Any],
                fit_check: Mapping[str, Any] | None = None) -> list[str]:
    if amd is None:
        return []
    t = amd.summary["tokens_per_s_per_gpu"]
    mem = amd.summary["peak_memory"]
    spec = bars.get("spec_derived", {})
    inside = [r for r in amd.rows if r.error_bar_pct is not None and abs(r.error_pct) <= r.error_bar_pct]
    p_amd = percentile([abs(r.error_pct) for r in amd.rows], float(bars.get("quantile", 68)))
    lines = [
        "## AMD Instinct runs",
        "",
        f"`primus validate primus/fidelity/data/amd_runs_dev.csv`: the {amd.complete} complete rows of AMD's published",
        "runs (`../shared/ground_truth/amd_runs_dev.csv`; the shipped copy adds, to the one row that recomputes a",
        "listed set of layers, the layer ids its source's table gives, and to the two Qwen3-30B-A3B rows the settings",
        "of the script they ran, run_qwen_30B_a3B_pretrain_mi355x.sh at the draft's commit 38ac39ff). Reported apart",
        "from the development set. The MI300X, MI325X and MI355X profiles stay spec-derived (datasheet and",
        "kernel-benchmark values) unless a fit to these rows predicts a source it did not see better (below).",
        "",
        "| figure | value |",
        "|---|---|",
        f"| median \\|error\\| of tokens/s/GPU (target ≤ 10%) | {_f(t['median_abs_pct'])}% |",
        f"| p90 \\|error\\| | {_f(t['p90_abs_pct'])}% |",
        f"| mean signed error | {_f(t['mean_signed_pct'], sign=True)}% |",
        f"| rows projected | {amd.summary['projected_rows']}/{amd.complete} |",
        f"| peak memory median \\|error\\| ({mem['n']} rows with a measured peak) | {_f(mem['median_abs_pct'])}% |",
        f"| false out-of-memory verdicts | {amd.summary['false_oom']} |",
        f"| rows inside their (spec-derived) bar | {len(inside)}/{len(amd.rows)} |",
        f"| p{bars.get('quantile', 68):.0f} of \\|error\\| on these rows | {_f(p_amd)}% |",
        "",
        f"The spec-derived bar (± {_f(spec.get('dense', {}).get('pct'))}% dense, "
        f"± {_f(spec.get('moe', {}).get('pct'))}% MoE) is what `primus project` prints for AMD accelerators:",
        "it is as wide as the evidence for a profile written from datasheets, and the AMD rows' own spread is",
        "reported beside it.",
        "",
        *_wrap("Before this page's release (issue 19) the same file projected 5 of 11 complete rows: "
                       + ", ".join(f"{rid} {_f(e, sign=True)}%" for rid, e in AMD_BEFORE) + " (median 11.5%).", 110),
        "The DeepSeek-V3 rows then recomputed every layer; they now read the recipe's block recompute of one layer",
        "per virtual stage and its listed layer ids, its stated pipeline layouts, and its Primus options.",
        *_wrap("The previous release projected all 11 at median " + _f(AMD_PREVIOUS_MEDIAN) + "% with "
                       "MI355X's scale-up collectives at assumed fractions of its 537.6 GB/s (0.70 for the ring "
                       "collectives, 0.65 for all-to-all); they now take the rccl-tests bus bandwidths AMD's cluster "
                       "validation suite expects on one 8 x MI355X node at 8 GiB (ROCm/cvs e241bd47 "
                       "single_node_mi355_rccl.json: 390, 380, 400 and 340 GB/s for all-reduce, all-gather, "
                       "reduce-scatter and all-to-all, hardware/profiles/mi355x.yaml). The release before that, at "
                       "median " + _f(AMD_GROUPED_GEMM_MEDIAN) + "%, had DeepSeek-V3 at +10.6% and +10.7%: its "
                       "recipe's legacy grouped GEMM was timed in FP8; it runs the experts in BF16 (below).", 110,
                       break_on_hyphens=False),
        "",
        *_fit_check_lines(fit_check),
        "",
        "| run | model | accelerator | precision | predicted | measured | error % | ± bar % | peak GiB (pred / meas) |"
        " Primus options not modelled |",
        "|---|---|---|---|---:|---:|---:|---:|---|---|",
    ]
    for r in amd.rows:
        mem_txt = f"{r.predicted_peak_gib:.1f}" + (f" / {r.measured_peak_gib:.1f}" if r.measured_peak_gib else "")
        unmodelled = next((a.split(": ", 1)[1] for a in r.assumed if a.startswith("Primus options not modelled")), "")
        lines.append(f"| {_esc(r.run_id)} | {_esc(r.model)} | {r.accelerator} | {_esc(r.precision)} | "
                     f"{r.predicted:,.0f} | {r.measured:,.0f} | {_f(r.error_pct, sign=True)} | "
                     f"{_f(r.error_bar_pct)} | {mem_txt} | {_esc(unmodelled)} |")
    if amd.unprojected:
        lines += ["", "| run not projected | reason |", "|---|---|"]
        lines += [f"| {_esc(u.run_id)} | {_esc(u.reason)} |" for u in amd.unprojected]
    lines += [
        "",
        "Primus options are named, sourced settings (`primus/fidelity/data/primus_options.yaml`): loss fusion sets",
        "the fused cross-entropy, DeepEP the deduplicating (`flex`) dispatcher, the precision-aware optimizer bf16",
        "gradients and moments. `moe_use_legacy_grouped_gemm` sets `moe.grouped_gemm: legacy`: Megatron's",
        "GroupedMLP calls the grouped_gemm package's `gg.ops.gmm` on bf16 tensors and has no FP8 path (Megatron-Core",
        "core_v0.14.0 experts.py; Primus's zbpp_gemm.py calls it the BF16 backend), so under FP8 the expert GEMMs",
        "and their saved inputs stay BF16. Sync-free MoE stage 2 and above sets `moe.sync_free` (the token counts",
        "stay on the device, so the per-layer host round trip `host.moe_layer_us` is not spent). Sync-free stage 1",
        "turns on Megatron's fused permutation and fused router (`moe_permute_fusion`,",
        "`moe_use_fused_router_with_aux_score`: Primus rocm_arg_validation.py `_get_sync_free_moe_options`); below",
        "it the `primus` stack permutes unfused (language_model.yaml `moe_permute_fusion: false`), which the",
        "projection prices as Megatron-Core's torch path (core_v0.14.0 moe_utils.py: `index_select`, `zeros` +",
        "`scatter_add_`, 2 x copies + 2 x tokens more rows per layer; its two back-to-back `masked_select` calls",
        "one more `host.moe_layer_us` per MoE layer forward): 2.4-2.8 points off the three stage-0 rows. The",
        "fused router's saving, the rest of stage 1's published +12%, Primus-Turbo grouped GEMM kernels and launch",
        "options (NUMA binding, kernel argument pool) are recognised but not modelled: their sources publish the",
        "gain (+12%, +5.8%, +2%), not a per-kernel cost. The DeepSeek-V2-Lite rows ran with",
        "`apply_rope_fusion: false`: the blog script's experiment config (Primus e97d7a76, 2025-12-12, \"moe package",
        "v2\": examples/moe_package/configs/MI355X/deepseek_v2_lite-pretrain-baseline.yaml) loads",
        "deepseek_v2_lite.yaml, whose base deepseek_v2_base.yaml sets it (\"multi_latent_attention does not support",
        "apply_rope_fusion\"), and neither the script nor the experiment overrides it (the script's ENABLE_MLA",
        "default passes --multi_latent_attention True over the experiment's false, so the runs are MLA runs); the",
        "shipped rows state it and `kernels.rope_fusion: false`",
        "prices MLA's rotary part on Megatron-Core's eager `_apply_rotary_pos_emb_bshd`: 1.1-1.4 points off those",
        "six rows, AMD median 10.2% to 9.3% (before: 3050f03). The DeepSeek-V3 and Qwen3 scripts pass",
        "`--apply_rope_fusion True`.",
        "",
        "DeepEP sends a token once to each distinct rank holding one of its experts (its dispatch layout,",
        "`is_token_in_rank`); the projection prices the flex dispatcher's traffic inside a scale-up domain per",
        "expert copy, as an all-to-all moves it, at the all-to-all efficiency (`primus/projection/collectives.py`),",
        "so on one node it projects no gain from DeepEP where the blog measured +13.0% (31,095 to 35,151). Priced",
        "per distinct rank at the same efficiency (26% fewer bytes on 8 GPUs at top-6) it projects +8.3%, but every",
        "DeepEP row then reads faster: DeepSeek-V2-Lite by 9-10 points, Qwen3-30B-A3B by 14, DeepSeek-V3 by 10",
        "(the AMD median, then 10.2%, to 19.6%), and the single-node EP 8 dev rows by 7-15 (DeepSeek-V3 on",
        "GB200/GB300 1-2",
        "closer). Either DeepEP's kernels reach less of the link on the deduplicated bytes than the all-to-all",
        "does on the copies, or these rows carry a cost the projection misses elsewhere (the stage-0 gap below);",
        "no DeepEP bandwidth per accelerator was found that applies here, so the per-copy volume stands in, and",
        "this is recorded, not fitted.",
        "",
        "The DeepSeek-V2-Lite baseline does not read high for host stalls. The same blog's micro-batch chart",
        "(Figure 5, Primus examples/moe_package/images/DeepSeekV2Lite_mbs_scaling_mi355.png; the same stage-0",
        "stack: 10,734.6, 21,028.2, 28,063.1, 30,359.5 and 30,444.3 tokens/s/GPU at MBS 1, 2, 4, 8 and 12) gives",
        "0.382, 0.390, 0.584, 1.079 and 1.615 s per microbatch: a host floor near 0.38 s per microbatch at MBS",
        "1-2 (twice the tokens cost 2% more time), then 0.129 s per sample from MBS 4 to 12, on a line through",
        "0.07 s per microbatch at MBS 0. Host time per layer adds a constant per microbatch, so it accounts for",
        "at most those 0.07 s of the 1.615 s; the rest of the baseline row's gap grows with the tokens: it is GPU",
        "work the stage-0 stack does and the projection does not price.",
        *_mbs_pair_lines(amd),
    ]
    return lines


def _mbs_pair_lines(amd: ValidationReport) -> list[str]:
    """Complete rows that differ only in MBS (`primus.fidelity.mbs_pairs`): the measured and projected step
    lines, and which part (per token or fixed) the projection misses."""
    closing = "No sourced cost closes the gap yet, so none was added and no factor was fitted."
    pairs = mbs_pairs(amd.rows)
    if not pairs:
        return [closing]
    text = ("Complete rows that differ only in MBS (`primus.fidelity.mbs_pairs`) split a step into a fixed part "
            "and a part per token per GPU:")
    per_token_ok = True
    for p in pairs:
        per_token = 100.0 * (p.projected_slope_s_per_token / p.measured_slope_s_per_token - 1.0)
        per_token_ok &= abs(per_token) <= PER_TOKEN_AGREES_PCT and p.projected_fixed_s < p.measured_fixed_s
        text += (f" {_esc(p.run_ids[0])} and {_esc(p.run_ids[1])} (MBS {p.mbs[0]} and {p.mbs[1]}) measure "
                 f"{p.measured_fixed_s:.2f} s + {1e6 * p.measured_slope_s_per_token:.2f} us per token and project "
                 f"{p.projected_fixed_s:.2f} s + {1e6 * p.projected_slope_s_per_token:.2f} us per token: the per-token "
                 f"part {_f(per_token, sign=True)}%, the fixed part {p.projected_fixed_s - p.measured_fixed_s:+.2f} s "
                 f"per step. A 1% change in either run's throughput moves the measured fixed part by "
                 f"{p.fixed_s_per_pct:.2f} s, so that gap stands only if the two runs repeat to better than "
                 f"{abs(p.projected_fixed_s - p.measured_fixed_s) / p.fixed_s_per_pct:.1f}%.")
    if per_token_ok:
        text += (" At face value the projection prices the work per token (within "
                 f"{PER_TOKEN_AGREES_PCT:.0f}%) and misses a cost paid once per step, or once per microbatch at a "
                 "fixed microbatch count. Manual GC, on in every "
                 "DeepSeek-V2-Lite row, is not it: AMD puts a collection every step at about 10-30 ms (Primus "
                 "examples/megatron/configs/MI355X/qwen3_30B_A3B-BF16-sft-packed-bridge_aligned.yaml, its "
                 "manual_gc comment). Nor is a slower MLA attention kernel, which would cost per token: "
                 "ROCm/TransformerEngine pull request 706 (2026-08-18) reports Transformer Engine's automatic "
                 "backend choice falling to a ck_tile path about 8x slower than aiter's for unequal query/key and "
                 "value head dims (192/128), but in releases after release_v2.15_rocm, which chose the fused path, "
                 "and the per-token part above leaves no room for it.")
    return ["", *_wrap(text + " " + closing, 110)]


def unstated_section(report: ValidationReport) -> list[str]:
    """Rows whose source leaves a layout axis unstated (`primus.fidelity.completions`): the point at the
    stack's default and the range over the legal completions."""
    rows = [r for r in report.rows if r.completions is not None and r.range_error_pct is not None]
    if not rows:
        return []
    wide = [r for r in rows if r.completions is not None and r.completions.tokens[0] < r.completions.tokens[1]]
    lines = ["## Unstated layout axes", "", *_wrap(
        f"{len(rows)} rows leave VP (with PP > 1) or, for a MoE model, ETP unstated, and no per-model recipe of "
        "their stack sets it. Their point is projected at the stack's default (the rule named in each row as "
        "`point_rule`); `validate` also projects every legal completion (the values `primus fit` finds legal "
        "and fitting, every other axis held) and reports the range. The point errors above use the rule; the "
        f"range is not folded into any figure. {len(rows) - len(wide)} of them have a single legal completion; "
        "the others:", 110), "",
        "| run | unstated axes (legal values) | point error % | range of error % |", "|---|---|---:|---|"]
    for r in wide:
        assert r.completions is not None and r.range_error_pct is not None
        axes = "; ".join(f"{k} {{{', '.join(map(str, v))}}}" for k, v in r.completions.axes.items())
        lo, hi = r.range_error_pct
        lines.append(f"| {_esc(r.run_id)} | {axes} | {_f(r.error_pct, sign=True)} | {_f(lo, sign=True)} to "
                     f"{_f(hi, sign=True)} |")
    return lines
