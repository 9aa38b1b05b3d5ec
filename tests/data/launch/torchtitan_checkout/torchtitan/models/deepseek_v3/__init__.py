# Written for primus's tests in the structure of pytorch/torchtitan v0.2.2 torchtitan/models/deepseek_v3/__init__.py:
# the 16B flavor (DeepSeek-V2-Lite's shape: MLA without a query LoRA, one dense layer first, 64 routed experts
# top-6 and 2 shared). primus reads this file with `ast`; it is never imported.
from torchtitan.models.moe import MoEArgs

from .model.args import DeepSeekV3ModelArgs

deepseekv3_args = {
    "16B": DeepSeekV3ModelArgs(
        vocab_size=102400,
        dim=2048,
        inter_dim=10944,
        moe_inter_dim=1408,
        n_layers=27,
        n_dense_layers=1,
        n_heads=16,
        moe_args=MoEArgs(num_experts=64, num_shared_experts=2, top_k=6, score_func="softmax"),
        q_lora_rank=0,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
    ),
}
