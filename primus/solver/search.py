"""Best-first search under an admissible bound: the k best items an exhaustive scoring would return,
scoring only the items the bound cannot rule out. The solver knows nothing of projection; callers
pass the score and its bound (`primus.projection.bound` for projected tokens/s/GPU)."""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence


def best_first(bounds: Sequence[float], score: Callable[[int], float], k: int,
               refine: Sequence[Callable[[int], float]] = ()) -> tuple[list[tuple[float, int]], int, float]:
    """The k best (score, index) over items 0..n-1, best first (ties: lower index first), exactly as
    exhaustive scoring would rank them.

    `bounds` are upper bounds on each score; `refine` are tighter (costlier) upper bounds, applied in
    order, the score last. Items wait in a max-heap on their current value: an item whose value is its
    score and is on top beats every other item's bound, so it is the next best; an item on top with a
    bound is refined one level and pushed back. Returns (best, items scored, the largest bound never
    refined to a score, or -inf when every item was scored)."""
    levels = [*refine, score]
    heap = [(-float(b), i, 0) for i, b in enumerate(bounds)]
    heapq.heapify(heap)
    best: list[tuple[float, int]] = []
    scored = 0
    while heap and len(best) < k:
        neg, i, level = heapq.heappop(heap)
        if level == len(levels):
            best.append((-neg, i))
            continue
        value = levels[level](i)
        scored += level == len(levels) - 1
        heapq.heappush(heap, (-value, i, level + 1))
    stop = max((-neg for neg, _, level in heap if level < len(levels)), default=float("-inf"))
    return best, scored, stop
