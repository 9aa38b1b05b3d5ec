"""The torchtitan launch line after #2386: a registry config with command-line overrides.

torchtitan after pytorch/torchtitan #2386 (9810191, 2026-02-23) has no TOML configs: a run is
``-m torchtitan.train --module <pkg> --config <function>`` and ``--section.option`` flags override the
function's ``Trainer.Config`` (torchtitan/config/manager.py, tyro). The flags written here are those of
pytorch/torchtitan b5bcd76 (2026-08-21), the commit `torchtitan@2026.08` describes, and every one of
them is in that commit's frozen CLI (`CLI_OPTIONS`). The batch is in tokens there since #4121
(73aed7f, 2026-08-20, "fold batch dim"), and torchtitan/trainer.py derives the step from it:

- ``training.num_tokens_per_microbatch_per_dp_rank`` = MBS × seq: the tokens of one forward (one
  pipeline microbatch) on one data-parallel rank;
- ``parallelism.num_pp_microbatches`` = the pipeline microbatches of one schedule (ignored at PP 1);
- ``training.num_tokens_per_train_step`` = GBS × seq; its default is one accumulation step
  (microbatch tokens × PP microbatches × DP), and gradient accumulation steps = step tokens ÷ that.

So a job's M = GBS ÷ (MBS × DP) microbatches are written as ``num_pp_microbatches M`` (one schedule,
as Megatron runs them) under PP, and as M accumulation steps without PP; the step tokens are always
written, so the global batch never falls back to the default of one accumulation step.
"""

from __future__ import annotations

from typing import Final

from primus.errors import InputError
from primus.job import Job
from primus.parallel import Layout
from primus.schedule.torchtitan_split import layers_per_stage

#: The commit the flags are those of (`stacks/torchtitan.yaml`, torchtitan@2026.08).
CLI_COMMIT: Final = "b5bcd76"
#: The options of b5bcd76's frozen command line that this module writes (tests/unit_tests/
#: test_no_new_cli_options.py _FROZEN_CLI_OPTIONS at pytorch/torchtitan b5bcd76): nothing else is accepted.
CLI_OPTIONS: Final = frozenset({
    "training.num_tokens_per_microbatch_per_dp_rank", "training.num_tokens_per_train_step",
    "training.max_context_length", "training.dtype",
    "parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree",
    "parallelism.tensor_parallel_degree", "parallelism.pipeline_parallel_degree",
    "parallelism.context_parallel_degree", "parallelism.pipeline_parallel_schedule",
    "parallelism.num_pp_microbatches", "parallelism.pipeline_parallel_first_stage_less_layers",
    "parallelism.pipeline_parallel_last_stage_less_layers", "parallelism.pipeline_parallel_layers_per_stage",
    "parallelism.expert_parallel_degree", "compile.enable", "compile.enable_async_tensor_parallel",
})
#: The config functions of b5bcd76's config_registry.py files for the flavors primus maps
#: (torchtitan/models/{llama3,deepseek_v3,qwen3,gpt_oss}/config_registry.py); Qwen3 235B-A22B has a
#: flavor (model_registry("235B-A22B")) but no config function.
REGISTRY_CONFIGS: Final = frozenset({"llama3_8b", "llama3_70b", "llama3_405b", "deepseek_v3_671b",
                                     "qwen3_30b_a3b", "gpt_oss_20b", "gpt_oss_120b"})
#: pytorch/torchtitan #3167 (c4b409a, 2026-04-30) removed expert tensor parallelism and its options
#: (``expert_tensor_parallel_degree``, ``expert_parallel_comm_backend``): experts are never TP-sharded.
NO_ETP: Final = "pytorch/torchtitan #3167 (c4b409a, 2026-04-30) removed expert tensor parallelism"


