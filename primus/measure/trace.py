"""Trace the reference layer's saved activations with torch's MemTracker and compare with the ledger.

How bytes are attributed (one forward, no backward, under `FakeTensorMode`, so nothing is allocated):

1. The layer, its parameters, the shared RoPE tables and a leaf `x0` [s, b, h] are built *outside*
   the tracker and registered with `MemTracker.track_external`: parameters land in "Parameter", the
   leaf and the tables in "Other".
2. Inside the tracker the layer input is `x = x0.clone()` — a non-leaf created by an op, so it is
   an "Activation" exactly like the previous layer's output is in a real model, and it stays alive
   only if the layer saves it (the fused norm+linear does).
3. After the forward we keep the autograd graph (the output's `grad_fn`) and drop our references to
   the output and to `x`. Every storage MemTracker still counts as "Activation" is then held by the
   graph alone: that total is the layer's saved activations (`traced_bytes`). Temporaries (the s×s
   scores, argsort buffers) died inside the forward; storages are counted once however many views
   or names point at them; on CPU MemTracker counts exact bytes (no 512-byte CUDA rounding).
4. Two witnesses cross-check it: a `saved_tensors_hooks` pack hook sums the distinct non-parameter,
   non-external storages handed to autograd (`witness_bytes`), and the reference's functions record
   each saved storage under the ledger's tensor name (`named`), which says *which* tensors differ.

The ledger side is `layer_bytes(model, kind, ctx, "none")` with ctx = TP 1, CP 1, no SP, bf16, flash
attention, the same seq_len and mbs (`ledger_context`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.distributed._tools.mem_tracker import MemTracker

from primus.measure.functions import recording
from primus.measure.reference import ReferenceLayer, rope_tables
from primus.memory.activations import ActContext, layer_bytes, layer_inventory
from primus.memory.numerics import numerics_for
from primus.specs.model import ModelSpec

ACTIVATION = "Activation"  # MemTracker's category name for tensors produced in forward


def category_bytes(snapshot: dict[Any, dict[Any, int]], category: str, device: str = "cpu") -> int:
    """Bytes of one MemTracker category on `device` in a `get_tracker_snapshot()` result.

    The keys are a private str-Enum whose hash is not the string's, so match on `.value`."""
    for dev, cats in snapshot.items():
        if str(dev) != device:
            continue
        for key, value in cats.items():
            if getattr(key, "value", key) == category:
                return int(value)
    return 0


def ledger_context(seq_len: int, mbs: int) -> ActContext:
    """The ActContext the trace reproduces: one rank holding the whole layer, bf16, flash attention."""
    return ActContext(seq_len=seq_len, mbs=mbs, tp=1, cp=1, sp=False, etp=1,
                      numerics=numerics_for("bf16", None), flash_attention=True)


@dataclass(frozen=True)
class TensorDiff:
    name: str
    ledger_bytes: int
    traced_bytes: int


@dataclass(frozen=True)
class TraceResult:
    """One traced layer next to the ledger's bytes for the same layer."""

    model: str
    kind: str
    seq_len: int
    mbs: int
    moe_probs: str
    traced_bytes: int
    witness_bytes: int
    output_bytes: int
    ledger_bytes: int
    named: dict[str, int] = field(default_factory=dict)
    ledger_named: dict[str, int] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def error(self) -> float:
        """(ledger − traced) / traced: positive when the ledger over-counts."""
        return (self.ledger_bytes - self.traced_bytes) / self.traced_bytes

    @property
    def unattributed_bytes(self) -> int:
        """Traced bytes no named save accounts for (0 when every saving op is a reference function)."""
        return self.traced_bytes - sum(self.named.values())

    def diffs(self) -> list[TensorDiff]:
        """Tensors whose bytes differ between ledger and trace, in ledger order then trace-only."""
        names = list(self.ledger_named) + [n for n in self.named if n not in self.ledger_named]
        out = [TensorDiff(n, self.ledger_named.get(n, 0), self.named.get(n, 0)) for n in names]
        return [d for d in out if d.ledger_bytes != d.traced_bytes]

    def to_json(self) -> dict[str, Any]:
        return {
            "model": self.model, "kind": self.kind, "seq_len": self.seq_len, "mbs": self.mbs,
            "moe_probs": self.moe_probs if self.kind == "moe" else None,
            "ledger_bytes": self.ledger_bytes, "traced_bytes": self.traced_bytes,
            "witness_bytes": self.witness_bytes, "error": self.error,
            "unattributed_bytes": self.unattributed_bytes,
            "diffs": [{"name": d.name, "ledger_bytes": d.ledger_bytes, "traced_bytes": d.traced_bytes}
                      for d in self.diffs()],
            "traced": self.named, "ledger": self.ledger_named,
        }


def ledger_named_bytes(model: ModelSpec, kind: str, ctx: ActContext) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in layer_inventory(model, kind, ctx):
        out[s.name] = out.get(s.name, 0) + s.bytes
    return out


def trace_activation_bytes(model: ModelSpec, seq_len: int, mbs: int, kind: str,
                           moe_probs: str = "activation") -> TraceResult:
    """Trace one forward of the reference `kind` layer of `model` ([seq_len, mbs] tokens, bf16) and
    return its saved-activation bytes beside the ledger's. ValueError if the reference cannot build it."""
    dtype = torch.bfloat16
    with FakeTensorMode():
        layer = ReferenceLayer(model, kind, moe_probs=moe_probs, dtype=dtype)
        rope = None
        if model.rotary:
            rope = rope_tables(seq_len, model.head_dim, dtype)
        x0 = torch.empty(seq_len, mbs, model.hidden_size, dtype=dtype, requires_grad=True)
        external = [x0, *(rope or ())]
        skip = {id(t.untyped_storage()) for t in [*layer.parameters(), *external]}
        witness: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            st = t.untyped_storage()
            if id(st) not in skip:
                witness[id(st)] = st.nbytes()
            return t

        tracker = MemTracker()
        tracker.track_external(layer, *external)
        with tracker, recording() as rec, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            x = x0.clone()
            out = layer(x, rope)
            output_bytes = out.untyped_storage().nbytes()
            graph = out.grad_fn
            del out, x
            traced = category_bytes(tracker.get_tracker_snapshot(), ACTIVATION)
            named = rec.by_name(skip)
            aliases = dict(rec.aliases)
        del graph
    ctx = ledger_context(seq_len, mbs)
    return TraceResult(
        model=model.name, kind=kind, seq_len=seq_len, mbs=mbs, moe_probs=moe_probs,
        traced_bytes=traced, witness_bytes=sum(witness.values()), output_bytes=output_bytes,
        ledger_bytes=layer_bytes(model, kind, ctx, "none"), named=named,
        ledger_named=ledger_named_bytes(model, kind, ctx), aliases=aliases,
    )
