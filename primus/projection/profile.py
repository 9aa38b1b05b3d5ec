"""The calibration profile: the few named efficiencies that turn work into time on one accelerator.

Everything the projection knows about a machine comes from two places: the hardware entry
(`hardware/<name>.yaml`: datasheet peaks, HBM and link bandwidths, latencies, each with its source) and
this profile (`hardware/profiles/<name>.yaml`): what fraction of those peaks real kernels reach. The
profile is deliberately small, so that `primus calibrate` can fit it from published runs:

- `gemm.<format>`: the large-GEMM plateau (fraction of the dense peak of that format) and the size
  in FLOPs at which a GEMM reaches half of it (e(F) = plateau · F / (F + half_flops), i.e. a fixed
  cost of half_flops / (peak · plateau) seconds per GEMM: launch, prologue/epilogue, wave tail);
- `attention`: flash-attention forward and backward efficiency against the bf16 dense peak;
- `hbm`: the achieved fraction of HBM bandwidth by memory-bound kernels, and their half size;
- `collectives.<kind>.<tier>`: achieved fraction of the link bandwidth per collective kind, inside
  the scale-up domain and across it (NCCL-tests "bus bandwidth" over the wire rate);
- `overlap.<model>`: the fraction of an available compute window a named overlap actually uses, and
  `overlap.interference`: the fraction of a hidden collective's time the compute it overlaps still
  loses (communication kernels occupy SMs and HBM bandwidth while they run);
- `host.moe_layer_us`: host time a dropless MoE layer exposes per forward pass (the token dispatcher
  copies per-expert token counts to the host before its all-to-all and grouped GEMMs, so the GPU drains
  and waits while the CPU launches the rest of the layer);
- `stacks.<name>`: the same parameter names with other values for a named software stack (e.g.
  PyTorch eager FSDP with FlashAttention-2 instead of Megatron-Core with Transformer Engine and cuDNN
  attention): kernel efficiencies belong to the kernels a run used, not to the silicon alone.

Every number is a `Param` with a `source`; a profile says whether it was `fitted` and from what
(`provenance`, and for fitted profiles a `calibration` record: runs used, date, residuals).
`parameters()` / `with_parameters()` expose the flat vector a fitter needs (stack overrides as
`stacks.<name>.<parameter>`); `for_stack(name)` is the profile a run on that stack sees.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, get_args

from pydantic import Field, PrivateAttr, StrictFloat, StrictInt, model_validator

from primus.errors import InputError
from primus.paths import data_dir
from primus.specs.base import Bool, Spec, Text, parse_spec
from primus.specs.hardware import ClusterSpec
from primus.yamlio import load_mapping

if TYPE_CHECKING:
    from primus.job import Job

#: GEMM compute formats a job can run its linear layers in (see `gemm_format`).
GemmFormat = Literal["bf16", "fp16", "fp8", "fp8_block", "mxfp8", "nvfp4"]
GEMM_FORMATS: tuple[str, ...] = ("bf16", "fp16", "fp8", "fp8_block", "mxfp8", "nvfp4")
#: The accelerator peak each format runs at.
PEAK_DTYPE: dict[str, str] = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "fp8_block": "fp8",
                              "mxfp8": "fp8", "nvfp4": "fp4"}


def gemm_format(precision: str, fp8_recipe: str | None) -> str:
    """The format a job's linear layers run in: its precision, and for FP8 the recipe's scaling
    (per-tensor delayed/tensorwise, DeepSeek-style 128-blocks, or MXFP8's 32-element blocks)."""
    if precision == "fp8":
        return {"blockwise": "fp8_block", "mxfp8": "mxfp8"}.get(fp8_recipe or "delayed", "fp8")
    return precision


def high_format(precision: str) -> str:
    """The format of GEMMs Megatron keeps in high precision (router, output layer, unfused attention)."""
    return "fp16" if precision == "fp16" else "bf16"


def runnable_formats(cluster: ClusterSpec, profile: Profile | None) -> frozenset[str]:
    """The GEMM formats a cluster runs: the accelerator has the peak the format runs at and the
    calibration profile has its efficiency (without a profile, the peak alone decides)."""
    peaks = cluster.accelerator.peak_tflops
    formats = GEMM_FORMATS if profile is None else tuple(profile.gemm)
    return frozenset(f for f in formats if PEAK_DTYPE[f] in peaks)


def runnable_precisions(formats: frozenset[str]) -> list[str]:
    """The job precisions (and, for fp8, the recipes) whose GEMMs all run in `formats`."""
    from primus.specs.job import Fp8Recipe, Precision

    out = []
    for precision in get_args(Precision):
        recipes = get_args(Fp8Recipe) if precision == "fp8" else (None,)
        ok = [r for r in recipes if {gemm_format(precision, r), high_format(precision)} <= formats]
        if ok and precision == "fp8":
            out.append(f"fp8 (recipes {', '.join(str(r) for r in ok)})")
        elif ok:
            out.append(precision)
    return out


def precision_refusal(cluster: ClusterSpec, formats: frozenset[str], fmt: str) -> str:
    """Why a GEMM format cannot run on a cluster, naming the precisions it can run (one line)."""
    runs = runnable_precisions(formats)
    dtype = PEAK_DTYPE.get(fmt, fmt)
    missing = (f"no {dtype} peak in the hardware entry" if dtype not in cluster.accelerator.peak_tflops
               else f"no gemm.{fmt} in its calibration profile")
    return f"{cluster.name} cannot run {fmt} GEMMs ({missing}); it runs {', '.join(runs) or 'none of the precisions'}"


def require_precision(job: Job) -> None:
    """Refuse a job whose precision its hardware cannot run: the test `project` and `tune` apply, for
    every command (`fit`, `enumerate`, `memory` too). Hardware without a shipped calibration profile is
    judged by its peaks alone."""
    try:
        profile: Profile | None = load_profile(job.cluster)
    except InputError:
        profile = None
    formats = runnable_formats(job.cluster, profile)
    for fmt in (gemm_format(job.spec.precision, job.spec.effective_fp8_recipe), high_format(job.spec.precision)):
        if fmt not in formats:
            raise InputError(job.where, "precision", precision_refusal(job.cluster, formats, fmt))


COLLECTIVES: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "p2p")
TIERS: tuple[str, ...] = ("scaleup", "scaleout")
OVERLAPS: tuple[str, ...] = ("grad_reduce", "param_gather", "fsdp_prefetch", "tp_comm", "moe_a2a", "interference")

