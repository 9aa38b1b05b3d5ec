"""`fit`'s suggestions: the fastest completion of each nearest pin assignment, scoring only what the
ranking shows.

A refusal shows at most `MAX_ALTERNATIVES` fixes, ranked by (pins changed, then fastest). Every fix with
k pins changed ranks before every fix with k + 1, so the nearest pin assignments are taken one level
at a time (`primus.solver.explain.nearest_levels`) and the next level is not even enumerated once the
lower ones fill the list. Within a level only the `need` fastest assignments are shown, so all of that
level's completions wait in one max-heap on an admissible upper bound of their projected speed (the
vectorised compute bound first, the placement-aware bound next, the projection last): a completion
whose projected speed is on top beats every bound left, so its assignment is the next fastest, and its
other completions are dropped. The answer is the one exhaustive scoring gives (ties: the nearer
assignment, then the completion with less memory), with far fewer layouts projected.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from primus.parallel import Layout
from primus.solver.vector import Candidates

#: Projected tokens/s/GPU of a legal layout, given its peak bytes (the ranking key for completions).
Speed = Callable[[Layout, int], float]


@dataclass(frozen=True)
class Alternative:
    """A legal layout near the request. `changed`: what it changes, an axis by its name (`sharding`,
    `recompute`, `recompute_num_layers`) and any other job option by its path (`pipeline.layout`,
    `parallel.recompute_method`, `allocator.expandable_segments`); `pins_changed`: the pinned axes among
    them; `options`: the options' new values by path (empty for an axis change: the layout says it);
    `tight_band_bytes`: the allocator reserve its headroom is measured against (`tight`)."""

    layout: Layout
    peak_bytes: int
    headroom_bytes: int
    changed: tuple[str, ...]
    tokens_per_s_per_gpu: float | None = None  # when completed by projected speed
    options: dict[str, Any] = field(default_factory=dict)
    pins_changed: tuple[str, ...] = ()
    tight_band_bytes: int = 0

    @property
    def keeps_pins(self) -> bool:
        return not self.pins_changed

    @property
    def tight(self) -> bool:
        """It fits with less headroom than the allocator's uncertain reserve (issue 15's tight verdict)."""
        return self.headroom_bytes < self.tight_band_bytes


def option_text(name: str, value: Any) -> str:
    """One changed option as fit, export and tune print it, spelled as a job file writes it:
    `pipeline.X=true`, `recompute=full`, or `pipeline.X unset` where a fix removes the job's own."""
    if value is None:
        return f"{name} unset"
    return f"{name}={('true' if value else 'false') if isinstance(value, bool) else value}"


def changed_name(path: str, axes: Sequence[str]) -> str:
    """An option path as `changed` names it: a parallel axis by its name, anything else by its path."""
    section, _, key = path.partition(".")
    return key if section == "parallel" and key in axes else path


def labelled(a: Alternative, pins: dict[str, Any], axes: Sequence[str], band: int) -> Alternative:
    """`a` with its changes named one way (`changed_name`), the pins it changes and its tight band.
    An axis change changes a pin by construction; an option changes one when it sets a pinned axis to
    another value (partial recompute sets `parallel.recompute: full` over a pinned `none`)."""
    names: list[str] = []
    pins_changed: list[str] = []
    for c in a.changed:
        if c in a.options:
            name = changed_name(c, axes)
            if name in pins and pins[name] != a.options[c]:
                pins_changed.append(name)
        else:
            name = c
            pins_changed.append(c)
        names.append(name)
    return replace(a, changed=tuple(names), pins_changed=tuple(pins_changed), tight_band_bytes=band)


def rank_key(a: Alternative) -> tuple[bool, int, float, int]:
    """Fixes with headroom above the allocator reserve before tight ones; then those that keep every pin,
    then fewest pins changed; among as many, the fastest; then the fewest settings changed."""
    return (a.tight, len(a.pins_changed), -(a.tokens_per_s_per_gpu or 0.0), len(a.changed))


def fastest_groups(groups: Sequence[tuple[Candidates, tuple[str, ...]]], need: int, capacity: int,
                   speed: Speed | None, options: Sequence[dict[str, Any]] | None = None) -> list[Alternative]:
    """The `need` fastest of these pin assignments (each: its legal completions, least memory first,
    and what it changes), each by its fastest completion, fastest first (ties: earlier group, then less
    memory). Without `speed`: the first `need` groups, each by its least-memory completion."""
    opts = [o for g, o in zip(groups, options or [{}] * len(groups), strict=True) if g[0].n]
    groups = [g for g in groups if g[0].n]
    if speed is None:
        return [_make(rows, 0, changed, capacity, None, opts[g]) for g, (rows, changed) in enumerate(groups[:need])]
    owner = np.concatenate([np.full(rows.n, g, dtype=np.int64) for g, (rows, _) in enumerate(groups)])
    local = np.concatenate([np.arange(rows.n, dtype=np.int64) for rows, _ in groups])

    def layout(i: int) -> Layout:
        return groups[int(owner[i])][0].layout(int(local[i]))

    def score(i: int) -> float:
        rows = groups[int(owner[i])][0]
        return speed(layout(i), int(rows.cols["peak_bytes"][int(local[i])]))

    bound = getattr(speed, "bound", None)
    coarse = getattr(speed, "coarse_bounds", None)
    levels: list[Callable[[int], float]] = [score]
    if bound is None:  # no bound: every completion is scored
        first = [score(i) for i in range(len(owner))]
        levels = []
    elif coarse is not None:
        first = np.concatenate([np.asarray(coarse(rows), dtype=float) for rows, _ in groups]).tolist()
        levels = [lambda i: bound(layout(i)), score]
    else:
        first = [bound(layout(i)) for i in range(len(owner))]
    found = best_per_group(first, owner.tolist(), levels, need)
    final = getattr(speed, "final", None)  # the chosen completions' numbers as `project` shows them
    return [_make(groups[g][0], int(local[i]), groups[g][1], capacity,
                  value if final is None else final(layout(i), int(groups[g][0].cols["peak_bytes"][int(local[i])])),
                  opts[g]) for value, g, i in found]


def best_per_group(first: Sequence[float], owner: Sequence[int], levels: Sequence[Callable[[int], float]],
                   need: int) -> list[tuple[float, int, int]]:
    """The `need` groups with the highest best score, as (score, group, item), best first; ties go to
    the lower group, then the lower item, exactly as scoring every item would rank them.

    `first` are upper bounds on each item's score and `levels` tighter bounds in order, the score last
    (empty when `first` are the scores). Items wait in a max-heap on their current value; an item whose
    value is its score and is on top beats every other item's bound, so its group is the next best and
    the group's other items are dropped unrefined."""
    heap = [(-float(b), owner[i], i, 0) for i, b in enumerate(first)]
    heapq.heapify(heap)
    done: set[int] = set()
    out: list[tuple[float, int, int]] = []
    while heap and len(out) < need:
        neg, g, i, level = heapq.heappop(heap)
        if g in done:
            continue
        if level == len(levels):
            done.add(g)
            out.append((-neg, g, i))
            continue
        heapq.heappush(heap, (-levels[level](i), g, i, level + 1))
    return out


def _make(rows: Candidates, r: int, changed: tuple[str, ...], capacity: int, tokens: float | None,
          options: dict[str, Any]) -> Alternative:
    peak = int(rows.cols["peak_bytes"][r])
    return Alternative(rows.layout(r), peak, capacity - peak, changed, tokens, dict(options))
