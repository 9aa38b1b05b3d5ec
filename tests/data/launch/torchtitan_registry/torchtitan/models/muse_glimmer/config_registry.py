# Written for primus's tests in the structure of pytorch/torchtitan torchtitan/models/*/config_registry.py
# (b5bcd76): text and multimodal configs, one that returns a shared config function's result called with
# its settings, one that changes the model's MTP blocks, and a helper that is not a config. Read with `ast`.
from torchtitan.components.loss import ChunkedLossWrapper
from torchtitan.config import TrainingConfig
from torchtitan.trainer import Trainer

from . import model_registry


def _base(attn_backend: str = "varlen") -> Trainer.Config:
    return Trainer.Config(
        loss=ChunkedLossWrapper.Config(),
        model_spec=model_registry("small", attn_backend=attn_backend),
        training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=2 * 1024, max_context_length=1024),
    )


def muse_small() -> Trainer.Config:
    return _base()


def muse_small_flex() -> Trainer.Config:
    return _base(attn_backend="flex")


def muse_small_mtp() -> Trainer.Config:
    config = _base()
    config.model_spec = model_registry("small", num_mtp_layers=2)
    return config


def muse_small_mm() -> Trainer.Config:
    return Trainer.Config(
        model_spec=model_registry("small_mm"),
        training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=1024, max_context_length=1024),
    )


def enable_fused_kernels(config: Trainer.Config) -> None:
    config.override.imports.append("fused")