Number = Annotated[StrictFloat | StrictInt, Field(ge=0.0, le=1e18)]


class Param(Spec):
    """One named, fit-able number with its unit and where it came from."""

    value: Number
    unit: Text = ""
    source: Text


class GemmParams(Spec):
    efficiency: Param
    half_flops: Param


class AttentionParams(Spec):
    fwd_efficiency: Param
    bwd_efficiency: Param


class HbmParams(Spec):
    efficiency: Param
    half_bytes: Param


class TierParams(Spec):
    scaleup: Param
    scaleout: Param


class CollectiveParams(Spec):
    """Bandwidth efficiency per collective kind and tier (reduce-scatter and all-gather move the same
    ring traffic but reduce in different places, so each has its own entry)."""

    all_reduce: TierParams
    all_gather: TierParams
    reduce_scatter: TierParams
    all_to_all: TierParams
    p2p: TierParams


class OverlapParams(Spec):
    """Per named overlap model: the fraction of its compute window that actually hides communication
    (1 = the whole window; less when communication kernels slow the compute they share SMs with)."""

    grad_reduce: Param
    param_gather: Param
    fsdp_prefetch: Param
    tp_comm: Param
    moe_a2a: Param
    interference: Param = Field(default_factory=lambda: Param(
        value=0.0, unit="fraction of hidden communication time",
        source="not modelled in this profile: hidden communication costs the compute it overlaps nothing"))


#: Host dispatch per kernel when a profile does not say: PyTorch eager (Python, pybind11, autograd and
#: ATen dispatch, cudaLaunchKernel) spends about 5-25 us of CPU per op before the kernel runs (Horace He,
#: "Making Deep Learning Go Brrrr From First Principles", 2022, section Overhead; PyTorch's own op
#: microbenchmarks put a tiny CUDA op at about 10 us); 10 us is the floor one kernel costs a step.
KERNEL_LAUNCH_US = 10.0
#: Per-step host work the GPU waits for, when a profile does not say, derived from op counts and the
#: per-op dispatch cost: Megatron-Core's distributed optimizer (NVIDIA/Megatron-LM d98e8a64dd) issues one
#: gradient cast per parameter tensor (`_copy_model_grads_to_main_grads`) and one parameter copy per tensor
#: (`_copy_main_params_to_model_params`); the gradient-norm clip reads the all-reduced norm with `.item()`
#: (`clip_grads.get_grad_norm_fp32`), a device-to-host synchronisation that drains the stream, so what
#: follows cannot hide behind earlier kernels; then a multi-tensor scale, Adam per parameter group (2),
#: the loss's all-reduce for logging and the gradient-buffer zeroing. A 2-layer Llama-style model (15
#: tensors) issues 2 x 15 + 8 = 38 ops at 5-25 us each (He 2022; `KERNEL_LAUNCH_US` takes 10): 0.19-0.95 ms,
#: 0.38 ms at 10 us; 0.5 ms lies in that range (not fitted).
STEP_US = 500.0


