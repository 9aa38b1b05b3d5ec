"""Which decoder layers keep their activations on the device under CPU activation offloading.

Megatron-Core's `cpu_offloading` hands Transformer Engine's offload handler the model's decoder layers
(`TransformerBlock`: `get_cpu_offload_context(enabled, cpu_offloading_num_layers, num_layers, ...)`).
Megatron-Core allows it only without pipeline parallelism and without recompute, and for fewer layers
than the model has (NVIDIA/Megatron-LM d98e8a6 `megatron/core/transformer/transformer_config.py`:
"Currently there is no support for Pipeline parallelism with CPU offloading", "CPU offloading does not
work when activation recomputation is enabled", "CPU offloading can be done only for layers less than
num_layers"); the rule `cpu-offload` (`constraints/megatron.yaml`) refuses the rest.

Transformer Engine offloads the first K of the L layers. Its handler in TE 2.9 (the NeMo 25.11
container; NVIDIA/TransformerEngine v2.9 70f536662ae10a62a54f4ed1ba92e3314c5cfd69
`transformer_engine/pytorch/cpu_offload.py`, `AsyncDoubleBufferGroupOffloadHandler`; TE 2.10 keeps it
as `cpu_offload_v1.py`) spreads the copies over the forward: offload group i is freed at the group
commit after layer w(i) = (L // K)(i + 1) − 1 (plus the remainder spread over the first groups; line 345,
freed in `synchronize_on_group_commit_forward`, line 516), so w(K − 1) = L − 1. Megatron-Core commits
after every decoder layer, before the final norm (NVIDIA/Megatron-LM 0d8e0714cd29c01e164fe6de9f532182bdffa942,
the Megatron-LM of Megatron-Bridge v0.2.0, `megatron/core/transformer/transformer_block.py` lines
725-746), so the last offloaded layer K − 1 is on the device while layer L − 1 runs its forward and is
gone before the final norm, the output layer and the loss run: those run beside L − K layers. The
backward reloads group K − 1 in the commit's backward for layer L − 1 (`on_group_commit_backward`, line
641), i.e. after the loss's and the output layer's backward have released the logits and before layer
L − 1's backward: that runs beside L − K + 1 layers. The stage's activation peak is therefore the larger
of (L − K layers + the loss) and (L − K + 1 layers + one layer's backward working set), never both the
extra layer and the loss (`reloaded_layers`, the ledger term `activations.offload_reload`). TE's
rewritten handler (2.10 on, `cpu_offload.py` `OffloadSynchronizer`) documents the same L − K: "peak
memory usage of saving activations is (num_layers - num_offloaded_layers) * T".

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
    """The decoder layers (global indices, forward order) whose activations are on the device while the
    loss runs when the first `offloaded` of them go to host memory: all of them when none are offloaded."""
    if offloaded <= 0:
        return layers
    return layers[offloaded:]


def reloaded_layers(layers: tuple[int, ...], offloaded: int) -> tuple[int, ...]:
    """The offloaded layer that is on the device beside the resident ones but not beside the loss: the
    last offloaded one, still copying while the last layer runs its forward and reloaded before the last
    layer's backward (empty when none are offloaded)."""
    if offloaded <= 0:
        return ()
    return layers[offloaded - 1:offloaded]
