"""`primus measure`: downscale, measure within a budget, write (or extend) a measured profile.

One campaign: (1) record the target's calls (`primus.measure.plan`); (2) say what the local devices can
run of the target (`primus.measure.downscale`); (3) drop every call the profile at `--out` already
holds (shape + dtype on this device: a profile is reused, never re-measured); (4) time the collectives
the local processes can run, then the kernels, most projected seconds first, until the budget is
spent — what is left stays modelled, and the run record says how many and why; (5) check the
measured layers' activation memory against the ledger if time is left; (6) write the profile.

Torch is imported by this module; the CLI imports it only after checking torch is installed.
"""

from __future__ import annotations

import math
import platform
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from primus.catalog.hardware import catalog_hardware, resolve_hardware
from primus.errors import InputError
from primus.job import Job
from primus.measure.collectives import CollectiveSpec, measure_collectives
from primus.measure.downscale import Downscale, downscale
from primus.measure.kernels import KernelBench, Unsupported, median
from primus.measure.measured_profile import (
    DeviceInfo,
    Entry,
    MeasuredProfile,
    call_key,
    load_measured_profile,
    now,
)
from primus.measure.plan import Plan, PlanItem, Recipe, build_plan
from primus.parallel import Layout

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
BOUND = {"cpu": 256 * 2**20, "cuda": 2 * 2**30}  # bounded buffers for memory-bound kernels and messages
SPAWN_S = {"cpu": 8.0, "cuda": 20.0}  # starting processes (each imports torch) before any collective runs
COLLECTIVE_SHARE = 0.5  # of the budget left, what the collectives may use when kernels still wait
BUDGET = "budget spent: modelled"


@dataclass(frozen=True)
class MeasureOptions:
    device: str = "cpu"  # cpu | cuda
    procs: int = 1
    budget_s: float | None = 60.0  # None: no budget, every call is measured however long it takes
    dtype: str = "auto"  # auto | bf16 | fp16 | fp32
    hardware: str | None = None  # the hardware entry this device is (default: detected)
    memory_check: bool = True
    bound_bytes: int | None = None
    target_s: float = 0.15  # repetitions per kernel: enough for ~this many seconds (3 to 25 of them)
    colocate: bool = False  # on CPU with procs > 1: time every kernel in all processes at once

    @property
    def colocated(self) -> int:
        """Processes that run each kernel at once: all of them on CPU (the ranks share this host's
        cores, caches and memory bandwidth), one on GPUs (each rank has its own device)."""
        return self.procs if self.device == "cpu" and self.colocate and self.procs > 1 else 1


@dataclass
class MeasureResult:
    profile: MeasuredProfile
    plan: Plan  # the first target's plan
    downscale: Downscale
    items: int = 0  # distinct calls over every target
    measured: int = 0
    reused: int = 0
    exact_zero: int = 0
    left: Counter[str] = field(default_factory=Counter)
    elapsed_s: float = 0.0
    memory_rows: list[dict[str, Any]] = field(default_factory=list)
    memory_skipped: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return BUDGET not in self.left


def detect_hardware(device_name: str) -> str | None:
    """The catalog entry whose accelerator name shares the most words with torch's device name (the
    model number among them), e.g. 'NVIDIA H200' -> h200; None when no single entry wins."""
    words = {w for w in device_name.upper().replace("-", " ").split() if w}
    scores: list[tuple[int, str]] = []
    for slug in catalog_hardware():
        name = resolve_hardware(slug, "catalog").accelerator.name.upper().replace("(", " ").replace(")", " ")
        common = words & set(name.split())
        if any(any(c.isdigit() for c in w) for w in common):
            scores.append((len(common), slug))
    scores.sort(reverse=True)
    if not scores or (len(scores) > 1 and scores[0][0] == scores[1][0]):
        return None
    return scores[0][1]


def measure_dtype(opt: MeasureOptions, job: Job) -> str:
    """bf16 (fp16 for fp16 jobs) on GPUs; fp32 on CPU, where bf16 GEMMs are emulated (about 1 GFLOP/s
    on the development machine, against 50 in fp32) and a CPU training run uses fp32 too."""
    if opt.dtype != "auto":
        return opt.dtype
    if opt.device == "cpu":
        return "fp32"
    return "fp16" if job.spec.precision == "fp16" else "bf16"


def device_info(opt: MeasureOptions, dtype: str, where: str) -> DeviceInfo:
    if opt.device == "cuda":
        if not torch.cuda.is_available():
            raise InputError(where, "--device", "cuda requested but torch sees no GPU")
        if opt.procs > torch.cuda.device_count():
            raise InputError(where, "--procs", f"{opt.procs} processes need {opt.procs} GPUs; torch sees "
                             f"{torch.cuda.device_count()}")
        name = torch.cuda.get_device_name(0)
        hw = opt.hardware or detect_hardware(name)
        if hw is None:
            raise InputError(where, "--hardware", f"cannot tell which hardware entry {name!r} is; pass --hardware")
        return DeviceInfo("cuda", name, hw, torch.__version__, str(DTYPES[dtype]).removeprefix("torch."), None,
                          opt.procs)
    name = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            name = next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), name)
    except OSError:
        pass
    return DeviceInfo("cpu", name, opt.hardware or "cpu", torch.__version__,
                      str(DTYPES[dtype]).removeprefix("torch."), 1, opt.procs, opt.colocated)


