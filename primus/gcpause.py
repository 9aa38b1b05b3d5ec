"""The cyclic garbage collector paused while an answer is computed (`paused_gc`).

`fit`, `enumerate` and `project` build hundreds of thousands of long-lived, acyclic objects: the
enumerator's columns and ledger tables, the bounded search's caches of block costs, shape contexts and
placements. CPython's cyclic collector runs whenever allocations outnumber deallocations by its
generation-0 threshold (700), and each older-generation pass walks every tracked object built so
far, none of which it can free. On the frontier jobs of `benchmarks/bench_frontier.py` those passes
took about a quarter of `project`'s time (gpt-oss-120b on 256 H100: 2.9 s -> 2.4 s, DeepSeek-V3 on
1,024 MI355X: 1.6 s -> 1.1 s, with the same peak RSS; docs/solver.md). Reference counting still frees
every object as soon as it is unreachable; only reference cycles wait until the collector is resumed,
and the collector's own state (enabled or not) is restored on the way out, so a caller that disabled
it keeps it disabled.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic collector inside the block; re-enable it after if it was enabled before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def with_paused_gc(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` run under `paused_gc`."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with paused_gc():
            return fn(*args, **kwargs)
    return wrapper
