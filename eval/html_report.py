"""One self-contained HTML page for a report document (``stbeval-report/1``, built by
report_data.py): the summary drawn here (metric cards, inline SVG charts), every query of
the first run listed, filtered and opened by the page's own script (html_assets.py).

The page makes no network request: styles, script and charts are inline and a Content
Security Policy forbids loading anything else. The document is embedded once, as JSON that
nothing in it can close (``<``, ``>``, ``&``, U+2028, U+2029 escaped); the script builds the
page with ``textContent`` only, so an answer holding markup shows as text.
"""

from __future__ import annotations

import base64
import hashlib
import html
import json
import math
import re
from typing import Any, Iterable

from .exec_html import exec_sections
from .html_assets import CSS, SCRIPT
from .html_text import esc

# Where a call's answer came from: the same colour in the legend, the rows and the steps.
SOURCE_COLORS = {"upstream": "#2563eb", "cache": "#0d9488", "simulated": "#7c3aed", "injected": "#db2777",
                 "error": "#dc2626", "imported": "#a16207"}
_MORE_COLORS = ("#475569", "#0891b2", "#65a30d", "#c2410c", "#9333ea", "#be185d", "#1d4ed8", "#4d7c0f")
LINE_COLORS = ("#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#4b5563", "#b91c1c")
BASELINE_COLOR = "#94a3b8"
STATUS_FILTERS = (("all", "All queries"), ("solved-any", "Solved in any round"), ("solved-all", "Solved in all rounds"),
                  ("unsolved-all", "Unsolved in all rounds"), ("unsure", "Unsure in a round"),
                  ("unscored", "Unscored or missing in a round"))
SORTS = (("id-asc", "Id (ascending)"), ("id-desc", "Id (descending)"), ("steps-asc", "Steps (fewest first)"),
         ("steps-desc", "Steps (most first)"))

_JSON_UNSAFE = re.compile("[<>&\u2028\u2029\ud800-\udfff]")


# -- text ----------------------------------------------------------------------------------

def embed_json(value: Any) -> str:
    """JSON for a ``<script type="application/json">`` block: nothing in it can end the
    block or the page's parse (``<``, ``>``, ``&``, U+2028, U+2029 and lone surrogates as
    ``\\uXXXX``); numbers that JSON cannot carry (NaN, infinities) become null."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False, default=str)
    except ValueError:
        text = json.dumps(_finite(value), ensure_ascii=False, separators=(",", ":"), default=str)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _fmt(value: Any, digits: int = 1) -> str:
    number = _number(value)
    return "–" if number is None else f"{number:.{digits}f}"


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _script_hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


# -- colours -------------------------------------------------------------------------------

def source_colors(names: Iterable[str]) -> dict[str, str]:
    """A colour per source: the known ones fixed, others from a further palette in name order."""
    colors = {}
    others = sorted({n for n in names if n not in SOURCE_COLORS})
    for name in names:
        if name in SOURCE_COLORS:
            colors[name] = SOURCE_COLORS[name]
    for i, name in enumerate(others):
        colors[name] = _MORE_COLORS[i % len(_MORE_COLORS)]
    return colors


def source_order(names: Iterable[str]) -> list[str]:
    """Known sources in their usual order, then the others by name."""
    names = set(names)
    return [n for n in SOURCE_COLORS if n in names] + sorted(names - set(SOURCE_COLORS))


def query_sources(query: dict) -> dict[str, int]:
    """A query's calls by source: its ``sources``, else counted from its steps."""
    sources = query.get("sources")
    if isinstance(sources, dict):
        return {str(k): int(v) for k, v in sources.items() if _number(v)}
    counts: dict[str, int] = {}
    for step in _list(query.get("trajectory")):
        source = _dict(step).get("source")
        if source:
            counts[str(source)] = counts.get(str(source), 0) + 1
    return counts


