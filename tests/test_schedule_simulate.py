"""Specification of primus.schedule.simulate: discrete-event step time on the pipeline schedule."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from primus.schedule.pipeline import Schedule, build_schedule
from primus.schedule.simulate import (
    Timeline,
    closed_form_1f1b,
    closed_form_interleaved,
    one_f_one_b_p2p_hops,
    simulate,
)


def uniform(schedule: Schedule, tf: float, tb: float, p2p: float = 0.0) -> Timeline:
    return simulate(schedule, lambda _r, _c: tf, lambda _r, _c: tb, lambda _s, _d, _k: p2p)


def interleaved_grid() -> list[tuple[int, int, int]]:
    return [(pp, vp, k * pp) for pp, vp, k in itertools.product((2, 3, 4, 8), (2, 3, 5), (1, 2, 3, 5))]


# ---- closed forms -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("pp", "m"), list(itertools.product((1, 2, 3, 4, 8), (1, 2, 3, 4, 7, 8, 16, 33))))
def test_1f1b_uniform_without_p2p_takes_m_plus_pp_minus_1_slots(pp: int, m: int) -> None:
    t = uniform(build_schedule(pp, 1, m), 1.25, 2.5)
    assert t.makespan == pytest.approx((m + pp - 1) * (1.25 + 2.5), rel=1e-9)


@pytest.mark.parametrize(
    ("pp", "m", "p2p"),
    list(itertools.product((1, 2, 3, 5, 8), (1, 2, 3, 5, 8, 9, 17, 40), (0.01, 0.7, 50.0))),
)
def test_1f1b_uniform_with_p2p_matches_the_closed_form(pp: int, m: int, p2p: float) -> None:
    t = uniform(build_schedule(pp, 1, m), 1.0, 2.0, p2p)
    assert t.makespan == pytest.approx(closed_form_1f1b(pp, m, 1.0, 2.0, p2p), rel=1e-9)


@pytest.mark.parametrize(("pp", "vp", "m"), interleaved_grid())
def test_interleaved_uniform_without_p2p_shrinks_the_bubble_by_vp(pp: int, vp: int, m: int) -> None:
    tf_chunk, tb_chunk = 0.5, 1.5
    t = uniform(build_schedule(pp, vp, m), tf_chunk, tb_chunk)
    expected = (m * vp + pp - 1) * (tf_chunk + tb_chunk)
    assert t.makespan == pytest.approx(expected, rel=1e-9)
    assert closed_form_interleaved(pp, vp, m, tf_chunk, tb_chunk) == pytest.approx(expected, rel=1e-12)
    # The same in stage times: M*(tf+tb) + (pp-1)*(tf+tb)/vp.
    stage = vp * (tf_chunk + tb_chunk)
    assert t.makespan == pytest.approx(m * stage + (pp - 1) * stage / vp, rel=1e-9)


@pytest.mark.parametrize(("pp", "vp", "m"), interleaved_grid())
@pytest.mark.parametrize(("tf", "tb", "p2p"), [(1.0, 2.0, 0.3), (2.0, 1.0, 1.0), (0.5, 4.0, 0.5)])
def test_interleaved_hides_p2p_up_to_one_op_except_on_fill_and_drain(
    pp: int, vp: int, m: int, tf: float, tb: float, p2p: float
) -> None:
    t = uniform(build_schedule(pp, vp, m), tf, tb, p2p)
    assert t.makespan == pytest.approx(closed_form_interleaved(pp, vp, m, tf, tb, p2p), rel=1e-9)


def test_interleaved_closed_form_refuses_p2p_longer_than_a_chunk_pass() -> None:
    with pytest.raises(ValueError, match="simulate"):
        closed_form_interleaved(4, 2, 8, 1.0, 2.0, 1.5)


def test_interleaved_closed_form_needs_m_divisible_by_pp() -> None:
    with pytest.raises(ValueError):
        closed_form_interleaved(4, 2, 6, 1.0, 2.0)


def test_1f1b_p2p_hops_for_one_microbatch_are_one_round_trip() -> None:
    assert one_f_one_b_p2p_hops(8, 1) == 14
    assert one_f_one_b_p2p_hops(1, 9) == 0


@pytest.mark.parametrize(("pp", "m"), list(itertools.product((2, 4, 8), (4, 8, 16, 64))))
def test_1f1b_uniform_bubble_fraction_is_pp_minus_1_over_m_plus_pp_minus_1(pp: int, m: int) -> None:
    t = uniform(build_schedule(pp, 1, m), 1.0, 2.0)
    for r in range(pp):
        assert t.bubble_fraction(r) == pytest.approx((pp - 1) / (m + pp - 1), rel=1e-9)


# ---- invariants -------------------------------------------------------------------------------------


chunk_times = st.lists(st.floats(min_value=0.01, max_value=10.0), min_size=40, max_size=40)
shapes = st.sampled_from([(1, 1, 3), (2, 1, 5), (4, 1, 8), (2, 2, 4), (4, 2, 8), (4, 5, 8), (8, 2, 16)])


def run(shape: tuple[int, int, int], f: list[float], b: list[float], p2p: float) -> tuple[Schedule, Timeline]:
    s = build_schedule(*shape)
    return s, simulate(s, lambda _r, c: f[c], lambda _r, c: b[c], lambda _s, _d, _k: p2p)


@settings(max_examples=60)
@given(shapes, chunk_times, chunk_times, st.floats(min_value=0.0, max_value=3.0))
def test_makespan_covers_every_ranks_compute(
    shape: tuple[int, int, int], f: list[float], b: list[float], p2p: float
) -> None:
    s, t = run(shape, f, b, p2p)
    for r, ops in enumerate(s.ops_by_rank):
        assert t.busy[r] == pytest.approx(sum(f[op.chunk] if op.kind == "F" else b[op.chunk] for op in ops))
        assert t.makespan >= t.busy[r] * (1 - 1e-12)
        assert t.idle[r] >= -1e-9


@settings(max_examples=60)
@given(shapes, chunk_times, chunk_times, st.floats(min_value=0.0, max_value=3.0))
def test_ops_run_in_order_and_after_their_inputs_arrive(
    shape: tuple[int, int, int], f: list[float], b: list[float], p2p: float
) -> None:
    s, t = run(shape, f, b, p2p)
    for r, ops in enumerate(s.ops_by_rank):
        for j, _op in enumerate(ops):
            if j:
                assert t.starts[r][j] >= t.ends[r][j - 1] - 1e-12
            dep = s.dependency(r, j)
            if dep is not None:
                link = p2p if dep[0] != r else 0.0
                assert t.starts[r][j] >= t.ends[dep[0]][dep[1]] + link - 1e-9


@settings(max_examples=60)
@given(shapes, chunk_times, chunk_times, st.floats(min_value=0.0, max_value=0.01))
def test_non_uniform_stages_are_bracketed_by_the_uniform_closed_forms(
    shape: tuple[int, int, int], f: list[float], b: list[float], p2p: float
) -> None:
    # Makespan is monotone in every duration, so the uniform min/max stages bound it.
    pp, vp, m = shape
    s, t = run(shape, f, b, p2p)
    n = pp * vp
    lo_f, hi_f, lo_b, hi_b = min(f[:n]), max(f[:n]), min(b[:n]), max(b[:n])
    if vp == 1:
        lo, hi = closed_form_1f1b(pp, m, lo_f, lo_b, p2p), closed_form_1f1b(pp, m, hi_f, hi_b, p2p)
    else:
        lo = uniform(s, lo_f, lo_b, p2p).makespan
        hi = uniform(s, hi_f, hi_b, p2p).makespan
    assert lo * (1 - 1e-9) <= t.makespan <= hi * (1 + 1e-9)


@settings(max_examples=60)
@given(shapes, chunk_times, chunk_times, st.floats(min_value=0.0, max_value=3.0))
def test_makespan_is_at_least_one_microbatchs_trip_through_all_chunks(
    shape: tuple[int, int, int], f: list[float], b: list[float], p2p: float
) -> None:
    pp, vp, _ = shape
    n = pp * vp
    _, t = run(shape, f, b, p2p)
    hops = 2 * (n - 1) if pp > 1 else 0
    assert t.makespan >= (sum(f[:n]) + sum(b[:n]) + hops * p2p) * (1 - 1e-12)


def test_single_stage_never_transfers() -> None:
    calls: list[tuple[int, int, str]] = []

    def link(src: int, dst: int, kind: str) -> float:
        calls.append((src, dst, kind))
        return 1.0

    t = simulate(build_schedule(1, 1, 4), lambda _r, _c: 1.0, lambda _r, _c: 2.0, link)
    assert t.makespan == 12.0 and calls == [] and t.p2p_recv == (0.0,)


def test_p2p_is_asked_only_for_neighbouring_links_including_the_wrap_around() -> None:
    calls: set[tuple[int, int, str]] = set()

    def link(src: int, dst: int, kind: str) -> float:
        calls.add((src, dst, kind))
        return 0.1

    uniform_times = simulate(build_schedule(3, 2, 6), lambda _r, _c: 1.0, lambda _r, _c: 1.0, link)
    assert uniform_times.makespan > 0
    assert calls == {(0, 1, "F"), (1, 2, "F"), (2, 0, "F"), (2, 1, "B"), (1, 0, "B"), (0, 2, "B")}


def test_p2p_totals_count_each_transfer_once_per_side() -> None:
    m = 5
    t = simulate(
        build_schedule(2, 1, m),
        lambda _r, _c: 1.0,
        lambda _r, _c: 1.0,
        lambda _s, _d, kind: 0.25 if kind == "F" else 0.5,
    )
    # Rank 1 receives M activations (0.25 each); rank 0 receives M gradients (0.5 each).
    assert t.p2p_recv == pytest.approx((m * 0.5, m * 0.25))
    assert t.p2p_send == pytest.approx((m * 0.25, m * 0.5))


def test_p2p_delays_but_does_not_occupy_the_compute_stream() -> None:
    s = build_schedule(4, 1, 8)
    slow = uniform(s, 1.0, 2.0, 5.0)
    fast = uniform(s, 1.0, 2.0, 0.0)
    assert slow.busy == fast.busy
    assert slow.makespan > fast.makespan


def test_simulation_is_deterministic() -> None:
    s = build_schedule(8, 5, 64)
    f = [1.0 + 0.01 * c for c in range(40)]

    def go() -> Timeline:
        return simulate(s, lambda _r, c: f[c], lambda _r, c: 2 * f[c], lambda a, b, _k: 0.1 * (a + b))

    assert go() == go()


def test_negative_or_nan_durations_are_programming_errors() -> None:
    s = build_schedule(2, 1, 2)
    with pytest.raises(ValueError, match="fwd_time"):
        simulate(s, lambda _r, _c: -1.0, lambda _r, _c: 1.0, lambda _s, _d, _k: 0.0)
    with pytest.raises(ValueError, match="p2p_time"):
        simulate(s, lambda _r, _c: 1.0, lambda _r, _c: 1.0, lambda _s, _d, _k: math.nan)


def test_zero_durations_give_zero_makespan() -> None:
    t = uniform(build_schedule(4, 2, 8), 0.0, 0.0)
    assert t.makespan == 0.0 and t.bubble_fraction(0) == 0.0
