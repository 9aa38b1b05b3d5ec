"""Specification of `project`: the breakdown adds up, the fast path agrees with the simulation, the
published DGX Cloud Llama 3 70B FP8 run is reproduced within the sanity bound, and more data-parallel
GPUs mean more throughput."""

from __future__ import annotations

from typing import Any

import pytest

from primus.errors import InputError
from primus.job import Job, job_from_mapping
from primus.memory.evaluate import pinned_layout
from primus.parallel import Layout
from primus.projection import (
    BREAKDOWN_ORDER,
    AnalyticTimer,
    AttentionCall,
    GemmCall,
    MeasuredTimer,
    NothingFits,
    Projector,
    RecordingTimer,
    complete_and_project,
    load_profile,
    project,
    rank_layouts,
)
from primus.specs.flops import flops_per_token

# DGX Cloud benchmarking recipes (NVIDIA DGX Cloud Performance Recipes, release 25.04.01), Llama 3 70B
# pre-training in FP8 on 64 x H100 SXM 80GB: TP4 PP8 VP5 CP1, MBS 1, GBS 128, sequence 8192, step time
# 9.86 s (ground_truth/runs_dev.csv row DGXC25.04.01-H100-Llama3-70B-FP8-64). The recipe (NeMo's
# llama3_70b performance config) runs sequence parallelism, the distributed optimizer with overlapped
# gradient reduce and parameter gather, TP communication overlap and the fused cross-entropy.
DGX_STEP_S = 9.86
DGX_JOB = {
    "model": "llama3.1-70b", "hardware": "h100-80gb", "gpus": 64, "seq_len": 8192, "global_batch_size": 128,
    "precision": "fp8", "overlap": {"tp_comm": True}, "kernels": {"cross_entropy_fusion": True},
    "parallel": {"tp": 4, "pp": 8, "vp": 5, "cp": 1, "mbs": 1, "sp": True, "recompute": "none",
                 "sharding": "dist_opt"},
}
DGX_LAYOUT = Layout(tp=4, pp=8, vp=5, cp=1, ep=1, etp=1, dp=2, mbs=1, sp=True, recompute="none",
                    sharding="dist_opt")


def job(**data: Any) -> Job:
    base: dict[str, Any] = {"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 8, "seq_len": 4096,
                            "global_batch_size": 32, "precision": "bf16"}
    base.update(data)
    return job_from_mapping(base, "test")


def lay(tp: int = 1, pp: int = 1, vp: int = 1, cp: int = 1, ep: int = 1, etp: int = 1, dp: int = 8, mbs: int = 1,
        sp: bool = True, recompute: str = "none", sharding: str = "dist_opt", rnl: int | None = None) -> Layout:
    return Layout(tp=tp, pp=pp, vp=vp, cp=cp, ep=ep, etp=etp, dp=dp, mbs=mbs, sp=sp and tp > 1,
                  recompute=recompute, sharding=sharding, recompute_num_layers=rnl)


CONFIGS: list[tuple[str, dict[str, Any], Layout]] = [
    ("dense dp", {}, lay()),
    ("dense tp sp", {}, lay(tp=4, dp=2)),
    ("dense tp no sp", {}, lay(tp=2, dp=4, sp=False)),
    ("pipeline 1f1b", {"gpus": 16}, lay(tp=2, pp=4, dp=2)),
    ("interleaved", {"gpus": 16}, lay(tp=2, pp=4, vp=2, dp=2)),
    ("context parallel", {"seq_len": 32768, "global_batch_size": 8}, lay(tp=2, cp=4, dp=1)),
    ("full recompute", {}, lay(tp=2, dp=4, recompute="full", rnl=2)),
    ("selective", {}, lay(tp=2, dp=4, recompute="selective")),
    ("fsdp", {"gpus": 16}, lay(dp=16, sharding="fsdp")),
    ("zero2", {"gpus": 16}, lay(dp=16, sharding="zero2")),
    ("no sharding", {"gpus": 16}, lay(dp=16, sharding="none")),
    ("fp8 tp overlap", {"precision": "fp8", "overlap": {"tp_comm": True}}, lay(tp=8, dp=1)),
    ("unfused attention", {"kernels": {"flash_attention": False}, "seq_len": 2048}, lay(tp=8, dp=1)),
    ("moe ep", {"model": "mixtral-8x7b", "gpus": 16}, lay(tp=2, ep=8, dp=8)),
    ("moe etp overlap", {"model": "qwen3-30b-a3b", "gpus": 32, "overlap": {"moe_a2a": True}},
     lay(tp=2, ep=16, etp=2, dp=16)),
    ("mla mtp", {"model": "deepseek-v3", "gpus": 256, "global_batch_size": 256, "seq_len": 4096,
                 "pipeline": {"layout": "Et*3|(tttt|)*14ttmL"}}, lay(tp=2, pp=16, ep=16, dp=8)),
    ("mi300x mesh", {"hardware": "mi300x", "gpus": 16}, lay(tp=2, pp=2, dp=4)),
    ("gb200 nvl72", {"hardware": "gb200", "gpus": 144, "global_batch_size": 144}, lay(tp=4, pp=2, dp=18)),
]


