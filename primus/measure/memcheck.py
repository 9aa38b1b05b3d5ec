"""Activation bytes of the measured layers, measured, against the ledger.

- On a GPU: one forward of the torch reference layer (`primus.measure.reference`, which saves what
  Megatron-Core + Transformer Engine save) with real tensors. After the forward, the output and the
  layer input's handle are dropped and only the autograd graph is kept, so
  `torch.cuda.memory_allocated()` above the baseline (parameters, the leaf input, RoPE tables) is
  what the layer holds for backward; `max_memory_allocated` and `memory_reserved` are reported too
  (the transient peak, e.g. the reference's unfused attention scores, and the caching allocator's pool).
- On CPU: the trace-memory path (`primus.measure.trace`): the same reference layer under
  FakeTensorMode with torch's MemTracker, so nothing is allocated and any size can be checked.

Both are compared with the ledger's bytes for that layer at TP 1, CP 1, no SP, bf16, flash attention
(`primus.measure.trace.ledger_context`), the same seq_len and mbs. The reference builds TP-1 layers
only, so the check uses the target's tokens per rank (seq / CP) on one device; an MoE layer whose
experts do not fit the free device memory is checked with the downscaled sub-model's experts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from primus.measure.reference import ReferenceLayer, check_supported, rope_tables
from primus.measure.trace import ledger_context, trace_activation_bytes
from primus.memory.activations import layer_bytes
from primus.specs.model import ModelSpec
from primus.specs.params import count_params


@dataclass(frozen=True)
class MemoryRow:
    kind: str
    method: str
    seq_len: int
    mbs: int
    experts: int | None
    ledger_bytes: int
    measured_bytes: int
    peak_bytes: int | None = None
    reserved_bytes: int | None = None
    note: str = ""

    @property
    def error(self) -> float:
        """(ledger − measured) / measured: positive when the ledger over-counts."""
        return (self.ledger_bytes - self.measured_bytes) / self.measured_bytes if self.measured_bytes else 0.0

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "method": self.method, "seq_len": self.seq_len, "mbs": self.mbs,
                "experts": self.experts, "ledger_bytes": self.ledger_bytes, "measured_bytes": self.measured_bytes,
                "peak_bytes": self.peak_bytes, "reserved_bytes": self.reserved_bytes, "error": self.error,
                "note": self.note}


def layer_kinds(model: ModelSpec) -> list[str]:
    return [k for k, present in (("dense", model.has_dense_layers), ("moe", model.num_moe_layers > 0)) if present]


def _cuda_row(model: ModelSpec, kind: str, seq: int, mbs: int, device: torch.device) -> MemoryRow:
    dtype = torch.bfloat16
    torch.cuda.synchronize(device)
    with device:  # build the weights on the GPU directly (initialising billions of them on the host is slow)
        layer = ReferenceLayer(model, kind, moe_probs="activation", dtype=dtype)
    rope = None
    if model.rotary:
        rope = tuple(t.to(device) for t in rope_tables(seq, model.head_dim, dtype))
    x0 = torch.randn(seq, mbs, model.hidden_size, device=device, dtype=dtype, requires_grad=True)
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    x = x0.clone()
    out = layer(x, rope)
    graph = out.grad_fn
    del out, x
    torch.cuda.synchronize(device)
    held = torch.cuda.memory_allocated(device) - base
    peak = torch.cuda.max_memory_allocated(device) - base
    reserved = torch.cuda.memory_reserved(device)
    del graph, layer, x0, rope
    torch.cuda.empty_cache()
    return MemoryRow(kind, "torch.cuda.memory_allocated after forward (graph only)", seq, mbs, model.num_experts,
                     layer_bytes(model, kind, ledger_context(seq, mbs), "none"), held, peak, reserved)


def _fits(model: ModelSpec, kind: str, seq: int, mbs: int, device: torch.device) -> bool:
    """Rough upper bound of the reference forward: weights, 4× the ledger's activations, and the
    reference attention's fp32 score temporaries (a few s × s per head)."""
    free, _ = torch.cuda.mem_get_info(device)
    count = count_params(model)
    layer = count.moe if kind == "moe" else count.dense
    weights = 2 * (layer.total() if layer is not None else 0)
    need = weights + 4 * layer_bytes(model, kind, ledger_context(seq, mbs), "none") \
        + 3 * 4 * mbs * model.num_attention_heads * seq * seq
    return need < 0.8 * free


def check_memory(model: ModelSpec, seq_len: int, mbs: int, device: str, sub_experts: int | None = None
                 ) -> tuple[list[MemoryRow], list[str]]:
    """Rows per layer kind the reference can build, and one line per kind it had to skip."""
    rows: list[MemoryRow] = []
    skipped: list[str] = []
    for kind in layer_kinds(model):
        try:
            check_supported(model, kind, "activation")
        except ValueError as exc:
            skipped.append(f"{kind}: {exc}")
            continue
        try:
            if device == "cpu":
                r = trace_activation_bytes(model, seq_len, mbs, kind, moe_probs="activation")
                rows.append(MemoryRow(kind, "trace: FakeTensorMode + MemTracker (nothing allocated)", seq_len, mbs,
                                      model.num_experts, r.ledger_bytes, r.traced_bytes))
                continue
            dev = torch.device(device)
            m = model
            if not _fits(m, kind, seq_len, mbs, dev) and kind == "moe" and sub_experts:
                m = ModelSpec(**{**model.model_dump(), "num_experts": sub_experts,
                                 "moe_router_topk": min(model.topk, sub_experts)})
            if not _fits(m, kind, seq_len, mbs, dev):
                skipped.append(f"{kind}: the reference layer at seq {seq_len} does not fit the free device memory")
                continue
            row = _cuda_row(m, kind, seq_len, mbs, dev)
            if m is not model:
                row = MemoryRow(**{**row.__dict__, "note": f"downscaled to {sub_experts} experts (EP sub-model)"})
            rows.append(row)
        except (RuntimeError, ValueError) as exc:
            skipped.append(f"{kind}: {str(exc).splitlines()[0][:160]}")
    return rows, skipped
