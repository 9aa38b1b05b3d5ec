"""`primus.solver.search.best_first`: the k best items exactly as exhaustive scoring ranks them (ties to
the lower index), whatever the bounds are, as long as each level bounds the score from above."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from primus.solver.search import best_first


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(0, 60), k=st.integers(1, 10), levels=st.integers(0, 3))
def test_best_first_returns_the_k_best_of_exhaustive_scoring_ties_to_the_lower_index(data, n, k, levels):
    # few distinct values, so scores and bounds tie often (the tie order is part of the contract)
    value = st.integers(0, 6).map(float)
    scores = data.draw(st.lists(value, min_size=n, max_size=n))
    slack = [data.draw(st.lists(st.integers(0, 3).map(float), min_size=n, max_size=n)) for _ in range(levels + 1)]
    # level j bounds the score from above; levels need not tighten monotonically
    bounds = [[s + d[i] for i, s in enumerate(scores)] for d in slack]
    refine = [b.__getitem__ for b in bounds[1:]]
    best, scored, stop = best_first(bounds[0], lambda i: scores[i], k, refine)
    expected = sorted(((s, i) for i, s in enumerate(scores)), key=lambda t: (-t[0], t[1]))[:k]
    assert best == expected
    assert len(best) <= scored <= n
    if scored < n:  # what was never scored is bounded by `stop`, which the k-th best reaches
        assert stop <= best[-1][0] or len(best) < k


def test_best_first_scores_only_what_the_bound_cannot_rule_out():
    """Items whose bound is below the k-th best score are never scored."""
    scores = [5.0, 4.0, 3.0, 2.0, 1.0]
    calls: list[int] = []

    def score(i: int) -> float:
        calls.append(i)
        return scores[i]

    best, scored, stop = best_first([s + 0.5 for s in scores], score, 2)
    assert best == [(5.0, 0), (4.0, 1)]
    assert sorted(calls) == [0, 1] and scored == 2 and stop == 3.5
