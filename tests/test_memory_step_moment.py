"""The optimizer step is a moment of its own: 16-bit main gradients reach Adam as fp32 copies.

Megatron-Core's distributed optimizer sets each shard's `grad = shard_model_grad.float()`, and the
non-distributed optimizer each parameter's `grad = main_grad.float()`, before Adam runs (core_v0.15.0
megatron/core/optimizer/distrib_optimizer.py lines 2386-2396, optimizer.py lines 750-758). With fp32 main
gradients (Megatron's default under --bf16) `.float()` is the same tensor; with fp16 ones (an fp16 job) or
bf16 ones (Megatron-Bridge and NeMo's grad_reduce_in_fp32=False) it is a new 4 B per gradient element, held
while every activation is already freed. The peak is the larger of that moment and the backward's.

Llama 3 8B (meta-llama/Meta-Llama-3-8B: 32 layers, 8.03B parameters) in fp16 at TP4 PP2 on 8 H100, full
recompute: each rank holds about 1.0B parameters, so the step's copies are 4.02 GB against 0.54 GB of
activations and loss state on stage 0 at the backward's peak.
"""

from __future__ import annotations

from typing import Any

import pytest

from primus.job import job_from_mapping
from primus.memory.evaluate import MemoryModel, pinned_layout

PARALLEL = {"tp": 4, "pp": 2, "vp": 1, "cp": 1, "mbs": 1, "sp": True, "recompute": "full", "sharding": "none"}
FP16 = {"model": "llama3-8b", "hardware": "h100-80gb", "seq_len": 4096, "precision": "fp16", "gpus": 8,
        "global_batch_size": 16, "parallel": PARALLEL}


def _stages(data: dict[str, Any]) -> list[Any]:
    job = job_from_mapping(data, "job.yaml")
    return list(MemoryModel(job).evaluate(pinned_layout(job), strict=False).stages)


def _backward(stage: Any) -> int:
    return sum(v for k, v in stage.terms.items() if k.startswith("activations.")) + stage.terms["other.logits_and_loss"]


def test_fp16_main_gradients_peak_at_the_optimizer_step_with_their_fp32_copies() -> None:
    stage = _stages(FP16)[0]
    copies = 4 * stage.params  # sharding none: every gradient the rank holds
    assert stage.params == 1_004_142_592
    assert _backward(stage) == 537_075_712
    assert stage.terms["optimizer.step_grad_copy"] == copies - _backward(stage) == 3_479_494_656
    assert stage.bytes == 21_209_022_464 == sum(stage.terms.values())


def test_the_distributed_optimizer_copies_only_its_shard() -> None:
    data = {**FP16, "gpus": 16, "global_batch_size": 32, "parallel": {**PARALLEL, "sharding": "dist_opt"}}
    stage = _stages(data)[0]  # DP 2: each rank's optimizer owns half of its parameters
    shard = -(-stage.params // 2)
    assert stage.terms["optimizer.step_grad_copy"] == max(0, 4 * shard - _backward(stage)) > 0


def test_bf16_gradients_of_megatron_bridge_are_copied_too() -> None:
    data = {**FP16, "precision": "bf16", "stack": "megatron-bridge@26.04",
            "parallel": {**PARALLEL, "sharding": "dist_opt"}}
    stage = _stages(data)[0]
    assert stage.terms["optimizer.step_grad_copy"] == 4 * stage.params - _backward(stage)


@pytest.mark.parametrize("data, why", [
    ({**FP16, "precision": "bf16"}, "fp32 main gradients: .float() returns the same tensor"),
    ({**FP16, "precision": "bf16", "stack": "megatron-bridge@26.04",
      "parallel": {**PARALLEL, "sharding": "dist_opt"},
      "optimizer": {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}},
     "the precision-aware optimizer reads the bf16 gradient (decoupled_grad)"),
    ({**FP16, "precision": "nvfp4", "hardware": "b200", "stack": "megatron-lm@2026.06",
      "parallel": {**PARALLEL, "sharding": "dist_opt"},
      "optimizer": {"main_grads_dtype": "bf16", "exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}},
     "NVFP4 leaves --fp8-recipe at 'delayed': the precision-aware optimizer reads the gradient (decoupled_grad)"),
])
def test_no_copy_where_the_optimizer_reads_the_gradient_itself(data: dict[str, Any], why: str) -> None:
    assert all("optimizer.step_grad_copy" not in s.terms for s in _stages(data)), why


def test_the_copy_stays_where_fp8_keeps_the_precision_aware_optimizer_on_grad() -> None:
    # optimizer_config.py lines 198-205: with fp32 master weights and an FP8 recipe other than delayed
    # scaling, the precision-aware optimizer still takes `grad = shard_model_grad.float()`
    data = {**FP16, "precision": "fp8", "fp8_recipe": "mxfp8", "hardware": "b200", "stack": "megatron-bridge@26.04",
            "parallel": {**PARALLEL, "sharding": "dist_opt"},
            "optimizer": {"exp_avg_dtype": "bf16", "exp_avg_sq_dtype": "bf16"}}
    stage = _stages(data)[0]
    assert stage.terms["optimizer.step_grad_copy"] == 4 * stage.params - _backward(stage)


def test_megatron_fsdp_copies_its_gradient_shard_too() -> None:
    # core_v0.15.0 megatron_fsdp/param_and_grad_buffer.py `update_main_grads` (lines 2399-2460): beside the fp32
    # main weights, `optimizer_grad.to(param.dtype)` makes an fp32 copy of each 16-bit gradient shard, held until
    # zero_grad; at the step the gathered layer copies and their unsharded gradients are freed as well
    data = {**FP16, "precision": "bf16", "stack": "megatron-bridge@26.04", "gpus": 8, "seq_len": 1024,
            "parallel": {**PARALLEL, "tp": 1, "pp": 1, "sharding": "fsdp"}}
    stage = _stages(data)[0]
    shard = -(-stage.params // 8)
    gathered = stage.terms["weights.unsharded_working_copies"] + stage.terms["gradients.unsharded_layer_grads"]
    assert stage.terms["optimizer.step_grad_copy"] == 4 * shard - _backward(stage) - gathered > 0
