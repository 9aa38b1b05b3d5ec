# Written for primus's tests in the structure of pytorch/torchtitan torchtitan/models/gpt_oss/config_registry.py
# (b5bcd76). primus reads this file with `ast`; it is never imported.
from torchtitan.config import TrainingConfig
from torchtitan.trainer import Trainer

from . import model_registry


def gpt_oss_small() -> Trainer.Config:
    return Trainer.Config(
        model_spec=model_registry("small"),
        training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=4096, max_context_length=4096),
    )
