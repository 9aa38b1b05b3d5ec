"""Which decoder layers full recompute re-runs: one definition for the ledger and the projection.

Megatron-LM's `--recompute-granularity full` has two methods:

- `uniform`: every layer of a chunk is recomputed, in groups of `--recompute-num-layers` consecutive
  layers (one checkpoint per group);
- `block`: only the first `--recompute-num-layers` layers of each model chunk (virtual stage) are
  recomputed, each from its own checkpoint; the rest keep their activations.

Primus-LM adds `--recompute_layer_ids`: an explicit list of global decoder-layer ids (0-based) that are
recomputed, each from its own checkpoint, wherever they land in the pipeline; every other layer keeps its
activations. Source: AMD-AGI/Primus docs/tech_blogs/moe_package_2.0/moe_package.md ("Fine-grained
recompute with `--recompute_layer_ids`": "Primus instead accepts an explicit list of global layer IDs",
e.g. `--recompute_layer_ids "0,1,2,4,6,8,10,12,14" --recompute_granularity full`, 9 of DeepSeek-V3's 61
layers at 128 nodes).
"""

from __future__ import annotations


def recomputed_mask(layers: tuple[int, ...], method: str, num_layers: int | None,
                    layer_ids: frozenset[int] | None) -> tuple[bool, ...]:
    """For one chunk's decoder layers (global indices, execution order): which are recomputed under full
    recompute. Listed ids win over the method; `block` takes the first `num_layers` (default 1) of the
    chunk; `uniform` takes all of them."""
    if layer_ids is not None:
        return tuple(i in layer_ids for i in layers)
    if method == "block":
        k = num_layers or 1
        return tuple(j < k for j in range(len(layers)))
    return (True,) * len(layers)
