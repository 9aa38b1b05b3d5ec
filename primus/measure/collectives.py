"""Time collectives at the target's message sizes across local processes with torch.distributed.

`measure_collectives` starts `procs` worker processes, one per device: NCCL (RCCL on ROCm builds)
on GPUs, one GPU per process; gloo on CPU, each process with one torch thread (the CPU proof's
"device" is one process with one thread). Every process runs the same list, in order:

- all-reduce of `nbytes`; all-gather into an `nbytes` output; reduce-scatter of an `nbytes` input;
  all-to-all of `nbytes` per rank (the projection's conventions, `primus.projection.ops.Comm`);
- point-to-point: a ping-pong between ranks 0 and 1, half the round trip per message.

A group smaller than `procs` runs on the first `size` ranks (a sub-group); the others wait at the
barrier. Each repetition is fenced by a barrier (and a device synchronise), every rank times its own
call, and the repetition's time is the slowest rank's (a collective ends when its last rank does).
Messages above `bound` bytes run at `bound` and are scaled linearly (bandwidth-bound at that size).
The parent gives the workers a wall-clock deadline; rank 0 decides, before each item, whether time is
left, and broadcasts the decision so every rank runs the same list.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

MIN_REPS, MAX_REPS = 3, 15
REPS_TARGET_S = 0.2  # repetitions per collective: enough for about this many seconds, within the bounds above
WORKER_GRACE_S = 180.0  # past the budget, how long the parent waits for workers (start-up, NCCL set-up)
GROUP_TIMEOUT_S = 120  # torch.distributed's own timeout for a worker's collectives (a hang fails, not waits)


@dataclass(frozen=True)
class CollectiveSpec:
    key: str
    kind: str  # all_reduce | all_gather | reduce_scatter | all_to_all | p2p
    nbytes: int
    size: int


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _op(kind: str, nbytes: int, size: int, rank: int, group: Any, device: torch.device) -> Callable[[], None]:
    """One call of `kind` on this rank, with float32 buffers of `nbytes` in the projection's sense."""
    n = max(size, -(-nbytes // 4))
    n = -(-n // size) * size  # divisible into `size` shards
    full = torch.ones(n, device=device)
    shard = torch.ones(n // size, device=device)
    if kind == "all_reduce":
        return lambda: dist.all_reduce(full, group=group)
    if kind == "all_gather":
        gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
        return lambda: gather(full, shard, group=group)
    if kind == "reduce_scatter":
        scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        return lambda: scatter(shard, full, group=group)
    if kind == "all_to_all":
        out = torch.empty_like(full)
        return lambda: dist.all_to_all_single(out, full, group=group)
    if kind == "p2p":
        peer = 1 - rank

        def ping() -> None:
            if rank == 0:
                dist.send(full, peer)
                dist.recv(full, peer)
            else:
                dist.recv(full, peer)
                dist.send(full, peer)

        return ping
    raise ValueError(f"unknown collective {kind!r}")


def _worker(rank: int, cfg: dict[str, Any]) -> None:
    warnings.filterwarnings("ignore", category=FutureWarning)
    device = init_workers(rank, cfg)
    procs, bound, deadline = cfg["procs"], cfg["bound"], cfg["deadline"]
    groups: dict[int, Any] = {procs: None}
    results: dict[str, Any] = {}
    for spec in cfg["specs"]:
        size = int(spec["size"])
        if size not in groups:  # every rank must take part in creating a sub-group
            groups[size] = dist.new_group(list(range(size)))
        if not rank0_decides(rank, time.time() < deadline, device):
            break
        nbytes = int(spec["nbytes"])
        run = min(nbytes, bound)
        member = rank < size and (spec["kind"] != "p2p" or rank < 2)
        fn = _op(spec["kind"], run, size, rank, groups[size], device) if member else None
        samples: list[float] = []
        reps = MAX_REPS
        i = -1
        while i < reps:  # i = -1 is the warm-up (communicator and connection set-up)
            dist.barrier()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            if fn is not None:
                fn()
                if device.type == "cuda":
                    torch.cuda.synchronize(device)
            dt = torch.tensor([time.perf_counter() - t0 if fn is not None else 0.0], device=device)
            dist.all_reduce(dt, op=dist.ReduceOp.MAX)
            if i >= 0:
                samples.append(float(dt.item()) / (2 if spec["kind"] == "p2p" else 1))
                if i == 0:
                    reps = int(min(MAX_REPS, max(MIN_REPS, REPS_TARGET_S / max(samples[0], 1e-6))))
            i += 1
        results[spec["key"]] = {"samples": samples, "scale": nbytes / run, "ran_bytes": run}
    dist.barrier()
    if rank == 0:
        Path(cfg["out"]).write_text(json.dumps(results))
    dist.destroy_process_group()


def spawn_workers(module: str, cfg: dict[str, Any], procs: int, device_kind: str, budget_s: float
                  ) -> tuple[Any, str | None]:
    """Run `python -m module ARGS RANK` for each rank, wait (budget + a margin for start-up), and return
    what rank 0 wrote to cfg["out"] (JSON), or an error line. Workers are separate interpreters, not
    multiprocessing children, so this works from any caller (a CLI, a test runner, a script on stdin);
    they get a wall-clock deadline, so their start-up (importing torch) counts against the budget. An
    infinite budget (no budget) waits for them as long as they run."""
    with tempfile.TemporaryDirectory(prefix="primus-workers-") as tmp:
        out = os.path.join(tmp, "rank0.json")
        args = os.path.join(tmp, "args.json")
        Path(args).write_text(json.dumps({**cfg, "procs": procs, "port": _free_port(), "device": device_kind,
                                          "deadline": time.time() + budget_s, "out": out}))
        env = dict(os.environ, OMP_NUM_THREADS="1") if device_kind == "cpu" else dict(os.environ)
        workers = [subprocess.Popen([sys.executable, "-m", module, args, str(r)],
                                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                   for r in range(procs)]
        limit = time.monotonic() + budget_s + WORKER_GRACE_S
        errors: list[str] = []
        for w in workers:
            try:
                _, err = w.communicate(timeout=max(1.0, limit - time.monotonic()) if math.isfinite(limit) else None)
            except subprocess.TimeoutExpired:
                w.kill()  # our own child, by its handle
                _, err = w.communicate()
            if w.returncode:
                lines = (err or b"").decode(errors="replace").strip().splitlines()
                errors.append(lines[-1] if lines else f"exit {w.returncode}")
        if os.path.exists(out):
            # Rank 0 writes its file after the workers' last barrier, so every measurement is in it; a
            # process that then aborts while tearing its gloo group down ("terminate called without an
            # active exception", seen under load) does not void them.
            try:
                return json.loads(Path(out).read_text()), None
            except ValueError:
                errors.append("rank 0's result file is incomplete")
        return None, "; ".join(errors)[:300] or "no result"


def init_workers(rank: int, cfg: dict[str, Any]) -> torch.device:
    """A worker's process group (gloo on CPU with one torch thread, NCCL on its own GPU otherwise)."""
    if cfg["device"] == "cpu":
        torch.set_num_threads(1)
        device, backend = torch.device("cpu"), "gloo"
    else:
        torch.cuda.set_device(rank)
        device, backend = torch.device("cuda", rank), "nccl"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{cfg['port']}", rank=rank,
                            world_size=cfg["procs"], timeout=timedelta(seconds=GROUP_TIMEOUT_S))
    return device


def rank0_decides(rank: int, ok: bool, device: torch.device) -> bool:
    """Rank 0's decision (e.g. "time is left"), the same on every rank, so all run the same list."""
    flag = torch.tensor([1.0 if rank != 0 or ok else 0.0], device=device)
    dist.broadcast(flag, 0)
    return bool(flag.item())


def measure_collectives(specs: list[CollectiveSpec], procs: int, device_kind: str, budget_s: float,
                        bound: int) -> tuple[dict[str, dict[str, Any]], str | None]:
    """Samples per spec key (and the linear scale applied), plus an error line if the workers failed.
    Specs cut by the deadline are simply absent from the result."""
    if not specs or procs < 2:
        return {}, None
    payload = {"bound": bound, "specs": [{"key": s.key, "kind": s.kind, "nbytes": s.nbytes, "size": s.size}
                                         for s in specs]}
    got, err = spawn_workers("primus.measure.collectives", payload, procs, device_kind, budget_s)
    if err is not None:
        return {}, f"collective workers failed ({err}); collectives left modelled"
    return dict(got), None


def _main(argv: list[str]) -> None:
    cfg = json.loads(Path(argv[0]).read_text())
    _worker(int(argv[1]), cfg)


if __name__ == "__main__":
    _main(sys.argv[1:])
