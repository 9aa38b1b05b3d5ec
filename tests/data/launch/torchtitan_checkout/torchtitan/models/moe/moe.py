# Written for primus's tests in the structure of torchtitan v0.2.2 models/moe/moe.py: MoEArgs's defaults
# (one shared expert, top-1 sigmoid routing).
from dataclasses import dataclass


@dataclass
class MoEArgs:
    num_experts: int = 8
    num_shared_experts: int = 1
    score_func: str = "sigmoid"
    top_k: int = 1
