# Written for primus's tests in the structure of pytorch/torchtitan v0.2.2 torchtitan/models/qwen3/__init__.py:
# a dict of flavors, each a ModelArgs call with literal keyword values (Qwen3 1.7B's published shape).
# primus reads this file with `ast`; it is never imported.
from .model.args import Qwen3ModelArgs

qwen3_args = {
    # a debug flavor whose vocabulary torchtitan takes from the tokenizer at run time (v0.1's ModelArgs
    # default, -1)
    "debugmodel": Qwen3ModelArgs(dim=256, n_layers=2, vocab_size=-1),
    "1.7B": Qwen3ModelArgs(
        vocab_size=151936,
        max_seq_len=4096,
        head_dim=128,
        dim=2048,
        n_layers=28,
        n_heads=16,
        n_kv_heads=8,
        qk_norm=True,
        hidden_dim=6144,
        rope_theta=1000000,
        enable_weight_tying=True,
    ),
}