@pytest.mark.parametrize(("name", "data", "layout"), CONFIGS, ids=[c[0] for c in CONFIGS])
@pytest.mark.parametrize("method", ["auto", "fast", "simulate"])
def test_breakdown_adds_up_to_the_step_time(name: str, data: dict[str, Any], layout: Layout, method: str) -> None:
    p = project(job(**data), layout, method=method)
    assert list(p.breakdown) == list(BREAKDOWN_ORDER)
    assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=1e-9)
    assert all(v >= -1e-9 * p.step_time_s for v in p.breakdown.values()), p.breakdown
    assert all(v >= 0 for v in p.hidden.values())
    assert set(p.sources) == set(BREAKDOWN_ORDER)
    assert set(p.sources.values()) == {"modelled"}
    assert p.breakdown["gemm"] > 0 and p.breakdown["optimizer"] > 0
    tokens = p.layout.world and job(**data).spec.global_batch_size * job(**data).spec.seq_len
    assert p.tokens_per_s_per_gpu == pytest.approx(tokens / p.step_time_s / p.layout.world)


@pytest.mark.parametrize(("name", "data", "layout"), CONFIGS, ids=[c[0] for c in CONFIGS])
def test_fast_path_agrees_with_the_simulation(name: str, data: dict[str, Any], layout: Layout) -> None:
    """Exactly where the closed form applies (PP 1, or uniform chunks); within 2% for the uneven
    stages the embedding and the loss make."""
    j = job(**data)
    fast = project(j, layout, method="fast")
    sim = project(j, layout, method="simulate")
    if fast.timing == "closed_form":
        assert fast.step_time_s == pytest.approx(sim.step_time_s, rel=1e-12)
    else:
        assert fast.step_time_s == pytest.approx(sim.step_time_s, rel=0.02)


def test_communication_kinds_show_up_where_the_layout_has_them() -> None:
    cp = project(job(seq_len=65536, global_batch_size=8), lay(tp=1, cp=8, dp=1))
    assert cp.breakdown["cp_comm"] + cp.hidden["cp_comm"] > 0
    moe = project(job(model="qwen3-30b-a3b", gpus=16), lay(ep=16, dp=16))
    assert moe.breakdown["ep_a2a"] > 0
    pp = project(job(gpus=16, global_batch_size=4), lay(tp=8, pp=2, dp=1))
    assert pp.breakdown["pp_p2p"] > 0 and pp.breakdown["bubble"] > 0
    fsdp = project(job(gpus=16), lay(dp=16, sharding="fsdp"))
    assert fsdp.breakdown["fsdp_comm"] + fsdp.hidden["fsdp_comm"] > 0
    dp = project(job(gpus=16, overlap={"grad_reduce": False, "param_gather": False}), lay(dp=16))
    assert dp.breakdown["dp_grad_reduce"] > 0 and dp.breakdown["dp_param_gather"] > 0
    rec = project(job(), lay(tp=2, dp=4, recompute="full"))
    plain = project(job(), lay(tp=2, dp=4))
    assert rec.breakdown["recompute"] == pytest.approx(rec.step_time_s - plain.step_time_s, rel=1e-6)
    compute = plain.breakdown["gemm"] + plain.breakdown["attention"] + plain.breakdown["memory_bound"]
    assert plain.breakdown["gemm"] / 3 < rec.breakdown["recompute"] < compute / 2  # one more forward


def test_dgx_cloud_llama3_70b_fp8_is_within_the_sanity_bound() -> None:
    j = job_from_mapping(DGX_JOB, "dgx-cloud-llama3-70b-fp8")
    p = project(j, DGX_LAYOUT)
    assert p.step_time_s == pytest.approx(DGX_STEP_S, rel=0.25)
    assert sum(p.breakdown.values()) == pytest.approx(p.step_time_s, rel=1e-9)
    assert p.timing == "simulation"
    assert p.num_microbatches == 64
    # model FLOPs: Megatron convention, MFU against the dense FP8 peak
    fpt = flops_per_token(j.model, 8192).training
    assert p.model_tflops_per_gpu == pytest.approx(fpt * 128 * 8192 / p.step_time_s / 64 / 1e12)
    assert p.mfu == pytest.approx(p.model_tflops_per_gpu / 1978.9)


def test_more_data_parallel_gpus_give_more_total_throughput() -> None:
    totals = []
    for nodes in (1, 2, 4, 8):
        j = job(gpus=8 * nodes, global_batch_size=16 * nodes, model="llama3.1-70b", seq_len=8192)
        p = project(j, lay(tp=8, pp=1, dp=nodes, recompute="full"))
        totals.append(p.tokens_per_s_per_gpu * 8 * nodes)
    assert totals == sorted(totals) and totals[-1] > 7 * totals[0]


