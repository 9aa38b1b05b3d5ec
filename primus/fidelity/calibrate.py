"""`calibrate`: fit the named parameters of one accelerator's profile to published runs.

Starting point: the spec-derived profile (`hardware/profiles/spec/<hw>.yaml`, every number from a
datasheet or a published kernel/collective benchmark). Unknowns: a few groups of parameters, chosen from
what the runs can identify (`parameter_groups`): the GEMM plateau of each format the runs use (after the
fit, the formats of its kin on the same kernels that too few runs use follow it: `KIN`), attention
efficiency, the MoE host overhead and all-to-all efficiency when there are MoE runs, memory-bound
efficiency when there are many runs. Each group is the accelerator's, shared by every software stack: a
stack's kernels differ from the default stack's by the sourced values of its profile section (`stacks:`),
which move with the default's by the same factor, never by a factor of their own. Never more than one
group per three runs. The fit is `primus.fidelity.fitter.robust_fit` (Huber on log errors, Gaussian prior
towards the spec values): deterministic, numpy only.

The result is a profile with `fitted: true`, each fitted number's `source` saying so, and a
`calibration` record: date, runs file, parameters, runs used, residuals and their summary.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from primus.errors import InputError
from primus.fidelity.fitter import HUBER_DELTA, PRIOR_SIGMA, FitOutcome, robust_fit, safe_log_ratio
from primus.fidelity.stats import describe
from primus.fidelity.validate import Prepared
from primus.paths import data_dir
from primus.projection.profile import Profile, bounds, gemm_format, profile_from_mapping
from primus.yamlio import load_mapping

#: A fit may move a parameter by at most this factor either way from its spec-derived value: the spec
#: values come from kernel and collective benchmarks, and a factor beyond 2 would mean the model of that
#: kernel is wrong, which a fit must not paper over.
MAX_FACTOR = math.log(2.0)
RUNS_PER_GROUP = 3
#: Published ceilings no fitted efficiency may exceed: FlashAttention-3 (Shah et al. 2024) reaches 0.75
#: of the H100 dense peak in the forward and about 0.6 in the backward at its best shapes; the best
#: cuBLASLt / CUTLASS GEMMs reach about 0.9 of the dense peak of their format.
CEILINGS: dict[str, float] = {"attention.fwd_efficiency": 0.75, "attention.bwd_efficiency": 0.6}
GEMM_CEILING = 0.9


def ceiling(name: str) -> float:
    base = name.split(".", 2)[2] if name.startswith("stacks.") else name
    if base in CEILINGS:
        return CEILINGS[base]
    if base.startswith("gemm.") and base.endswith(".efficiency"):
        return GEMM_CEILING
    return bounds(name)[1]


@dataclass(frozen=True)
class Group:
    """Profile parameters that move together by one fitted factor."""

    name: str
    params: tuple[str, ...]


@dataclass(frozen=True)
class Calibration:
    profile: Profile
    groups: tuple[Group, ...]
    factors: dict[str, float]
    residuals_pct: dict[str, float]
    outcome: FitOutcome


def spec_profile_path(hardware: str) -> Path:
    return data_dir("hardware") / "profiles" / "spec" / f"{hardware}.yaml"


def load_spec_profile(hardware: str, path: str | Path | None = None) -> Profile:
    """The spec-derived starting profile of an accelerator (or the file `path`)."""
    p = Path(path) if path is not None else spec_profile_path(hardware)
    if not p.is_file():
        raise InputError(str(p), None, f"no spec-derived profile for hardware {hardware!r}")
    prof = profile_from_mapping(load_mapping(p), str(p))
    if prof.hardware != hardware:
        raise InputError(str(p), "hardware", f"profile is for {prof.hardware!r}, not {hardware!r}")
    return prof


def _row_facts(p: Prepared) -> tuple[str | None, str, bool, bool, bool, bool]:
    spec = p.jobs.project.spec
    fmt = gemm_format(spec.precision, spec.effective_fp8_recipe)
    ep = spec.parallel.ep or 1
    moe = p.jobs.project.model.is_moe
    return (p.jobs.rule.kernels, fmt, spec.kernels.flash_attention, moe, ep > 1,
            moe and ep > 1 and spec.overlap.moe_a2a)


def parameter_groups(profile: Profile, rows: Sequence[Prepared]) -> tuple[Group, ...]:
    """What these runs can identify, most informative first: a group is fitted only when at least
    RUNS_PER_GROUP runs depend on it, and there are never more groups than runs / RUNS_PER_GROUP. With
    fewer than 4 × RUNS_PER_GROUP runs (or no format with enough runs of its own) the GEMM plateaus of
    every format of the profile move by one joint factor, the accelerator's, whether or not a run used
    that format; two runs suffice for that one.

    Every group is a property of the accelerator, shared by every software stack: a stack's own entry
    for a parameter (`stacks.NAME.…`, its kernels' efficiency as its source states it, e.g. FlashAttention-2
    where the default stack runs cuDNN's fused attention) moves with the default's by the same factor, so
    the ratio between stacks stays the sourced one and no stack gets a fitted factor of its own. A source
    held out of the fit is then predicted by the hardware factors the other stacks' runs fitted."""
    known = profile.parameters()
    facts = [_row_facts(p) for p in rows]
    stacks = sorted(profile.stacks)
    candidates: list[tuple[Group, int]] = []

    def add(name: str, params: Sequence[str], n: int) -> None:
        ps = tuple(x for x in params if x in known)
        if ps and all(g.name != name for g, _ in candidates):
            candidates.append((Group(name, ps), n))

    def everywhere(base: Sequence[str]) -> list[str]:
        """`base` parameters of the default stack and the same parameters of every stack that sets them."""
        return [*base, *(f"stacks.{s}.{b}" for s in stacks for b in base)]

    counts: dict[str, int] = {}
    for f in facts:
        key = "bf16" if f[1] == "fp16" else f[1]
        counts[key] = counts.get(key, 0) + 1
    for fmt in sorted(counts, key=lambda k: (-counts[k], k)):
        fmts = ("bf16", "fp16") if fmt == "bf16" else (fmt,)  # same tensor cores, same rate
        add(f"gemm.{fmt}", everywhere([f"gemm.{f}.efficiency" for f in fmts]), counts[fmt])
    # memory-bound efficiency before attention: every step depends on both, and the fit with the most runs
    # (H100, 119 from 11 sources) moves it furthest from its spec value (x0.50, the limit; attention x1.15),
    # so an accelerator with runs for four groups (GB200, GB300) fits it instead of leaving it at the spec's
    # copy-kernel rate (issue 19: H100's gpt-oss rows, about 30% memory-bound, project +5-8% at H100's fitted
    # value and +32-36% at its spec value, about what the Blackwell rows were at theirs)
    add("hbm.efficiency", everywhere(["hbm.efficiency"]), len(rows) if len(rows) >= 4 * RUNS_PER_GROUP else 0)
    add("attention", everywhere(["attention.fwd_efficiency", "attention.bwd_efficiency"]),
        sum(1 for f in facts if f[2]))
    moe = [f for f in facts if f[3]]
    add("host.moe_layer_us", ["host.moe_layer_us"], len(moe))
    add("collectives.all_to_all", ["collectives.all_to_all.scaleup", "collectives.all_to_all.scaleout"],
        sum(1 for f in moe if f[4]))
    # the share of the all-to-all a job with Megatron's EP overlap hides: identified only by runs that overlap
    add("overlap.moe_a2a", ["overlap.moe_a2a"], sum(1 for f in moe if f[5]))
    add("overlap.interference", ["overlap.interference"], len(rows) if len(rows) >= 4 * RUNS_PER_GROUP else 0)
    gemm = [(g, n) for g, n in candidates if g.name.startswith("gemm.")]
    # the joint factor is the accelerator's GEMM factor against its datasheet plateaus, so it moves every
    # format's plateau, also those no run used (their values stay in the spec's ratio to the others);
    # left at the spec value, a format the runs never used would be projected as if the accelerator
    # reached its datasheet plateau in that format alone
    every_format = [x for x in everywhere([f"gemm.{f}.efficiency" for f in sorted(profile.gemm)]) if x in known]
    joint = Group("gemm (joint)", tuple(dict.fromkeys([*(p for g, _ in gemm for p in g.params), *every_format])))
    if len(rows) < 4 * RUNS_PER_GROUP or not any(n >= RUNS_PER_GROUP for _, n in gemm):
        # few runs: one factor on every GEMM plateau they use, then whatever else they identify
        candidates = [(joint, len(rows)), *[(g, n) for g, n in candidates if (g, n) not in gemm]]
    chosen = [g for g, n in candidates if n >= RUNS_PER_GROUP][:len(rows) // RUNS_PER_GROUP]
    if not chosen and len(rows) >= 2 and joint.params:
        chosen = [joint]
    return tuple(chosen)


#: GEMM formats that run on the same kind of kernel with another scaling of the same tensor cores: the
#: microscaling pair, MXFP8 and NVFP4 (1-D block scales along K read by Blackwell's block-scaled MMA;
#: Transformer Engine's MXFP8BlockScaling and NVFP4BlockScaling recipes). 16-bit formats already share one
#: group. Other pairs are not assumed: Blackwell's 128x128-block FP8 has no published rate against either.
KIN: dict[str, tuple[str, ...]] = {"nvfp4": ("mxfp8",), "mxfp8": ("nvfp4",)}


def _format(param: str) -> str:
    return param.split(".")[-2]


def kin_followers(profile: Profile, groups: Sequence[Group]) -> dict[str, tuple[str, ...]]:
    """Per fitted GEMM group, the parameters of the formats of its kin (`KIN`) that no fitted group holds
    (too few runs of their own, or none). After the fit they take that group's factor on their own spec
    values: left at the spec value, such a format would be projected as if the accelerator reached its
    datasheet plateau in that format alone while its kin, on the same kernels, sits a fitted factor away
    (GB200's NVFP4 at the spec's assumed 0.55 of 10 PFLOP/s beside MXFP8 fitted at x0.7 of its own: issue
    19's NVFP4 rows, +11% to +40% held out). They follow and do not fit: their few runs do not move the
    kin's factor. The joint factor already moves every format."""
    fitted = {_format(p): g.name for g in groups if g.name.startswith("gemm.") and g.name != "gemm (joint)"
              for p in g.params}
    stacks = sorted(profile.stacks)
    known = profile.parameters()
    out: dict[str, list[str]] = {}
    for fmt in sorted(profile.gemm):
        if fmt in fitted:
            continue
        kin = next((fitted[k] for k in KIN.get(fmt, ()) if k in fitted), None)
        if kin is None:
            continue
        names = [f"gemm.{fmt}.efficiency", *(f"stacks.{s}.gemm.{fmt}.efficiency" for s in stacks)]
        out.setdefault(kin, []).extend(n for n in names if n in known)
    return {k: tuple(v) for k, v in out.items() if v}


def _follow(start: Profile, fitted: Profile, followers: dict[str, tuple[str, ...]],
            factors: dict[str, float], note: str) -> Profile:
    """`fitted` with each follower at its spec value times its kin group's factor, within its bounds and
    the published ceiling a fit respects."""
    own = start.parameters()
    new: dict[str, float] = {}
    for group, names in followers.items():
        for name in names:
            lo, hi = bounds(name)
            new[name] = min(hi, max(ceiling(name), own[name]), max(lo, own[name] * factors[group]))
    return fitted.with_parameters(new, source=note) if new else fitted


def _limits(profile: Profile, groups: Sequence[Group]) -> list[tuple[float, float]]:
    values = profile.parameters()
    out = []
    for g in groups:
        hi = MAX_FACTOR
        for name in g.params:
            v = values[name]
            if v > 0:
                hi = min(hi, math.log(max(ceiling(name), v) / v))
        out.append((-MAX_FACTOR, max(0.0, hi)))
    return out


def apply(profile: Profile, groups: Sequence[Group], theta: Sequence[float], source: str | None = None) -> Profile:
    values = profile.parameters()
    new: dict[str, float] = {}
    for g, t in zip(groups, theta, strict=True):
        for name in g.params:
            lo, hi = bounds(name)
            new[name] = min(hi, max(lo, values[name] * math.exp(t)))
    if source is None:
        return profile.with_parameters(new)
    return profile.with_parameters(new, source=source)


def residuals(profile: Profile, rows: Sequence[Prepared]) -> list[float]:
    out = []
    for p in rows:
        proj = p.project(profile.for_stack(p.jobs.rule.kernels), "fast")
        measured = p.row.measured_tokens
        assert measured is not None
        out.append(safe_log_ratio(proj.tokens_per_s_per_gpu, measured))
    return out


def calibrate(start: Profile, rows: Sequence[Prepared], *, runs_file: str = "", date: str | None = None) -> Calibration:
    """Fit `start` (a spec-derived profile) to `rows` (prepared runs on its accelerator)."""
    rows = [p for p in rows if p.jobs.project.cluster.name.split("+")[0] == start.hardware]
    if not rows:
        raise InputError(runs_file or "runs", None, f"no complete, projectable runs on {start.hardware!r} to fit")
    groups = parameter_groups(start, rows)
    limits = _limits(start, groups)
    outcome = robust_fit(lambda th: residuals(apply(start, groups, th), rows), len(groups), limits)
    when = date or datetime.now(UTC).date().isoformat()
    note = (f"fitted by primus calibrate on {len(rows)} published runs of {start.hardware} ({when}; Huber on log "
            f"error, prior towards the spec value)")
    fitted = apply(start, groups, outcome.theta, source=note)
    factors = {g.name: math.exp(t) for g, t in zip(groups, outcome.theta, strict=True)}
    followers = kin_followers(start, groups)
    final_residuals: Sequence[float] = outcome.residuals
    if followers:
        fitted = _follow(start, fitted, followers, factors,
                         f"fitted by primus calibrate on {len(rows)} published runs of {start.hardware} ({when}) "
                         "through its kin on the same kernels: the spec-derived value times the kin's factor "
                         "(calibrate.KIN)")
        final_residuals = residuals(fitted, rows)
        factors.update({f"gemm.{fmt} (follows {g})": factors[g] for g, names in followers.items()
                        for fmt in dict.fromkeys(_format(n) for n in names)})
    res_pct = {p.row.run_id: 100.0 * (math.exp(r) - 1.0) for p, r in zip(rows, final_residuals, strict=True)}
    summary = describe(list(res_pct.values()))
    record = {
        "date": when,
        "method": (f"robust Gauss-Newton (primus.fidelity.fitter): Huber(delta {HUBER_DELTA}) on "
                   f"log(predicted/measured) tokens/s/GPU + Gaussian prior (sigma {PRIOR_SIGMA} in log) towards the "
                   "spec-derived value; groups: "
                   + "; ".join(f"{g.name} x{factors[g.name]:.3f}" for g in groups)
                   + "".join(f"; {k} x{v:.3f}" for k, v in factors.items() if "(follows" in k)),
        "runs_file": runs_file,
        "parameters": [name for g in groups for name in g.params] + [n for ns in followers.values() for n in ns],
        "factors": {k: round(v, 4) for k, v in factors.items()},
        "runs": [p.row.run_id for p in rows],
        "residuals_pct": {k: round(v, 2) for k, v in res_pct.items()},
        "summary": {k: (round(float(v), 3) if isinstance(v, float) else float(v)) for k, v in summary.items()},
    }
    data = fitted.model_dump()
    data.update(fitted=True, calibration=record,
                source=f"fitted to {len(rows)} published runs ({when}); starting point: {start.source}"[:2000],
                provenance=(f"primus calibrate fitted {len(groups)} parameter group(s) "
                            f"({', '.join(g.name for g in groups)}) to {len(rows)} complete published runs of "
                            f"{start.hardware} from {runs_file or 'a runs file'} "
                            f"on {when}; every other number is spec-derived (see its source). Residuals: median "
                            f"|error| {summary['median_abs_pct']:.1f}%, p90 {summary['p90_abs_pct']:.1f}%.")[:2000])
    return Calibration(profile_from_mapping(data), tuple(groups), factors, res_pct, outcome)


def profile_yaml(profile: Profile, header: str) -> str:
    """A profile as YAML (stable key order), with a comment header."""
    data: dict[str, Any] = profile.model_dump(exclude_none=True)
    body = yaml.safe_dump(data, sort_keys=False, width=110, allow_unicode=True)
    lines = "".join(f"# {line}\n" for line in header.splitlines())
    return lines + body
