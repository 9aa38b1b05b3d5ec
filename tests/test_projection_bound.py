"""The step-time bounds behind `primus project`'s bounded search (issue 16): the coarse bound per group of
layouts covers every layout's own bound, because a block's cost per microbatch grows at most linearly
with the micro-batch size; and the placement the bounds key on is what the blocks talk on."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primus.job import job_from_mapping
from primus.parallel import Layout, normalise
from primus.projection.bound import ROUNDING, SpeedBound, pipeline_floor
from primus.projection.ends import embedding_block, loss_block, mtp_block
from primus.projection.ops import _attention, layer_block
from primus.projection.placement import Placement
from primus.projection.project import BLOCK_GROUPS, EXPERT_FREE, Projector, projector_for
from primus.projection.timer import AnalyticTimer, MeasuredTimer
from primus.projection.timing import METHODS, time_pipeline
from primus.schedule.pipeline import SCHEDULES
from primus.schedule.simulate import closed_form_1f1b, closed_form_interleaved
from primus.solver.api import Question

# Jobs chosen to exercise every rounding and overlap the scaling argument has to survive: micro-batch
# sizes with factors 3 and 5, MoE capacity factors and imbalance (rounded-up routed tokens), the
# allgather and flex dispatchers, TP and MoE all-to-all overlap, MLA, sliding windows, unfused
# attention, torchtitan's op-level recompute, FP8, and a full-mesh (MI300X) scale-up domain.
JOBS = {
    "mixtral-flex-overlap": {"model": "mixtral-8x7b", "hardware": "h100-80gb", "nodes": 4, "seq_len": 4096,
                             "global_batch_size": 96,
                             "moe": {"token_dispatcher": "flex", "capacity_factor": 1.25},
                             "overlap": {"tp_comm": True, "moe_a2a": True}},
    "deepseek-lite-fp8-allgather": {"model": "deepseek-v2-lite", "hardware": "h100-80gb", "nodes": 2,
                                    "seq_len": 4096, "global_batch_size": 80, "precision": "fp8",
                                    "moe": {"token_dispatcher": "allgather", "imbalance": 1.3}},
    "gpt-oss-mesh": {"model": "gpt-oss-20b", "hardware": "mi300x", "nodes": 2, "seq_len": 4096,
                     "global_batch_size": 48},
    "llama-unfused-torchtitan": {"model": "llama3.1-8b", "hardware": "h100-80gb", "nodes": 2, "seq_len": 2048,
                                 "global_batch_size": 60, "framework": "torchtitan",
                                 "kernels": {"flash_attention": False}},
}


def _contexts(job):  # type: ignore[no-untyped-def]
    """Every legal layout's shape context, grouped by all but the micro-batch size: {group: {mbs: layout}}."""
    cands = Question(job).candidates
    groups: dict[tuple[int, ...], dict[int, object]] = defaultdict(dict)
    for i in range(cands.n):
        lay = normalise(replace(cands.layout(i), sharding="none", recompute="none"), is_moe=job.model.is_moe)
        groups[(lay.tp, lay.cp, int(lay.sp), lay.ep, lay.etp)].setdefault(lay.mbs, lay)
    return cands, groups


@pytest.mark.parametrize("name", JOBS)
def test_a_blocks_cost_at_k_times_the_micro_batch_is_at_most_k_times_its_cost(name):
    job = job_from_mapping(JOBS[name], "job.yaml")
    bounds = SpeedBound(projector_for(job))
    _, groups = _contexts(job)
    pairs = 0
    for members in groups.values():
        for m, small in members.items():
            for big_mbs, big in members.items():
                if big_mbs == m or big_mbs % m or not bounds._scales(m, small.tp, small.cp, int(small.sp)):
                    continue
                k = big_mbs // m
                for at_k, at_1 in zip(bounds._sums(big), bounds._sums(small), strict=True):
                    assert at_k <= k * at_1 * (1 + ROUNDING), (small, big_mbs)
                pairs += 1
    assert pairs > 0


