"""Specification of primus.schedule.pipeline: per-rank op order and what is in flight at the peak."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from primus.errors import InputError
from primus.schedule.pipeline import (
    SCHEDULES,
    Op,
    Schedule,
    build_schedule,
    in_flight,
    peak_activation,
    schedule_table,
)

PPS = (1, 2, 4, 8)
VPS = (1, 2, 3, 5)


def grid() -> list[tuple[int, int, int]]:
    """(pp, vp, M) with M a multiple of pp; vp > 1 only with pp > 1 (as Megatron requires)."""
    out = []
    for pp, vp, k in itertools.product(PPS, VPS, (1, 2, 3)):
        if vp > 1 and pp == 1:
            continue
        out.append((pp, vp, k * pp))
    return out


def expected_peak(pp: int, vp: int, m: int, rank: int) -> int:
    """Megatron's warm-up count plus the first steady-state forward, capped at all passes."""
    warmup = pp - rank - 1 if vp == 1 else (pp - rank - 1) * 2 + (vp - 1) * pp
    return min(warmup + 1, m * vp)


def leading_forwards(ops: tuple[Op, ...]) -> int:
    return next((i for i, op in enumerate(ops) if op.kind != "F"), len(ops))


def labels(ops: tuple[Op, ...]) -> list[str]:
    return [f"{op.kind}{op.microbatch}" + (f".{op.chunk}" if op.chunk else "") for op in ops]


# ---- the order -------------------------------------------------------------------------------------


def test_single_stage_alternates_forward_and_backward_per_microbatch() -> None:
    s = build_schedule(1, 1, 3)
    assert labels(s.ops_by_rank[0]) == ["F0", "B0", "F1", "B1", "F2", "B2"]


def test_1f1b_first_rank_warms_up_then_alternates_then_drains() -> None:
    s = build_schedule(4, 1, 6, "1f1b")
    assert labels(s.ops_by_rank[0]) == [
        "F0", "F1", "F2", "F3", "B0", "F4", "B1", "F5", "B2", "B3", "B4", "B5",
    ]  # fmt: skip


def test_1f1b_last_rank_alternates_from_the_start() -> None:
    s = build_schedule(4, 1, 3, "1f1b")
    assert labels(s.ops_by_rank[3]) == ["F0.3", "B0.3", "F1.3", "B1.3", "F2.3", "B2.3"]


def test_1f1b_with_fewer_microbatches_than_stages_runs_all_forwards_first() -> None:
    s = build_schedule(8, 1, 2, "1f1b")
    assert labels(s.ops_by_rank[0]) == ["F0", "F1", "B0", "B1"]


def test_schedule_table_matches_megatrons_documented_example() -> None:
    # Megatron's get_schedule_table docstring: PP2, group size 3, M=5, VP2.
    table = schedule_table(5, 2, 3)
    assert [m for m, _ in table] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [v for _, v in table] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_interleaved_forwards_go_through_virtual_stages_in_groups_of_pp_microbatches() -> None:
    s = build_schedule(2, 2, 4)
    forwards = [(op.microbatch, op.chunk) for op in s.ops_by_rank[0] if op.kind == "F"]
    assert forwards == [(0, 0), (1, 0), (0, 2), (1, 2), (2, 0), (3, 0), (2, 2), (3, 2)]


def test_interleaved_backwards_visit_virtual_stages_in_reverse() -> None:
    s = build_schedule(2, 2, 4)
    backwards = [(op.microbatch, op.chunk) for op in s.ops_by_rank[0] if op.kind == "B"]
    assert backwards == [(0, 2), (1, 2), (0, 0), (1, 0), (2, 2), (3, 2), (2, 0), (3, 0)]


@pytest.mark.parametrize(("pp", "vp", "m"), grid())
def test_warmup_length_follows_megatron(pp: int, vp: int, m: int) -> None:
    s = build_schedule(pp, vp, m)
    for r in range(pp):
        # The steady state opens with one more forward right after the warm-up forwards.
        assert min(leading_forwards(s.ops_by_rank[r]), m * vp) == expected_peak(pp, vp, m, r)


def test_interleaved_with_m_equal_pp_on_rank_0_is_all_forwards_then_all_backwards() -> None:
    s = build_schedule(4, 2, 4)
    assert leading_forwards(s.ops_by_rank[0]) == 8
    assert all(op.kind == "B" for op in s.ops_by_rank[0][8:])


