"""Time one recipe (`primus.measure.plan.Recipe`) with torch on one device: warm-up, repetitions, median.

Every recipe becomes a closure that runs the kernel once; `time_recipe` calls it after a warm-up, sizes
the repetitions to a small time target (at least 3, at most 25) and returns the raw samples, so the
profile keeps them and the median is taken there. On CUDA each sample is bracketed by CUDA events (the
kernel's device time, launch included); on CPU by `time.perf_counter` in the calling thread, which
runs torch with the thread count the caller set (one per process for the CPU proof).

Backward recipes build the forward once with autograd and time `torch.autograd.grad` with
`retain_graph`, i.e. the backward kernels alone, as a training step runs them.

Bounded buffers: memory-bound recipes above `bound` bytes run on a proportionally smaller tensor and
carry the linear `scale` back (their time is bytes over bandwidth), so a measurement never needs the
target's whole optimizer state or logits; GEMMs and attention always run at their real shapes.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from primus.measure.plan import Recipe
from primus.projection.ops import ACT

MIN_REPS, MAX_REPS = 3, 25


@dataclass(frozen=True)
class Prepared:
    """A kernel ready to run: `fn` runs it once; its time × `scale` is the recipe's time."""

    fn: Callable[[], object]
    scale: float = 1.0
    note: str = ""


class Unsupported(Exception):
    """This recipe cannot run on this device / torch build; the message says why (it stays modelled)."""


