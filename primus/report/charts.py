"""The report's four charts as inline SVG, from plain numbers (no projection or ledger calls here).

- `memory_chart`: each pipeline stage's bytes stacked by kind against the usable capacity;
- `timeline_chart`: the best layout's pipeline, ranks × time: forward, backward, P2P transfers, bubble;
- `scatter_chart`: every scored candidate as throughput against memory headroom. Tens of thousands of
  points would make an unreadable, multi-megabyte drawing, so above `BIN_ABOVE` candidates they are
  binned on a fixed grid (shade = count) and only the Pareto front and the marked points are drawn one
  by one; the chart says so;
- `progress_chart`: the best throughput found against the number of candidates scored.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from primus.report.svg import Axes, Svg, f

GIB = 1024**3
MEMORY_KINDS = (("weights", "#4e79a7"), ("gradients", "#f28e2b"), ("optimizer", "#e15759"),
                ("activations", "#76b7b2"), ("other", "#9c755f"))
FORWARD, BACKWARD, TRANSFER, BUBBLE, TAIL, MIXED = "#4e79a7", "#f28e2b", "#b07aa1", "#ececec", "#59a14f", "#a0a0c8"
MARKS = {"best": ("#d62728", "best"), "reference": ("#111111", "reference"),
         "llm": ("#9467bd", "LLM proposal"), "hypothesis": ("#17becf", "hypothesis-generator proposal")}
BIN_ABOVE = 2_000
GRID = (100, 60)
SHADES = 8
MIN_PX = 0.6  # a timeline op narrower than this is merged into its neighbour
MIN_TRANSFER_PX = 1.5  # P2P transfers are far shorter than a pass: drawn at least this wide to be seen


def memory_chart(stages: Sequence[tuple[str, dict[str, int]]], capacity_bytes: int, hbm_bytes: int) -> str:
    """Stacked bars, one per pipeline stage at its peak, with the capacity (HBM less reserves) as a line."""
    n = max(1, len(stages))
    svg = Svg(1000, 300, "Memory per pipeline stage at its peak",
              f"{n} stage(s) stacked by kind against a capacity of {capacity_bytes / GIB:.1f} GiB", "chart-memory")
    top = max([sum(b.values()) for _, b in stages] + [hbm_bytes, capacity_bytes]) / GIB * 1.05
    ax = Axes(svg, (80, 20, 880, 210), (0, n), (0, top))
    ax.frame("pipeline stage", "GiB per GPU", x_ticks=False)
    bar = min(90.0, 880 / n * 0.7)
    for k, (label, breakdown) in enumerate(stages):
        cx = ax.x(k + 0.5)
        acc = 0.0
        for kind, color in MEMORY_KINDS:
            v = breakdown.get(kind, 0) / GIB
            if v > 0:
                svg.rect(cx - bar / 2, ax.y(acc + v), bar, ax.y(acc) - ax.y(acc + v), color,
                         f"{label}: {kind} {v:,.2f} GiB")
            acc += v
        if n <= 32 or k % math.ceil(n / 32) == 0:
            svg.text(cx, ax.y(0) + 16, label, size=10, anchor="middle", fill="#555")
    for value, name, color, dash in ((capacity_bytes, "capacity", "#d62728", "6 4"),
                                     (hbm_bytes, "HBM", "#999999", "2 3")):
        y = ax.y(value / GIB)
        svg.line(ax.x0, y, ax.x0 + ax.w, y, color, 1.5, dash)
        svg.text(ax.x0 + ax.w - 4, y - 4, f"{name} {value / GIB:,.1f} GiB", size=10, anchor="end", fill=color)
    svg.legend(80, 290, [(k, c) for k, c in MEMORY_KINDS])
    return svg.render()


@dataclass(frozen=True)
class TimelineData:
    """One simulated step of a pipeline: per rank (start, end, kind "F"/"B", chunk, microbatch) of each
    op; P2P transfers as (receiving rank, start, end); each rank's last op end; the step time."""

    ops: tuple[tuple[tuple[float, float, str, int, int], ...], ...]
    transfers: tuple[tuple[int, float, float], ...]
    pipeline_ends: tuple[float, ...]
    step_time: float