def _open_profile(out: Path, device: DeviceInfo) -> MeasuredProfile:
    if not out.exists():
        return MeasuredProfile(device, now(), path=str(out))
    prof = load_measured_profile(out)
    if not prof.device.same_device(device):
        raise InputError(str(out), "device",
                         f"holds measurements of {prof.device.name} ({prof.device.hardware}, {prof.device.dtype}, "
                         f"threads {prof.device.threads}); this is {device.name} ({device.hardware}, {device.dtype}, "
                         f"threads {device.threads}): write to another --out")
    prof.device = DeviceInfo(**{**prof.device.__dict__, "procs": max(prof.device.procs, device.procs)})
    return prof


def _entry(item: PlanItem, runs: list[tuple[Recipe, int, list[float], float, str]]) -> Entry:
    """The occurrence-weighted mean of the recipes' medians (× their bounded-buffer scales)."""
    total = sum(n for _, n, _, _, _ in runs)
    seconds = sum(n * median(s) * scale for _, n, s, scale, _ in runs) / total
    recipes = tuple({**r.to_json(), "weight": n, "samples": s, "median_s": median(s), "scale": scale,
                     **({"note": note} if note else {})} for r, n, s, scale, note in runs)
    return Entry(item.call, seconds, recipes, now())


def run_measure(job: Job, layout: Layout, out: str | Path, opt: MeasureOptions,
                log: Callable[[str], None] = lambda s: None, also: Sequence[tuple[Job, Layout]] = ()) -> MeasureResult:
    """Measure what `out` does not hold yet of the target (job, layout) — and of the `also` targets, in
    the same campaign (one start of the collective processes, one budget) — and save it to `out`.
    The downscale and the memory check are the first target's."""
    start = time.monotonic()
    deadline = math.inf if opt.budget_s is None else start + opt.budget_s
    threads = torch.get_num_threads()
    if opt.device == "cpu":
        torch.set_num_threads(1)  # one "device" = one process with one thread (stated in the profile)
    try:
        return _run(job, layout, list(also), Path(out), opt, start, deadline, log)
    finally:
        torch.set_num_threads(threads)


def _merged(plans: list[Plan]) -> list[PlanItem]:
    """Every distinct call of the plans once, most projected seconds first (priorities add up)."""
    merged: dict[object, PlanItem] = {}
    for plan in plans:
        for item in plan.items:
            seen = merged.get(item.call)
            merged[item.call] = item if seen is None else \
                PlanItem(seen.call, seen.recipes, seen.analytic_s, seen.priority + item.priority, seen.skip)
    return sorted(merged.values(), key=lambda i: -i.priority)


def _run(job: Job, layout: Layout, also: list[tuple[Job, Layout]], out: Path, opt: MeasureOptions, start: float,
         deadline: float, log: Callable[[str], None]) -> MeasureResult:
    dtype = measure_dtype(opt, job)
    device = device_info(opt, dtype, job.where)
    prof = _open_profile(out, device)
    fp8 = hasattr(torch, "_scaled_mm") and hasattr(torch, "float8_e4m3fn")
    plans = [build_plan(j, lay, procs=opt.procs, device_kind=opt.device, has_fp8=fp8)
             for j, lay in [(job, layout), *also]]
    plan = plans[0]
    ds = downscale(job.model, plan.layout, opt.procs)
    items = _merged(plans)
    res = MeasureResult(prof, plan, ds, len(items))
    bound = opt.bound_bytes or BOUND[opt.device]
    pending: list[PlanItem] = []
    for item in items:
        if prof.has(item.call):
            res.reused += 1
        elif item.trivial:
            prof.add(Entry(item.call, 0.0, ({"op": "zero", "note": "zero bytes or a group of one: no work"},), now()))
            res.exact_zero += 1
        elif item.skip is not None:
            res.left[item.skip] += 1
        else:
            pending.append(item)
    log(f"{len(items)} calls: {res.reused} already in the profile, {len(pending)} to measure, "
        f"{sum(res.left.values())} not measurable here")

    colls = [i for i in pending if i.is_collective]
    if colls:
        left_s = deadline - time.monotonic()
        kernels_left = len(pending) - len(colls)
        share = left_s if not kernels_left else COLLECTIVE_SHARE * left_s
        if share < SPAWN_S[opt.device]:
            res.left[BUDGET] += len(colls)
            res.notes.append(f"no time left to start {opt.procs} processes for the collectives")
        else:
            log(f"collectives: {len(colls)} on {opt.procs} processes ({'gloo' if opt.device == 'cpu' else 'nccl'})")
            specs = {call_key(i.call, dtype): i for i in colls}
            got, err = measure_collectives(
                [CollectiveSpec(k, i.recipes[0][0].flag, i.recipes[0][0].dims[0], i.recipes[0][0].dims[1])
                 for k, i in specs.items()], opt.procs, opt.device, share, bound)
            if err:
                res.notes.append(err)
            for k, i in specs.items():
                r = got.get(k)
                if r and r["samples"]:
                    note = f"ran at {r['ran_bytes']} bytes, time × {r['scale']:.4g}" if r["scale"] != 1 else ""
                    prof.add(_entry(i, [(i.recipes[0][0], 1, r["samples"], float(r["scale"]), note)]))
                    res.measured += 1
                else:
                    res.left["collective workers failed: modelled" if err else BUDGET] += 1

    kernels = [i for i in pending if not i.is_collective]
    if opt.colocated > 1:
        _colocated_kernels(kernels, prof, res, opt, dtype, bound, deadline, log)
    else:
        _kernels(kernels, prof, res, opt, dtype, bound, deadline)

    if opt.memory_check:
        if time.monotonic() < deadline:
            from primus.measure.memcheck import check_memory

            seq = job.spec.seq_len // plan.layout.cp
            rows, skipped = check_memory(job.model, seq, plan.layout.mbs, opt.device, ds.num_experts)
            res.memory_rows = [{**r.to_json(), "model": job.model.name, "date": now()} for r in rows]
            res.memory_skipped = skipped
            prof.memory = [m for m in prof.memory if m.get("model") != job.model.name or
                           (m.get("seq_len"), m.get("mbs")) != (seq, plan.layout.mbs)] + res.memory_rows
        else:
            res.memory_skipped.append("budget spent before the memory check")
    res.elapsed_s = time.monotonic() - start
    prof.runs.append(_record(job, res, opt, also))
    prof.save(out)
    return res


