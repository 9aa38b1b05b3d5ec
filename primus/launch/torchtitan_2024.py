"""A torchtitan TOML in the keys of December 2024, for a job on `torchtitan@2024.12`.

That release (`stacks/torchtitan.yaml`) describes pytorch/torchtitan 9dec370 (2024-12-26), whose
JobConfig (``torchtitan/config_manager.py``) read, among the keys an export writes:

- ``[training] batch_size`` (the per-rank batch; #1238 renamed it ``local_batch_size`` and added
  ``global_batch_size`` with gradient accumulation on 2025-06-05, so the global batch was
  ``batch_size`` × DP), ``seq_len``, ``data_parallel_replicate_degree``, ``data_parallel_shard_degree``,
  ``tensor_parallel_degree`` (#980 moved the degrees to ``[parallelism]`` on 2025-03-18) and
  ``compile`` (the transformer blocks only: the loss ran eagerly until #1033, 2025-04-01);
- ``[experimental] pipeline_parallel_degree``, ``pipeline_parallel_schedule``,
  ``pipeline_parallel_microbatches`` (a count; #1073 replaced it by a size on 2025-04-07),
  ``context_parallel_degree`` and ``enable_async_tensor_parallel``; the pipeline split points, when not
  given, split the layers evenly (``pipelining_utils.generate_split_points``: no stage lighter for the
  embedding or the loss, which #1416 added on 2025-07-30);
- ``[float8] enable_float8_linear`` with ``scaling_type_input/weight/grad_output`` dynamic
  (tensorwise) or delayed (#812 deleted delayed scaling on 2025-01-31);
- ``[activation_checkpoint]`` as later.

There was no MoE, no rowwise or MX float8, and no ``training.dtype`` (optimizer state in bf16): a job
that needs one is refused, with the change that added it. The importer
(`primus.launch.torchtitan`) reads every one of these keys back and dates the file to 2024.12, so the
export round-trips without its ``# primus-job:`` header.
"""

from __future__ import annotations

from typing import Any, Final

from primus.errors import InputError
from primus.job import Job
from primus.parallel import Layout

KEYS_2024: Final = ("torchtitan JobConfig of December 2024 (torchtitan/config_manager.py, pytorch/torchtitan "
                    "9dec370: [training] batch_size and parallel degrees, [experimental] pipeline and context "
                    "parallel, [float8] enable_float8_linear)")
#: The launch of that release (run_llama_train.sh at 9dec370): train.py at the repository root.
LAUNCH_2024: Final = "train.py --job.config_file <this file>"
#: The last month whose TOML keys this writer produces: #980 (2025-03-18) moved the degrees out of [training].
UNTIL_MONTH: Final = "2025.03"


def tables_2024(job: Job, layout: Layout, checkpoint: dict[str, Any], notes: list[str]) -> dict[str, dict[str, Any]]:
    """The TOML tables of a job on torchtitan@2024.12 (`checkpoint`: its [activation_checkpoint])."""
    spec, where = job.spec, job.where
    if job.model.is_moe:
        raise InputError(where, "stack", f"{job.resolved_stack.label} has no expert parallelism (torchtitan's MoE "
                         "came in 2025): export for a later torchtitan release")
    local = spec.global_batch_size // layout.dp
    if layout.pp == 1 and local != layout.mbs:
        raise InputError(where, "global_batch_size", f"{spec.global_batch_size} is not micro-batch {layout.mbs} × "
                         f"DP {layout.dp}: {job.resolved_stack.label} has no gradient accumulation (training."
                         "batch_size × DP is the global batch until pytorch/torchtitan #1238, 2025-06-05)")
    opt = spec.optimizer
    if {opt.main_grads_dtype, opt.main_params_dtype, opt.exp_avg_dtype, opt.exp_avg_sq_dtype} != {"fp32"}:
        raise InputError(where, "optimizer", f"{job.resolved_stack.label} keeps optimizer state in fp32 (no "
                         "training.dtype before pytorch/torchtitan 2025)")
    training: dict[str, Any] = {
        "batch_size": local, "seq_len": spec.seq_len,
        "data_parallel_replicate_degree": layout.dp if layout.sharding == "none" else 1,
        "data_parallel_shard_degree": 1 if layout.sharding == "none" else layout.dp,
        "tensor_parallel_degree": layout.tp, "compile": True}
    experimental: dict[str, Any] = {"pipeline_parallel_degree": layout.pp, "context_parallel_degree": layout.cp}
    if layout.pp > 1:
        pipeline = spec.pipeline
        if pipeline.account_for_embedding_in_pipeline_split or pipeline.account_for_loss_in_pipeline_split:
            raise InputError(where, "pipeline", f"{job.resolved_stack.label} splits the layers evenly over the "
                             "stages (no first/last stage lighter for the embedding or the loss before "
                             "pytorch/torchtitan #1416, 2025-07-30)")
        experimental.update(pipeline_parallel_schedule="Interleaved1F1B" if layout.vp > 1 else "1F1B",
                            pipeline_parallel_microbatches=local // layout.mbs)
        if layout.vp not in (1, 2):  # the default split points give a looped schedule two stages per rank
            raise InputError(where, "parallel.vp", f"VP {layout.vp}: {job.resolved_stack.label}'s generated "
                             "split points give a looped schedule 2 stages per rank")
    if spec.overlap.tp_comm and layout.tp > 1:
        experimental["enable_async_tensor_parallel"] = True
    tables: dict[str, dict[str, Any]] = {"training": training, "experimental": experimental,
                                         "activation_checkpoint": checkpoint}
    tables.update(_float8(job, notes))
    return tables


def _float8(job: Job, notes: list[str]) -> dict[str, dict[str, Any]]:
    precision, recipe = job.spec.precision, job.spec.effective_fp8_recipe
    if precision == "bf16":
        return {}
    if precision != "fp8" or recipe in ("blockwise", "mxfp8"):
        raise InputError(job.where, "precision", f"{precision} {recipe or ''}".strip() + f" has no "
                         f"{job.resolved_stack.label} recipe (its float8 scaled per tensor, dynamic or delayed; "
                         "rowwise came with pytorch/torchtitan #808, 2025-02-27, MX with #1190, 2025-05-14)")
    scaling = "delayed" if recipe == "delayed" and job.spec.fp8_recipe is not None else "dynamic"
    if recipe == "delayed" and scaling == "dynamic":
        notes.append("fp8 without a recipe written as dynamic (tensorwise) scaling, torchtitan's default")
    return {"float8": {"enable_float8_linear": True, **{f"scaling_type_{t}": scaling
                                                        for t in ("input", "weight", "grad_output")}}}
