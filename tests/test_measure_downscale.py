"""Downscaling a target layout to the local devices: PP to 1 first, then DP replicas, then EP (keeping
experts per rank and tokens per expert), then CP, then TP — with the catalog's real models."""

from __future__ import annotations

from typing import Any

import pytest

from primus.catalog.models import resolve_model
from primus.measure.downscale import Downscale, downscale
from primus.parallel import Layout


def layout(**kw: Any) -> Layout:
    base: dict[str, Any] = dict(tp=1, pp=1, vp=1, cp=1, ep=1, etp=1, dp=1, mbs=1, sp=False, recompute="none",
                                sharding="dist_opt")
    base.update(kw)
    return Layout(**base)


def axes(ds: Downscale) -> list[str]:
    return [r.axis for r in ds.reductions]


def test_a_target_that_fits_is_not_reduced() -> None:
    model = resolve_model("llama3.1-8b", "test")
    ds = downscale(model, layout(cp=2, dp=4), 8)
    assert not ds.reduced and ds.local == ds.target
    assert "nothing reduced" in ds.describe()[0]


def test_pipeline_goes_first_then_replicas() -> None:
    """Llama 3.1 70B as DGX Cloud runs it (TP 4, PP 8 × VP 5, DP 2) on one 8-GPU node."""
    model = resolve_model("llama3.1-70b", "test")
    ds = downscale(model, layout(tp=4, pp=8, vp=5, dp=2, sp=True), 8)
    assert axes(ds) == ["pp"]
    assert (ds.local.tp, ds.local.pp, ds.local.vp, ds.local.dp) == (4, 1, 1, 2)
    one = downscale(model, layout(tp=4, pp=8, vp=5, dp=2, sp=True), 1)
    assert axes(one) == ["pp", "dp", "tp"]
    assert one.local.world == 1


def test_expert_parallel_keeps_experts_per_rank() -> None:
    """Mixtral 8x22B, EP 8 over 64 GPUs (PP 4, DP 16): on 8 devices EP 8 survives (DP folds to 8); on 2
    devices EP drops to 2 with one expert per rank, so the sub-model has 2 experts."""
    model = resolve_model("mixtral-8x22b", "test")
    target = layout(pp=4, vp=2, ep=8, dp=16)
    eight = downscale(model, target, 8)
    assert axes(eight) == ["pp", "dp"]
    assert (eight.local.ep, eight.local.dp, eight.num_experts) == (8, 8, 8)
    two = downscale(model, target, 2)
    assert axes(two)[:3] == ["pp", "dp", "ep"]
    assert (two.local.ep, two.local.world, two.num_experts, two.topk) == (2, 2, 2, 2)
    ep = next(r for r in two.reductions if r.axis == "ep")
    assert "experts per rank kept (1)" in ep.why and "tokens per expert kept" in ep.why


def test_expert_parallel_to_one_says_top_k_is_capped() -> None:
    model = resolve_model("mixtral-8x22b", "test")
    one = downscale(model, layout(pp=4, vp=2, ep=8, dp=16), 1)
    assert one.local.world == 1 and one.num_experts == 1 and one.topk == 1
    assert "fewer tokens per expert" in next(r.why for r in one.reductions if r.axis == "ep")


def test_tensor_parallel_is_reduced_last() -> None:
    """Llama 3.1 405B (TP 8, PP 8 × VP 8, CP 2, DP 8): on 8 devices PP, DP and CP go, TP 8 stays."""
    model = resolve_model("llama3.1-405b", "test")
    target = layout(tp=8, pp=8, vp=8, cp=2, dp=8, sp=True)
    ds = downscale(model, target, 8)
    assert axes(ds) == ["pp", "dp", "cp"]
    assert ds.local.tp == 8 and ds.local.world == 8
    one = downscale(model, target, 1)
    assert axes(one) == ["pp", "dp", "cp", "tp"]
    assert one.to_json()["local"]["tp"] == 1


@pytest.mark.parametrize("devices", [1, 2, 4, 8, 16])
def test_every_local_layout_fits_and_folds(devices: int) -> None:
    model = resolve_model("deepseek-v3", "test")
    ds = downscale(model, layout(tp=2, pp=16, ep=64, dp=32, sp=True), devices)
    local = ds.local
    assert local.world <= devices
    assert (local.tp * local.cp * local.dp) % (local.ep * local.etp) == 0  # MoE parallel folding holds
    assert ds.num_experts == 256 // 64 * local.ep


def test_devices_must_be_positive() -> None:
    with pytest.raises(ValueError):
        downscale(resolve_model("llama3.1-8b", "test"), layout(), 0)
