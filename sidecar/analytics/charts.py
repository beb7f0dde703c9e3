"""Small inline-SVG charts: bar charts (stacked or grouped) and a heatmap.

Plain strings, no plotting library: the report stays one self-contained HTML file and
the analytics extra needs nothing beyond pyspark.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#e15759",
    "#76b7b2",
    "#59a14f",
    "#edc948",
    "#b07aa1",
    "#ff9da7",
    "#9c755f",
    "#bab0ac",
)
WIDTH = 900
HEIGHT = 320
MARGIN_LEFT = 64
MARGIN_RIGHT = 16
MARGIN_TOP = 16
MARGIN_BOTTOM = 72


def _nice_max(value: float) -> float:
    if value <= 0:
        return 1.0
    exponent = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        candidate = step * 10.0**exponent
        if candidate >= value:
            return candidate
    return 10.0 ** (exponent + 1)


def format_number(value: float) -> str:
    if value >= 1_000_000:
        return f"{value / 1_000_000:.1f}M"
    if value >= 10_000:
        return f"{value / 1000:.0f}k"
    if value >= 1000:
        return f"{value / 1000:.1f}k"
    if value == int(value):
        return str(int(value))
    return f"{value:.2f}"


def _svg_open(chart_id: str, title: str, height: int = HEIGHT) -> str:
    return (
        f'<svg id="{escape(chart_id)}" class="chart" xmlns="http://www.w3.org/2000/svg" '
        f'viewBox="0 0 {WIDTH} {height}" width="100%" role="img" '
        f'aria-label="{escape(title)}"><title>{escape(title)}</title>'
    )


def _legend(names: Sequence[str], y: int) -> tuple[str, int]:
    """Legend entries in rows from ``y`` down; returns the SVG and the bottom used."""
    parts: list[str] = []
    x = MARGIN_LEFT
    for i, name in enumerate(names):
        label = name if len(name) <= 28 else name[:27] + "…"
        width = 24 + 7 * len(label)
        if x + width > WIDTH - MARGIN_RIGHT and x > MARGIN_LEFT:
            x = MARGIN_LEFT
            y += 16
        color = PALETTE[i % len(PALETTE)]
        parts.append(
            f'<rect x="{x}" y="{y - 9}" width="10" height="10" fill="{color}"/>'
            f'<text x="{x + 14}" y="{y}" class="legend">{escape(label)}</text>'
        )
        x += width
    return "".join(parts), y + 8


def bar_chart(
    chart_id: str,
    title: str,
    categories: Sequence[str],
    series: Sequence[tuple[str, Sequence[float]]],
    *,
    stacked: bool,
    y_label: str,
) -> str:
    """Bars per category; one colour per series, stacked or side by side."""
    plot_w = WIDTH - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = HEIGHT - MARGIN_TOP - MARGIN_BOTTOM
    n = max(1, len(categories))
    if stacked:
        peak = max((sum(s[1][i] for s in series) for i in range(len(categories))), default=0.0)
    else:
        peak = max((v for _, values in series for v in values), default=0.0)
    top = _nice_max(peak)
    slot = plot_w / n
    bar_w = slot * 0.8 / (1 if stacked else max(1, len(series)))
    out = [_svg_open(chart_id, title)]
    for tick in range(5):
        value = top * tick / 4
        y = MARGIN_TOP + plot_h - plot_h * tick / 4
        out.append(
            f'<line x1="{MARGIN_LEFT}" x2="{WIDTH - MARGIN_RIGHT}" y1="{y:.1f}" y2="{y:.1f}" '
            f'class="grid"/><text x="{MARGIN_LEFT - 6}" y="{y + 4:.1f}" class="tick" '
            f'text-anchor="end">{format_number(value)}</text>'
        )
    for i, category in enumerate(categories):
        base = float(MARGIN_TOP + plot_h)
        for j, (name, values) in enumerate(series):
            value = values[i]
            if value <= 0:
                continue
            h = plot_h * value / top
            if stacked:
                x = MARGIN_LEFT + slot * i + slot * 0.1
                y = base - h
                base = y
            else:
                x = MARGIN_LEFT + slot * i + slot * 0.1 + bar_w * j
                y = MARGIN_TOP + plot_h - h
            out.append(
                f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(bar_w, 0.5):.1f}" height="{h:.1f}" '
                f'fill="{PALETTE[j % len(PALETTE)]}"><title>{escape(name)} · '
                f"{escape(category)}: {format_number(value)}</title></rect>"
            )
    every = max(1, math.ceil(n / 24))
    for i, category in enumerate(categories):
        if i % every:
            continue
        x = MARGIN_LEFT + slot * (i + 0.5)
        y = MARGIN_TOP + plot_h + 12
        out.append(
            f'<text x="{x:.1f}" y="{y}" class="tick" text-anchor="end" '
            f'transform="rotate(-35 {x:.1f} {y})">{escape(category)}</text>'
        )
    out.append(
        f'<text x="14" y="{MARGIN_TOP + plot_h / 2:.0f}" class="axis" '
        f'transform="rotate(-90 14 {MARGIN_TOP + plot_h / 2:.0f})" '
        f'text-anchor="middle">{escape(y_label)}</text>'
    )
    height = HEIGHT
    if len(series) > 1:
        legend, height = _legend([name for name, _ in series], HEIGHT + 4)
        out.append(legend)
    out.append("</svg>")
    return _svg_open(chart_id, title, height) + "".join(out[1:])


def _heat_color(fraction: float) -> str:
    # White to deep red; fraction in [0, 1].
    f = min(1.0, max(0.0, fraction))
    r = 255 - int(55 * f)
    g = int(245 * (1 - f) + 20 * f)
    b = int(240 * (1 - f) + 30 * f)
    return f"rgb({r},{g},{b})"


def heatmap(
    chart_id: str,
    title: str,
    rows: Sequence[str],
    columns: Sequence[str],
    values: Sequence[Sequence[float]],
    *,
    unit: str,
) -> str:
    """Cells coloured by their share of the largest value; zero cells stay white."""
    label_w = 230
    cell_h = 18
    height = MARGIN_TOP + cell_h * max(1, len(rows)) + 56
    plot_w = WIDTH - label_w - MARGIN_RIGHT
    cell_w = plot_w / max(1, len(columns))
    peak = max((v for row in values for v in row), default=0.0)
    out = [_svg_open(chart_id, title, height)]
    for r, name in enumerate(rows):
        y = MARGIN_TOP + r * cell_h
        label = name if len(name) <= 34 else name[:33] + "…"
        out.append(
            f'<text x="{label_w - 6}" y="{y + cell_h - 5}" class="tick" '
            f'text-anchor="end">{escape(label)}</text>'
        )
        for c, column in enumerate(columns):
            value = values[r][c]
            color = _heat_color(value / peak) if value > 0 else "#fafafa"
            out.append(
                f'<rect x="{label_w + c * cell_w:.1f}" y="{y}" width="{max(cell_w - 1, 0.5):.1f}" '
                f'height="{cell_h - 1}" fill="{color}"><title>{escape(name)} partition '
                f"{escape(column)}: {format_number(value)} {escape(unit)}</title></rect>"
            )
    every = max(1, math.ceil(len(columns) / 32))
    bottom = MARGIN_TOP + cell_h * len(rows) + 14
    for c, column in enumerate(columns):
        if c % every == 0:
            x = label_w + (c + 0.5) * cell_w
            out.append(
                f'<text x="{x:.1f}" y="{bottom}" class="tick" '
                f'text-anchor="middle">{escape(column)}</text>'
            )
    out.append(
        f'<text x="{label_w + plot_w / 2:.0f}" y="{bottom + 18}" class="axis" '
        f'text-anchor="middle">partition · colour: {escape(unit)} (darkest = '
        f"{format_number(peak)})</text>"
    )
    out.append("</svg>")
    return "".join(out)
