"""Projection speed: projections per second on one core.

    python benchmarks/bench_projection.py            # prints the figures the README quotes

Two configurations from the projection issue:

- a typical dense config through the fast path: Llama 3.1 70B on 128 x H100, TP8 PP4 VP1, MBS 1,
  GBS 128 (M = 32 microbatches per pipeline), method "fast";
- an interleaved config through the full discrete-event simulation: Llama 3.1 70B FP8 on 64 x H100,
  TP4 PP8 VP5, MBS 1, GBS 128 (M = 64), method "simulate".

Each is timed three ways: `warm` (one Projector, the same layout again: what `enumerate --rank` and
`project` pay once block costs are cached), `sweep` (one Projector over every legal completion of the
job's free axes, as ranking does), and `cold` (a new Projector with a perturbed profile every call: what
a calibration fitter pays, nothing cached but the shape-only inventories).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from primus.job import Job, job_from_mapping
from primus.parallel import Layout
from primus.projection import Projector, load_profile

DENSE = {"model": "llama3.1-70b", "hardware": "h100-80gb", "gpus": 128, "seq_len": 8192,
         "global_batch_size": 128, "precision": "bf16", "parallel": {"tp": 8, "pp": 4, "vp": 1, "cp": 1, "mbs": 1}}
DENSE_LAYOUT = Layout(tp=8, pp=4, vp=1, cp=1, ep=1, etp=1, dp=4, mbs=1, sp=True, recompute="none",
                      sharding="dist_opt")
INTERLEAVED = {"model": "llama3.1-70b", "hardware": "h100-80gb", "gpus": 64, "seq_len": 8192,
               "global_batch_size": 128, "precision": "fp8", "overlap": {"tp_comm": True},
               "parallel": {"tp": 4, "pp": 8, "vp": 5, "cp": 1, "mbs": 1}}
INTERLEAVED_LAYOUT = Layout(tp=4, pp=8, vp=5, cp=1, ep=1, etp=1, dp=2, mbs=1, sp=True, recompute="none",
                            sharding="dist_opt")


def rate(fn: Callable[[], Any], seconds: float = 2.0, repeats: int = 3) -> float:
    """Calls per second: the median of `repeats` runs of about `seconds` each."""
    fn()
    rates = []
    for _ in range(repeats):
        n = 0
        start = time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= seconds:
                break
        rates.append(n / elapsed)
    return statistics.median(rates)


def bench(name: str, job: Job, layout: Layout, method: str) -> dict[str, float]:
    proj = Projector(job)
    p = proj.project(layout, method)
    out = {"warm": rate(lambda: proj.project(layout, method, peak=(p.peak_bytes, p.fits)))}
    out["warm+ledger"] = rate(lambda: proj.project(layout, method))
    from primus.solver.api import Question

    legal = Question(job).legal()
    sweep_proj = Projector(job)
    i = [0]

    def one() -> None:
        cand = legal[i[0] % len(legal)]
        i[0] += 1
        sweep_proj.project(cand.layout, method, peak=(cand.peak_bytes, True))

    out["sweep"] = rate(one)
    profile = load_profile(job.cluster)
    k = [0]

    def cold() -> None:
        k[0] += 1
        prof = profile.with_parameters({"gemm.bf16.efficiency": 0.7 + 1e-6 * (k[0] % 1000)})
        Projector(job, prof).project(layout, method, peak=(p.peak_bytes, p.fits))

    out["cold"] = rate(cold, seconds=1.0)
    print(f"{name}: step {p.step_time_s:.3f} s by {p.timing}, {len(legal)} legal completions")
    for key, value in out.items():
        print(f"  {key:12s} {value:10,.0f} projections/s")
    return out


def main() -> None:
    bench("dense TP8 PP4 VP1 M32, fast path", job_from_mapping(DENSE, "bench"), DENSE_LAYOUT, "fast")
    bench("interleaved TP4 PP8 VP5 M64, simulation", job_from_mapping(INTERLEAVED, "bench"), INTERLEAVED_LAYOUT,
          "simulate")


if __name__ == "__main__":
    main()
