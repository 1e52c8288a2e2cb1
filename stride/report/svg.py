"""Inline-SVG charts, so report.html is self-contained and needs no plotting library or network.

Why our own: the report needs three simple chart kinds; matplotlib would add ~40 MB of dependencies
for them, and inline SVG scales and opens in any browser offline. Every chart is laid out from
measured text: margins fit the widest tick label, legends sit outside the data area (to its right),
every axis has a title with its unit and at least three ticks (1-2-5 steps, or powers of two on a
log2 axis). Class names (plot-area, tick, legend, bar, series) let tests check the geometry.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape

from stride.report.axes import FONT, TITLE_FONT, log2_ticks, nice_ticks, text_width, tick_labels

PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d")
PLOT_W, PLOT_H = 420, 210
ROW = 16  # legend row and bar-chart row height, px
TICK = 4


@dataclass
class Axis:
    ticks: list[float]
    labels: list[str]
    log2: bool = False

    @classmethod
    def linear(cls, lo: float, hi: float) -> Axis:
        ticks = nice_ticks(lo, hi)
        return cls(ticks, tick_labels(ticks))

    @classmethod
    def powers_of_two(cls, lo: float, hi: float) -> Axis:
        ticks = log2_ticks(lo, hi)
        return cls(ticks, tick_labels(ticks), log2=True)

    def frac(self, v: float) -> float:
        """Position of `v` along the axis, 0 at the first tick, 1 at the last."""
        f = (lambda x: math.log2(x)) if self.log2 else (lambda x: x)
        lo, hi = f(self.ticks[0]), f(self.ticks[-1])
        return (f(v) - lo) / (hi - lo) if hi > lo else 0.5


@dataclass
class Frame:
    """The chart's box: title on top, y tick labels and y title left, x ticks and title below, legend right."""

    title: str
    xtitle: str
    ytitle: str
    ylabels: list[str]
    legend: list[tuple[str, str]]  # (label, colour)
    plot_h: float = PLOT_H
    out: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        widest = max((text_width(s) for s in self.ylabels), default=0)
        self.left = 8 + (FONT + 8 if self.ytitle else 0) + widest + TICK + 4
        self.top = 8 + TITLE_FONT + 12
        self.legend_w = (max(text_width(s) for s, _ in self.legend) + 26) if self.legend else 0
        self.right = self.left + PLOT_W
        width = self.right + (16 + self.legend_w if self.legend else 24)
        self.width = max(width, text_width(self.title, TITLE_FONT, bold=True) + 16)
        self.bottom = self.top + self.plot_h
        self.height = self.bottom + TICK + FONT + 8 + FONT + 10
        legend_h = 8 + ROW * len(self.legend)
        self.height = max(self.height, self.top + legend_h + 4)

    def sx(self, axis: Axis, v: float) -> float:
        return self.left + axis.frac(v) * PLOT_W

    def sy(self, axis: Axis, v: float) -> float:
        return self.bottom - axis.frac(v) * self.plot_h

    def open(self) -> None:
        w, h = math.ceil(self.width), math.ceil(self.height)
        self.out += [
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
            f'font-family="sans-serif" font-size="{FONT}" role="img"><title>{escape(self.title)}</title>',
            f'<text class="title" x="{w / 2:.1f}" y="{8 + TITLE_FONT}" text-anchor="middle" font-weight="bold" '
            f'font-size="{TITLE_FONT}">{escape(self.title)}</text>',
            f'<rect class="plot-area" x="{self.left:.1f}" y="{self.top:.1f}" width="{PLOT_W}" '
            f'height="{self.plot_h:.1f}" fill="none" stroke="#bbb"/>',
            f'<text class="axis-title x" x="{self.left + PLOT_W / 2:.1f}" y="{self.height - 8:.1f}" '
            f'text-anchor="middle">{escape(self.xtitle)}</text>',
        ]
        if self.ytitle:
            x, y = 8 + FONT, self.top + self.plot_h / 2
            self.out.append(f'<text class="axis-title y" x="{x:.1f}" y="{y:.1f}" text-anchor="middle" '
                            f'transform="rotate(-90 {x:.1f} {y:.1f})">{escape(self.ytitle)}</text>')

    def ticks(self, axis: Axis, which: str) -> None:
        """Tick marks, grid lines and labels along the x (below the data) or y (left of it) axis."""
        for v, label in zip(axis.ticks, axis.labels, strict=True):
            if which == "x":
                p = self.sx(axis, v)
                mark, grid = (p, self.bottom, p, self.bottom + TICK), (p, self.top, p, self.bottom)
                at, anchor = (p, self.bottom + TICK + FONT), "middle"
            else:
                p = self.sy(axis, v)
                mark, grid = (self.left - TICK, p, self.left, p), (self.left, p, self.right, p)
                at, anchor = (self.left - TICK - 3, p + FONT / 2 - 1), "end"
            lines = "".join(f'<line x1="{a:.1f}" y1="{b:.1f}" x2="{c:.1f}" y2="{d:.1f}" stroke="{colour}"/>'
                            for (a, b, c, d), colour in ((mark, "#333"), (grid, "#eee")))
            self.out.append(f'<g class="tick {which}">{lines}<text x="{at[0]:.1f}" y="{at[1]:.1f}" '
                            f'text-anchor="{anchor}">{escape(label)}</text></g>')

    def close(self, swatch: str = "line") -> str:
        x0 = self.right + 16
        items = []
        for i, (label, colour) in enumerate(self.legend):
            y = self.top + 8 + ROW * i
            mark = (f'<line x1="{x0:.1f}" y1="{y:.1f}" x2="{x0 + 16:.1f}" y2="{y:.1f}" stroke="{colour}" '
                    'stroke-width="2.5"/>' if swatch == "line" else
                    f'<rect x="{x0 + 3:.1f}" y="{y - 5:.1f}" width="10" height="10" fill="{colour}"/>')
            items.append(f'{mark}<text x="{x0 + 22:.1f}" y="{y + 4:.1f}">{escape(label)}</text>')
        if items:
            self.out.append(f'<g class="legend">{"".join(items)}</g>')
        return "\n".join([*self.out, "</svg>"])