# -- SVG -----------------------------------------------------------------------------------

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
        one = _dict(one)
        points = []
        for point in _list(one.get("points")):
            if isinstance(point, (list, tuple)) and len(point) >= 2:
                x, y = _number(point[0]), _number(point[1])
                if x is not None and y is not None:
                    points.append((x, y))
        if points:
            drawn.append((str(one.get("name") or f"series {i + 1}"), sorted(points),
                          one.get("color") or LINE_COLORS[i % len(LINE_COLORS)]))
    if not drawn:
        return ""
    xs = [x for _, pts, _ in drawn for x, _ in pts]
    ys = [y for _, pts, _ in drawn for _, y in pts]
    x_lo, x_hi = min(xs), max(xs)
    if x_hi == x_lo:
        x_lo, x_hi = x_lo - 1, x_hi + 1
    if integer_x:
        x_ticks = list(range(math.ceil(x_lo), math.floor(x_hi) + 1))
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
    legend, lx, ly = [], left, 12
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
                       f"<title>{esc(name)}: {esc(_tick_label(x))}, {esc(_fmt(y, 2))}{esc(y_suffix)}</title></circle>")
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
    values = [_number(v) for one in series for v in _list(_dict(one).get("values"))]
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
            one = _dict(one)
            vals, errs = _list(one.get("values")), _list(one.get("errors"))
            value = _number(vals[row]) if row < len(vals) else None
            error = _number(errs[row]) if row < len(errs) else None
            y = y0 + s * bar_h
            color = esc(one.get("color") or LINE_COLORS[s % len(LINE_COLORS)])
            if value is None:
                out.append(f'<text class="tick muted" x="{left + 4}" y="{y + bar_h - 3}">–</text>')
                continue
            w = max(0.0, min(1.0, value / top_value)) * plot_w
            text = _fmt(value) + suffix + (f" ± {_fmt(error)}" if error is not None else "")
            out.append(f'<rect x="{left}" y="{y + 1}" width="{w:.1f}" height="{bar_h - 2}" rx="2" fill="{color}">'
                       f"<title>{esc(one.get('name') or '')} {esc(label)}: {esc(text)}</title></rect>"
                       f'<text class="value" x="{left + w + 5:.1f}" y="{y + bar_h - 3}">{esc(text)}</text>')
    if legend:
        for s, one in enumerate(series):
            one = _dict(one)
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


def _dot(color: str) -> str:
    return (f'<svg class="dot" viewBox="0 0 10 10" aria-hidden="true"><circle cx="5" cy="5" r="5" '
            f'fill="{esc(color)}"/></svg>')


# -- the summary ---------------------------------------------------------------------------

def _metric_cards(main: dict, baseline: dict | None) -> str:
    metrics = [m for m in _list(main.get("metrics")) if isinstance(m, dict)]
    base_metrics = {str(m.get("label")): m for m in _list(_dict(baseline).get("metrics")) if isinstance(m, dict)}
    labels = [str(m.get("label")) for m in metrics]
    extra = [m for label, m in base_metrics.items() if label not in labels] if baseline else []
    cards = []
    for metric in metrics + [{"label": m.get("label"), "detail": m.get("detail")} for m in extra]:
        label = str(metric.get("label") or "–")
        value, std = _number(metric.get("value")), _number(metric.get("std"))
        parts = [f'<div class="card"><div class="card-label">{esc(label)}</div>',
                 f'<div class="card-value">{esc(_fmt(value))}']
        if value is not None:
            parts.append('<span class="unit">%</span>')
        if std is not None:
            parts.append(f'<span class="std">± {esc(_fmt(std))}</span>')
        parts.append("</div>")
        if baseline is not None:
            other = base_metrics.get(label, {})
            b_value, b_std = _number(other.get("value")), _number(other.get("std"))
            delta = ""
            if value is not None and b_value is not None:
                diff = value - b_value
                kind = "up" if diff > 0.05 else "down" if diff < -0.05 else "same"
                delta = f' <span class="delta {kind}">{"+" if diff >= 0 else "−"}{abs(diff):.1f} pts</span>'
            b_text = _fmt(b_value) + (" %" if b_value is not None else "") + (
                f" ± {_fmt(b_std)}" if b_std is not None else "")
            parts.append(f'<div class="card-base"><span class="muted">baseline</span> {esc(b_text)}{delta}</div>')
        if metric.get("detail"):
            parts.append(f'<div class="card-detail">{esc(metric.get("detail"))}</div>')
        parts.append("</div>")
        cards.append("".join(parts))
    if not cards:
        return '<p class="muted">No metrics in this run.</p>'
    return f'<div class="cards">{"".join(cards)}</div>'


