# Written for primus's tests in the structure of pytorch/torchtitan torchtitan/models/kimi_k2_7/config_registry.py
# (b5bcd76). primus reads this file with `ast`; it is never imported.
from torchtitan.config import TrainingConfig
from torchtitan.trainer import Trainer

from . import model_registry


def kimi_text() -> Trainer.Config:
    return Trainer.Config(
        model_spec=model_registry("text"),
        training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=8192, max_context_length=8192),
    )


def kimi_vl() -> Trainer.Config:
    return Trainer.Config(
        model_spec=model_registry("vl"),
        training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=8192, max_context_length=8192),
    )
