"""The job an exported launch file runs: on the target framework's stack, with only its settings.

A Megatron-LM argument line is run by Megatron-LM's pretrain_gpt.py, a Primus experiment by AMD Primus,
a torchtitan TOML or registry line by torchtitan, whatever stack the job was written for. So the job
`primus export` checks with `fit` and describes in the `# primus-job:` header is the job on the
target's stack (for a Megatron-LM line the Megatron-LM release the job's stack runs,
`primus.stacks.megatron_release.megatron_target`: a Primus, Megatron-Bridge or NeMo release's pinned one;
else the target's newest release, what ``--stack NAME`` gives), keeping what the user set and
what the file states (`WRITTEN_BY`, whoever supplied it), leaving the rest of what the old stack supplied
to the new one, without the settings the target framework does
not have (`FRAMEWORK_ONLY`). Importing the file then gives back the job it launches, not the one it
was exported from.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Final

from primus.errors import InputError
from primus.job import TORCHTITAN_DEFAULT_SPLIT, Job, job_from_mapping
from primus.launch.common import flatten, nest, own_settings
from primus.launch.megatron_export import WRITTEN, WRITTEN_MOE
from primus.launch.torchtitan import PIPELINE_WRITTEN
from primus.launch.torchtitan import WRITTEN as TORCHTITAN_WRITTEN
from primus.stacks.core import Stack, resolve_stack
from primus.stacks.megatron_release import GROUPED_MLP_REMOVED_IN, megatron_target

#: The stack that runs each launch format.
TARGET_STACKS: Final = {"megatron": "megatron-lm", "primus": "primus", "torchtitan": "torchtitan"}
#: What each format's framework is called in the notes.
RUNNER: Final = {"megatron": "Megatron-LM's pretrain_gpt.py", "primus": "AMD Primus", "torchtitan": "torchtitan"}
#: Job settings only some frameworks have: key -> (the formats that launch it, why the others cannot, the
#: value every framework runs, which is never dropped).
FRAMEWORK_ONLY: Final[dict[str, tuple[tuple[str, ...], str, Any]]] = {
    "moe.sync_free": (("primus",), "sync-free MoE is AMD Primus-Turbo's (turbo_sync_free_moe_stage); without it "
                      "the host waits for the token counts once per MoE layer forward (host.moe_layer_us)", False),
    "kernels.eager_cross_entropy": (("torchtitan",), "the eager fp32-logit loss is torchtitan's uncompiled loss; "
                                    "Megatron runs its vocab-parallel cross-entropy", False),
    "kernels.attention_backend": (("megatron", "primus"), "Megatron's --attention-backend; torchtitan runs "
                                  "PyTorch's scaled_dot_product_attention", "auto"),
    "moe.grouped_gemm": (("megatron", "primus"), "Megatron's expert modules (SequentialMLP, GroupedMLP, the fused "
                         "grouped MLP); torchtitan's experts run grouped GEMMs", "te"),
}
#: The job keys each format's file states (the exporters' own lists; the Primus experiment holds the
#: Megatron arguments): run as stated, whichever stack supplied them.
WRITTEN_BY: Final = {"megatron": WRITTEN | WRITTEN_MOE, "primus": WRITTEN | WRITTEN_MOE,
                     "torchtitan": TORCHTITAN_WRITTEN | PIPELINE_WRITTEN}
#: The formats whose file sets PyTorch's allocator when the job runs expandable segments (a Megatron-LM
#: line exports PYTORCH_CUDA_ALLOC_CONF, `primus.launch.launch_env.allocator_env`), whichever stack chose it.
STATES_ALLOCATOR: Final = ("megatron",)
#: The formats whose file states the pipeline layout a stack's recipe split gives (Megatron arguments, and
#: Primus's YAML of them); a torchtitan TOML states none (`primus.launch.torchtitan`).
SPLIT_WRITTEN: Final = ("megatron", "primus")
#: Keys that describe the framework itself: the target's stack supplies them.
FRAMEWORK_KEYS: Final = ("framework", "selective_recompute")


def on_target_stack(job: Job, kind: str) -> tuple[Job, tuple[str, ...]]:
    """The job as the `kind` launch file runs it, and what changed (notes for stderr); the job itself
    when nothing does."""
    own = own_settings(job)
    old = job.resolved_stack
    moved = old.name != TARGET_STACKS[kind]
    new = _new_stack(old, kind) if moved else old.label
    lost = [k for k in FRAMEWORK_KEYS if k in own] if moved else []
    if moved:
        # what the file states is run as stated, whoever supplied it (a recipe's fused loss, its bf16
        # gradients, the layout); the rest of what the old stack supplied is left to the new one
        stated = (*WRITTEN_BY[kind], "parallel")
        spec = job.spec.model_dump(mode="json", exclude_defaults=True)
        if job.split_stack is not None and job.spec.pipeline == TORCHTITAN_DEFAULT_SPLIT:
            spec.pop("pipeline", None)  # torchtitan's own defaults, stated on load: not the new framework's split
        for key, value in flatten(spec).items():
            if key not in own and any(key == w or key.startswith(w + ".") for w in stated):
                own[key] = value
        if kind in STATES_ALLOCATOR and job.expandable_segments and "allocator.expandable_segments" not in own:
            own["allocator.expandable_segments"] = True  # the line exports PYTORCH_CUDA_ALLOC_CONF
        for key in FRAMEWORK_KEYS:
            own.pop(key, None)
        own["stack"] = new
    dropped = [key for key, (formats, _, default) in FRAMEWORK_ONLY.items()
               if own.get(key, default) != default and kind not in formats]
    if kind == "primus" and own.get("moe.sync_free") and job.spec.moe.token_dispatcher != "flex":
        dropped.append("moe.sync_free")  # Primus's stage 2 makes the dispatcher flex (DeepEP): another is not it
    if not moved and not dropped:
        return job, ()
    notes: list[str] = []
    if moved:
        pinned = f" (the Megatron-LM {old.label} runs)" if kind == "megatron" and old.megatron_lm is not None else ""
        notes.append(f"stack {new}{pinned}, not {old.label}: the file runs on {RUNNER[kind]}, so the job checked and "
                     f"named in its `# primus-job:` header is on {new} (what the file does not state follows {new})"
                     + (f"; {', '.join(lost)} dropped (the framework's own)" if lost else ""))
    for key in dropped:
        why = FRAMEWORK_ONLY[key][1] if kind not in FRAMEWORK_ONLY[key][0] else \
            f"Primus's sync-free stage 2 makes the dispatcher flex (DeepEP), and this job's is " \
            f"{job.spec.moe.token_dispatcher}"
        del own[key]
        notes.append(f"{key} dropped from the launched job: {why}")
    if moved and kind == "megatron" and job.model.is_moe and own.get("moe.grouped_gemm") == "legacy":
        _check_legacy_gemm(job, old, new)
    data: dict[str, Any] = nest(own)
    data["model"], data["hardware"] = job.spec.model, job.spec.hardware
    target = job_from_mapping(data, job.where, job.base_dir)
    if moved and kind in SPLIT_WRITTEN and job.split_stack is not None and "pipeline" not in data:
        # the old stack's recipe split, which the file states (--pipeline-model-parallel-layout): a layout
        # `fit` and `tune` found legal there stays so on the runner's stack, as the file runs it
        target = replace(target, split_stack=job.split_stack)
    return target, tuple(notes)


def _new_stack(old: Stack, kind: str) -> str:
    """The stack a job moved off `old` runs on: for a Megatron-LM line from a release that pins a Megatron-LM
    (AMD Primus, Megatron-Bridge, NeMo), that release (``megatron-lm@core_v0.17.0``); else the newest."""
    if kind == "megatron" and old.megatron_lm is not None:
        return megatron_target(old).stack
    return resolve_stack(TARGET_STACKS[kind]).label


def _check_legacy_gemm(job: Job, old: Stack, new: str) -> None:
    """A job on another stack (AMD Primus keeps GroupedMLP) whose Megatron-LM line would run a release
    without it: refused here, naming the export, rather than as a job on a stack the user did not write."""
    target = megatron_target(resolve_stack(new), job.where)
    if target.before(GROUPED_MLP_REMOVED_IN):
        return
    why = f"the Megatron-LM {old.label} runs" if old.megatron_lm is not None else "the newest Megatron-LM release"
    raise InputError(job.where, "moe.grouped_gemm",
                     f"legacy: export --to megatron writes a Megatron-LM {target.tag} line ({why}), and {target.tag} "
                     "has no GroupedMLP and no --moe-use-legacy-grouped-gemm (NVIDIA/Megatron-LM #3410, 2caa681a1d, "
                     f"removed them in {GROUPED_MLP_REMOVED_IN}); export --to primus (AMD Primus keeps GroupedMLP), "
                     "use grouped_gemm te, or name a Megatron-LM release before it (--stack megatron-lm@core_v0.16.1)")