def _launch_default() -> Param:
    return Param(value=KERNEL_LAUNCH_US, unit="us of host dispatch per kernel",
                 source="default KERNEL_LAUNCH_US (primus/projection/profile.py): PyTorch eager dispatch plus "
                        "cudaLaunchKernel, about 5-25 us per op (He 2022, 'Making Deep Learning Go Brrrr')")


def _step_default() -> Param:
    return Param(value=STEP_US, unit="us of host work per step",
                 source="default STEP_US (primus/projection/profile.py): the 38 host-issued ops of Megatron-Core's "
                        "step for a 2-layer model (per-tensor gradient casts and parameter copies, the gradient-norm "
                        ".item() synchronisation, multi-tensor scale and Adam, loss reduction, gradient zeroing) at "
                        "5-25 us each (He 2022); 0.5 ms lies in that range")


class HostParams(Spec):
    """Host-side time the GPU waits for: per MoE layer forward (the token counts copied to the host),
    per kernel (a block's forward or backward takes at least its kernels × dispatch time: the floor a
    tiny model hits) and per step (the optimizer's synchronisations and launches), in microseconds."""

    moe_layer_us: Param
    kernel_launch_us: Param = Field(default_factory=_launch_default)
    step_us: Param = Field(default_factory=_step_default)


class Stack(Spec):
    """A named software stack: overrides of top-level parameter names (each a Param with its source)."""

    source: Text
    values: dict[Annotated[str, Field(max_length=100)], Param]


class CalibrationRecord(Spec):
    """How a fitted profile was fitted: when, on which runs, by what objective, with what residuals."""

    date: Annotated[str, Field(max_length=40)]
    method: Text
    runs_file: Text
    parameters: list[Annotated[str, Field(max_length=100)]]
    factors: dict[Annotated[str, Field(max_length=100)], float] = Field(default_factory=dict)
    runs: list[Annotated[str, Field(max_length=200)]]
    residuals_pct: dict[Annotated[str, Field(max_length=200)], float]
    summary: dict[Annotated[str, Field(max_length=100)], float]


