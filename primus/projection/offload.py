"""CPU activation offloading in the step time: copies that outrun the compute they overlap.

Transformer Engine copies an offloaded layer's saved activations to host memory on a side stream during
the forward and back before the backward needs them; the copies cost nothing while a layer's compute is
longer than its copy ("D2h and h2d copying are completely hidden behind computation if computation time of
a layer is longer than host-device communication time", NVIDIA/TransformerEngine
`transformer_engine/pytorch/cpu_offload_v1.py`, `AsyncDoubleBufferGroupOffloadHandler`). The handler
spreads the K offloaded layers over the L layers of the pass (each copy has about L/K layers of compute
to hide behind: `primus.memory.offload`), so with layers of equal cost the exposed time of one pass is
max(0, K x copy − L x compute) = max(0, copy time of the offloaded bytes − compute time of the pass),
once for the forward's device-to-host copies and once for the backward's host-to-device ones, over the
hardware's `host_link` (PCIe, or NVLink-C2C on Grace superchips), per GPU and direction. The exposed
seconds go to the `host` category; the hidden ones are recorded as hidden.
"""

from __future__ import annotations

from primus.memory.units import ActUnits
from primus.projection.cost import HOST
from primus.projection.stages import ChunkWork
from primus.specs.model import ModelSpec


def offloaded_bytes(model: ModelSpec, au: ActUnits, offloaded: int) -> int:
    """Activation bytes of one microbatch that leave the device: the first `offloaded` decoder layers,
    each with everything it saves (the ledger's per-layer inventory)."""
    return sum(au.moe_full if model.moe_layers[i] else au.dense_full for i in range(offloaded))


def with_offload(work: ChunkWork, copy_s: float) -> ChunkWork:
    """The chunk's work with the copies of its offloaded activations: exposed where a pass's copy time
    exceeds its compute time (forward: device to host; backward: host to device)."""
    fwd, bwd, hidden = list(work.fwd), list(work.bwd), list(work.hidden)
    exposed_fwd = max(0.0, copy_s - work.fwd_compute)
    exposed_bwd = max(0.0, copy_s - work.bwd_compute)
    fwd[HOST] += exposed_fwd
    bwd[HOST] += exposed_bwd
    hidden[HOST] += (copy_s - exposed_fwd) + (copy_s - exposed_bwd)
    return ChunkWork.of(tuple(fwd), tuple(bwd), tuple(hidden), work.calls, work.measured)
