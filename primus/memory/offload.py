"""Which decoder layers keep their activations on the device under CPU activation offloading.

Megatron-Core's `cpu_offloading` hands Transformer Engine's offload handler the model's decoder layers
(`TransformerBlock`: `get_cpu_offload_context(enabled, cpu_offloading_num_layers, num_layers, ...)`).
Megatron-Core allows it only without pipeline parallelism and without recompute, and for fewer layers
than the model has (NVIDIA/Megatron-LM d98e8a6 `megatron/core/transformer/transformer_config.py`:
"Currently there is no support for Pipeline parallelism with CPU offloading", "CPU offloading does not
work when activation recomputation is enabled", "CPU offloading can be done only for layers less than
num_layers"); the rule `cpu-offload` (`constraints/megatron.yaml`) refuses the rest.

Transformer Engine offloads the first K of the L layers. Its handler up to TE 2.9 (the NeMo 25.11
container; NVIDIA/TransformerEngine `transformer_engine/pytorch/cpu_offload_v1.py`,
`AsyncDoubleBufferGroupOffloadHandler`) spreads the copies over the forward: offload group i must be
off the device by layer w(i) = (L // K)(i + 1) − 1 (plus the remainder spread over the first groups),
so w(K − 1) = L − 1 and the last offloaded layer is still resident while the last layer runs. At that
moment — the activation peak, just before the backward starts — the device holds layers K − 1 .. L − 1:
L − K + 1 layers. (TE's rewritten handler, 2.10 on, documents exactly L − K: "peak memory usage of saving
activations is (num_layers - num_offloaded_layers) * T", `cpu_offload.py` `OffloadSynchronizer`; the
ledger keeps the one-layer-larger figure of the older handler, the safe side.)

Offloaded tensors are those Transformer Engine's modules mark for offloading plus Megatron's fused
SwiGLU input (`megatron/core/fusions/fused_bias_swiglu.py` marks it), i.e. the whole per-layer inventory
the ledger counts.
"""

from __future__ import annotations


def offload_applies(pp: int, recompute: str) -> bool:
    """Whether the ledger and the projection apply the job's offloading to a layout: at PP 1 without full
    recompute. Selective recompute with offloading is refused by the rule `cpu-offload`, not here, so that
    the stage shapes depend on recompute only through "full or not", as the solver's tables key them."""
    return pp == 1 and recompute != "full"


def resident_layers(layers: tuple[int, ...], offloaded: int) -> tuple[int, ...]:
    """The decoder layers (global indices, forward order) whose activations are on the device at the
    peak when the first `offloaded` of them go to host memory: all of them when none are offloaded."""
    if offloaded <= 0:
        return layers
    return layers[offloaded - 1:]
