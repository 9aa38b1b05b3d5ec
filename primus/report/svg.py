"""A small SVG writer for the report's charts: escaped text, fixed number formatting, axes with round
ticks. No JavaScript and no external assets, so a chart reads the same in a browser, in print, in a
pull-request diff and in an image viewer; the same data always gives the same bytes."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape as _html_escape

from primus.safe_text import escape_controls


def escape(text: str) -> str:
    """Text for an SVG element or attribute: control characters shown escaped (XML 1.0 allows none of
    them but tab and newline), then XML-escaped."""
    return _html_escape(escape_controls(text))


FONT = "font-family=\"system-ui,-apple-system,'Segoe UI',Roboto,sans-serif\""


def f(x: float) -> str:
    """A coordinate with two decimals and no trailing zeros (stable, compact output)."""
    s = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About `n` round tick values covering [lo, hi] (steps of 1, 2 or 5 times a power of ten)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(1, n)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    out = []
    k = 0
    while first + k * step <= hi + 1e-9 * step:
        out.append(round(first + k * step, 12))
        k += 1
    return out


def tick_label(v: float) -> str:
    if v == 0:
        return "0"
    if abs(v) >= 1000:
        return f"{v:,.0f}"
    if abs(v) >= 10 or float(v).is_integer():
        return f"{v:.0f}" if float(v).is_integer() else f"{v:.1f}"
    return f"{v:.3g}"


class Svg:
    """An SVG document built element by element (every text escaped)."""

    def __init__(self, width: int, height: int, title: str, desc: str, chart_id: str) -> None:
        self.width = width
        self.height = height
        self.title = title
        self.desc = desc
        self.id = chart_id
        self.parts: list[str] = []

    def add(self, raw: str) -> None:
        self.parts.append(raw)

    def rect(self, x: float, y: float, w: float, h: float, fill: str, tip: str | None = None,
             extra: str = "") -> None:
        body = f'<rect x="{f(x)}" y="{f(y)}" width="{f(max(w, 0.0))}" height="{f(max(h, 0.0))}" fill="{fill}"{extra}'
        self.parts.append(body + (f"><title>{escape(tip)}</title></rect>" if tip else "/>"))

    def line(self, x1: float, y1: float, x2: float, y2: float, stroke: str, width: float = 1.0,
             dash: str | None = None) -> None:
        d = f' stroke-dasharray="{dash}"' if dash else ""
        self.parts.append(f'<line x1="{f(x1)}" y1="{f(y1)}" x2="{f(x2)}" y2="{f(y2)}" stroke="{stroke}" '
                          f'stroke-width="{f(width)}"{d}/>')

    def text(self, x: float, y: float, s: str, size: int = 11, anchor: str = "start", fill: str = "#333",
             weight: str = "normal", rotate: bool = False) -> None:
        rot = f' transform="rotate(-90 {f(x)} {f(y)})"' if rotate else ""
        bold = ' font-weight="bold"' if weight == "bold" else ""
        self.parts.append(f'<text x="{f(x)}" y="{f(y)}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"'
                          f'{bold}{rot}>{escape(s)}</text>')

    def circle(self, x: float, y: float, r: float, fill: str, tip: str | None = None, stroke: str | None = None,
               opacity: float | None = None) -> None:
        s = f' stroke="{stroke}" stroke-width="1"' if stroke else ""
        o = f' fill-opacity="{f(opacity)}"' if opacity is not None else ""
        body = f'<circle cx="{f(x)}" cy="{f(y)}" r="{f(r)}" fill="{fill}"{s}{o}'
        self.parts.append(body + (f"><title>{escape(tip)}</title></circle>" if tip else "/>"))

    def path(self, d: str, fill: str = "none", stroke: str = "none", width: float = 1.0, tip: str | None = None
             ) -> None:
        body = f'<path d="{d}" fill="{fill}" stroke="{stroke}" stroke-width="{f(width)}"'
        self.parts.append(body + (f"><title>{escape(tip)}</title></path>" if tip else "/>"))

    def legend(self, x: float, y: float, items: Sequence[tuple[str, str]], gap: float = 14) -> float:
        """Swatches and labels in a row from (x, y); returns the x after the last item."""
        for label, color in items:
            self.rect(x, y - 9, 10, 10, color)
            self.text(x + 14, y, label)
            x += 14 + 6.2 * len(label) + gap
        return x

    def render(self) -> str:
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" id="{self.id}" viewBox="0 0 {self.width} '
                f'{self.height}" width="{self.width}" height="{self.height}" role="img" '
                f'aria-labelledby="{self.id}-title {self.id}-desc" {FONT}>')
        meta = (f'<title id="{self.id}-title">{escape(self.title)}</title>'
                f'<desc id="{self.id}-desc">{escape(self.desc)}</desc>')
        bg = f'<rect x="0" y="0" width="{self.width}" height="{self.height}" fill="#fff"/>'
        return "\n".join([head, meta, bg, *self.parts, "</svg>"]) + "\n"


class Axes:
    """A plot area inside an Svg with linear x and y scales, gridlines and labelled ticks."""

    def __init__(self, svg: Svg, box: tuple[float, float, float, float], x_range: tuple[float, float],
                 y_range: tuple[float, float]) -> None:
        self.svg = svg
        self.x0, self.y0, self.w, self.h = box
        self.xlo, self.xhi = x_range
        self.ylo, self.yhi = y_range
        if self.xhi <= self.xlo:
            self.xhi = self.xlo + 1.0
        if self.yhi <= self.ylo:
            self.yhi = self.ylo + 1.0

    def x(self, v: float) -> float:
        return self.x0 + (v - self.xlo) / (self.xhi - self.xlo) * self.w

    def y(self, v: float) -> float:
        return self.y0 + self.h - (v - self.ylo) / (self.yhi - self.ylo) * self.h

    def frame(self, x_label: str, y_label: str, x_ticks: bool = True, y_ticks: bool = True) -> None:
        s = self.svg
        if y_ticks:
            for t in nice_ticks(self.ylo, self.yhi):
                yy = self.y(t)
                s.line(self.x0, yy, self.x0 + self.w, yy, "#e3e3e3")
                s.text(self.x0 - 6, yy + 4, tick_label(t), size=10, anchor="end", fill="#555")
        if x_ticks:
            for t in nice_ticks(self.xlo, self.xhi, 8):
                xx = self.x(t)
                s.line(xx, self.y0 + self.h, xx, self.y0 + self.h + 4, "#555")
                s.text(xx, self.y0 + self.h + 16, tick_label(t), size=10, anchor="middle", fill="#555")
        s.line(self.x0, self.y0 + self.h, self.x0 + self.w, self.y0 + self.h, "#555")
        s.line(self.x0, self.y0, self.x0, self.y0 + self.h, "#555")
        s.text(self.x0 + self.w / 2, self.y0 + self.h + 32, x_label, anchor="middle")
        s.text(self.x0 - 46, self.y0 + self.h / 2, y_label, anchor="middle", rotate=True)
