"""The query list of the HTML report as the page is served: its search, filters, sort,
pager and an empty table. The page's script (html_script.py) fills the rows."""

from __future__ import annotations

from .call_sources import query_sources, source_order
from .html_text import esc
from .lenient import as_list

STATUS_FILTERS = (("all", "All queries"), ("solved-any", "Solved in any round"), ("solved-all", "Solved in all rounds"),
                  ("unsolved-all", "Unsolved in all rounds"), ("unsure", "Unsure in a round"),
                  ("unscored", "Unscored or missing in a round"))
SORTS = (("id-asc", "Id (ascending)"), ("id-desc", "Id (descending)"), ("steps-asc", "Steps (fewest first)"),
         ("steps-desc", "Steps (most first)"))


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


def query_section(main: dict, has_baseline: bool, rounds: int) -> str:
    """The query list's section: its controls and a table whose rows the script fills
    (a baseline column when a baseline is given; ``rounds`` heads the status column)."""
    queries = [q for q in as_list(main.get("queries")) if isinstance(q, dict)]
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
