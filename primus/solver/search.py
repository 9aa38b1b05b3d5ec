"""Best-first search under an admissible bound: the k best items an exhaustive scoring would return,
scoring only the items the bound cannot rule out. The solver knows nothing of projection; callers
pass the score and its bound (`primus.projection.bound` for projected tokens/s/GPU)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

import numpy as np


def best_first(bounds: Sequence[float] | np.ndarray, score: Callable[[int], float], k: int,
               refine: Sequence[Callable[[int], float]] = ()) -> tuple[list[tuple[float, int]], int, float]:
    """The k best (score, index) over items 0..n-1, best first (ties: lower index first), exactly as
    exhaustive scoring would rank them.

    `bounds` are upper bounds on each score; `refine` are tighter (costlier) upper bounds, applied in
    order, the score last. Items wait in a max-heap on their current value: an item whose value is its
    score and is on top beats every other item's bound, so it is the next best; an item on top with a
    bound is refined one level and pushed back. Items not yet refined wait in one array sorted by
    (bound descending, index) instead of the heap (the same order the heap would pop them in, without
    pushing the hundreds of thousands the bound rules out). Returns (best, items scored, the largest
    bound never refined to a score, or -inf when every item was scored)."""
    levels = [*refine, score]
    values = np.asarray(bounds, dtype=float)
    order = np.argsort(-values, kind="stable")  # (bound descending, index ascending), as the heap pops
    waiting = order.tolist()
    waiting_neg = (-values[order]).tolist()
    heap: list[tuple[float, int, int]] = []
    best: list[tuple[float, int]] = []
    scored = 0
    pos, n = 0, len(waiting)
    while len(best) < k:
        if pos < n and (not heap or (waiting_neg[pos], waiting[pos], 0) < heap[0]):
            neg, i, level = waiting_neg[pos], waiting[pos], 0
            pos += 1
        elif heap:
            neg, i, level = heapq.heappop(heap)
        else:
            break
        if level == len(levels):
            best.append((-neg, i))
            continue
        value = levels[level](i)
        scored += level == len(levels) - 1
        heapq.heappush(heap, (-value, i, level + 1))
    stop = max((-neg for neg, _, level in heap if level < len(levels)), default=float("-inf"))
    if pos < n:
        stop = max(stop, -waiting_neg[pos])
    return best, scored, stop
