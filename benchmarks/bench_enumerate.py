"""Enumeration speed: the vectorised engine against a plain-Python brute force over the same rules.

Run: python benchmarks/bench_enumerate.py
Prints wall-clock seconds for counting and listing legal layouts, and the brute force's time on the
same job where it finishes in reasonable time.
"""

from __future__ import annotations

import time
from pathlib import Path

from primus.job import load_job
from primus.solver.api import Question
from primus.solver.brute import brute_force

ROOT = Path(__file__).resolve().parent.parent


def timed(fn):  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def main() -> None:
    print("| job | engine | legal layouts | seconds | layouts/s |")
    print("|---|---|---:|---:|---:|")
    for name, brute in (("deepseek-v3-h100-1024.yaml", False), ("llama3.1-70b-mi300x-free.yaml", True)):
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


if __name__ == "__main__":
    main()