def _pass_k_panel(run: dict) -> str:
    pass_k = _dict(run.get("pass_k"))
    ks = _list(pass_k.get("k"))
    series = []
    for name in ("pass@k", "pass^k"):
        values = _list(pass_k.get(name))
        points = [[k, 100 * v] for k, v in zip(ks, values) if _number(k) is not None and _number(v) is not None]
        series.append({"name": name, "points": points})
    chart = svg_lines(series, title="pass@k and pass^k", x_label="k (trials)", y_label="queries (%)",
                      y_suffix="%", y_range=(0, 100), integer_x=True)
    return _panel("pass@k / pass^k", chart,
                  "pass@k: at least one of k trials passes; pass^k: all k pass.") if chart else ""


def _stability_panel(run: dict) -> str:
    stability = _dict(run.get("stability"))
    chart = svg_lines(_list(stability.get("series")), title="Stability", x_label=str(stability.get("x_label") or ""),
                      y_label=str(stability.get("y_label") or ""))
    return _panel("Stability under faults", chart) if chart else ""


def _sources_panel(main: dict, baseline: dict | None, colors: dict[str, str]) -> str:
    rows = []
    for label, run in (("this run", main), ("baseline", baseline)):
        if run is None:
            continue
        counts = {str(k): int(v) for k, v in _dict(run.get("sources")).items() if _number(v)}
        total = sum(counts.values())
        if not total and run is baseline:
            continue
        bar = svg_stack(counts, colors, title=f"calls by source ({label})") or '<div class="stack empty"></div>'
        legend = "".join(
            f'<li>{_dot(colors.get(name, "#64748b"))}<span class="src-name">{esc(name)}</span>'
            f'<span class="num">{counts[name]}</span>'
            f'<span class="muted pct">{100 * counts[name] / total:.1f}%</span></li>'
            for name in source_order(counts) if counts[name] > 0)
        head = f'<div class="stack-head"><span>{esc(label)}</span><span class="muted">{total} calls</span></div>' \
            if baseline is not None else f'<div class="stack-head"><span class="muted">{total} calls</span></div>'
        rows.append(f'<div class="stack-block">{head}{bar}<ul class="legend-list">{legend}</ul></div>')
    if not rows:
        return ""
    return _panel("Calls by source", "".join(rows), "Where each tool call's answer came from.")


def _groups_panel(main: dict, baseline: dict | None) -> str:
    groups = [g for g in _list(main.get("groups")) if isinstance(g, dict)]
    if not groups:
        return ""
    names = [str(g.get("name") or "–") for g in groups]
    metric = next((str(k) for g in groups for k in _dict(g.get("metrics"))), None)
    if metric is None:
        return ""

    def pair(group: dict) -> tuple[float | None, float | None]:
        value = _list(_dict(group.get("metrics")).get(metric))
        return (_number(value[0]) if value else None, _number(value[1]) if len(value) > 1 else None)

    mine = [pair(g) for g in groups]
    series = [{"name": str(main.get("name") or "this run"), "values": [m for m, _ in mine],
               "errors": [s for _, s in mine], "color": LINE_COLORS[0]}]
    if baseline is not None:
        theirs = {str(g.get("name")): pair(g) for g in _list(baseline.get("groups")) if isinstance(g, dict)}
        if theirs:
            series.append({"name": "baseline", "values": [theirs.get(n, (None, None))[0] for n in names],
                           "errors": [theirs.get(n, (None, None))[1] for n in names], "color": BASELINE_COLOR})
    chart = svg_bars(names, series, title=f"{metric} by group", max_value=100, suffix="%")
    return _panel(f"{metric} by group", chart) if chart else ""


