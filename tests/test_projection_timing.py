"""Specification of primus.projection.timing: the fast path agrees with the discrete-event simulation."""

from __future__ import annotations

import itertools
import random

import pytest

from primus.projection.timing import time_pipeline


def _uniform(pp: int, vp: int, tf: float, tb: float) -> tuple[list[float], list[float]]:
    return [tf] * (pp * vp), [tb] * (pp * vp)


@pytest.mark.parametrize(("pp", "m", "p2p"), list(itertools.product((1, 2, 4, 8), (1, 3, 8, 32), (0.0, 0.01, 0.3))))
def test_1f1b_closed_form_equals_simulation(pp: int, m: int, p2p: float) -> None:
    fwd, bwd = _uniform(pp, 1, 1.0, 2.1)
    fast = time_pipeline(pp, 1, m, fwd, bwd, p2p, "fast")
    sim = time_pipeline(pp, 1, m, fwd, bwd, p2p, "simulate")
    assert fast.method == "closed_form" and sim.method == "simulation"
    assert fast.makespan == pytest.approx(sim.makespan, rel=1e-12)
    assert fast.ends == pytest.approx(sim.ends, rel=1e-12)
    assert fast.starts == pytest.approx(sim.starts, rel=1e-12, abs=1e-12)
    assert fast.p2p_on_path(0) == pytest.approx(sim.p2p_on_path(0), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize(("pp", "vp", "k", "p2p"),
                         list(itertools.product((2, 4, 8), (2, 3, 5), (1, 2, 8), (0.0, 0.05, 0.4))))
def test_interleaved_closed_form_equals_simulation(pp: int, vp: int, k: int, p2p: float) -> None:
    m = k * pp
    fwd, bwd = _uniform(pp, vp, 0.5, 1.1)
    fast = time_pipeline(pp, vp, m, fwd, bwd, p2p, "fast")
    sim = time_pipeline(pp, vp, m, fwd, bwd, p2p, "simulate")
    assert fast.method == "closed_form"
    assert fast.makespan == pytest.approx(sim.makespan, rel=1e-12)
    assert fast.ends == pytest.approx(sim.ends, rel=1e-12)
    assert fast.starts == pytest.approx(sim.starts, rel=1e-12, abs=1e-12)


def test_auto_uses_the_closed_form_only_where_it_is_exact() -> None:
    fwd, bwd = _uniform(4, 2, 0.5, 1.0)
    assert time_pipeline(4, 2, 8, fwd, bwd, 0.1, "auto").method == "closed_form"
    assert time_pipeline(4, 2, 8, fwd, bwd, 0.9, "auto").method == "simulation"  # p2p > a chunk pass
    fwd[-1] += 0.2
    assert time_pipeline(4, 2, 8, fwd, bwd, 0.1, "auto").method == "simulation"


@pytest.mark.parametrize("seed", range(40))
def test_bottleneck_bound_is_within_two_percent_for_heavier_end_stages(seed: int) -> None:
    """Uneven stages as the projection builds them: the embedding on the first chunk, the output layer
    and loss on the last; the fast path is within 2% (and a lower bound without P2P)."""
    rng = random.Random(seed)
    pp = rng.choice((2, 4, 8))
    vp = rng.choice((1, 1, 2, 5)) if pp > 1 else 1
    m = pp * rng.choice((1, 2, 4, 8, 16))
    base = rng.uniform(0.5, 2.0)
    fwd, bwd = _uniform(pp, vp, base, 2 * base)
    fwd[0] += base * rng.uniform(0, 0.05)
    bwd[0] += base * rng.uniform(0, 0.05)
    fwd[-1] += base * rng.uniform(0, 0.5)
    bwd[-1] += base * rng.uniform(0, 0.5)
    p2p = rng.choice((0.0, 0.001, 0.01)) * base
    fast = time_pipeline(pp, vp, m, fwd, bwd, p2p, "fast")
    sim = time_pipeline(pp, vp, m, fwd, bwd, p2p, "simulate")
    assert fast.method == "bottleneck"
    if p2p == 0.0:
        assert fast.makespan <= sim.makespan * (1 + 1e-12)
    assert fast.makespan == pytest.approx(sim.makespan, rel=0.02)


def test_simulation_reports_p2p_waits_on_the_critical_path() -> None:
    fwd, bwd = _uniform(4, 1, 1.0, 2.0)
    fwd[-1] = 1.5
    no = time_pipeline(4, 1, 8, fwd, bwd, 0.0, "simulate")
    yes = time_pipeline(4, 1, 8, fwd, bwd, 0.05, "simulate")
    assert no.p2p_on_path(0) == 0.0
    assert 0.0 < yes.p2p_on_path(0) <= yes.makespan - no.makespan + 1e-9 + 14 * 0.05


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        time_pipeline(2, 1, 4, [1.0], [1.0], 0.0)
    with pytest.raises(ValueError):
        time_pipeline(2, 1, 4, [1.0, 1.0], [1.0, 1.0], 0.0, "guess")