def line_chart(series: dict[str, list[tuple[float, float]]], title: str, xtitle: str, ytitle: str, *,
               x_log2: bool = False, y_zero: bool = False, y_range: tuple[float, float] | None = None,
               markers: bool = False, reference: float | None = None,
               faint: dict[str, list[tuple[float, float]]] | None = None) -> str:
    """Lines per series. `x_log2`: a log2 x axis (batch sizes, process counts); `y_zero`: the y axis starts
    at 0 (rates, times); `y_range` widens the y axis to include it; `markers` dots each point;
    `reference` draws a dashed level (the ideal); `faint` draws other curves thinly in the series'
    colours (the raw curve under a smoothed one)."""
    pts = [p for s in [*series.values(), *(faint or {}).values()] for p in s]
    if not pts:
        return _empty(title, xtitle, ytitle)
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    lo, hi = min(ys), max(ys)
    if y_range is not None:
        lo, hi = min(lo, y_range[0]), max(hi, y_range[1])
    if reference is not None:
        lo, hi = min(lo, reference), max(hi, reference)
    if y_zero:
        lo = min(lo, 0.0)
    ya = Axis.linear(lo, hi)
    xa = Axis.powers_of_two(min(xs), max(xs)) if x_log2 and min(xs) > 0 else Axis.linear(min(xs), max(xs))
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(series)}
    f = Frame(title, xtitle, ytitle, ya.labels, [(n, colours[n]) for n in series])
    f.open()
    f.ticks(ya, "y")
    f.ticks(xa, "x")
    if reference is not None:
        y = f.sy(ya, reference)
        f.out.append(f'<line class="reference" x1="{f.left:.1f}" y1="{y:.1f}" x2="{f.right:.1f}" y2="{y:.1f}" '
                     'stroke="#777" stroke-dasharray="4 3"/>')
    for name, s in (faint or {}).items():
        path = " ".join(f"{f.sx(xa, x):.1f},{f.sy(ya, y):.1f}" for x, y in s)
        f.out.append(f'<polyline class="series faint" fill="none" stroke="{colours.get(name, "#999")}" '
                     f'stroke-opacity="0.25" stroke-width="1" points="{path}"/>')
    for name, s in series.items():
        c = colours[name]
        path = " ".join(f"{f.sx(xa, x):.1f},{f.sy(ya, y):.1f}" for x, y in s)
        f.out.append(f'<polyline class="series" fill="none" stroke="{c}" stroke-width="2" points="{path}">'
                     f"<title>{escape(name)}</title></polyline>")
        if markers:
            f.out += [f'<circle cx="{f.sx(xa, x):.1f}" cy="{f.sy(ya, y):.1f}" r="3" fill="{c}"><title>{escape(name)}: '
                      f"{x:g}, {y:.4g}</title></circle>" for x, y in s]
    return f.close()