def registry_line(job: Job, layout: Layout, name: str, flavor: str) -> tuple[str, list[str]]:
    """``-m torchtitan.train --module ... --config ... --flags``: the job's batch, microbatching and
    layout as b5bcd76 reads them, and notes on what the flags cannot say. Refuses what b5bcd76 cannot
    run (ETP > 1)."""
    spec, seq = job.spec, job.spec.seq_len
    gbs, dp = spec.global_batch_size, layout.dp
    notes: list[str] = []
    if job.model.is_moe and layout.etp != 1:
        raise InputError(job.where, "parallel.etp", f"{layout.etp}: {NO_ETP} (torchtitan after it runs ETP 1 only)")
    flags: list[tuple[str, object]] = [
        ("training.num_tokens_per_microbatch_per_dp_rank", layout.mbs * seq),
        ("training.num_tokens_per_train_step", gbs * seq),
        ("training.max_context_length", seq),
        ("parallelism.data_parallel_replicate_degree", dp if layout.sharding == "none" else 1),
        ("parallelism.data_parallel_shard_degree", 1 if layout.sharding == "none" else dp),
        ("parallelism.tensor_parallel_degree", layout.tp),
        ("parallelism.pipeline_parallel_degree", layout.pp),
        ("parallelism.context_parallel_degree", layout.cp),
    ]
    if layout.pp > 1:
        emb, loss = export_weights(job, layout, notes)
        flags += [("parallelism.pipeline_parallel_schedule", "Interleaved1F1B" if layout.vp > 1 else "1F1B"),
                  ("parallelism.num_pp_microbatches", gbs // (layout.mbs * dp)),
                  ("parallelism.pipeline_parallel_first_stage_less_layers", int(emb)),
                  ("parallelism.pipeline_parallel_last_stage_less_layers", int(loss))]
        if layout.vp > 2:  # two stages per rank are the multi-stage schedules' default
            total, stages = job.model.num_layers + emb + loss, layout.pp * layout.vp
            per_stage = layers_per_stage(total, stages)
            if per_stage is None:
                raise InputError(job.where, "parallel.vp", f"no pipeline_parallel_layers_per_stage makes {stages} "
                                 f"stages of {total} layers (the embedding and the output counted)")
            flags.append(("parallelism.pipeline_parallel_layers_per_stage", per_stage))
    if job.model.is_moe:
        flags.append(("parallelism.expert_parallel_degree", layout.ep))
        if spec.moe.token_dispatcher == "flex":
            notes.append("DeepEP is model_registry(..., moe_comm_backend=\"deepep\") in the config function (the "
                         "model spec is not a command-line option at b5bcd76): set it there")
    opt = spec.optimizer
    if {opt.main_grads_dtype, opt.main_params_dtype, opt.exp_avg_dtype, opt.exp_avg_sq_dtype} == {"bf16"}:
        flags.append(("training.dtype", "bfloat16"))
    if spec.overlap.tp_comm and layout.tp > 1:  # async TP is a compile option since #4045 (7375947)
        flags += [("compile.enable", True), ("compile.enable_async_tensor_parallel", True)]
    config = f"{name}_{flavor.lower().replace('-', '_').replace('.', '_')}"
    if config not in REGISTRY_CONFIGS:
        notes.append(f"torchtitan's {name} registry has no config {config} at {CLI_COMMIT}: write one returning "
                     f"model_registry(\"{flavor}\") (torchtitan/config/README.md) and name it with --config")
    return f"-m torchtitan.train --module {name} --config {config} " + " ".join(_flag(k, v) for k, v in flags), notes


def _flag(key: str, value: object) -> str:
    """A tyro option: a bool is a bare switch (``--compile.enable``), anything else takes its value."""
    if key not in CLI_OPTIONS:  # a guard on this module's own table, not on input
        raise ValueError(f"--{key} is not an option of torchtitan {CLI_COMMIT}")
    return f"--{key}" if value is True else f"--{key} {value}"


def export_weights(job: Job, layout: Layout, notes: list[str]) -> tuple[int, int]:
    """The first/last_stage_less_layers to write: the ones the split primus evaluated used
    (`Job.torchtitan_split_weights`); a release whose split is the 2024 one (the layers alone) is written as the
    weighted split's weights that give the same stages, or 0 and 0 with a note where none does."""
    from primus.schedule.torchtitan_split import torchtitan_counts

    how = job.torchtitan_split_weights()
    if how is None:
        return (int(job.spec.pipeline.account_for_embedding_in_pipeline_split),
                int(job.spec.pipeline.account_for_loss_in_pipeline_split))
    kind, first, last = how
    if kind == "torchtitan_weighted":
        return first, last
    stages, layers = layout.pp * layout.vp, job.model.num_layers
    want = torchtitan_counts(kind, layers, stages)
    for weights in ((0, 0), (1, 1), (1, 0), (0, 1)):
        if torchtitan_counts("torchtitan_weighted", layers, stages, *weights) == want:
            return weights
    notes.append(f"torchtitan's weighted split (2025-04 on) has no first/last_stage_less_layers giving the stages "
                 f"{job.resolved_stack.label} splits the layers into ({'|'.join(map(str, want or []))}): 0 and 0 "
                 "written, which split them differently")
    return 0, 0
