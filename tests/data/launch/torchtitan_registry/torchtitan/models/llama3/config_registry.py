# Written for primus's tests in the structure of pytorch/torchtitan torchtitan/models/llama3/config_registry.py
# (b5bcd76, 2026): functions returning Trainer.Config, a base config that others modify, model_registry(FLAVOR),
# a token-based batch and a chunked loss. primus reads this file with `ast`; it is never imported.
from torchtitan.components.loss import ChunkedLossWrapper, CrossEntropyLoss
from torchtitan.components.quantization import Float8LinearConverter
from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig
from torchtitan.distributed.activation_checkpoint import FullAC
from torchtitan.trainer import Trainer

from . import model_registry


def llama3_70b() -> Trainer.Config:
    model_spec = model_registry("70B")
    return Trainer.Config(
        loss=ChunkedLossWrapper.Config(loss_fn=CrossEntropyLoss.Config()),
        model_spec=model_spec,
        training=TrainingConfig(
            num_tokens_per_microbatch_per_dp_rank=2 * 8192,
            max_context_length=8192,
            steps=1000,
        ),
        parallelism=ParallelismConfig(tensor_parallel_degree=8),
        activation_checkpoint=FullAC.Config(),
    )


def llama3_70b_fp8() -> Trainer.Config:
    config = llama3_70b()
    config.compile = CompileConfig(enable=True, components=["model"])
    config.model_spec = model_registry("70B", converters=[Float8LinearConverter.Config(filter_fqns=["output"])])
    config.parallelism.context_parallel_degree = 2
    config.training.max_context_length = 16384
    return config


def llama3_1b() -> Trainer.Config:
    return Trainer.Config(
        model_spec=model_registry("1B"),
        training=TrainingConfig(num_tokens_per_microbatch_per_dp_rank=4 * 8192, max_context_length=8192),
    )