def hbar_chart(bars: dict[str, dict[str, float]], title: str, xtitle: str, *,
               whiskers: dict[str, tuple[float, float]] | None = None) -> str:
    """Horizontal bars from zero, one row per key, stacked by its parts (one part: a plain bar; the
    legend lists parts only when there are several). Long names fit: they sit left of their row."""
    if not bars:
        return _empty(title, xtitle, "")
    parts = list(dict.fromkeys(k for b in bars.values() for k in b))
    top = max([sum(b.values()) for b in bars.values()] + [hi for _, hi in (whiskers or {}).values()])
    xa = Axis.linear(0.0, top or 1.0)
    colours = {p: PALETTE[i % len(PALETTE)] for i, p in enumerate(parts)}
    legend = [(p, colours[p]) for p in parts] if len(parts) > 1 else []
    names = list(bars)
    f = Frame(title, xtitle, "", names, legend, plot_h=max(2 * ROW, 22 * len(names) + 8))
    f.open()
    f.ticks(xa, "x")
    for i, name in enumerate(names):
        y = f.top + 4 + 22 * i
        x = f.left
        f.out.append(f'<text class="row-label" x="{f.left - 7:.1f}" y="{y + 13:.1f}" text-anchor="end">'
                     f"{escape(name)}</text>")
        for p in parts:
            v = bars[name].get(p, 0.0)
            w = f.sx(xa, v) - f.left
            f.out.append(f'<rect class="bar" x="{x:.1f}" y="{y:.1f}" width="{max(w, 0):.1f}" height="18" '
                         f'fill="{colours[p]}"><title>{escape(name)} {escape(p)}: {v:.4g}</title></rect>')
            x += w
        if whiskers and name in whiskers:
            a, b = (f.sx(xa, v) for v in whiskers[name])
            f.out.append(f'<path class="whisker" d="M{a:.1f},{y + 9:.1f}H{b:.1f}M{a:.1f},{y + 4:.1f}V{y + 14:.1f}'
                         f'M{b:.1f},{y + 4:.1f}V{y + 14:.1f}" stroke="#222" fill="none"/>')
    return f.close(swatch="box")


def _empty(title: str, xtitle: str, ytitle: str) -> str:
    f = Frame(title, xtitle, ytitle, [], [], plot_h=40)
    f.open()
    f.out.append(f'<text x="{f.left + PLOT_W / 2:.1f}" y="{f.top + 24:.1f}" text-anchor="middle" fill="#777">'
                 "no data</text>")
    return f.close()


def spread_chart(series: dict[str, list[tuple[float, float, float, float]]], title: str, xtitle: str, ytitle: str,
                 xticks: dict[float, str] | None = None) -> str:
    """Mean lines with a whisker from low to high at each x: [(x, mean, low, high)] per series (the seed
    spread of a sweep). `xticks` labels chosen x positions (categorical values, or 10^k on a log axis)
    instead of numeric ticks."""
    pts = [p for s in series.values() for p in s]
    if not pts:
        return _empty(title, xtitle, ytitle)
    ya = Axis.linear(min(p[2] for p in pts), max(p[3] for p in pts))
    xs = sorted({p[0] for p in pts} | set(xticks or {}))
    if xticks:
        ordered = sorted(xticks)
        xa = Axis(ordered, [xticks[x] for x in ordered])
        if len(ordered) == 1:  # one value: centre it
            xa = Axis([ordered[0] - 1, ordered[0], ordered[0] + 1], ["", xticks[ordered[0]], ""])
    else:
        xa = Axis.linear(xs[0], xs[-1])
    colours = {name: PALETTE[i % len(PALETTE)] for i, name in enumerate(series)}
    f = Frame(title, xtitle, ytitle, ya.labels, [(n, colours[n]) for n in series])
    f.open()
    f.ticks(ya, "y")
    f.ticks(xa, "x")
    for name, s in series.items():
        c = colours[name]
        path = " ".join(f"{f.sx(xa, x):.1f},{f.sy(ya, m):.1f}" for x, m, _, _ in s)
        f.out.append(f'<polyline class="series" fill="none" stroke="{c}" stroke-width="2" points="{path}">'
                     f"<title>{escape(name)}</title></polyline>")
        for x, m, lo, hi in s:
            px = f.sx(xa, x)
            f.out.append(f'<line class="whisker" x1="{px:.1f}" y1="{f.sy(ya, lo):.1f}" x2="{px:.1f}" '
                         f'y2="{f.sy(ya, hi):.1f}" stroke="{c}" stroke-width="1"><title>{lo:.4g} .. {hi:.4g}</title>'
                         f'</line><circle cx="{px:.1f}" cy="{f.sy(ya, m):.1f}" r="3" fill="{c}"><title>'
                         f"{escape(name)}: {m:.4g}</title></circle>")
    return f.close()
