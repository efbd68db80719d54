"""One self-contained HTML page for a report document (``stbeval-report/1``, built by
report_data.py): a summary (metric cards, inline SVG charts), then every query of the first
run, listed, filtered and opened by the page's own script. This module puts the page
together; its parts come from html_summary.py (with svg_charts.py), exec_html.py (``eval
exec`` runs), html_queries.py (the query list as served), html_style.py and
html_script.py (inline) and html_json.py (the embedded document).

The page makes no network request: styles, script and charts are inline and a Content
Security Policy forbids loading anything else. The document is embedded once, as JSON that
nothing in it can close (``<``, ``>``, ``&``, U+2028, U+2029 escaped); the script builds the
page with ``textContent`` only, so an answer holding markup shows as text.
"""

from __future__ import annotations

import base64
import hashlib
import html

from .call_sources import query_sources, source_colors
from .exec_html import exec_sections
from .html_json import embed_json
from .html_queries import query_section
from .html_script import SCRIPT
from .html_style import CSS
from .html_summary import summary
from .html_text import esc
from .lenient import as_dict, as_list, number


def _script_hash(text: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


def render(document: dict) -> str:
    """The complete HTML page of a report document."""
    doc = as_dict(document)
    runs = [r for r in as_list(doc.get("runs")) if isinstance(r, dict)]
    main = runs[0] if runs else {}
    baseline = doc.get("baseline") if isinstance(doc.get("baseline"), dict) else None
    queries = [q for q in as_list(main.get("queries")) if isinstance(q, dict)]
    names: set[str] = set()
    for run in runs + ([baseline] if baseline else []):
        names.update(str(k) for k in as_dict(run.get("sources")))
    for query in queries:
        names.update(query_sources(query))
        names.update(str(s["source"]) for s in as_list(query.get("trajectory"))
                     if isinstance(s, dict) and s.get("source"))
    colors = source_colors(sorted(names))
    statuses = [len(as_list(q.get("status"))) for q in queries]
    given = number(main.get("rounds")) if main.get("status_of") != "trials" else None
    rounds = int(given or max(statuses, default=0))
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
        summary(runs, baseline, colors),
        exec_sections(runs),
        # An exec run lists items, not queries: its (empty) query list stays for the script, hidden.
        query_section(main, baseline is not None, rounds) if main.get("kind") != "exec"
        else f"<div hidden>{query_section(main, baseline is not None, rounds)}</div>",
        '</main><footer class="muted">Self-contained page: it loads nothing from the network. '
        f'Format {esc(doc.get("format") or "unknown")}.</footer>',
        f'<script type="application/json" id="stb-data">{embed_json(document)}</script>',
        f'<script type="application/json" id="stb-colors">{embed_json(colors)}</script>',
        f"<script>{SCRIPT}</script></body></html>\n",
    ])
