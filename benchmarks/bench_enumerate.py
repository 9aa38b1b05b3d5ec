"""Enumeration speed: the vectorised engine against a plain-Python brute force over the same rules.

Run: python benchmarks/bench_enumerate.py
Prints wall-clock seconds for counting and listing legal layouts, the brute force's time on the
same job where it finishes in reasonable time, and the time of a `fit` refusal with its suggestions.
"""

from __future__ import annotations

import time
from pathlib import Path

from primus.job import load_job
from primus.projection.complete import speed_of
from primus.solver.api import Question
from primus.solver.brute import brute_force
from primus.solver.fit import fit

ROOT = Path(__file__).resolve().parent.parent


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main() -> None:
    print("| job | engine | legal layouts | seconds | layouts/s |")
    print("|---|---|---:|---:|---:|")
    for name, brute in (("deepseek-v3-h100-1024.yaml", False), ("deepseek-v3-b200-256-bridge.yaml", False),
                        ("llama3.1-70b-mi300x-free.yaml", True)):
        job = load_job(ROOT / "examples" / name)
        q = Question(job)
        count, secs = timed(q.count)
        print(f"| {name} | vectorised count | {count:,} | {secs:.2f} | {count / secs:,.0f} |")
        rows, secs2 = timed(lambda q=q: q.candidates.parallel_dicts())
        print(f"| {name} | vectorised listing (after count) | {len(rows):,} | {secs2:.2f} | "
              f"{len(rows) / max(secs2, 1e-9):,.0f} |")
        if brute:
            found, secs3 = timed(lambda q=q: brute_force(Question(q.job)))
            print(f"| {name} | plain-Python brute force | {len(found):,} | {secs3:.2f} | {len(found) / secs3:,.0f} |")
            assert len(found) == count
    refusal()


def refusal() -> None:
    """`fit` on a job that does not fit: the minimal core plus five suggestions, completed by least memory
    and by projected throughput (which projects every completion of the first 20 pin assignments)."""
    job = load_job(ROOT / "examples" / "llama3.1-70b-h100-tp1.yaml")
    print("\n| refusal of llama3.1-70b-h100-tp1.yaml | seconds |")
    print("|---|---:|")
    fit(Question(job))  # warm the per-process caches (table build, ledger units) once
    _, secs = timed(lambda: fit(Question(job)))
    print(f"| core + suggestions by least memory | {secs:.2f} |")
    speed = speed_of(job)
    _, secs = timed(lambda: fit(Question(job), speed=speed))
    print(f"| core + suggestions by projected throughput | {secs:.2f} |")


if __name__ == "__main__":
    main()
