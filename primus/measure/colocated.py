"""Kernels timed with every local process running them at once: ranks that share one host.

GPUs are separate devices: a kernel timed alone on one of them runs as fast as when its neighbours
are busy, so GPU kernels are timed in one process. The `cpu` hardware entry's "devices" are processes
on one host, which share the last-level cache and memory bandwidth (and, on a shared machine, the
cores with whatever else runs there). `primus measure --device cpu --procs N --colocate` times each
kernel in N processes at the same time: every process prepares the same recipe, all start each
repetition together (a barrier), and a repetition's time is the slowest process's, as with a
collective. The profile records it (`device.colocated` = N): it describes N busy ranks per host, a
profile timed alone one, and the two are different devices for reuse purposes.

Off by default: on the development VM, quiet, two single-thread trainings side by side run at the
speed of one alone (the small model's GEMMs are compute-bound and its caches private), and the
slowest-of-N repetition then overstates kernel times by about 10% (docs/measurement.md).
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from primus.measure.collectives import init_workers, spawn_workers
from primus.measure.kernels import MAX_REPS, MIN_REPS, KernelBench, Unsupported
from primus.measure.plan import Recipe

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


def measure_colocated(recipes: list[Recipe], procs: int, dtype: torch.dtype, bound: int, target_s: float,
                      budget_s: float) -> tuple[dict[Recipe, tuple[list[float], float, str] | str], str | None]:
    """Per recipe: (samples, scale, note), or the reason it could not run; plus an error line if the
    workers failed. Recipes cut by the deadline are absent."""
    if not recipes:
        return {}, None
    payload = {"dtype": str(dtype).removeprefix("torch."), "bound": bound, "target_s": target_s,
               "recipes": [r.to_json() for r in recipes]}
    got, err = spawn_workers("primus.measure.colocated", payload, procs, "cpu", budget_s)
    if err is not None:
        return {}, f"co-located kernel workers failed ({err}); kernels left modelled"
    out: dict[Recipe, tuple[list[float], float, str] | str] = {}
    for r, res in zip(recipes, got, strict=False):
        if res is None:
            continue
        out[r] = res if isinstance(res, str) else (list(res["samples"]), float(res["scale"]), str(res["note"]))
    return out, None


def _agree(values: list[float], op: dist.ReduceOp.RedOpType) -> list[float]:
    """The same reduction of `values` on every process (one small gloo all-reduce)."""
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=op)
    return [float(x) for x in t.tolist()]


def _worker(rank: int, cfg: dict[str, Any]) -> None:
    """Every process runs the same recipes in lockstep: one all-reduce to agree to go on (time left on
    rank 0, the kernel ready everywhere), one for the repetition count (from the slowest warm-up), a
    barrier before each repetition, and one for the per-repetition maxima at the end."""
    warnings.filterwarnings("ignore", category=FutureWarning)
    init_workers(rank, cfg)
    bench = KernelBench("cpu", DTYPES[cfg["dtype"]], cfg["bound"], cfg["target_s"])
    results: list[Any] = []
    for raw in cfg["recipes"]:
        recipe = Recipe(raw["op"], tuple(raw["dims"]), raw["backward"], raw["flag"])
        why = "failed on another process"
        prep = None
        warm = 0.0
        if rank != 0 or time.time() < cfg["deadline"]:
            try:
                prep = bench.prepare(recipe)
                t0 = time.perf_counter()
                prep.fn()  # warm-up
                warm = time.perf_counter() - t0
            except (Unsupported, RuntimeError) as exc:
                prep, why = None, str(exc)
        timely = 1.0 if rank != 0 or time.time() < cfg["deadline"] else 0.0
        ok, in_time = _agree([1.0 if prep is not None else 0.0, timely], dist.ReduceOp.MIN)
        if not in_time:
            break
        if not ok or prep is None:  # every process skips what one of them cannot run
            results.append(why)
            continue
        slowest = _agree([warm], dist.ReduceOp.MAX)[0]
        reps = int(min(MAX_REPS, max(MIN_REPS, cfg["target_s"] / max(slowest, 1e-7))))
        local: list[float] = []
        for _ in range(reps):
            dist.barrier()
            t0 = time.perf_counter()
            prep.fn()
            local.append(time.perf_counter() - t0)
        samples = _agree(local, dist.ReduceOp.MAX)  # a repetition lasts as long as its slowest process
        results.append({"samples": samples, "scale": prep.scale, "note": prep.note})
        del prep
    dist.barrier()
    if rank == 0:
        Path(cfg["out"]).write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    _worker(int(sys.argv[2]), json.loads(Path(sys.argv[1]).read_text()))