@pytest.mark.parametrize("name", JOBS)
def test_the_group_bound_covers_every_layouts_own_bound(name):
    job = job_from_mapping(JOBS[name], "job.yaml")
    bounds = SpeedBound(projector_for(job))
    cands = Question(job).candidates
    coarse = bounds.group_bounds(cands)
    own = bounds.row_bounds(cands)
    for i in range(cands.n):
        assert own(i) <= coarse[i], cands.layout(i)
    for i in range(0, cands.n, max(1, cands.n // 300)):
        assert own(i) == bounds.context_bound(cands.layout(i))


@pytest.mark.parametrize("name", JOBS)
def test_the_unsharded_bound_lies_between_the_group_bound_and_each_rows_own_bound(name):
    """The level `primus project` refines the group bound to first: each row at its own micro-batch size
    without its sharding's collectives. It is never above the group bound (the scaling argument) nor
    below the row's own bound (FSDP's gathers and ZeRO-2's reduce-scatter only add time), and the rows
    that shard nothing get exactly their own bound."""
    job = job_from_mapping(JOBS[name], "job.yaml")
    bounds = SpeedBound(projector_for(job))
    cands = Question(job).candidates
    coarse = bounds.group_bounds(cands)
    unsharded, own = bounds.unsharded_bounds(cands), bounds.row_bounds(cands)
    tighter = 0
    for i in range(cands.n):
        assert own(i) <= unsharded(i) <= coarse[i], cands.layout(i)
        tighter += unsharded(i) < coarse[i]
        if cands.layout(i).sharding in ("none", "dist_opt"):
            assert unsharded(i) == own(i)
    assert tighter > 0


@pytest.mark.parametrize("name", JOBS)
def test_a_layers_attention_reads_neither_ep_nor_etp(name):
    """`layer_block` builds a MoE layer's attention once per shape context for every EP and ETP (its
    cache is keyed with EP = ETP = 1): the attention built in the layout's own context is the same."""
    job = job_from_mapping(JOBS[name], "job.yaml")
    proj = projector_for(job)
    cands = Question(job).candidates
    checked = 0
    for i in range(0, cands.n, max(1, cands.n // 50)):
        ctx = proj.context(normalise(cands.layout(i), is_moe=job.model.is_moe))
        plain = replace(ctx, ep=1, act=replace(ctx.act, etp=1))
        for window in (None, 128):
            assert _attention(job.model, ctx, window) == _attention(job.model, plain, window)
        checked += ctx != plain
    assert checked > 0 or not job.model.is_moe


def test_under_a_measured_timer_each_micro_batch_size_is_bounded_on_its_own():
    """A measured table can time any call, so the scaling argument is not used: the coarse bound of a
    layout is the bound of its own shape context (without FSDP's gathers)."""
    job = job_from_mapping(JOBS["mixtral-flex-overlap"], "job.yaml")
    proj = Projector(job, timer=MeasuredTimer(AnalyticTimer(job.cluster, projector_for(job).profile), {}))
    bounds = SpeedBound(proj)
    assert not bounds.scalable
    cands = Question(job).candidates
    coarse = bounds.group_bounds(cands)
    for i in range(0, cands.n, max(1, cands.n // 200)):
        layout = replace(cands.layout(i), sharding="none")
        assert coarse[i] == bounds.context_bound(layout) * (1 + ROUNDING)


@pytest.mark.parametrize("domain", [8, 72])
@pytest.mark.parametrize("tp,cp,ep,etp", [(1, 1, 8, 1), (2, 2, 4, 2), (8, 1, 16, 1), (4, 8, 64, 4), (2, 4, 32, 8)])
def test_under_megatrons_rank_order_dp_and_pp_do_not_move_the_groups_a_block_talks_on(tp, cp, ep, etp, domain):
    """tp-cp-ep-dp-pp numbers TP fastest, then CP, and folds experts as ETP, EP inside DP and PP: the TP,
    CP, EP and ETP groups are the same whatever DP and PP are, so the bounds key on neither."""
    world = 8192
    shapes = set()
    for pp in (1, 2, 4, 8):
        lay = Layout(tp=tp, pp=pp, vp=1, cp=cp, ep=ep, etp=etp, dp=world // (tp * cp * pp), mbs=1, sp=tp > 1,
                     recompute="none", sharding="dist_opt")
        groups = Placement(lay, domain).groups()
        shapes.add(tuple(groups[g] for g in ("tp", "cp", "ep", "etp")))
    assert len(shapes) == 1


@pytest.mark.parametrize("name", JOBS)
def test_blocks_without_experts_read_neither_ep_nor_etp_and_every_block_talks_on_the_block_groups(name):
    """The projector builds and costs embedding, loss and dense blocks once for every EP and ETP
    (`EXPERT_FREE`), and keys chunk work on the placement of `BLOCK_GROUPS` only."""
    job = job_from_mapping(JOBS[name], "job.yaml")
    proj = projector_for(job)
    cands = Question(job).candidates
    kinds = {"embedding", "loss", "mtp", *(("moe", "dense") if job.model.is_moe else ("dense",))}
    checked = 0
    for i in range(0, cands.n, max(1, cands.n // 50)):
        ctx = proj.context(normalise(cands.layout(i), is_moe=job.model.is_moe))
        plain = replace(ctx, ep=1, act=replace(ctx.act, etp=1))
        for kind in kinds:
            block = _build(job.model, kind, ctx)
            assert {c.group for c in block.comms} <= set(BLOCK_GROUPS)
            if kind in EXPERT_FREE:
                assert block == _build(job.model, kind, plain)
                checked += ctx != plain
    assert checked > 0 or not job.model.is_moe


def _build(model, kind, ctx):  # type: ignore[no-untyped-def]
    if kind == "embedding":
        return embedding_block(model, ctx)
    if kind == "loss":
        return loss_block(model, ctx)
    if kind == "mtp":
        return mtp_block(model, ctx)
    return layer_block(model, kind, ctx, None)


@pytest.mark.parametrize("name", ["mixtral-flex-overlap", "gpt-oss-mesh"])
@pytest.mark.parametrize("sharding", ["zero2", "fsdp"])
def test_a_layouts_own_bound_is_never_below_its_projection_under_sharded_gradients(name, sharding):
    """ZeRO-2's per-microbatch reduce-scatter floor and FSDP's gathers enter the bound; the projection of
    every such layout (sampled) stays at or under it."""
    job = job_from_mapping(JOBS[name], "job.yaml")
    proj = projector_for(job)
    bounds = SpeedBound(proj)
    cands = Question(job).candidates
    rows = [i for i in range(cands.n) if cands.layout(i).sharding == sharding]
    assert rows
    for i in rows[::max(1, len(rows) // 150)]:
        layout = cands.layout(i)
        tokens = proj.project(layout, "fast", peak=(int(cands.cols["peak_bytes"][i]), True),
                              explain=False).tokens_per_s_per_gpu
        assert tokens <= bounds.upper_bound(layout), layout


@settings(max_examples=300, deadline=None)
@given(pp=st.integers(1, 6), vp=st.integers(1, 4), rounds=st.integers(1, 4), p2p=st.floats(0.0, 0.3),
       method=st.sampled_from(METHODS), data=st.data())
def test_every_timing_of_the_schedule_lasts_at_least_the_fill_the_busiest_path_and_the_drain(
        pp, vp, rounds, p2p, method, data):
    """1F1B (VP 1) and interleaved (VP > 1, M a multiple of PP) with uneven chunks and P2P delays: the
    simulation, the closed forms and the fast bottleneck path all end rank 0 no earlier than
    `pipeline_floor` (the bubble term of a layout's own bound)."""
    vp = vp if pp > 1 else 1
    m = rounds * pp if vp > 1 else rounds
    times = st.lists(st.floats(0.01, 2.0), min_size=pp * vp, max_size=pp * vp)
    fwd, bwd = data.draw(times), data.draw(times)
    timing = time_pipeline(pp, vp, m, fwd, bwd, p2p, method)
    floor = pipeline_floor([f + b for f, b in zip(fwd, bwd, strict=True)], pp, m)
    assert timing.ends[0] >= floor * (1 - ROUNDING)


@pytest.mark.parametrize("pp,vp,m", [(4, 1, 8), (8, 1, 3), (4, 2, 8), (4, 5, 12), (2, 63, 4)])
def test_on_uniform_chunks_the_floor_is_the_schedules_own_makespan_m_plus_pp_minus_1_over_vp_stages(pp, vp, m):
    """Without P2P, uniform chunks of tf + tb: 1F1B takes (M + PP - 1)(tf + tb) and the interleaved
    schedule (M + (PP - 1)/VP) x VP(tf + tb) (Narayanan et al. 2021, section 2.2); the floor is exact."""
    tf, tb = 0.3, 0.7
    floor = pipeline_floor([tf + tb] * (pp * vp), pp, m)
    exact = closed_form_1f1b(pp, m, tf, tb, 0.0) if vp == 1 else closed_form_interleaved(pp, vp, m, tf, tb, 0.0)
    assert floor == pytest.approx(exact, rel=1e-12)
    assert floor == pytest.approx((m + (pp - 1) / vp) * vp * (tf + tb), rel=1e-12)


def test_every_schedule_the_projection_times_has_a_bubble():
    """The bubble floor holds for 1F1B and the interleaved schedule; a zero-bubble schedule (its bubble
    can vanish) must not reach the projection without revisiting `SpeedBound._pipeline_floor`."""
    assert set(SCHEDULES) == {"1f1b", "interleaved"}


@pytest.mark.parametrize("name", ["mixtral-flex-overlap", "gpt-oss-mesh", "llama-unfused-torchtitan"])
@pytest.mark.parametrize("method", ["fast", "simulate"])
def test_a_layouts_bound_with_its_bubble_is_never_below_its_projection(name, method):
    """Pipelined layouts (VP 1 and VP > 1, every sharding and recompute, sampled): the projection stays
    at or under the bound with the bubble, which is tighter than the context bound on some of them."""
    job = job_from_mapping(JOBS[name], "job.yaml")
    proj = projector_for(job)
    bounds = SpeedBound(proj)
    cands = Question(job).candidates
    rows = [i for i in range(cands.n) if cands.layout(i).pp > 1]
    assert rows
    seen_vp, tighter = set(), 0
    for i in rows[::max(1, len(rows) // 60)]:
        layout = cands.layout(i)
        tokens = proj.project(layout, method, peak=(int(cands.cols["peak_bytes"][i]), True),
                              explain=False).tokens_per_s_per_gpu
        own = bounds.upper_bound(layout)
        assert tokens <= own, layout
        seen_vp.add(layout.vp > 1)
        tighter += own < bounds.context_bound(layout)
    # with the MoE all-to-all overlap Megatron-Core refuses VP 1 at PP > 1 (rule moe-a2a-overlap-needs-vp,
    # core_v0.18.0 transformer_config.py lines 2405-2409), so that job's pipelined layouts all interleave
    expected = {True} if JOBS[name].get("overlap", {}).get("moe_a2a") else {False, True}
    assert seen_vp == expected and tighter > 0
