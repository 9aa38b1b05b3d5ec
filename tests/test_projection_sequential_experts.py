"""Megatron-Core's SequentialMLP (`moe.grouped_gemm: sequential`), what Megatron-LM builds without
--moe-grouped-gemm: a Python loop over the local experts, each a Megatron MLP of Transformer Engine linears.

Sources: NVIDIA/Megatron-LM core_v0.16.0 megatron/core/extensions/transformer_engine_spec_provider.py
`grouped_mlp_modules` (SequentialMLP with TEColumnParallelLinear / TERowParallelLinear when neither grouped
flag is set); megatron/core/transformer/moe/experts.py lines 1054-1120 (`_pad_tensor_for_fp8`, the split
per expert, the cat of the outputs); megatron/core/fp8_utils.py `get_fp8_align_size` (32 rows for MXFP8,
16 otherwise). Shapes: Megatron-Bridge's Qwen3-30B-A3B preset on 8 B200 (EP 8: 128 / 8 = 16 local experts,
hidden 2048, top-8), MBS 1.
"""

from __future__ import annotations

from typing import Any

import pytest

from primus.errors import InputError
from primus.job import job_from_mapping
from primus.memory.evaluate import MemoryModel, pinned_layout
from primus.projection import Projector
from primus.projection.ops import Block

QWEN3_30B_B200: dict[str, Any] = {
    "stack": "megatron-bridge@25.09", "model": "qwen3-30b-a3b", "hardware": "b200", "gpus": 8,
    "seq_len": 4096, "global_batch_size": 512, "precision": "fp8", "fp8_recipe": "mxfp8",
    "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": 8, "etp": 1, "mbs": 1, "sp": False, "recompute": "none",
                 "sharding": "dist_opt"}}
SEQUENTIAL = {"moe": {"grouped_gemm": "sequential"}}
HIDDEN = 2048


def _block(job_map: dict[str, Any]) -> Block:
    job = job_from_mapping(job_map, "test")
    p = Projector(job)
    return p.block("moe", p.context(pinned_layout(job)))


def _op(block: Block, name: str) -> Any:
    return next((m for m in block.memops if m.name == name), None)


def test_sequential_experts_call_the_glu_once_per_local_expert() -> None:
    te = _op(_block(QWEN3_30B_B200), "mlp.experts.activation")
    seq = _op(_block({**QWEN3_30B_B200, **SEQUENTIAL}), "mlp.experts.activation")
    assert (te.launches, te.bwd_launches) == (1, None)
    assert (seq.launches, seq.bwd_launches) == (16, 16)
    assert (seq.fwd_bytes, seq.bwd_bytes) == (te.fwd_bytes, te.bwd_bytes)  # the same rows, in 16 calls


def test_sequential_experts_cat_their_outputs_and_their_input_gradients() -> None:
    # R = 4,096 tokens x top-8 = 32,768 routed rows on each rank (balanced routing); the forward's cat of
    # the outputs and the backward's cat of the split's gradients each read and write R rows of bf16
    cat = _op(_block({**QWEN3_30B_B200, **SEQUENTIAL}), "mlp.experts.sequential_cat")
    assert cat.fwd_bytes == cat.bwd_bytes == 32_768 * HIDDEN * 2 * 2
    assert _op(_block(QWEN3_30B_B200), "mlp.experts.sequential_cat") is None


def test_no_expert_pads_when_its_rows_are_a_multiple_of_the_alignment() -> None:
    # 32,768 rows over 16 experts: 2,048 each, a multiple of MXFP8's 32
    assert _op(_block({**QWEN3_30B_B200, **SEQUENTIAL}), "mlp.experts.fp8_pad") is None


def test_mxfp8_pads_each_expert_to_32_rows_and_other_fp8_recipes_to_16() -> None:
    # seq 4,000: 32,000 rows, 2,000 per expert: MXFP8 pads each to 2,016 (32,256 rows in all), copying the
    # rows into the padded buffer (R read, 32,256 written) with a zeros and a cat per expert; 2,000 is a
    # multiple of 16, so the tensorwise recipe does not pad, and BF16 never does
    short = {**QWEN3_30B_B200, **SEQUENTIAL, "seq_len": 4000}
    pad = _op(_block(short), "mlp.experts.fp8_pad")
    assert pad.fwd_bytes == pad.bwd_bytes == (32_000 + 32_256) * HIDDEN * 2
    assert (pad.launches, pad.bwd_launches) == (32, 32)
    assert _op(_block({**short, "fp8_recipe": "tensorwise"}), "mlp.experts.fp8_pad") is None
    bf16 = {k: v for k, v in short.items() if k != "fp8_recipe"} | {"precision": "bf16"}
    assert _op(_block(bf16), "mlp.experts.fp8_pad") is None


def test_sequential_experts_take_longer_and_hold_the_same_memory() -> None:
    te_job = job_from_mapping(QWEN3_30B_B200, "test")
    seq_job = job_from_mapping({**QWEN3_30B_B200, **SEQUENTIAL}, "test")
    layout = pinned_layout(te_job)
    te, seq = Projector(te_job).project(layout), Projector(seq_job).project(layout)
    assert seq.step_time_s > te.step_time_s
    peak = [MemoryModel(j).evaluate(layout, strict=False).peak_bytes for j in (seq_job, te_job)]
    assert peak[0] == peak[1]


def test_torchtitan_has_no_sequential_experts() -> None:
    with pytest.raises(InputError, match="SequentialMLP"):
        job_from_mapping({"stack": "torchtitan", "model": "qwen3-30b-a3b", "hardware": "b200", "gpus": 8,
                          "seq_len": 4096, "global_batch_size": 512, **SEQUENTIAL}, "test")


def test_sync_free_moe_needs_a_grouped_linear() -> None:
    with pytest.raises(InputError, match="sync-free"):
        job_from_mapping({**QWEN3_30B_B200, "stack": "primus", "moe": {"grouped_gemm": "sequential",
                                                                       "sync_free": True}}, "test")


def test_the_projection_names_the_expert_implementation_it_priced() -> None:
    job = job_from_mapping({**QWEN3_30B_B200, **SEQUENTIAL}, "test")
    assumptions = Projector(job).project(pinned_layout(job)).assumptions
    assert any(a.startswith("experts: SequentialMLP") for a in assumptions)


def test_an_export_to_torchtitan_drops_sequential_experts_with_a_note() -> None:
    from primus.launch.target import on_target_stack

    job = job_from_mapping({**QWEN3_30B_B200, **SEQUENTIAL, "stack": "megatron-lm@2026.06"}, "test")
    moved, notes = on_target_stack(job, "torchtitan")
    assert moved.spec.moe.grouped_gemm == "te"
    assert any("moe.grouped_gemm dropped" in n and "SequentialMLP" in n for n in notes)
