"""Kernel timers: the one interface through which work becomes seconds.

`AnalyticTimer` models each call from the hardware entry and the calibration profile; a measured
table (`MeasuredTimer`) overrides any call it has a time for and defers the rest, and every answer
says which it was, so a projection can report its `sources`. Calls are small frozen records, so a
measurement campaign can key its table by them.

Analytic model (work over peak × efficiency):

- GEMM: max(FLOPs / (peak × plateau), bytes / (HBM × hbm efficiency)) + count × half_flops / (peak ×
  plateau). The first term is the roofline (skinny GEMMs, e.g. experts with few tokens, are bound by
  their operand bytes), the second the fixed per-problem cost that makes the efficiency curve
  e(F) = plateau · F / (F + half_flops) over GEMM size;
- attention: FLOPs / (bf16 peak × forward or backward efficiency);
- memory-bound kernel: (bytes + half_bytes) / (HBM bandwidth × efficiency);
- collective: `primus.projection.collectives.LinkModel`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

from primus.errors import InputError
from primus.projection.collectives import LinkModel
from primus.projection.ops import Attention
from primus.projection.placement import GroupShape
from primus.projection.profile import PEAK_DTYPE, Profile, precision_refusal
from primus.specs.hardware import ClusterSpec


class Timed(NamedTuple):
    seconds: float
    measured: bool


@dataclass(frozen=True, slots=True)
class GemmCall:
    """One GEMM launch: `count` problems of [m × k] · [k × n] in `fmt`, with operand and output widths."""

    fmt: str
    m: int
    n: int
    k: int
    count: int
    in_bytes: float
    out_bytes: float

    @property
    def flops(self) -> int:
        return gemm_flops(self.m, self.n, self.k, self.count)

    @property
    def nbytes(self) -> float:
        return gemm_bytes(self.m, self.n, self.k, self.count, self.in_bytes, self.out_bytes)


def gemm_flops(m: int, n: int, k: int, count: int) -> int:
    return 2 * m * n * k * count


def gemm_bytes(m: int, n: int, k: int, count: int, in_bytes: float, out_bytes: float) -> float:
    """Operand and output bytes of `count` [m × k] · [k × n] problems."""
    return count * ((m * k + k * n) * in_bytes + m * n * out_bytes)


@dataclass(frozen=True, slots=True)
class AttentionCall:
    op: Attention
    backward: bool


@dataclass(frozen=True, slots=True)
class MemoryCall:
    nbytes: float


@dataclass(frozen=True, slots=True)
class CollectiveCall:
    """One collective on a group; `fanout` is the top-k of a deduplicating token dispatch."""

    kind: str
    nbytes: float
    group: GroupShape
    fanout: int = 1


@runtime_checkable
class KernelTimer(Protocol):
    """Seconds for each kind of call, and whether the answer was measured."""

    def gemm(self, call: GemmCall) -> Timed: ...

    def attention(self, call: AttentionCall) -> Timed: ...

    def memory(self, call: MemoryCall) -> Timed: ...

    def collective(self, call: CollectiveCall) -> Timed: ...


class AnalyticTimer:
    """The simulation mode: every call modelled from datasheet figures and profile efficiencies."""

    def __init__(self, cluster: ClusterSpec, profile: Profile) -> None:
        acc = cluster.accelerator
        self.cluster = cluster
        self.profile = profile
        self.hbm = acc.hbm_bandwidth_gb_s * 1e9 * float(profile.hbm.efficiency.value)
        self.half_bytes = float(profile.hbm.half_bytes.value)
        self._gemm: dict[str, tuple[float, float]] = {}
        for fmt, params in profile.gemm.items():
            dtype = PEAK_DTYPE[fmt]
            if dtype not in acc.peak_tflops:
                continue
            rate = acc.peak_flops(dtype) * float(params.efficiency.value)
            self._gemm[fmt] = (rate, float(params.half_flops.value))
        peak = acc.peak_flops("bf16")  # attention runs in bf16/fp16 (same tensor-core rate) under FP8 too
        self.attn_fwd = peak * float(profile.attention.fwd_efficiency.value)
        self.attn_bwd = peak * float(profile.attention.bwd_efficiency.value)
        self.links = LinkModel(cluster, profile)

    def supports(self, fmt: str) -> bool:
        return fmt in self._gemm

    def require(self, fmt: str, where: str) -> None:
        """InputError unless both the accelerator and the profile know the GEMM format `fmt`."""
        if fmt not in self._gemm:
            raise InputError(where, "precision", precision_refusal(self.cluster, frozenset(self._gemm), fmt))

    def gemm(self, call: GemmCall) -> Timed:
        return Timed(self.gemm_seconds(call.fmt, call.m, call.n, call.k, call.count, call.in_bytes, call.out_bytes),
                     False)

    def gemm_seconds(self, fmt: str, m: int, n: int, k: int, count: int, in_bytes: float, out_bytes: float) -> float:
        """`gemm` of GemmCall(fmt, m, n, k, count, in_bytes, out_bytes) without building the record (block
        costs time thousands of GEMMs in a bounded search)."""
        rate, half = self._gemm[fmt]
        compute = gemm_flops(m, n, k, count) / rate
        memory = gemm_bytes(m, n, k, count, in_bytes, out_bytes) / self.hbm
        return max(compute, memory) + count * half / rate

    def attention(self, call: AttentionCall) -> Timed:
        if call.backward:
            return Timed(call.op.bwd_flops / self.attn_bwd, False)
        return Timed(call.op.fwd_flops / self.attn_fwd, False)

    def memory(self, call: MemoryCall) -> Timed:
        return Timed(self.memory_seconds(call.nbytes), False)

    def memory_seconds(self, nbytes: float) -> float:
        """`memory` of MemoryCall(nbytes) without building the record."""
        if nbytes <= 0:
            return 0.0
        return (nbytes + self.half_bytes) / self.hbm

    def collective(self, call: CollectiveCall) -> Timed:
        return Timed(self.links.time(call.kind, call.nbytes, call.group, call.fanout), False)


class MeasuredTimer:
    """Measured seconds for the calls in `table`; everything else from `fallback`.

    The measurement issue fills `table` (keyed by the call records above) from kernel benchmarks on
    the real machine; the projection then reports those breakdown entries as `measured`.
    """

    def __init__(self, fallback: KernelTimer, table: Mapping[object, float]) -> None:
        self.fallback = fallback
        self.table = dict(table)

    def _lookup(self, call: object) -> float | None:
        value = self.table.get(call)
        return None if value is None else float(value)

    def gemm(self, call: GemmCall) -> Timed:
        t = self._lookup(call)
        return Timed(t, True) if t is not None else self.fallback.gemm(call)

    def attention(self, call: AttentionCall) -> Timed:
        t = self._lookup(call)
        return Timed(t, True) if t is not None else self.fallback.attention(call)

    def memory(self, call: MemoryCall) -> Timed:
        t = self._lookup(call)
        return Timed(t, True) if t is not None else self.fallback.memory(call)

    def collective(self, call: CollectiveCall) -> Timed:
        t = self._lookup(call)
        return Timed(t, True) if t is not None else self.fallback.collective(call)


class RecordingTimer:
    """Answers from `fallback` and remembers every distinct call: the list of kernels and collectives a
    projection depends on, i.e. what a measurement campaign has to time to replace the model."""

    def __init__(self, fallback: KernelTimer) -> None:
        self.fallback = fallback
        self.calls: set[object] = set()

    def gemm(self, call: GemmCall) -> Timed:
        self.calls.add(call)
        return self.fallback.gemm(call)

    def attention(self, call: AttentionCall) -> Timed:
        self.calls.add(call)
        return self.fallback.attention(call)

    def memory(self, call: MemoryCall) -> Timed:
        self.calls.add(call)
        return self.fallback.memory(call)

    def collective(self, call: CollectiveCall) -> Timed:
        self.calls.add(call)
        return self.fallback.collective(call)
