"""Re-measure the local machine for the `cpu` hardware entry and print a YAML snippet.

    python hardware/measure_cpu.py            # prints the figures to paste into hardware/cpu.yaml

What it measures (numpy only; torch is not needed):
- fp32 matmul throughput: a few square float32 `np.matmul` calls, median time, 2*n^3 FLOP each;
- memory bandwidth: `np.copyto` between two large float32 arrays, bytes read + bytes written over the
  median time;
- a small inter-process round trip through a pipe (scale-up latency: two ranks on one host);
- loopback TCP bandwidth and round trip (scale-out: this machine has no second node);
- logical CPUs (`os.sched_getaffinity`), MemTotal from /proc/meminfo, and the resident size of this
  interpreter after importing numpy (the runtime's own footprint).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import multiprocessing as mp
import os
import platform
import socket
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection

import numpy as np


def _median_seconds(fn: Callable[[], object], repeats: int) -> float:
    for _ in range(2):  # warm-up: the first calls pay thread start-up and page faults
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def matmul_tflops(n: int = 2048, repeats: int = 7) -> float:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    out = np.empty((n, n), dtype=np.float32)
    seconds = _median_seconds(lambda: np.matmul(a, b, out=out), repeats)
    return 2.0 * n**3 / seconds / 1e12


def copy_bandwidth_gb_s(mib: int = 512, repeats: int = 5) -> float:
    count = mib * 2**20 // 4
    src = np.ones(count, dtype=np.float32)
    dst = np.empty_like(src)
    seconds = _median_seconds(lambda: np.copyto(dst, src), repeats)
    return 2.0 * src.nbytes / seconds / 1e9  # one read and one write per byte


def _echo(conn: Connection) -> None:
    while True:
        msg = conn.recv_bytes()
        if not msg:
            return
        conn.send_bytes(msg)


def pipe_one_way_latency_us(rounds: int = 2000) -> float:
    parent, child = mp.Pipe()
    proc = mp.Process(target=_echo, args=(child,), daemon=True)
    proc.start()
    for _ in range(100):
        parent.send_bytes(b"x")
        parent.recv_bytes()
    start = time.perf_counter()
    for _ in range(rounds):
        parent.send_bytes(b"x")
        parent.recv_bytes()
    elapsed = time.perf_counter() - start
    parent.send_bytes(b"")
    proc.join(timeout=5)
    return elapsed / rounds / 2 * 1e6


def _tcp_pair() -> tuple[socket.socket, socket.socket]:
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    server.close()
    for s in (client, peer):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, peer


def _recv_exactly(sock: socket.socket, nbytes: int, chunk: int) -> None:
    left = nbytes
    while left:
        got = sock.recv(min(chunk, left))
        if not got:
            raise ConnectionError("peer closed early")
        left -= len(got)


def tcp_loopback(mib: int = 256, rounds: int = 2000) -> tuple[float, float]:
    """(bandwidth GB/s, one-way latency us) over loopback TCP."""
    client, peer = _tcp_pair()
    payload = bytes(4 * 2**20)
    total = mib * 2**20

    def sink() -> None:
        _recv_exactly(peer, total, 4 * 2**20)

    reader = threading.Thread(target=sink)
    reader.start()
    start = time.perf_counter()
    sent = 0
    while sent < total:
        client.sendall(payload)
        sent += len(payload)
    reader.join()
    bandwidth = total / (time.perf_counter() - start) / 1e9

    def echo() -> None:
        for _ in range(rounds + 100):
            peer.sendall(peer.recv(1))

    responder = threading.Thread(target=echo)
    responder.start()
    for _ in range(100):
        client.sendall(b"x")
        client.recv(1)
    start = time.perf_counter()
    for _ in range(rounds):
        client.sendall(b"x")
        client.recv(1)
    latency = (time.perf_counter() - start) / rounds / 2 * 1e6
    responder.join()
    client.close()
    peer.close()
    return bandwidth, latency


def logical_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _proc_field(path: str, key: str) -> int:
    """A `kB` field of a /proc file, in bytes."""
    with open(path, encoding="ascii") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(f"{key} not in {path}")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


@dataclass(frozen=True)
class Measurement:
    date: str
    cpu_model: str
    logical_cpus: int
    mem_total_bytes: int
    numpy_version: str
    rss_bytes: int
    matmul_tflops: float
    copy_gb_s: float
    pipe_latency_us: float
    tcp_gb_s: float
    tcp_latency_us: float


def measure() -> Measurement:
    rss = _proc_field("/proc/self/status", "VmRSS")  # before any array is allocated
    tcp_gb_s, tcp_latency_us = tcp_loopback()
    return Measurement(
        date=_dt.date.today().isoformat(),
        cpu_model=cpu_model(),
        logical_cpus=logical_cpus(),
        mem_total_bytes=_proc_field("/proc/meminfo", "MemTotal"),
        numpy_version=np.__version__,
        rss_bytes=rss,
        matmul_tflops=matmul_tflops(),
        copy_gb_s=copy_bandwidth_gb_s(),
        pipe_latency_us=pipe_one_way_latency_us(),
        tcp_gb_s=tcp_gb_s,
        tcp_latency_us=tcp_latency_us,
    )


def snippet(m: Measurement) -> str:
    tflops = round(m.matmul_tflops, 4)
    copy = round(m.copy_gb_s, 2)
    where = (
        f"measured on the development machine ({m.logical_cpus} cores, {m.cpu_model}) on {m.date} "
        f"with numpy {m.numpy_version}"
    )
    return "\n".join(
        [
            "# --- measured by hardware/measure_cpu.py ---",
            f"peak_tflops: {{bf16: {tflops}, fp32: {tflops}}}",
            f"peak_tflops_source: {where}: median of 7 float32 np.matmul 2048x2048 (2*n^3 FLOP); bf16 set "
            "equal to the fp32 figure (numpy has no bf16 GEMM), see hardware/cpu.yaml notes",
            f"hbm_bytes: {m.mem_total_bytes}",
            f"hbm_bytes_source: {where}: MemTotal of /proc/meminfo",
            f"hbm_bandwidth_gb_s: {copy}",
            f"hbm_bandwidth_source: {where}: median np.copyto of 512 MiB float32 (read + write bytes)",
            f"gpus_per_node: 1  # logical CPUs: {m.logical_cpus}",
            f"scaleup.bandwidth_gb_s: {copy}  # same memory copy",
            f"scaleup.latency_us: {round(m.pipe_latency_us, 2)}  # one way, pipe ping-pong",
            f"scaleout.nic_bandwidth_gb_s: {round(m.tcp_gb_s, 2)}  # loopback TCP, 256 MiB",
            f"scaleout.latency_us: {round(m.tcp_latency_us, 2)}  # one way, loopback TCP ping-pong",
            f"reserves.runtime_context_bytes: {m.rss_bytes}  # VmRSS after importing numpy",
        ]
    )


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(snippet(measure()))


if __name__ == "__main__":
    main()