class KernelBench:
    """Prepares and times recipes on one device in one dtype (not the projection's KernelTimer protocol:
    this one runs torch kernels; that one answers calls with seconds)."""

    def __init__(self, device: str, dtype: torch.dtype, bound_bytes: int, target_s: float = 0.15) -> None:
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self.dtype = dtype
        self.bound = bound_bytes
        self.target_s = target_s
        self.esize = torch.empty((), dtype=dtype).element_size()

    # ---- timing -----------------------------------------------------------------------------------

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def _once(self, fn: Callable[[], object]) -> float:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end)) / 1e3
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    def time_recipe(self, recipe: Recipe, deadline: float) -> tuple[list[float], float, str]:
        """(raw samples in seconds, scale, note). Raises Unsupported when the kernel cannot run here."""
        prep = self.prepare(recipe)
        try:
            prep.fn()  # warm-up: allocator, kernel selection, caches
            self.sync()
            first = self._once(prep.fn)
        except (RuntimeError, NotImplementedError) as exc:  # e.g. out of memory, no kernel for this dtype
            raise Unsupported(f"{recipe.op} failed on {self.device.type}: {str(exc).splitlines()[0][:160]}") from None
        samples = [first]
        reps = int(min(MAX_REPS, max(MIN_REPS, self.target_s / max(first, 1e-7))))
        while len(samples) < reps and (len(samples) < MIN_REPS or time.perf_counter() + first < deadline):
            samples.append(self._once(prep.fn))
        return samples, prep.scale, prep.note

    # ---- recipes ----------------------------------------------------------------------------------

    def _t(self, *shape: int, dtype: torch.dtype | None = None, grad: bool = False) -> torch.Tensor:
        t = torch.randn(*shape, device=self.device, dtype=dtype or self.dtype) * 0.1
        return t.requires_grad_(grad)

    def _bounded(self, elems: int, bytes_per_elem: float) -> tuple[int, float]:
        """Elements to allocate and the linear scale back to `elems`."""
        limit = max(1, int(self.bound // max(bytes_per_elem, 1)))
        return (elems, 1.0) if elems <= limit else (limit, elems / limit)

    def prepare(self, r: Recipe) -> Prepared:
        builder = getattr(self, f"_r_{r.op}", None)
        if builder is None:
            raise Unsupported(f"no torch recipe for {r.op}")
        try:
            return builder(r)
        except (RuntimeError, NotImplementedError, TypeError, ValueError) as exc:
            raise Unsupported(f"{r.op} failed on {self.device.type}: {str(exc).splitlines()[0][:160]}") from None

    def _r_gemm(self, r: Recipe) -> Prepared:
        m, n, k, count = r.dims
        fmt, _, lay = r.flag.partition(":")
        if fmt == "fp8":
            return self._fp8_gemm(m, n, k, count)
        if lay == "tn":  # weight gradient: xᵀ · dy with x [k × m] and dy [k × n] stored row-major
            a = self._t(count, k, m).transpose(-1, -2) if count > 1 else self._t(k, m).t()
            b = self._t(count, k, n) if count > 1 else self._t(k, n)
        else:  # x · Wᵀ with W [n × k] stored row-major (nn.Linear)
            a = self._t(count, m, k) if count > 1 else self._t(m, k)
            b = self._t(count, n, k).transpose(-1, -2) if count > 1 else self._t(n, k).t()
        out = torch.empty(*((count,) if count > 1 else ()), m, n, device=self.device, dtype=self.dtype)
        if count > 1:
            return Prepared(lambda: torch.bmm(a, b, out=out))
        return Prepared(lambda: torch.mm(a, b, out=out))

    def _fp8_gemm(self, m: int, n: int, k: int, count: int) -> Prepared:
        if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
            raise Unsupported("no torch._scaled_mm")
        if m % 16 or n % 16 or k % 16:
            raise Unsupported(f"FP8 GEMM dims must be multiples of 16 (got {m}×{n}×{k})")
        a = self._t(m, k, dtype=torch.float32).to(torch.float8_e4m3fn)
        b = self._t(n, k, dtype=torch.float32).to(torch.float8_e4m3fn).t()  # column-major operand
        one = torch.ones((), device=self.device, dtype=torch.float32)

        def run() -> None:
            for _ in range(count):  # a grouped FP8 GEMM as `count` launches
                torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        return Prepared(run)

    def _r_attention(self, r: Recipe) -> Prepared:
        bh, sq, kv, d_qk, d_v = r.dims
        q = self._t(1, bh, sq, d_qk, grad=True)
        k, v = self._t(1, bh, kv, d_qk, grad=True), self._t(1, bh, kv, d_v, grad=True)
        causal = r.flag == "causal"
        if not r.backward:
            return Prepared(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        g = torch.randn_like(out)
        return Prepared(lambda: torch.autograd.grad(out, (q, k, v), g, retain_graph=True))

    def _fwd_bwd(self, r: Recipe, fwd: Callable[[], torch.Tensor], inputs: tuple[torch.Tensor, ...],
                 scale: float = 1.0) -> Prepared:
        """Forward as is; backward as the gradient of one retained forward."""
        note = f"bounded buffer, time × {scale:.4g}" if scale != 1.0 else ""
        if not r.backward:
            return Prepared(fwd, scale, note)
        out = fwd()
        g = torch.randn_like(out)
        return Prepared(lambda: torch.autograd.grad(out, inputs, g, retain_graph=True), scale, note)

    def _r_norm(self, r: Recipe) -> Prepared:
        rows, dim = r.dims
        rows, scale = self._bounded(rows, dim * self.esize * 2)
        x, w = self._t(rows, dim, grad=True), (torch.ones(dim, device=self.device, dtype=self.dtype)).requires_grad_()
        if r.flag == "rms":
            return self._fwd_bwd(r, lambda: F.rms_norm(x, (dim,), w, 1e-5), (x, w), scale)
        b = torch.zeros(dim, device=self.device, dtype=self.dtype, requires_grad=True)
        return self._fwd_bwd(r, lambda: F.layer_norm(x, (dim,), w, b, 1e-5), (x, w, b), scale)

    def _r_swiglu(self, r: Recipe) -> Prepared:
        elems, scale = self._bounded(r.dims[0], 3 * self.esize)
        x = self._t(2, elems, grad=True)
        return self._fwd_bwd(r, lambda: F.silu(x[0]) * x[1], (x,), scale)

    def _r_gelu(self, r: Recipe) -> Prepared:
        elems, scale = self._bounded(r.dims[0], 2 * self.esize)
        x = self._t(elems, grad=True)
        return self._fwd_bwd(r, lambda: F.gelu(x), (x,), scale)

    def _r_squared_relu(self, r: Recipe) -> Prepared:
        elems, scale = self._bounded(r.dims[0], 2 * self.esize)
        x = self._t(elems, grad=True)
        return self._fwd_bwd(r, lambda: torch.relu(x).square(), (x,), scale)

    def _r_residual(self, r: Recipe) -> Prepared:
        elems, scale = self._bounded(r.dims[0], 3 * self.esize)
        p = float(r.flag or 0)
        x, res = self._t(elems, grad=True), self._t(elems)
        if p > 0:
            return self._fwd_bwd(r, lambda: F.dropout(x, p, training=True) + res, (x,), scale)
        return self._fwd_bwd(r, lambda: x + res, (x,), scale)

    def _r_rope(self, r: Recipe) -> Prepared:
        rows, d = r.dims
        rows, scale = self._bounded(rows, d * self.esize * 2)
        x = self._t(rows, d, grad=True)
        cos, sin = self._t(1, d), self._t(1, d)
        half = d // 2

        def fwd() -> torch.Tensor:
            rot = torch.cat((-x[:, half:], x[:, :half]), dim=-1)
            return x * cos + rot * sin

        return self._fwd_bwd(r, fwd, (x,), scale)

    def _r_cross_entropy(self, r: Recipe) -> Prepared:
        t, vocab = r.dims
        t2, scale = self._bounded(t, vocab * (self.esize + 8))
        logits = self._t(t2, vocab, grad=True)
        target = torch.randint(0, vocab, (t2,), device=self.device)
        return self._fwd_bwd(r, lambda: F.cross_entropy(logits.float(), target), (logits,), scale)

    def _r_embedding(self, r: Recipe) -> Prepared:
        t, h, vocab = r.dims
        table = self._t(vocab, h, grad=True)
        ids = torch.randint(0, vocab, (t,), device=self.device)
        return self._fwd_bwd(r, lambda: F.embedding(ids, table), (table,))

    def _r_copy(self, r: Recipe) -> Prepared:
        # `nbytes` counts bytes read plus written at 2-byte activations: nbytes / 4 elements are copied,
        # in this timer's dtype (an fp32 CPU run moves twice the bytes, as its own kernels do)
        elems, scale = self._bounded(max(1, r.dims[0] // (2 * ACT)), 2 * self.esize)
        src, dst = self._t(elems), torch.empty(elems, device=self.device, dtype=self.dtype)
        return Prepared(lambda: dst.copy_(src), scale, f"bounded buffer, time × {scale:.4g}" if scale != 1 else "")

    def _r_adam(self, r: Recipe) -> Prepared:
        """One Adam step (fp32 master, moments and gradient, plus the cast to the training dtype when
        that is narrower) on min(the call's parameters, a bounded buffer); time scaled to the call's
        parameters, i.e. its bytes over the projection's bytes per parameter."""
        nbytes, per_param = r.dims
        params = nbytes / per_param
        n = max(1, min(math.ceil(params), int(self.bound // (16 + (self.esize if self.esize < 4 else 0)))))
        master = torch.zeros(n, device=self.device, dtype=torch.float32, requires_grad=True)
        master.grad = torch.randn(n, device=self.device, dtype=torch.float32)
        opt = torch.optim.Adam([master], lr=1e-4, fused=True) if self.cuda else \
            torch.optim.Adam([master], lr=1e-4, foreach=True)
        low = torch.empty(n, device=self.device, dtype=self.dtype) if self.esize < 4 else None

        def step() -> None:
            opt.step()
            if low is not None:
                low.copy_(master.detach())

        return Prepared(step, params / n, f"Adam step on {n:,} parameters, time × {params / n:.4g}")


def median(samples: list[float]) -> float:
    return float(statistics.median(samples)) if samples else 0.0
