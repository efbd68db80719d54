"""Where a call's answer came from (upstream, cache, simulated, ...), as the HTML report
shows it: the sources in their usual order, a colour each (the same in the legend, the
rows and the steps), and a query's calls counted by source."""

from __future__ import annotations

from typing import Iterable

from .lenient import as_dict, as_list, number

SOURCE_COLORS = {"upstream": "#2563eb", "cache": "#0d9488", "simulated": "#7c3aed", "injected": "#db2777",
                 "error": "#dc2626", "imported": "#a16207"}
_MORE_COLORS = ("#475569", "#0891b2", "#65a30d", "#c2410c", "#9333ea", "#be185d", "#1d4ed8", "#4d7c0f")


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
        return {str(k): int(v) for k, v in sources.items() if number(v)}
    counts: dict[str, int] = {}
    for step in as_list(query.get("trajectory")):
        source = as_dict(step).get("source")
        if source:
            counts[str(source)] = counts.get(str(source), 0) + 1
    return counts
