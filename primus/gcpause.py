"""The cyclic garbage collector paused while an answer is computed (`paused_gc`).

`fit`, `enumerate` and `project` build hundreds of thousands of long-lived, acyclic objects: the
enumerator's columns and ledger tables, the bounded search's caches of block costs, shape contexts and
placements. CPython's cyclic collector runs whenever allocations outnumber deallocations by its
generation-0 threshold (700), and each older-generation pass walks every tracked object built so
far, none of which it can free. Timed with `gc.callbacks` in whole `primus project` processes, the
collector's passes took 0.41 s of gpt-oss-120b on 256 H100, 0.24 s of DeepSeek-V3 on 1,024 MI355X and
0.21 s of Kimi K2 on 2,048 B200 (641, 379 and 395 passes), and none with it paused; the peak RSS is the
same (docs/solver.md, "Frontier scale"). Reference counting still frees every object as soon as it
is unreachable; only reference cycles wait until the collector is resumed, and its state (enabled or
not) is restored on the way out, so a caller that disabled it keeps it disabled.
"""

from __future__ import annotations

import functools
import gc
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")


class _Pauses:
    """How many `paused_gc` blocks are running, and whether the collector was on when the first began.
    The collector is one per process, so its pause is too: a block that ends while another (in another
    thread) still runs leaves the collector off, and only the last one out restores the state the first
    one found (review 40, item 5). Module state for that reason only: it mirrors the interpreter's."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.was_enabled = False

    def enter(self) -> None:
        with self.lock:
            if self.depth == 0:
                self.was_enabled = gc.isenabled()
                gc.disable()
            self.depth += 1

    def leave(self) -> None:
        with self.lock:
            self.depth -= 1
            if self.depth == 0 and self.was_enabled:
                gc.enable()


_PAUSES = _Pauses()


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic collector inside the block; the last block out re-enables it if it was enabled
    when the first came in."""
    _PAUSES.enter()
    try:
        yield
    finally:
        _PAUSES.leave()


def with_paused_gc(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` run under `paused_gc`."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        with paused_gc():
            return fn(*args, **kwargs)
    return wrapper
