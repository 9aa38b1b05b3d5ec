# Written for primus's tests in the structure of pytorch/torchtitan v0.2.2 torchtitan/models/llama4/__init__.py:
# Llama 4 Scout's shape (every layer MoE, 16 experts) and Maverick's (MoE every second layer by the class
# default, 128 experts). primus reads this file with `ast`; it is never imported.
from torchtitan.models.moe import MoEArgs

from .model.args import TransformerModelArgs

llama4_args = {
    "17bx16e": TransformerModelArgs(
        dim=5120,
        n_layers=48,
        n_heads=40,
        n_kv_heads=8,
        ffn_dim_multiplier=1.2,
        multiple_of=2048,
        moe_args=MoEArgs(num_experts=16),
        interleave_moe_layer_step=1,
    ),
    "17bx128e": TransformerModelArgs(
        dim=5120,
        n_layers=48,
        n_heads=40,
        n_kv_heads=8,
        ffn_dim_multiplier=1.2,
        multiple_of=2048,
        moe_args=MoEArgs(num_experts=128),
        every_n_layers_nope=4,
    ),
}
