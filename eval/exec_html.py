"""The HTML report's section for ``eval exec`` runs (html_report.render adds it).

One section per exec run given to ``eval report --html``: the scores per task, then every
item as a ``<details>`` element (no script needed): its status and F1, the command as the
generation wrote it, what the proxy answered (and how: its source), the best label's
command and answer, the top-level items that differ, and every label's outcome. Text
only, escaped; styles scoped to the section (the page's CSP allows inline styles).
"""

from __future__ import annotations

import json
from typing import Any

from .exec_report import table
from .html_text import esc
from .lenient import as_dict

MAX_SHOWN = 4000  # characters of an answer shown; the run folder has more

_STYLE = """
.exec h2 { margin-top: 1.5rem; }
.exec table.exec-tasks td, .exec table.exec-tasks th { padding: 2px 8px; text-align: right; }
.exec table.exec-tasks th:first-child, .exec table.exec-tasks td:first-child { text-align: left; }
.exec details.exec-item { border: 1px solid #e2e8f0; border-radius: 6px; margin: 4px 0; padding: 4px 8px; }
.exec details.exec-item > summary { cursor: pointer; display: flex; gap: 10px; align-items: baseline; }
.exec .exec-id { font-weight: 600; font-family: ui-monospace, monospace; }
.exec .exec-status { border-radius: 9px; padding: 0 8px; font-size: 12px; color: #fff; background: #64748b; }
.exec .exec-status.success { background: #15803d; }
.exec .exec-status.differs { background: #b45309; }
.exec .exec-status.crashed, .exec .exec-status.not_executable, .exec .exec-status.missed { background: #b91c1c; }
.exec .exec-reason { color: #475569; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
.exec pre { background: #f8fafc; padding: 6px; overflow-x: auto; white-space: pre-wrap; word-break: break-all;
            max-height: 24em; }
.exec table.exec-diff td { vertical-align: top; font-family: ui-monospace, monospace; padding: 2px 6px; }
"""


def exec_sections(runs: list[dict]) -> str:
    """The section of every exec run among ``runs`` (empty when there is none)."""
    return "".join(_section(run) for run in runs if isinstance(run, dict) and isinstance(run.get("exec"), dict))


def _section(run: dict) -> str:
    data = run["exec"]
    head, rows = table({"tasks": data.get("tasks") or [], "overall": data.get("overall") or {}})
    table_html = ("<table class=\"exec-tasks\"><thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head)
                  + "</tr></thead><tbody>"
                  + "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows)
                  + "</tbody></table>")
    items = [i for i in data.get("items") or [] if isinstance(i, dict)]
    return (f'<section class="exec" id="exec-items" aria-label="Execution-scored items"><style>{_STYLE}</style>'
            f"<h2>Execution-scored items: {esc(run.get('name'))}</h2>"
            '<p class="note">Scores in %, over the scored items (those with a label answer). Each item: the '
            "generation's first curl line and its labels, run through the proxy; the source says how the proxy "
            "answered (cache: from the store).</p>"
            f'{table_html}<div class="exec-list">{"".join(_item(i) for i in items)}</div></section>')


def _item(item: dict) -> str:
    status = str(item.get("status") or "")
    f1 = item.get("f1")
    prediction = as_dict(item.get("prediction"))
    labels = [label for label in item.get("labels") or [] if isinstance(label, dict)]
    best = item.get("best_label")
    chosen = labels[best - 1] if isinstance(best, int) and 0 < best <= len(labels) else None
    summary = (f'<details class="exec-item" data-status="{esc(status)}"><summary>'
               f'<span class="exec-id">{esc(item.get("id"))}</span><span class="muted">{esc(item.get("task"))}</span>'
               f'<span class="exec-status {esc(status)}">{esc(status.replace("_", " "))}</span>'
               f'<span class="num">F1 {esc(_number(f1))}</span>'
               f'<span class="exec-reason">{esc(item.get("reason"))}</span></summary>')
    parts = [summary]
    if item.get("query"):
        parts.append(f"<p>{esc(item.get('query'))}</p>")
    parts.append("<h4>Command</h4>" + _command(prediction))
    if chosen is not None:
        parts.append(f"<h4>Best label ({best} of {len(labels)})</h4>" + _command(chosen))
    differing = [d for d in item.get("differing") or [] if isinstance(d, dict)]
    if differing:
        rows = "".join(f"<tr><td>{esc(d.get('item'))}</td><td>{esc(_absent(d.get('prediction')))}</td>"
                       f"<td>{esc(_absent(d.get('label')))}</td></tr>" for d in differing)
        parts.append('<h4>Differing items</h4><table class="exec-diff"><thead><tr><th>item</th><th>prediction</th>'
                     f"<th>label</th></tr></thead><tbody>{rows}</tbody></table>")
    if len(labels) > 1 or chosen is None:
        outcomes = "".join(f"<li><code>{esc(label.get('command'))}</code>: {esc(label.get('status'))}"
                           + (f", {esc(label.get('reason'))}" if label.get("reason") else "")
                           + (f" ({esc(label.get('source'))})" if label.get("source") else "") + "</li>"
                           for label in labels)
        parts.append(f"<h4>Labels</h4><ol>{outcomes}</ol>")
    parts.append("</details>")
    return "".join(parts)


def _command(done: dict) -> str:
    command = done.get("command")
    facts = [f"{done.get('status')}"]
    if done.get("reason"):
        facts.append(str(done.get("reason")))
    if done.get("source"):
        facts.append(f"source {done.get('source')}")
    if done.get("http_status"):
        facts.append(f"HTTP {done.get('http_status')}")
    answer = done.get("answer") or ""
    return (f"<pre>{esc(command if command else '(no line of the generation begins with curl)')}</pre>"
            f'<p class="muted">{esc(" · ".join(facts))}</p>'
            + (f"<pre>{esc(_pretty(answer))}</pre>" if answer else ""))


def _pretty(text: str) -> str:
    try:
        text = json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        pass
    return text if len(text) <= MAX_SHOWN else text[:MAX_SHOWN] + f"\n... ({len(text) - MAX_SHOWN} more characters)"


def _number(value: Any) -> str:
    return f"{value:.2f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else "–"


def _absent(value: Any) -> str:
    return "(absent)" if value is None else str(value)