def _job_summary(job: Job) -> dict[str, Any]:
    spec = job.spec
    return {"where": job.where, "model": job.model.name, "hardware": job.cluster.name, "gpus": job.num_gpus,
            "seq_len": spec.seq_len, "global_batch_size": spec.global_batch_size, "precision": spec.precision}


def _kernels(items: list[PlanItem], prof: MeasuredProfile, res: MeasureResult, opt: MeasureOptions, dtype: str,
             bound: int, deadline: float) -> None:
    """Time the kernels in this process, most projected seconds first, until the deadline."""
    bench = KernelBench(opt.device, DTYPES[dtype], bound, opt.target_s)
    cache: dict[Recipe, tuple[list[float], float, str]] = {}
    for item in items:
        if time.monotonic() + 3 * max(item.analytic_s, 1e-4) > deadline:
            res.left[BUDGET] += 1
            continue
        runs = []
        try:
            for recipe, n in item.recipes:
                if recipe not in cache:
                    cache[recipe] = bench.time_recipe(recipe, deadline)
                samples, scale, note = cache[recipe]
                runs.append((recipe, n, samples, scale, note))
        except Unsupported as exc:
            res.left[f"{exc}: modelled"] += 1
            continue
        prof.add(_entry(item, runs))
        res.measured += 1
    del bench, cache
    if opt.device == "cuda":
        torch.cuda.empty_cache()


def _colocated_kernels(items: list[PlanItem], prof: MeasuredProfile, res: MeasureResult, opt: MeasureOptions,
                       dtype: str, bound: int, deadline: float, log: Callable[[str], None]) -> None:
    """Time the kernels in all `procs` CPU processes at once (`primus.measure.colocated`)."""
    from primus.measure.colocated import measure_colocated

    recipes = list(dict.fromkeys(r for i in items for r, _ in i.recipes))
    left_s = deadline - time.monotonic()
    if left_s < SPAWN_S["cpu"]:
        res.left[BUDGET] += len(items)
        return
    log(f"kernels: {len(recipes)} recipes, each run by {opt.colocated} processes at once")
    got, err = measure_colocated(recipes, opt.colocated, DTYPES[dtype], bound, opt.target_s, left_s)
    if err:
        res.notes.append(err)
    for item in items:
        results = [got.get(r) for r, _ in item.recipes]
        failed = next((x for x in results if isinstance(x, str)), None)
        if failed is not None:
            res.left[f"{failed}: modelled"] += 1
        elif any(x is None for x in results):
            res.left["co-located kernel workers failed: modelled" if err else BUDGET] += 1
        else:
            prof.add(_entry(item, [(r, n, *x) for (r, n), x in zip(item.recipes, results, strict=True)
                                   if not isinstance(x, str) and x is not None]))
            res.measured += 1


def _record(job: Job, res: MeasureResult, opt: MeasureOptions, also: list[tuple[Job, Layout]]) -> dict[str, Any]:
    return {
        "date": now(),
        "job": _job_summary(job),
        "also": [{**_job_summary(j), "layout": lay.as_parallel()} for j, lay in also],
        "layout": res.plan.layout.as_parallel(),
        "downscale": res.downscale.to_json(),
        "budget_s": opt.budget_s, "elapsed_s": round(res.elapsed_s, 3), "procs": opt.procs,
        "calls": res.items, "measured": res.measured, "reused": res.reused, "exact_zero": res.exact_zero,
        "left_modelled": dict(res.left), "complete": res.complete, "notes": res.notes,
        "memory_skipped": res.memory_skipped,
    }
