"""The summary at the top of the HTML report: the runs given, the first run's metric cards
(against the baseline's, if one is given), its panels (pass@k, stability, calls by source,
a metric by group) and a table of every run's metrics."""

from __future__ import annotations

from .call_sources import source_order
from .html_text import esc, number_text
from .lenient import as_dict, as_list, number
from .svg_charts import LINE_COLORS, svg_bars, svg_dot, svg_lines, svg_stack

BASELINE_COLOR = "#94a3b8"


def _metric_cards(main: dict, baseline: dict | None) -> str:
    metrics = [m for m in as_list(main.get("metrics")) if isinstance(m, dict)]
    base_metrics = {str(m.get("label")): m for m in as_list(as_dict(baseline).get("metrics")) if isinstance(m, dict)}
    labels = [str(m.get("label")) for m in metrics]
    extra = [m for label, m in base_metrics.items() if label not in labels] if baseline else []
    cards = []
    for metric in metrics + [{"label": m.get("label"), "detail": m.get("detail")} for m in extra]:
        label = str(metric.get("label") or "–")
        value, std = number(metric.get("value")), number(metric.get("std"))
        parts = [f'<div class="card"><div class="card-label">{esc(label)}</div>',
                 f'<div class="card-value">{esc(number_text(value))}']
        if value is not None:
            parts.append('<span class="unit">%</span>')
        if std is not None:
            parts.append(f'<span class="std">± {esc(number_text(std))}</span>')
        parts.append("</div>")
        if baseline is not None:
            other = base_metrics.get(label, {})
            b_value, b_std = number(other.get("value")), number(other.get("std"))
            delta = ""
            if value is not None and b_value is not None:
                diff = value - b_value
                kind = "up" if diff > 0.05 else "down" if diff < -0.05 else "same"
                delta = f' <span class="delta {kind}">{"+" if diff >= 0 else "−"}{abs(diff):.1f} pts</span>'
            b_text = number_text(b_value) + (" %" if b_value is not None else "") + (
                f" ± {number_text(b_std)}" if b_std is not None else "")
            parts.append(f'<div class="card-base"><span class="muted">baseline</span> {esc(b_text)}{delta}</div>')
        if metric.get("detail"):
            parts.append(f'<div class="card-detail">{esc(metric.get("detail"))}</div>')
        parts.append("</div>")
        cards.append("".join(parts))
    if not cards:
        return '<p class="muted">No metrics in this run.</p>'
    return f'<div class="cards">{"".join(cards)}</div>'


def _pass_k_panel(run: dict) -> str:
    pass_k = as_dict(run.get("pass_k"))
    ks = as_list(pass_k.get("k"))
    series = []
    for name in ("pass@k", "pass^k"):
        values = as_list(pass_k.get(name))
        points = [[k, 100 * v] for k, v in zip(ks, values) if number(k) is not None and number(v) is not None]
        series.append({"name": name, "points": points})
    chart = svg_lines(series, title="pass@k and pass^k", x_label="k (trials)", y_label="queries (%)",
                      y_suffix="%", y_range=(0, 100), integer_x=True)
    return _panel("pass@k / pass^k", chart,
                  "pass@k: at least one of k trials passes; pass^k: all k pass.") if chart else ""


def _stability_panel(run: dict) -> str:
    stability = as_dict(run.get("stability"))
    chart = svg_lines(as_list(stability.get("series")), title="Stability", x_label=str(stability.get("x_label") or ""),
                      y_label=str(stability.get("y_label") or ""))
    return _panel("Stability under faults", chart) if chart else ""


