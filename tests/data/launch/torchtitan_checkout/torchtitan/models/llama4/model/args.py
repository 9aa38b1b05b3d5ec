# Written for primus's tests in the structure of torchtitan v0.2.2 llama4/model/args.py: the dataclass
# defaults primus reads with `ast` (the MoE arguments come from a default factory).
from dataclasses import dataclass, field

from torchtitan.models.moe import MoEArgs


@dataclass
class TransformerModelArgs:
    dim: int = 4096
    n_layers: int = 32
    n_heads: int = 32
    n_kv_heads: int | None = None
    vocab_size: int = 202048
    multiple_of: int = 256
    ffn_dim_multiplier: float | None = None
    every_n_layers_nope: int | None = None
    moe_args: MoEArgs = field(default_factory=MoEArgs)
    auto_scale_hidden_dim: bool = True
    interleave_moe_layer_step: int = 2