class Profile(Spec):
    """A calibration profile for one hardware entry."""

    hardware: str = Field(min_length=1, max_length=100)
    fitted: Bool
    source: Text
    provenance: Text
    gemm: dict[GemmFormat, GemmParams]
    attention: AttentionParams
    hbm: HbmParams
    collectives: CollectiveParams
    overlap: OverlapParams
    host: HostParams = Field(default_factory=lambda: _unmodelled_host())
    stacks: dict[Annotated[str, Field(max_length=60)], Stack] = Field(default_factory=dict)
    calibration: CalibrationRecord | None = None
    #: the hardware entry whose fitted factors this (not itself fitted) profile carries, for an accelerator
    #: with no published runs of its own (`primus.fidelity.sibling`)
    transferred_from: Annotated[str, Field(max_length=100)] | None = None

    _stack_profiles: dict[str, Profile] = PrivateAttr(default_factory=dict)

    @model_validator(mode="after")
    def _ranges(self) -> Profile:
        if "bf16" not in self.gemm:
            raise ValueError("gemm needs at least a bf16 entry (router, output layer, attention BMMs)")
        base = self._base_parameters()
        for stack, spec in self.stacks.items():
            for name in spec.values:
                if name not in base:
                    raise ValueError(f"stacks.{stack}: unknown parameter {name!r}")
        for name, value in self.parameters().items():
            lo, hi = bounds(name)
            if not lo <= value <= hi:
                raise ValueError(f"{name} must lie in [{lo}, {hi}], got {value}")
        return self

    # ---- the flat parameter vector a fitter works on ----

    def parameters(self) -> dict[str, float]:
        """Every named parameter as `dotted.name -> value` (stable order), stack overrides last."""
        out = self._base_parameters()
        for stack, spec in self.stacks.items():
            for name, param in spec.values.items():
                out[f"stacks.{stack}.{name}"] = float(param.value)
        return out

    def _base_parameters(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for fmt, g in self.gemm.items():
            out[f"gemm.{fmt}.efficiency"] = float(g.efficiency.value)
            out[f"gemm.{fmt}.half_flops"] = float(g.half_flops.value)
        out["attention.fwd_efficiency"] = float(self.attention.fwd_efficiency.value)
        out["attention.bwd_efficiency"] = float(self.attention.bwd_efficiency.value)
        out["hbm.efficiency"] = float(self.hbm.efficiency.value)
        out["hbm.half_bytes"] = float(self.hbm.half_bytes.value)
        for kind in COLLECTIVES:
            tiers: TierParams = getattr(self.collectives, kind)
            for tier in TIERS:
                out[f"collectives.{kind}.{tier}"] = float(getattr(tiers, tier).value)
        for name in OVERLAPS:
            out[f"overlap.{name}"] = float(getattr(self.overlap, name).value)
        out["host.moe_layer_us"] = float(self.host.moe_layer_us.value)
        out["host.kernel_launch_us"] = float(self.host.kernel_launch_us.value)
        out["host.step_us"] = float(self.host.step_us.value)
        return out

    def with_parameters(self, values: Mapping[str, float], source: str = "set programmatically") -> Profile:
        """A new, re-validated profile with some parameters replaced (their `source` becomes `source`)."""
        data = self.model_dump()
        known = self.parameters()
        for name, value in values.items():
            if name not in known:
                raise KeyError(f"unknown profile parameter {name!r}")
            if name.startswith("stacks."):
                _, stack, rest = name.split(".", 2)
                node = data["stacks"][stack]["values"][rest]
            else:
                node = data
                for part in name.split("."):
                    node = node[part]
            node["value"] = float(value)
            node["source"] = source
        return Profile.model_validate(data)

    def for_stack(self, stack: str | None) -> Profile:
        """The profile a run on software stack `stack` sees: its overrides applied (itself for None or a
        stack this profile does not list, i.e. the default stack)."""
        spec = self.stacks.get(stack) if stack else None
        if spec is None or not stack:
            return self
        cache = self._stack_profiles
        if stack not in cache:
            cache[stack] = _apply_stack(self, stack)
        return cache[stack]

    def stack_names(self) -> tuple[str, ...]:
        return tuple(self.stacks)

    def value(self, name: str) -> float:
        return self.parameters()[name]


def _apply_stack(profile: Profile, stack: str) -> Profile:
    spec = profile.stacks[stack]
    data = profile.model_dump()
    for name, param in spec.values.items():
        node = data
        for part in name.split("."):
            node = node[part]
        node["value"] = float(param.value)
        node["source"] = f"stack {stack}: {param.source}"
    data["stacks"] = {}
    return Profile.model_validate(data)


def _unmodelled_host() -> HostParams:
    return HostParams(moe_layer_us=Param(value=0.0, unit="us", source="not modelled in this profile: 0"))


def bounds(name: str) -> tuple[float, float]:
    """Valid range of a parameter (also a fitter's search box): sizes are non-negative, efficiencies
    are fractions of a peak (at least 0.001: a zero would mean infinite time), overlap fractions may
    be 0 (nothing hidden)."""
    if name.startswith("stacks."):
        name = name.split(".", 2)[2]
    if name.endswith(("half_flops", "half_bytes")):
        return 0.0, 1e13
    if name.startswith("host."):
        return 0.0, 1e5
    if name.startswith("overlap."):
        return 0.0, 1.0
    return 1e-3, 1.0


def _strip_custom(name: str) -> str:
    """A hardware entry with user overrides is named '<base>+custom'; its profile is the base's."""
    return name.split("+", 1)[0]


def profile_path(hardware_name: str) -> Path:
    return data_dir("hardware") / "profiles" / f"{_strip_custom(hardware_name)}.yaml"


@lru_cache(maxsize=64)
def _load(path: str) -> Profile:
    return parse_spec(Profile, load_mapping(Path(path)), path)


def load_profile(cluster: ClusterSpec, ref: str | Path | None = None) -> Profile:
    """The profile for a cluster: the shipped `hardware/profiles/<name>.yaml`, or the file `ref`.

    A profile written for other hardware is refused: its efficiencies describe another machine.
    """
    base = _strip_custom(cluster.name)
    if ref is None:
        path = profile_path(cluster.name)
        if not path.exists():
            raise InputError(str(path), None, f"no calibration profile for hardware {base!r}; "
                             "write one (see hardware/profiles/) or pass --profile")
    else:
        path = Path(ref)
        if not path.exists():
            raise InputError(str(path), None, "profile file does not exist")
    profile = _load(str(path))
    if profile.hardware != base:
        raise InputError(str(path), "hardware",
                         f"profile is for {profile.hardware!r} but the job runs on {base!r}")
    return profile


def profile_from_mapping(data: Mapping[str, Any], where: str = "profile") -> Profile:
    return parse_spec(Profile, data, where)