@pytest.mark.parametrize(("pp", "vp", "m"), grid())
def test_every_pass_runs_once_on_the_rank_that_holds_its_chunk(pp: int, vp: int, m: int) -> None:
    s = build_schedule(pp, vp, m)
    seen = [(op.kind, op.microbatch, op.chunk) for ops in s.ops_by_rank for op in ops]
    assert sorted(seen) == sorted(itertools.product("BF", range(m), range(pp * vp)))
    assert all(op.rank == r == op.chunk % pp for r, ops in enumerate(s.ops_by_rank) for op in ops)


@pytest.mark.parametrize(("pp", "vp", "m"), grid())
def test_each_chunk_forward_precedes_its_backward_on_the_rank(pp: int, vp: int, m: int) -> None:
    s = build_schedule(pp, vp, m)
    for ops in s.ops_by_rank:
        position = {(op.kind, op.microbatch, op.chunk): i for i, op in enumerate(ops)}
        for op in ops:
            if op.kind == "B":
                assert position[("F", op.microbatch, op.chunk)] < position[("B", op.microbatch, op.chunk)]


def test_dependencies_follow_the_model_chunk_chain() -> None:
    s = build_schedule(2, 2, 2)
    ops = s.ops_by_rank

    def dep(rank: int, kind: str, m: int, chunk: int) -> Op | None:
        pos = next(
            i for i, op in enumerate(ops[rank]) if (op.kind, op.microbatch, op.chunk) == (kind, m, chunk)
        )
        found = s.dependency(rank, pos)
        return None if found is None else ops[found[0]][found[1]]

    assert dep(0, "F", 1, 0) is None  # the first chunk's forward reads the data loader
    assert dep(0, "F", 1, 2) == Op("F", 1, 1, 1)  # chunk 2 (rank 0) after chunk 1 (rank 1)
    assert dep(1, "B", 1, 3) == Op("F", 1, 3, 1)  # the loss chunk turns around on its own rank
    assert dep(0, "B", 1, 2) == Op("B", 1, 3, 1)
    assert dep(1, "B", 0, 1) == Op("B", 0, 2, 0)


# ---- selection and validation -------------------------------------------------------------------


def test_auto_picks_1f1b_without_virtual_stages_and_interleaved_with() -> None:
    assert build_schedule(4, 1, 8).kind == "1f1b"
    assert build_schedule(4, 2, 8).kind == "interleaved"


def test_schedules_are_cached_per_arguments() -> None:
    assert build_schedule(8, 5, 64) is build_schedule(8, 5, 64, "interleaved")


def test_registry_holds_the_implemented_schedules() -> None:
    assert set(SCHEDULES) == {"1f1b", "interleaved"}


def test_unknown_schedule_lists_the_known_ones() -> None:
    with pytest.raises(InputError, match="interleaved") as err:
        build_schedule(4, 1, 8, "zb-h1")
    assert "1f1b" in err.value.reason and err.value.field == "schedule"


def test_misspelt_schedule_gets_a_suggestion() -> None:
    with pytest.raises(InputError, match="did you mean 'interleaved'"):
        build_schedule(4, 2, 8, "interleave")


def test_interleaving_needs_microbatches_divisible_by_pp() -> None:
    with pytest.raises(InputError, match="divisible by pp"):
        build_schedule(4, 2, 6)


def test_1f1b_refuses_virtual_stages() -> None:
    with pytest.raises(InputError, match="vp=1"):
        build_schedule(4, 2, 8, "1f1b")


def test_interleaved_needs_virtual_stages_and_pipeline_parallelism() -> None:
    with pytest.raises(InputError):
        build_schedule(4, 1, 8, "interleaved")
    with pytest.raises(InputError):
        build_schedule(1, 2, 8)


@pytest.mark.parametrize(("pp", "vp", "m"), [(0, 1, 1), (1, 0, 1), (1, 1, 0), (2, 1, -4)])
def test_non_positive_sizes_are_input_errors(pp: int, vp: int, m: int) -> None:
    with pytest.raises(InputError):
        build_schedule(pp, vp, m)