def test_faster_hardware_and_lower_precision_are_faster() -> None:
    layout = lay(tp=2, dp=4)
    h100 = project(job(), layout).step_time_s
    assert project(job(hardware="b200"), layout).step_time_s < h100
    assert project(job(precision="fp8"), layout).step_time_s < h100


def test_measured_times_replace_modelled_ones_and_are_reported() -> None:
    j = job()
    layout = lay(dp=8)
    analytic = AnalyticTimer(j.cluster, load_profile(j.cluster))

    class Recorder(MeasuredTimer):
        def gemm(self, call: GemmCall) -> Any:
            t = self.fallback.gemm(call)
            return type(t)(t.seconds * 2, True)

    measured = Projector(j, timer=Recorder(analytic, {})).project(layout)
    modelled = Projector(j).project(layout)
    assert measured.sources["gemm"] == "measured"
    assert measured.sources["attention"] == "modelled"
    assert measured.breakdown["gemm"] == pytest.approx(2 * modelled.breakdown["gemm"])
    assert MeasuredTimer(analytic, {}).gemm(GemmCall("bf16", 64, 64, 64, 1, 2, 2)).measured is False


def test_a_measured_table_keyed_by_the_recorded_calls_replaces_the_model() -> None:
    j = job()
    layout = lay(tp=2, dp=4)
    analytic = AnalyticTimer(j.cluster, load_profile(j.cluster))
    recorder = RecordingTimer(analytic)
    modelled = Projector(j, timer=recorder).project(layout)
    table = {c: analytic.attention(c).seconds * 3 for c in recorder.calls if isinstance(c, AttentionCall)}
    assert table  # the kernels a measurement campaign would time
    measured = Projector(j, timer=MeasuredTimer(analytic, table)).project(layout)
    assert measured.sources["attention"] == "measured" and measured.sources["gemm"] == "modelled"
    assert measured.breakdown["attention"] == pytest.approx(3 * modelled.breakdown["attention"])


def test_layouts_that_megatron_cannot_build_are_refused() -> None:
    with pytest.raises(InputError, match="GPUs"):
        project(job(), lay(dp=4))
    with pytest.raises(InputError, match="divisible"):
        project(job(global_batch_size=12), lay(dp=8))


def test_completion_picks_the_fastest_fitting_layout_and_says_so() -> None:
    j = job(parallel={"tp": 2, "pp": 1, "cp": 1, "sp": True, "sharding": "dist_opt"})
    best = complete_and_project(j)
    assert best.fits
    assert best.layout.tp == 2 and best.completion and "mbs=" in best.completion
    from primus.solver.api import Question

    others = rank_layouts(j, Question(j).legal())
    assert best.step_time_s <= min(p.step_time_s for p in others) * 1.0101


def test_nothing_fits_says_why() -> None:
    j = job(model="llama3.1-405b", gpus=8, parallel={"tp": 8, "pp": 1, "cp": 1, "mbs": 1, "sp": True,
                                                       "recompute": "none", "sharding": "none"})
    with pytest.raises(NothingFits, match="GiB"):
        complete_and_project(j)


def test_json_document_has_the_contract_fields() -> None:
    doc = project(job(), lay(tp=2, dp=4)).to_json()
    for key in ("parallel", "step_time_s", "tokens_per_s_per_gpu", "model_tflops_per_gpu", "mfu", "peak_bytes",
                "breakdown", "hidden", "sources", "assumptions", "flop_convention"):
        assert key in doc
    assert doc["parallel"]["tp"] == 2 and doc["parallel"]["dp"] == 4
    assert 0 < doc["mfu"] < 1
    assert sum(doc["breakdown"].values()) == pytest.approx(doc["step_time_s"])


def test_zero2_reduces_every_microbatchs_gradients_exposed_or_hidden() -> None:
    # ZeRO-2 reduce-scatters each microbatch's gradients on its backward: at 8 microbatches the exposed and
    # the hidden time add up to 8 reduce-scatters, where the hidden part used to count one microbatch's
    # (Llama 3.1 8B on 16 H100, DP 16, full recompute: 0.0912 s each, exposed 0.084 s + hidden 0.081 s before)
    totals = {}
    for gbs in (16, 128):
        job = job_from_mapping({"model": "llama3.1-8b", "hardware": "h100-80gb", "gpus": 16, "seq_len": 4096,
                                "global_batch_size": gbs,
                                "parallel": {"tp": 1, "pp": 1, "vp": 1, "cp": 1, "ep": 1, "etp": 1, "mbs": 1,
                                             "sp": False, "recompute": "full", "sharding": "zero2"}}, "j")
        p = Projector(job, load_profile(job.cluster)).project(pinned_layout(job), "auto")
        totals[p.num_microbatches] = p.breakdown["dp_grad_reduce"] + p.hidden["dp_grad_reduce"]
    assert totals[8] == pytest.approx(8 * totals[1], rel=1e-9)