def timeline_chart(data: TimelineData, title: str) -> str:
    """Ranks as rows, time left to right: forward and backward chunk passes, the P2P transfers each rank
    waits on (a thin lane under it), idle time (bubble, grey) and the step's tail after the pipeline."""
    ranks = max(1, len(data.ops))
    row, lane, gap = (28.0, 6.0, 8.0) if ranks <= 8 else (14.0, 4.0, 4.0)
    height = int(40 + ranks * (row + lane + gap) + 60)
    svg = Svg(1000, height, f"Pipeline timeline: {title}",
              f"{ranks} pipeline rank(s) over one step of {data.step_time:.3f} s", "chart-timeline")
    end = max(data.step_time, max(data.pipeline_ends, default=0.0)) or 1.0
    plot_h = ranks * (row + lane + gap)
    ax = Axes(svg, (80, 20, 890, plot_h), (0, end), (0, 1))
    ax.frame("seconds into the step", "", y_ticks=False)
    mixed = False
    for r, ops in enumerate(data.ops):
        y = 20 + r * (row + lane + gap) + gap / 2
        svg.text(74, y + row / 2 + 4, f"rank {r}", size=10, anchor="end", fill="#555")
        svg.rect(ax.x(0), y, ax.x(data.pipeline_ends[r]) - ax.x(0), row, BUBBLE,
                 f"rank {r}: idle (bubble) wherever no pass runs")
        for x0, x1, kind, tip in _merged(ops, ax):
            svg.rect(x0, y, x1 - x0, row, {"F": FORWARD, "B": BACKWARD}.get(kind, MIXED), tip)
            mixed = mixed or kind == "FB"
        if data.step_time > data.pipeline_ends[r]:
            svg.rect(ax.x(data.pipeline_ends[r]), y, ax.x(data.step_time) - ax.x(data.pipeline_ends[r]), row, TAIL,
                     f"rank {r}: after its last backward: gradient reduction, optimizer step, parameter gather "
                     "(and waiting for the slowest rank)")
        lane_y = y + row + 1
        spans = _merged_spans([(ax.x(t0), ax.x(t1)) for dst, t0, t1 in data.transfers if dst == r])
        for x0, x1 in spans:
            svg.rect(x0, lane_y, x1 - x0, lane - 1, TRANSFER, "P2P transfer(s) this rank waits on")
    items = [("forward", FORWARD), ("backward", BACKWARD), ("P2P transfer (lane below)", TRANSFER),
             ("bubble (idle)", BUBBLE), ("DP sync + optimizer", TAIL)]
    svg.legend(80, height - 10, items + ([("F+B (merged at this scale)", MIXED)] if mixed else []))
    return svg.render()


def _merged(ops: Sequence[tuple[float, float, str, int, int]], ax: Axes) -> list[tuple[float, float, str, str]]:
    """Op rectangles in pixels. An op narrower than MIN_PX that touches the previous rectangle is merged
    into it (kind "FB" when forward and backward passes mix), so a step of thousands of microbatches
    stays a drawing of at most about a thousand rectangles per rank."""
    out: list[tuple[float, float, str, str]] = []
    for start, stop, kind, chunk, mb in ops:
        x0, x1 = ax.x(start), ax.x(stop)
        name = "forward" if kind == "F" else "backward"
        if out and x1 - x0 < MIN_PX and x0 - out[-1][1] < MIN_PX:
            px0, _, pkind, _ = out[-1]
            merged = pkind if pkind == kind else "FB"
            label = {"F": "forward", "B": "backward"}.get(merged, "forward and backward")
            out[-1] = (px0, x1, merged, f"{label} passes (merged at this scale)")
        else:
            out.append((x0, x1, kind, f"{name} chunk {chunk} microbatch {mb}: {start:.4f}-{stop:.4f} s"))
    return out