def _sources_panel(main: dict, baseline: dict | None, colors: dict[str, str]) -> str:
    rows = []
    for label, run in (("this run", main), ("baseline", baseline)):
        if run is None:
            continue
        counts = {str(k): int(v) for k, v in as_dict(run.get("sources")).items() if number(v)}
        total = sum(counts.values())
        if not total and run is baseline:
            continue
        bar = svg_stack(counts, colors, title=f"calls by source ({label})") or '<div class="stack empty"></div>'
        legend = "".join(
            f'<li>{svg_dot(colors.get(name, "#64748b"))}<span class="src-name">{esc(name)}</span>'
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
    groups = [g for g in as_list(main.get("groups")) if isinstance(g, dict)]
    if not groups:
        return ""
    names = [str(g.get("name") or "–") for g in groups]
    metric = next((str(k) for g in groups for k in as_dict(g.get("metrics"))), None)
    if metric is None:
        return ""

    def pair(group: dict) -> tuple[float | None, float | None]:
        value = as_list(as_dict(group.get("metrics")).get(metric))
        return (number(value[0]) if value else None, number(value[1]) if len(value) > 1 else None)

    mine = [pair(g) for g in groups]
    series = [{"name": str(main.get("name") or "this run"), "values": [m for m, _ in mine],
               "errors": [s for _, s in mine], "color": LINE_COLORS[0]}]
    if baseline is not None:
        theirs = {str(g.get("name")): pair(g) for g in as_list(baseline.get("groups")) if isinstance(g, dict)}
        if theirs:
            series.append({"name": "baseline", "values": [theirs.get(n, (None, None))[0] for n in names],
                           "errors": [theirs.get(n, (None, None))[1] for n in names], "color": BASELINE_COLOR})
    chart = svg_bars(names, series, title=f"{metric} by group", max_value=100, suffix="%")
    return _panel(f"{metric} by group", chart) if chart else ""


def _panel(title: str, body: str, note: str = "") -> str:
    note_html = f'<p class="note">{esc(note)}</p>' if note else ""
    return f'<section class="panel"><h3>{esc(title)}</h3>{body}{note_html}</section>'


def _run_line(run: dict, role: str) -> str:
    rounds = number(run.get("rounds"))
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
        for metric in as_list(run.get("metrics")):
            label = str(as_dict(metric).get("label"))
            if label not in labels:
                labels.append(label)
    head = "".join(f"<th>{esc(label)}</th>" for label in labels)
    body = []
    for run in runs:
        values = {str(as_dict(m).get("label")): as_dict(m) for m in as_list(run.get("metrics"))}
        cells = "".join(
            f'<td class="num">{esc(number_text(values.get(label, {}).get("value")))}'
            + (f' <span class="muted">± {esc(number_text(values[label].get("std")))}</span>'
               if number(values.get(label, {}).get("std")) is not None else "")
            # what the figure is made of (SoWR: its wins, ties and losses), as on the run's own card
            + (f'<div class="cell-detail">{esc(values[label]["detail"])}</div>'
               if values.get(label, {}).get("detail") else "") + "</td>"
            for label in labels)
        body.append(f'<tr><th scope="row">{esc(run.get("name") or "–")}</th><td>{esc(run.get("kind") or "")}</td>'
                    f"{cells}</tr>")
    return (f'<section class="panel wide"><h3>All runs given</h3><div class="table-wrap"><table class="runs">'
            f'<thead><tr><th>run</th><th>kind</th>{head}</tr></thead><tbody>{"".join(body)}</tbody>'
            f"</table></div></section>")


def summary(runs: list[dict], baseline: dict | None, colors: dict[str, str]) -> str:
    """The summary section: the first run (and the baseline) named, its cards and panels,
    and the table of all runs when more than one is given."""
    main = runs[0] if runs else {}
    lines = _run_line(main, "run") + (_run_line(baseline, "baseline") if baseline is not None else "")
    panels = [_pass_k_panel(main), _stability_panel(main), _sources_panel(main, baseline, colors),
              _groups_panel(main, baseline)]
    panels_html = "".join(p for p in panels if p)
    return (f'<section class="summary" aria-label="Summary"><div class="runs-line">{lines}</div>'
            f"{_metric_cards(main, baseline)}"
            f'<div class="panels">{panels_html}{_other_runs(runs)}</div></section>')
