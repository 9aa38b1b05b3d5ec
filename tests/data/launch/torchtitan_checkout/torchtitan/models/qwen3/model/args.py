# Written for primus's tests in the structure of torchtitan's qwen3 model/args.py: dataclass defaults.
from dataclasses import dataclass


@dataclass
class Qwen3ModelArgs:
    dim: int = 1024
    n_layers: int = 28
    n_heads: int = 16
    n_kv_heads: int = 8
    vocab_size: int = 151936
    head_dim: int = 128
    hidden_dim: int = 3072
    qk_norm: bool = True
    max_seq_len: int = 4096
    enable_weight_tying: bool = False
    moe_enabled: bool = False