def _merged_spans(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Pixel spans with overlapping or sub-pixel-apart neighbours joined (sorted by start)."""
    out: list[tuple[float, float]] = []
    for x0, x1 in sorted(spans):
        x1 = max(x1, x0 + MIN_TRANSFER_PX)
        if out and x0 - out[-1][1] < MIN_PX:
            out[-1] = (out[-1][0], max(out[-1][1], x1))
        else:
            out.append((x0, x1))
    return out


@dataclass(frozen=True)
class Mark:
    """A point drawn on its own over the scatter: kind is a key of MARKS."""

    headroom_gib: float
    tokens: float
    kind: str
    tip: str


def pareto(points: Sequence[tuple[float, float]]) -> list[int]:
    """Indices of the points no other point beats on both headroom and throughput (largest headroom
    first); ties keep the first point."""
    order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1], i))
    out, best = [], -math.inf
    for i in order:
        if points[i][1] > best:
            out.append(i)
            best = points[i][1]
    return out


def scatter_chart(points: Sequence[tuple[float, float]], marks: Sequence[Mark], tip: Callable[[int], str]) -> str:
    """Throughput (y) against headroom in GiB (x) for every scored candidate (`points`), binned above
    BIN_ABOVE; `marks` on top; `tip(i)` names point i (asked only for the points drawn one by one)."""
    n = len(points)
    binned = n > BIN_ABOVE
    front = pareto(points)
    note = (f"{n:,} candidates binned on a {GRID[0]} × {GRID[1]} grid (darker = more); the {len(front):,} on the "
            "Pareto front drawn one by one" if binned else f"all {n:,} scored candidates")
    svg = Svg(1000, 440, "Every scored candidate: throughput against memory headroom", note, "chart-scatter")
    xs = [p[0] for p in points] + [m.headroom_gib for m in marks]
    ys = [p[1] for p in points] + [m.tokens for m in marks]
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    y_hi = max(ys) * 1.05 if ys else 1.0
    pad = (x_hi - x_lo) * 0.03 or 1.0
    ax = Axes(svg, (80, 34, 880, 330), (min(0.0, x_lo - pad), x_hi + pad), (0, y_hi))
    ax.frame("memory headroom per GPU (GiB): capacity − peak", "tokens/s/GPU")
    svg.text(80, 20, note, size=11, fill="#555")
    if binned:
        _bins(svg, ax, points)
    else:
        for i, (x, y) in enumerate(points):
            svg.circle(ax.x(x), ax.y(y), 2.2, "#4e79a7", tip(i), opacity=0.55)
    fr = sorted(front, key=lambda i: points[i][0])
    if fr:
        svg.path("M" + " L".join(f"{f(ax.x(points[i][0]))},{f(ax.y(points[i][1]))}" for i in fr), stroke="#333",
                 width=1.0)
        for i in fr:
            svg.circle(ax.x(points[i][0]), ax.y(points[i][1]), 2.6, "#333", f"Pareto front: {tip(i)}")
    for m in sorted(marks, key=lambda m: ("llm", "hypothesis", "reference", "best").index(m.kind)):
        color = MARKS[m.kind][0]
        x, y = ax.x(m.headroom_gib), ax.y(m.tokens)
        if m.kind == "best":
            svg.path(_star(x, y, 8), fill=color, stroke="#fff", tip=m.tip)
        elif m.kind == "reference":
            svg.rect(x - 5, y - 5, 10, 10, color, m.tip, ' stroke="#fff" stroke-width="1"')
        else:
            svg.path(f"M{f(x)},{f(y - 6)} L{f(x + 5)},{f(y + 4)} L{f(x - 5)},{f(y + 4)} Z", fill=color, stroke="#fff",
                     tip=m.tip)
    kinds = sorted({m.kind for m in marks}, key=("best", "reference", "llm", "hypothesis").index)
    items = [("candidates" if not binned else "candidates (binned)", "#4e79a7"), ("Pareto front", "#333")]
    svg.legend(80, 428, items + [(MARKS[k][1], MARKS[k][0]) for k in kinds])
    return svg.render()


def _bins(svg: Svg, ax: Axes, points: Sequence[tuple[float, float]]) -> None:
    """A 2-D histogram: cells shaded in SHADES levels by log count, one path per level (a few thousand
    cells stay a few tens of kilobytes)."""
    nx, ny = GRID
    counts: dict[tuple[int, int], int] = {}
    for x, y in points:
        ix = min(nx - 1, max(0, int((x - ax.xlo) / (ax.xhi - ax.xlo) * nx)))
        iy = min(ny - 1, max(0, int((y - ax.ylo) / (ax.yhi - ax.ylo) * ny)))
        counts[(ix, iy)] = counts.get((ix, iy), 0) + 1
    top = max(counts.values(), default=1)
    cw, ch = ax.w / nx, ax.h / ny
    levels: dict[int, list[tuple[int, int, int]]] = {}
    for (ix, iy), c in sorted(counts.items()):
        level = min(SHADES - 1, int(math.log1p(c) / math.log1p(top) * SHADES)) if top > 1 else SHADES - 1
        levels.setdefault(level, []).append((ix, iy, c))
    for level, cells in sorted(levels.items()):
        d = "".join(f"M{f(ax.x0 + ix * cw)},{f(ax.y0 + ax.h - (iy + 1) * ch)}h{f(cw)}v{f(ch)}h{f(-cw)}z"
                    for ix, iy, _ in cells)
        lo, hi = min(c for _, _, c in cells), max(c for _, _, c in cells)
        opacity = 0.15 + 0.85 * (level + 1) / SHADES
        svg.add(f'<path d="{d}" fill="#4e79a7" fill-opacity="{f(opacity)}"><title>{lo:,}–{hi:,} candidates per '
                'cell</title></path>')


def _star(x: float, y: float, r: float) -> str:
    pts = []
    for k in range(10):
        rad = r if k % 2 == 0 else r * 0.45
        a = -math.pi / 2 + k * math.pi / 5
        pts.append(f"{f(x + rad * math.cos(a))},{f(y + rad * math.sin(a))}")
    return "M" + " L".join(pts) + " Z"


def progress_chart(steps: Sequence[tuple[int, float]], total: int, markers: Sequence[tuple[int, str]]) -> str:
    """The best throughput so far (a step line) against candidates scored, with the investigations
    (LLM calls, hypotheses) as dotted verticals."""
    svg = Svg(1000, 320, "Search progress: best throughput found against candidates scored",
              f"{len(steps)} improvement(s) over {total:,} scored candidates", "chart-progress")
    y_hi = max((s[1] for s in steps), default=1.0) * 1.08
    ax = Axes(svg, (80, 20, 880, 240), (0, max(total, 1)), (0, y_hi))
    ax.frame("candidates scored", "best tokens/s/GPU so far")
    for n, label in markers:
        x = ax.x(n)
        svg.line(x, ax.y0, x, ax.y0 + ax.h, "#9467bd", 1.0, "2 3")
        svg.text(x + 3, ax.y0 + 10, label, size=9, fill="#9467bd")
    if steps:
        # a horizontal run at each level, a vertical rise at each improvement
        path = [f"M{f(ax.x(steps[0][0]))},{f(ax.y(steps[0][1]))}"]
        for (_, y_prev), (n, y) in itertools.pairwise(steps):
            path.append(f"L{f(ax.x(n))},{f(ax.y(y_prev))} L{f(ax.x(n))},{f(ax.y(y))}")
        path.append(f"L{f(ax.x(total))},{f(ax.y(steps[-1][1]))}")
        svg.path(" ".join(path), stroke="#d62728", width=2.0)
        for n, y in steps:
            svg.circle(ax.x(n), ax.y(y), 2.5, "#d62728", f"after {n:,} scored: {y:,.0f} tokens/s/GPU")
    items = [("best so far", "#d62728")] + ([("investigation (LLM or hypotheses)", "#9467bd")] if markers else [])
    svg.legend(80, 308, items)
    return svg.render()