# ---- in flight ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("pp", "vp", "m"), grid())
def test_in_flight_peak_matches_megatron_warmup_formula(pp: int, vp: int, m: int) -> None:
    peaks = [f.peak for f in in_flight(build_schedule(pp, vp, m))]
    assert peaks == [expected_peak(pp, vp, m, r) for r in range(pp)]


@pytest.mark.parametrize(("pp", "m"), [(4, 1), (4, 3), (8, 5), (8, 8), (8, 20), (2, 7)])
def test_1f1b_rank_r_holds_min_of_pp_minus_r_and_m_microbatches(pp: int, m: int) -> None:
    peaks = [f.peak for f in in_flight(build_schedule(pp, 1, m))]
    assert peaks == [min(pp - r, m) for r in range(pp)]


@pytest.mark.parametrize(("pp", "vp"), [(2, 2), (4, 2), (4, 3), (8, 5), (8, 8)])
def test_interleaved_rank_0_matches_megatrons_activation_estimate(pp: int, vp: int) -> None:
    # Megatron: stage 0 holds pp microbatches' activations × (1 + (pp - 1) / (pp * vp)); in chunk
    # passes (a chunk is 1/vp of the stage) that is pp*vp + pp - 1, reached once M >= 2*pp.
    peak = in_flight(build_schedule(pp, vp, 2 * pp))[0].peak
    assert peak == vp * pp + pp - 1
    assert peak == pytest.approx(pp * vp * (1 + (pp - 1) / (pp * vp)))


def test_in_flight_reports_which_chunks_are_held_at_the_peak() -> None:
    first = in_flight(build_schedule(4, 2, 8))[0]
    # 11 forwards before the first backward: mb 0-3 and 4-6 through chunk 0, mb 0-3 through chunk 4.
    assert first.peak == 11
    assert first.chunks_at_peak == ((0, 7), (4, 4))
    assert first.count(4) == 4 and first.count(1) == 0


@pytest.mark.parametrize(("pp", "vp", "m"), grid())
def test_chunk_multiset_at_peak_sums_to_the_peak_and_stays_on_the_rank(pp: int, vp: int, m: int) -> None:
    for f in in_flight(build_schedule(pp, vp, m)):
        assert sum(n for _, n in f.chunks_at_peak) == f.peak
        assert all(c % pp == f.rank for c, _ in f.chunks_at_peak)


def naive_peak(s: Schedule, rank: int, size: dict[int, int]) -> int:
    """Reference: recompute the live set from scratch after every op."""
    best = 0
    ops = s.ops_by_rank[rank]
    for t in range(len(ops)):
        done = ops[: t + 1]
        live = [op for op in done if op.kind == "F"]
        freed = {(op.microbatch, op.chunk) for op in done if op.kind == "B"}
        best = max(best, sum(size[op.chunk] for op in live if (op.microbatch, op.chunk) not in freed))
    return best


@given(
    st.sampled_from([(2, 1, 3), (2, 2, 4), (4, 2, 8), (3, 3, 6), (4, 1, 2)]),
    st.lists(st.integers(min_value=0, max_value=2**70), min_size=12, max_size=12),
)
def test_peak_activation_equals_brute_force_with_uneven_chunk_sizes(
    shape: tuple[int, int, int], sizes: list[int]
) -> None:
    pp, vp, m = shape
    s = build_schedule(pp, vp, m)
    size = dict(enumerate(sizes))
    for r in range(pp):
        assert peak_activation(s, r, size.__getitem__) == naive_peak(s, r, size)


@pytest.mark.parametrize(("pp", "vp", "m"), grid())
def test_peak_activation_with_equal_chunks_is_peak_count_times_size(pp: int, vp: int, m: int) -> None:
    s = build_schedule(pp, vp, m)
    for f in in_flight(s):
        assert peak_activation(s, f.rank, lambda _c: 3) == 3 * f.peak


def test_peak_activation_rejects_non_integer_bytes() -> None:
    with pytest.raises(ValueError):
        peak_activation(build_schedule(2, 1, 2), 0, lambda _c: 1.5)  # type: ignore[arg-type,return-value]


def test_peak_activation_rejects_unknown_rank() -> None:
    with pytest.raises(ValueError):
        peak_activation(build_schedule(2, 1, 2), 2, lambda _c: 1)
