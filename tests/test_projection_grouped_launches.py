"""Host launches of the experts' grouped GEMM: Transformer Engine's GroupedLinear (Megatron-Core's
TEGroupedMLP) issues one cuBLAS GEMM per local expert and quantises each expert's slice with its own
kernel, so a MoE layer's host floor (`host.kernel_launch_us` per kernel) grows with the local experts.

Sources: NVIDIA/TransformerEngine v2.9 transformer_engine/common/gemm/cublaslt_gemm.cu
(`multi_stream_cublas_gemm`: a loop of `nvte_cublas_gemm_v2` over `num_gemms` on 4 compute streams) and
common/util/cast.cu (`nvte_multi_tensor_quantize`: a loop of quantize kernels over the tensors), called
by transformer_engine/pytorch/module/grouped_linear.py (`general_grouped_gemm`, `tex.split_quantize`).
Megatron-Bridge's Qwen3-30B-A3B MXFP8 preset on 8 B200 (EP 8: 128 / 8 = 16 local experts).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from primus.job import job_from_mapping
from primus.memory.evaluate import pinned_layout
from primus.projection import Projector
from primus.projection.cost import HOST, block_cost

QWEN3_30B_B200 = {"stack": "megatron-bridge@25.09", "model": "qwen3-30b-a3b", "hardware": "b200", "gpus": 8,
                  "seq_len": 4096, "global_batch_size": 512, "precision": "fp8", "fp8_recipe": "mxfp8",
                  "parallel": {"tp": 1, "pp": 1, "cp": 1, "ep": 8, "etp": 1, "mbs": 1, "sp": False,
                               "recompute": "none", "sharding": "dist_opt"}}


def _moe(job_map: dict[str, object], per_expert: bool | None = None):  # type: ignore[no-untyped-def]
    job = job_from_mapping(job_map, "test")
    layout = pinned_layout(job)
    p = Projector(job)
    ctx = p.context(layout)
    if per_expert is not None:
        ctx = replace(ctx, per_expert_launches=per_expert)
    return p, layout, ctx, p.block("moe", ctx)


def test_te_grouped_linear_launches_one_gemm_per_local_expert() -> None:
    _, _, ctx, block = _moe(QWEN3_30B_B200)
    assert ctx.per_expert_launches
    experts = [g for g in block.gemms if g.name.startswith("mlp.experts.")]
    assert [(g.count, g.launches) for g in experts] == [(16, 16), (16, 16)]
    router = next(g for g in block.gemms if g.name == "mlp.router")
    assert router.launches == 1


def test_the_legacy_grouped_gemm_is_one_kernel_for_all_experts() -> None:
    legacy = {**QWEN3_30B_B200, "moe": {"grouped_gemm": "legacy"}}
    _, _, ctx, block = _moe(legacy)
    assert not ctx.per_expert_launches
    assert {g.launches for g in block.gemms} == {1}


def test_each_expert_adds_its_gemm_and_quantisation_kernels_to_the_host_count() -> None:
    # per expert GEMM: forward, data-gradient and weight-gradient GEMMs (3) plus, in MXFP8, the
    # quantisation of its input (forward) and of its output gradient (backward) (2): 5 kernels, for FC1
    # and FC2, for each of the 15 local experts beyond the first
    p, layout, ctx, _ = _moe(QWEN3_30B_B200)
    groups = p.groups(layout)
    te = block_cost(p.block("moe", ctx), p.timer, groups, p.cost_settings)
    one = replace(ctx, per_expert_launches=False)
    single = block_cost(p.block("moe", one), p.timer, groups, p.cost_settings)
    assert sum(te.calls) - sum(single.calls) == 2 * 5 * 15 == 150
    assert te.fwd[:HOST] == single.fwd[:HOST]  # the GPU work is the same; only the host count differs


def _forward_launches(p, layout, ctx) -> int:  # type: ignore[no-untyped-def]
    """With one second per launch the forward is exactly its launch count in seconds (the floor rules)."""
    one_second = replace(p.cost_settings, launch=1.0)
    return round(sum(block_cost(p.block("moe", ctx), p.timer, p.groups(layout), one_second).fwd))


def test_a_slow_enough_host_makes_the_per_expert_launches_the_forward_floor() -> None:
    p, layout, ctx, block = _moe(QWEN3_30B_B200)
    n_te = _forward_launches(p, layout, ctx)
    n_one = _forward_launches(p, layout, replace(ctx, per_expert_launches=False))
    assert n_te - n_one == 2 * 2 * 15  # FC1 and FC2: a GEMM and an input quantisation per extra expert
    gpu = block_cost(block, p.timer, p.groups(layout), replace(p.cost_settings, launch=0.0))
    host_bound = block_cost(block, p.timer, p.groups(layout), replace(p.cost_settings, launch=40e-6))
    assert sum(gpu.fwd) < n_te * 40e-6
    assert sum(host_bound.fwd) == pytest.approx(n_te * 40e-6, rel=1e-12)
