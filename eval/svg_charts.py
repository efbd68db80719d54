"""The HTML report's charts, drawn as inline SVG: lines, horizontal bars, a bar split by
source, and a legend's dot. Every text in them is escaped; a chart with nothing to draw is
the empty string."""

from __future__ import annotations

import math

from .call_sources import source_order
from .html_text import esc, number_text
from .lenient import as_dict, as_list, number

LINE_COLORS = ("#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#4b5563", "#b91c1c")


def _ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering [low, high]."""
    if not high > low:
        high = low + 1
    raw = (high - low) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw * 0.999)
    first = math.floor(low / step + 1e-9) * step
    ticks = [first]
    while ticks[-1] < high - step * 1e-9:
        ticks.append(first + len(ticks) * step)
    return ticks


def _tick_label(value: float, suffix: str = "") -> str:
    text = f"{value:.0f}" if abs(value - round(value)) < 1e-9 else f"{value:.2f}".rstrip("0").rstrip(".")
    return text + suffix


def svg_lines(series: list[dict], *, title: str, x_label: str = "", y_label: str = "", y_suffix: str = "",
              y_range: tuple[float, float] | None = None, integer_x: bool = False,
              width: int = 460, height: int = 270) -> str:
    """A line chart: ``series`` of ``{"name", "points": [[x, y], ...], "color"?}``; points
    that are not two numbers are left out. Empty string when nothing can be drawn."""
    drawn = []
    for i, one in enumerate(series):
        one = as_dict(one)
        points = []
        for point in as_list(one.get("points")):
            if isinstance(point, (list, tuple)) and len(point) >= 2:
                x, y = number(point[0]), number(point[1])
                if x is not None and y is not None:
                    points.append((x, y))
        if points:
            drawn.append((str(one.get("name") or f"series {i + 1}"), sorted(points),
                          str(one.get("color") or LINE_COLORS[i % len(LINE_COLORS)])))
    if not drawn:
        return ""
    xs = [x for _, pts, _ in drawn for x, _ in pts]
    ys = [y for _, pts, _ in drawn for _, y in pts]
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    if integer_x:
        x_ticks = [float(t) for t in range(math.ceil(x_lo), math.floor(x_hi) + 1)]
        if len(x_ticks) > 12:
            x_ticks = x_ticks[::math.ceil(len(x_ticks) / 12)]
    else:
        x_ticks = [t for t in _ticks(x_lo, x_hi, 6) if x_lo - 1e-9 <= t <= x_hi + 1e-9]
    y_lo, y_hi = y_range if y_range else (min(0.0, min(ys)), max(ys))
    y_ticks = _ticks(y_lo, y_hi, 5)
    y_lo, y_hi = (y_range if y_range else (y_ticks[0], y_ticks[-1]))
    if y_hi == y_lo:
        y_hi = y_lo + 1
    left, right, bottom = 52, 18, 44
    legend: list[tuple[float, int, str, str]] = []  # x, y, label, colour
    lx: float = left
    ly = 12
    for name, _, color in drawn:  # legend entries left to right, wrapped (text ~6.2 px per character)
        label = name if len(name) <= 40 else name[:39] + "…"
        item_w = 30 + 6.2 * len(label)
        if lx > left and lx + item_w > width - right:
            lx, ly = left, ly + 18
        legend.append((lx, ly, label, color))
        lx += item_w
    top = ly + 16
    plot_w, plot_h = width - left - right, height - top - bottom

    def px(x: float) -> float:
        return left + (x - x_lo) / (x_hi - x_lo) * plot_w

    def py(y: float) -> float:
        return top + (1 - (y - y_lo) / (y_hi - y_lo)) * plot_h

    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
           f"<title>{esc(title)}</title>"]
    for t in y_ticks:
        if y_lo - 1e-9 <= t <= y_hi + 1e-9:
            y = py(t)
            out.append(f'<line class="grid" x1="{left}" x2="{left + plot_w}" y1="{y:.1f}" y2="{y:.1f}"/>'
                       f'<text class="tick" x="{left - 6}" y="{y + 4:.1f}" text-anchor="end">'
                       f"{esc(_tick_label(t, y_suffix))}</text>")
    for t in x_ticks:
        x = px(t)
        out.append(f'<line class="tickmark" x1="{x:.1f}" x2="{x:.1f}" y1="{top + plot_h}" y2="{top + plot_h + 4}"/>'
                   f'<text class="tick" x="{x:.1f}" y="{top + plot_h + 17}" text-anchor="middle">'
                   f"{esc(_tick_label(t))}</text>")
    out.append(f'<line class="axis" x1="{left}" x2="{left + plot_w}" y1="{top + plot_h}" y2="{top + plot_h}"/>')
    for name, points, color in drawn:
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in points)
        out.append(f'<polyline class="series" points="{path}" stroke="{esc(color)}"/>')
        for x, y in points:
            out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="3.5" fill="{esc(color)}">'
                       f"<title>{esc(name)}: {esc(_tick_label(x))}, {esc(number_text(y, 2))}{esc(y_suffix)}"
                       "</title></circle>")
    for lx, ly, label, color in legend:
        out.append(f'<line x1="{lx:.1f}" x2="{lx + 16:.1f}" y1="{ly}" y2="{ly}" stroke="{esc(color)}" '
                   f'stroke-width="2.5"/><text class="legend" x="{lx + 21:.1f}" y="{ly + 4}">{esc(label)}</text>')
    if x_label:
        out.append(f'<text class="axis-label" x="{left + plot_w / 2:.1f}" y="{height - 6}" '
                   f'text-anchor="middle">{esc(x_label)}</text>')
    if y_label:
        out.append(f'<text class="axis-label" transform="translate(13 {top + plot_h / 2:.1f}) rotate(-90)" '
                   f'text-anchor="middle">{esc(y_label)}</text>')
    out.append("</svg>")
    return "".join(out)


def svg_bars(labels: list[str], series: list[dict], *, title: str, max_value: float | None = None,
             suffix: str = "", width: int = 460) -> str:
    """Horizontal bars, one group per label: ``series`` of ``{"name", "values", "color",
    "errors"?}`` (a value per label, None for none). Empty string when nothing can be drawn."""
    values = [number(v) for one in series for v in as_list(as_dict(one).get("values"))]
    if not labels or not any(v is not None for v in values):
        return ""
    top_value = max_value if max_value else max(v for v in values if v is not None) or 1.0
    bar_h, gap, left, right = 13, 10, 130, 86
    legend = len(series) > 1
    top = 24 if legend else 6
    group_h = bar_h * len(series) + gap
    height = top + group_h * len(labels) + 4
    plot_w = width - left - right
    out = [f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}">',
           f"<title>{esc(title)}</title>"]
    for row, label in enumerate(labels):
        y0 = top + row * group_h
        short = label if len(label) <= 20 else label[:19] + "…"
        out.append(f'<text class="tick" x="{left - 8}" y="{y0 + bar_h * len(series) / 2 + 4:.1f}" '
                   f'text-anchor="end">{esc(short)}<title>{esc(label)}</title></text>')
        for s, one in enumerate(series):
            one = as_dict(one)
            vals, errs = as_list(one.get("values")), as_list(one.get("errors"))
            value = number(vals[row]) if row < len(vals) else None
            error = number(errs[row]) if row < len(errs) else None
            y = y0 + s * bar_h
            color = esc(one.get("color") or LINE_COLORS[s % len(LINE_COLORS)])
            if value is None:
                out.append(f'<text class="tick muted" x="{left + 4}" y="{y + bar_h - 3}">–</text>')
                continue
            w = max(0.0, min(1.0, value / top_value)) * plot_w
            text = number_text(value) + suffix + (f" ± {number_text(error)}" if error is not None else "")
            out.append(f'<rect x="{left}" y="{y + 1}" width="{w:.1f}" height="{bar_h - 2}" rx="2" fill="{color}">'
                       f"<title>{esc(one.get('name') or '')} {esc(label)}: {esc(text)}</title></rect>"
                       f'<text class="value" x="{left + w + 5:.1f}" y="{y + bar_h - 3}">{esc(text)}</text>')
    if legend:
        for s, one in enumerate(series):
            one = as_dict(one)
            lx = left + s * 150
            color = esc(one.get("color") or LINE_COLORS[s % len(LINE_COLORS)])
            out.append(f'<rect x="{lx}" y="4" width="11" height="11" rx="2" fill="{color}"/>'
                       f'<text class="legend" x="{lx + 16}" y="14">{esc(str(one.get("name") or "")[:22])}</text>')
    out.append("</svg>")
    return "".join(out)


def svg_stack(counts: dict[str, int], colors: dict[str, str], *, title: str, width: int = 460,
              height: int = 18) -> str:
    """One bar split by source, each part as wide as its share of the calls."""
    total = sum(counts.values())
    if total <= 0:
        return ""
    out = [f'<svg class="stack" viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="img" '
           f'aria-label="{esc(title)}"><title>{esc(title)}</title>']
    x = 0.0
    for name in source_order(counts):
        n = counts[name]
        if n <= 0:
            continue
        w = n / total * width
        color = esc(colors.get(name, "#64748b"))
        out.append(f'<rect x="{x:.2f}" y="0" width="{w:.2f}" height="{height}" fill="{color}">'
                   f"<title>{esc(name)}: {n} ({100 * n / total:.1f}%)</title></rect>")
        x += w
    out.append("</svg>")
    return "".join(out)


def svg_dot(color: str) -> str:
    """A small round mark of a colour, as a legend shows beside a name."""
    return (f'<svg class="dot" viewBox="0 0 10 10" aria-hidden="true"><circle cx="5" cy="5" r="5" '
            f'fill="{esc(color)}"/></svg>')
