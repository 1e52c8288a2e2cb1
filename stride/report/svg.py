"""Tiny inline-SVG charts, so report.html is self-contained and needs no plotting library or network.

Why our own: the report needs four simple chart kinds; matplotlib would add ~40 MB of dependencies
for them, and inline SVG scales and opens in any browser offline.
"""

from __future__ import annotations

from html import escape

PALETTE = ("#4c78a8", "#f58518", "#54a24b", "#e45756", "#72b7b2", "#b279a2", "#ff9da6", "#9d755d")
W, H, PAD = 520, 260, 48


def _axes(title: str, xlabel: str, ylabel: str) -> list[str]:
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" '
        'font-family="sans-serif" font-size="11">',
        f'<text x="{W / 2}" y="14" text-anchor="middle" font-weight="bold">{escape(title)}</text>',
        f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - 10}" y2="{H - PAD}" stroke="#333"/>',
        f'<line x1="{PAD}" y1="24" x2="{PAD}" y2="{H - PAD}" stroke="#333"/>',
        f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle">{escape(xlabel)}</text>',
        f'<text x="12" y="{H / 2}" text-anchor="middle" transform="rotate(-90 12 {H / 2})">{escape(ylabel)}</text>',
    ]


def line_chart(series: dict[str, list[tuple[float, float]]], title: str, xlabel: str, ylabel: str,
               y_range: tuple[float, float] | None = None, markers: bool = False,
               reference: float | None = None) -> str:
    """Lines per series; `y_range` widens the y axis to include it (e.g. (0, 1) for efficiency),
    `markers` dots each point (curves of 2-3 points), `reference` draws a dashed level (the ideal)."""
    pts = [p for s in series.values() for p in s]
    out = _axes(title, xlabel, ylabel)
    if not pts:
        return "\n".join([*out, "</svg>"])
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    if y_range is not None:
        y0, y1 = min(y0, y_range[0]), max(y1, y_range[1])
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)

    def sx(x: float) -> float:
        return PAD + (x - x0) / (x1 - x0) * (W - PAD - 20)

    def sy(y: float) -> float:
        return H - PAD - (y - y0) / (y1 - y0) * (H - PAD - 34)

    for v, y in ((y0, sy(y0)), (y1, sy(y1))):
        out.append(f'<text x="{PAD - 4}" y="{y + 4}" text-anchor="end">{v:.3g}</text>')
    xs = sorted({p[0] for p in pts})
    ticks = xs if markers and len(xs) <= 8 else [x0, x1]  # few discrete x (process counts): label each
    for v, x in ((t, sx(t)) for t in ticks):
        out.append(f'<text x="{x}" y="{H - PAD + 14}" text-anchor="middle">{v:.3g}</text>')
    if reference is not None:
        out.append(f'<line x1="{PAD}" y1="{sy(reference):.1f}" x2="{W - 20}" y2="{sy(reference):.1f}" '
                   'stroke="#999" stroke-dasharray="4 3"/>')
    for i, (name, s) in enumerate(series.items()):
        c = PALETTE[i % len(PALETTE)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s)
        out.append(f'<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{path}"/>')
        if markers:
            out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="3" fill="{c}"><title>{escape(name)}: '
                    f"{x:g}, {y:.3g}</title></circle>" for x, y in s]
        out.append(f'<text x="{W - 14}" y="{30 + 13 * i}" text-anchor="end" fill="{c}">{escape(name)}</text>')
    return "\n".join([*out, "</svg>"])


def stacked_bars(bars: dict[str, dict[str, float]], title: str, ylabel: str) -> str:
    """One bar per key, stacked by its parts (e.g. the step-time breakdown per workload)."""
    out = _axes(title, "", ylabel)
    parts = list(dict.fromkeys(k for b in bars.values() for k in b))
    top = max((sum(b.values()) for b in bars.values()), default=1.0) or 1.0
    bw = (W - PAD - 20) / max(len(bars), 1)
    for i, (name, b) in enumerate(bars.items()):
        y = H - PAD
        for j, part in enumerate(parts):
            h = b.get(part, 0.0) / top * (H - PAD - 34)
            out.append(f'<rect x="{PAD + i * bw + 6:.1f}" y="{y - h:.1f}" width="{bw - 12:.1f}" height="{h:.1f}" '
                       f'fill="{PALETTE[j % len(PALETTE)]}">'
                       f"<title>{escape(part)}: {b.get(part, 0.0):.4g}</title></rect>")
            y -= h
        out.append(f'<text x="{PAD + (i + 0.5) * bw:.1f}" y="{H - PAD + 14}" text-anchor="middle">'
                   f"{escape(name)}</text>")
    for j, part in enumerate(parts):
        out.append(f'<text x="{W - 14}" y="{30 + 13 * j}" text-anchor="end" fill="{PALETTE[j % len(PALETTE)]}">'
                   f"{escape(part)}</text>")
    out.append(f'<text x="{PAD - 4}" y="38" text-anchor="end">{top:.3g}</text>')
    return "\n".join([*out, "</svg>"])


def spread_chart(series: dict[str, list[tuple[float, float, float, float]]], title: str, xlabel: str, ylabel: str,
                 xticks: dict[float, str] | None = None) -> str:
    """Mean lines with a whisker from low to high at each x: [(x, mean, low, high)] per series (seed spread).

    `xticks` labels chosen x positions (categorical values, or 10^k on a log axis)."""
    pts = [(x, y) for s in series.values() for x, _, lo, hi in s for y in (lo, hi)]
    lines = {name: [(x, m) for x, m, _, _ in s] for name, s in series.items()}
    svg = line_chart(lines, title, xlabel, ylabel, y_range=(min(p[1] for p in pts), max(p[1] for p in pts))
                     if pts else None, markers=True).removesuffix("</svg>").split("\n")
    if not pts:
        return "\n".join([*svg, "</svg>"])
    x0, x1 = min(p[0] for p in pts), max(p[0] for p in pts)
    y0, y1 = min(p[1] for p in pts), max(p[1] for p in pts)
    x1, y1 = (x1 if x1 > x0 else x0 + 1), (y1 if y1 > y0 else y0 + 1)

    def sx(x: float) -> float:  # the same scales as line_chart's
        return PAD + (x - x0) / (x1 - x0) * (W - PAD - 20)

    def sy(y: float) -> float:
        return H - PAD - (y - y0) / (y1 - y0) * (H - PAD - 34)

    for i, s in enumerate(series.values()):
        c = PALETTE[i % len(PALETTE)]
        svg += [f'<line x1="{sx(x):.1f}" y1="{sy(lo):.1f}" x2="{sx(x):.1f}" y2="{sy(hi):.1f}" stroke="{c}" '
                f'stroke-width="1"><title>{lo:.4g} .. {hi:.4g}</title></line>' for x, _, lo, hi in s]
    if xticks:
        svg = [ln for ln in svg if f'y="{H - PAD + 14}"' not in ln]  # line_chart's numeric x labels
        svg += [f'<text x="{sx(x):.1f}" y="{H - PAD + 14}" text-anchor="middle">{escape(t)}</text>'
                for x, t in xticks.items()]
    return "\n".join([*svg, "</svg>"])