def _panel(title: str, body: str, note: str = "") -> str:
    note_html = f'<p class="note">{esc(note)}</p>' if note else ""
    return f'<section class="panel"><h3>{esc(title)}</h3>{body}{note_html}</section>'


def _run_line(run: dict, role: str) -> str:
    rounds = _number(run.get("rounds"))
    facts = [str(run.get("kind") or "")] + ([f"{rounds:.0f} round{'s' if rounds != 1 else ''}"] if rounds else [])
    queries = run.get("queries")
    if isinstance(queries, list) and queries:
        facts.append(f"{len(queries)} queries")
    return (f'<div class="run"><span class="run-role {esc(role)}">{esc(role)}</span>'
            f'<strong>{esc(run.get("name") or "–")}</strong>'
            f'<span class="muted">{esc(" · ".join(f for f in facts if f))}</span>'
            f'<code>{esc(run.get("folder") or "")}</code></div>')


def _other_runs(runs: list[dict]) -> str:
    if len(runs) < 2:
        return ""
    labels: list[str] = []
    for run in runs:
        for metric in _list(run.get("metrics")):
            label = str(_dict(metric).get("label"))
            if label not in labels:
                labels.append(label)
    head = "".join(f"<th>{esc(label)}</th>" for label in labels)
    body = []
    for run in runs:
        values = {str(_dict(m).get("label")): _dict(m) for m in _list(run.get("metrics"))}
        cells = "".join(
            f'<td class="num">{esc(_fmt(values.get(label, {}).get("value")))}'
            + (f' <span class="muted">± {esc(_fmt(values[label].get("std")))}</span>'
               if _number(values.get(label, {}).get("std")) is not None else "")
            # what the figure is made of (SoWR: its wins, ties and losses), as on the run's own card
            + (f'<div class="cell-detail">{esc(values[label]["detail"])}</div>'
               if values.get(label, {}).get("detail") else "") + "</td>"
            for label in labels)
        body.append(f'<tr><th scope="row">{esc(run.get("name") or "–")}</th><td>{esc(run.get("kind") or "")}</td>'
                    f"{cells}</tr>")
    return (f'<section class="panel wide"><h3>All runs given</h3><div class="table-wrap"><table class="runs">'
            f'<thead><tr><th>run</th><th>kind</th>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            f"</table></div></section>")


def _summary(runs: list[dict], baseline: dict | None, colors: dict[str, str]) -> str:
    main = runs[0] if runs else {}
    lines = _run_line(main, "run") + (_run_line(baseline, "baseline") if baseline is not None else "")
    panels = [_pass_k_panel(main), _stability_panel(main), _sources_panel(main, baseline, colors),
              _groups_panel(main, baseline)]
    panels_html = "".join(p for p in panels if p)
    return (f'<section class="summary" aria-label="Summary"><div class="runs-line">{lines}</div>'
            f"{_metric_cards(main, baseline)}"
            f'<div class="panels">{panels_html}{_other_runs(runs)}</div></section>')


# -- the query list ------------------------------------------------------------------------

def _controls(queries: list[dict], has_baseline: bool) -> str:
    status = list(STATUS_FILTERS) + ([("changed", "Changed vs baseline")] if has_baseline else [])
    present: set[str] = set()
    for query in queries:
        present.update(name for name, n in query_sources(query).items() if n > 0)
    sources = [("", "Any source")] + [(name, f"Touched {name}") for name in source_order(present)]
    sources += [("none", "No tool call")]

    def select(name: str, label: str, options: list[tuple[str, str]]) -> str:
        opts = "".join(f'<option value="{esc(v)}">{esc(t)}</option>' for v, t in options)
        return (f'<div class="control"><label for="{name}">{esc(label)}</label>'
                f'<select id="{name}" data-testid="{name}">{opts}</select></div>')

    return ('<div class="toolbar" role="search">'
            '<div class="control grow"><label for="search">Search</label>'
            '<input id="search" data-testid="search" type="search" placeholder="query text or id" '
            'autocomplete="off" spellcheck="false"></div>'
            + select("filter-status", "Status", status) + select("filter-source", "Source", sources)
            + select("sort", "Sort by", list(SORTS))
            + '<div class="control"><span class="label-spacer" aria-hidden="true">&nbsp;</span>'
              '<button type="button" id="reset" class="secondary">Reset</button></div></div>')


def _query_section(main: dict, has_baseline: bool, rounds: int) -> str:
    queries = [q for q in _list(main.get("queries")) if isinstance(q, dict)]
    unit = "trial" if main.get("status_of") == "trials" else "round"  # what each status pill stands for
    base_col = '<th scope="col">baseline</th>' if has_baseline else ""
    return ('<section class="queries" aria-label="Queries"><h2>Queries</h2>'
            f"{_controls(queries, has_baseline)}"
            '<div class="listbar"><span id="count" data-testid="count" aria-live="polite"></span>'
            '<div class="pager"><button type="button" id="prev-page" data-testid="prev-page" class="secondary" '
            'aria-label="Previous page">‹ Prev</button><span id="page-label" class="muted"></span>'
            '<button type="button" id="next-page" data-testid="next-page" class="secondary" '
            'aria-label="Next page">Next ›</button></div></div>'
            '<div class="table-wrap"><table class="qtable"><thead><tr>'
            '<th scope="col">id</th><th scope="col">group</th>'
            f'<th scope="col">status <span class="muted">({rounds} {unit}{"s" if rounds != 1 else ""})</span></th>'
            f'{base_col}<th scope="col" class="num">steps</th><th scope="col">calls by source</th>'
            '<th scope="col" class="qcol">query</th></tr></thead><tbody id="rows"></tbody></table></div></section>')


# -- the page ------------------------------------------------------------------------------

def render(document: dict) -> str:
    """The complete HTML page of a report document."""
    doc = _dict(document)
    runs = [r for r in _list(doc.get("runs")) if isinstance(r, dict)]
    main = runs[0] if runs else {}
    baseline = doc.get("baseline") if isinstance(doc.get("baseline"), dict) else None
    queries = [q for q in _list(main.get("queries")) if isinstance(q, dict)]
    names: set[str] = set()
    for run in runs + ([baseline] if baseline else []):
        names.update(str(k) for k in _dict(run.get("sources")))
    for query in queries:
        names.update(query_sources(query))
        names.update(str(s["source"]) for s in _list(query.get("trajectory"))
                     if isinstance(s, dict) and s.get("source"))
    colors = source_colors(sorted(names))
    statuses = [len(_list(q.get("status"))) for q in queries]
    rounds = int((main.get("status_of") != "trials" and _number(main.get("rounds"))) or max(statuses, default=0))
    title = str(doc.get("title") or "Evaluation report")
    policy = (f"default-src 'none'; script-src '{_script_hash(SCRIPT)}'; style-src 'unsafe-inline'; "
              "img-src data:; base-uri 'none'; form-action 'none'")
    return "".join([
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{html.escape(policy, quote=False)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="generator" content="stbeval">',
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>",
        f'<header class="top"><div class="brand">stbeval report</div><h1>{esc(title)}</h1></header><main>',
        _summary(runs, baseline, colors),
        exec_sections(runs),
        # An exec run lists items, not queries: its (empty) query list stays for the script, hidden.
        _query_section(main, baseline is not None, rounds) if main.get("kind") != "exec"
        else f"<div hidden>{_query_section(main, baseline is not None, rounds)}</div>",
        '</main><footer class="muted">Self-contained page: it loads nothing from the network. '
        f'Format {esc(doc.get("format") or "unknown")}.</footer>',
        f'<script type="application/json" id="stb-data">{embed_json(document)}</script>',
        f'<script type="application/json" id="stb-colors">{embed_json(colors)}</script>',
        f"<script>{SCRIPT}</script></body></html>\n",
    ])
