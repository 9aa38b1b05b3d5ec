"""Frontier-scale answers as whole processes: `fit`, `project` (free axes) and `enumerate --count` on the
five jobs of issue 16, with wall time and peak resident memory of each process.

Run: python benchmarks/bench_frontier.py [--repeat N] [--timeout S] [--only NAME] [--command NAME]
Prints a Markdown table (median wall seconds over the repeats, the median CPU seconds (user + system)
of the child, the largest peak RSS) and the load average before and after, since the development
machine is shared and wall time there counts the waiting too. `--command fit` runs one command only.
Each command runs as its own child process, so interpreter start-up and imports are counted, as a
user would see them; peak RSS is the child's `ru_maxrss` (resource.getrusage(RUSAGE_CHILDREN) of a
one-child wrapper). Bytecode is cached as it is for an installed primus (pip compiles it at install): the
children run with Python's default bytecode caching, into a cache folder of their own under the system's
temporary directory (so nothing is written into the tree), filled by one untimed run first. A machine whose
environment sets PYTHONDONTWRITEBYTECODE (the development sandbox does) would otherwise compile every
module on every start, about 0.2 s that no installed copy pays.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOBS = (
    ("DeepSeek-V3 x 1,024 H100 fp8, TP2 PP8 VP4 EP64 pinned", ROOT / "examples" / "deepseek-v3-h100-1024-pp8vp4.yaml"),
    ("DeepSeek-V3 x 1,024 MI355X bf16, free", ROOT / "benchmarks" / "jobs" / "deepseek-v3-mi355x-1024.yaml"),
    ("Kimi K2 x 2,048 B200 fp8, free", ROOT / "benchmarks" / "jobs" / "kimi-k2-b200-2048.yaml"),
    ("gpt-oss-120b x 256 H100 bf16, free", ROOT / "benchmarks" / "jobs" / "gpt-oss-120b-h100-256.yaml"),
    ("Llama 3.1 405B x 16,384 H100 bf16, free", ROOT / "benchmarks" / "jobs" / "llama3.1-405b-h100-16384.yaml"),
)
COMMANDS = (("fit", ("fit",)), ("project", ("project",)), ("enumerate --count", ("enumerate", "--count")))

# Runs one command as its only child and reports that child's wall time and peak RSS as JSON.
_WRAPPER = """
import json, resource, subprocess, sys, time
start = time.perf_counter()
try:
    code = subprocess.run(sys.argv[2:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                          timeout=float(sys.argv[1])).returncode
except subprocess.TimeoutExpired:
    code = 'timeout'
wall = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"code": code, "wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime,
                  "rss_kib": usage.ru_maxrss}))  # ru_maxrss: KiB on Linux
"""


PYCACHE = Path(tempfile.gettempdir()) / "primus-bench-pycache"


def run_once(args: list[str], timeout: float) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONPYCACHEPREFIX": str(PYCACHE)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    out = subprocess.run([sys.executable, "-c", _WRAPPER, str(timeout), sys.executable, "-m", "primus.cli.main",
                          *args], capture_output=True, text=True, env=env, check=True).stdout
    return json.loads(out)


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} CPUs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--only", default=None, help="run only jobs whose file name contains this")
    ap.add_argument("--command", default=None, choices=[name for name, _ in COMMANDS], help="run only this command")
    opts = ap.parse_args()
    run_once(["models", "list"], opts.timeout)  # untimed: fills the bytecode cache
    run_once([*COMMANDS[1][1], str(JOBS[0][1])], opts.timeout)
    print(f"load average before: {load()}")
    print("| job | command | exit | wall s (median) | wall s (max) | CPU s (median) | peak RSS GiB |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for title, path in JOBS:
        if opts.only and opts.only not in path.name:
            continue
        for name, args in COMMANDS:
            if opts.command and name != opts.command:
                continue
            runs = [run_once([*args, str(path)], opts.timeout) for _ in range(opts.repeat)]
            walls = [float(r["wall_s"]) for r in runs]  # type: ignore[arg-type]
            cpus = [float(r["cpu_s"]) for r in runs]  # type: ignore[arg-type]
            rss = max(int(r["rss_kib"]) for r in runs) / 2**20  # type: ignore[call-overload]
            print(f"| {title} | {name} | {runs[0]['code']} | {statistics.median(walls):.2f} | {max(walls):.2f} | "
                  f"{statistics.median(cpus):.2f} | {rss:.2f} |", flush=True)
    print(f"load average after: {load()}")


if __name__ == "__main__":
    main()
