"""The three cross-entropy forms the ledger knows, and the published torchtitan run whose peak is the
eager one (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, torchtitan 9dec370)."""

from __future__ import annotations

import pytest

from primus.errors import InputError
from primus.job import job_from_mapping
from primus.memory.evaluate import MemoryModel, pinned_layout

GIB = 2**30
# Table 2 of the December 2024 page: Llama 3.1 8B, 8 x H100 96 GB (500 W), FSDP 8, CP 1, local batch 1,
# sequence 32768, full activation checkpointing, torch.compile + Float8: 83.9 GiB (max reserved).
TT_2024_TABLE2 = {"model": "llama3.1-8b", "hardware": "h100-96gb-500w", "gpus": 8, "seq_len": 32768,
                  "global_batch_size": 8, "precision": "fp8", "fp8_recipe": "tensorwise",
                  "framework": "torchtitan",
                  "parallel": {"tp": 1, "pp": 1, "cp": 1, "mbs": 1, "sp": False, "recompute": "full",
                               "sharding": "fsdp"}}


def _peak(kernels: dict[str, bool]):  # type: ignore[no-untyped-def]
    job = job_from_mapping({**TT_2024_TABLE2, "kernels": kernels}, "test-job")
    return MemoryModel(job).evaluate(pinned_layout(job)).peak


def test_eager_cross_entropy_holds_two_more_fp32_logit_tensors_in_backward() -> None:
    logits = 32768 * 128_256  # tokens x vocabulary (128,256 is a multiple of 128: no padding)
    eager, in_place = _peak({"eager_cross_entropy": True}), _peak({})
    # kept in both: the fp32 (log-)softmax; backward transient: 2 fp32 tensors eager, 1 bf16 in place
    assert eager.terms["other.logits_and_loss"] == in_place.terms["other.logits_and_loss"]
    assert eager.terms["activations.backward_working_set"] == 2 * 4 * logits
    assert in_place.terms["activations.backward_working_set"] == 2 * logits
    assert eager.bytes - in_place.bytes == 6 * logits


def test_fused_cross_entropy_keeps_bf16_logits_only() -> None:
    fused, in_place = _peak({"cross_entropy_fusion": True}), _peak({})
    assert in_place.terms["other.logits_and_loss"] - fused.terms["other.logits_and_loss"] == 2 * 32768 * 128_256


def test_the_2024_long_sequence_run_is_reproduced_within_ten_percent() -> None:
    # Not one of the complete development rows (the CSV flags its batch as unstated; the table caption
    # gives local batch size 1), so an independent check of the eager-loss term: 83.9 GiB measured, as
    # torchtitan logs it, the allocator's maximum *reserved* memory under expandable segments (run_train.sh). The
    # ledger counts allocations, so the reserved figure is the ledger's peak plus that allocator's reserve
    # (stacks/allocators.yaml, derived from the two December 2024 Table 1 runs, not from this one): 72.17 GiB
    # at the loss backward (the fp32 log-softmax and its two fp32 gradient buffers) + 6% of the 94.0 GiB
    # left after the runtime context.
    job = job_from_mapping({**TT_2024_TABLE2, "kernels": {"eager_cross_entropy": True},
                            "allocator": {"expandable_segments": True}}, "test-job")
    report = MemoryModel(job).evaluate(pinned_layout(job))
    reserved = report.peak_bytes + report.reserves.fragmentation_bytes
    assert reserved / GIB == pytest.approx(83.9, rel=0.10)
    assert report.reserves.allocator == "expandable_segments"
    assert _peak({}).bytes / GIB < 0.7 * 83.9  # the in-place form misses by more than a third


def test_the_two_cross_entropy_switches_exclude_each_other() -> None:
    with pytest.raises(InputError, match="exclude each other"):
        job_from_mapping({**TT_2024_TABLE2, "kernels": {"eager_cross_entropy": True, "cross_entropy_fusion": True}},
                         "test-job")
