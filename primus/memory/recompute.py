"""What recompute re-runs, one definition for the ledger and the projection: which decoder layers full
recompute covers, and which modules selective recompute covers.

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

`--recompute-granularity selective` re-runs the modules of `--recompute-modules` (`RECOMPUTE_MODULES`
below) in every layer; the ledger drops what each module's recompute frees and the projection adds
each module's forward to the backward.
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
        k = recomputed_layers(num_layers, len(layers))
        return tuple(j < k for j in range(len(layers)))
    return (True,) * len(layers)


def recomputed_layers(num_layers: int | None, chunk_layers: int) -> int:
    """Layers of one chunk that block recompute re-runs, or the size of one uniform recompute unit:
    min(`--recompute-num-layers`, layers in the chunk). Megatron-LM accepts any count once it is set
    (core_v0.18.0 megatron/core/transformer/transformer_config.py lines 1562-1568 raise only when it is
    None) and clips it to the chunk (megatron/core/recompute.py lines 143-146, uniform:
    min(layer_idx + recompute_num_layers, layers per rank); lines 155-161, block: the layers below
    recompute_num_layers), so a count above a chunk's layers re-runs the whole chunk. Primus's default
    count, when none is set, is 1."""
    return min(num_layers or 1, chunk_layers)


#: Megatron-Core's `--recompute-modules` that the ledger and the projection model, and what each frees
#: (megatron/core/transformer/transformer_config.py `recompute_modules`, NVIDIA/Megatron-LM d98e8a6):
#:
#: - `core_attn`: the core attention re-runs in backward (normal checkpointing: q, k, v stay as its
#:   inputs); its output and softmax statistics are not kept (transformer/attention.py).
#: - `mla_up_proj`: MLA's q/kv up-projections and RoPE run inside a CheckpointWithoutOutput
#:   (transformer/multi_latent_attention.py `qkv_up_checkpoint`); the query, key and value are freed
#:   once core attention has run, and the up-projections' fused q/kv layernorms (TE
#:   LayerNormColumnParallelLinear when qk_layernorm) save nothing: only the compressed latents, their
#:   inputs, stay.
#: - `layernorm`: the input_layernorm and pre_mlp_layernorm, where they are modules of their own
#:   (transformer_layer.py: not an IdentityOp; with Transformer Engine a norm fused into the following
#:   linear, as for standard attention's QKV and a dense MLP's FC1, is an IdentityOp and is not
#:   recomputed): output-discarding checkpoints free the norm's output and statistics; with FP8 the
#:   consumers save the original input (`set_save_original_input`), so their quantised copies go too.
#: - `moe_act`: the routed experts' activation (moe/experts.py `activation_checkpoint`): its output,
#:   FC2's input, is freed after FC2 (the FC1 output it is rebuilt from stays).
#: - `mlp`: a dense layer's whole MLP (normal checkpointing; no effect on MoE layers): only its input
#:   stays; the fused norm's statistics and output, FC1's output and the activation output go.
RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn", "mla_up_proj", "layernorm", "moe_act", "mlp")

#: Megatron-Core's default `recompute_modules` for `recompute_granularity='selective'`.
DEFAULT_SELECTIVE: frozenset[str] = frozenset({"core_attn"})


def selective_modules(modules: tuple[str, ...] | None) -> frozenset[str]:
    """The modules selective recompute re-runs: the job's list, else Megatron-Core's default. An
    explicit list replaces the default (Megatron-Core only fills ['core_attn'] when none is given)."""
    return DEFAULT_SELECTIVE if modules is None else frozenset(modules)
