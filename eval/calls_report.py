"""Reports of call-level metrics (calls.py): the table, the run folder, per-query details.

A run folder holds ``summary.json`` (every figure, and the queries listed by what became
of them), ``table.md`` (the table, then every query not scored or whose calls differ, one
line each), ``table.csv`` (the table) and ``details/<group>/<query id>.json``: per query,
each reference call beside the run's call at the same position, with the parts that
differ, the order-free misses with the closest call the run had left, and the run's extra
calls. What is printed is the table and how many queries each list holds; the lists
themselves only when asked (``verbose``), since a run over the published ids can list
hundreds of queries.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from .calls import CallsResult, GroupCalls, Missing, QueryCalls
from .report import SUMMARY, cell, markdown, ordered_groups, to_csv

HEADER = ["Group", "Queries", "Scored", "Reference calls", "Run calls", "Call accuracy", "Order-free", "ROUGE-L",
          "No run", "No reference"]
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def summary(result: CallsResult) -> dict[str, Any]:
    return {
        "kind": "calls",
        "run": result.run,
        "reference": result.reference,
        "left_out_fields": sorted(result.left_out),
        "groups": [group_summary(g) for g in result.groups],
        "overall": group_summary(result.overall),
        "problems": result.problems,
    }


def group_summary(g: GroupCalls) -> dict[str, Any]:
    return {
        "group": g.group,
        "queries": g.queries,
        "scored": len(g.results),
        "reference_calls": g.reference_calls,
        "run_calls": g.run_calls,
        "matched": g.matched,
        "order_free_matched": g.order_free,
        "call_accuracy": g.accuracy,
        "order_free_accuracy": g.order_free_accuracy,
        "rouge_l": g.rouge_l,
        "rouge_l_scored": len(g.rouge_scored),
        "unreadable_reference_calls": sum(c.arguments is None for r in g.results for c in r.reference),
        "no_run": [_missing(m) for m in g.no_run],
        "no_reference": [_missing(m) for m in g.no_reference],
        "mismatched": [_first_mismatch(r) for r in g.mismatched],
    }


def _first_mismatch(q: QueryCalls) -> dict[str, Any]:
    position = next(i for i, diffs in enumerate(q.positions) if diffs)
    return {"query_id": q.query_id, "mismatched_calls": len(q.reference) - q.matched, "position": position + 1,
            "api": q.reference[position].api, "first_difference": q.positions[position][0]}


def _missing(m: Missing) -> dict[str, str]:
    return {"query_id": m.query_id, "reason": m.reason}


def table(data: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per group in the paper's order, then the overall row when there are several."""
    by_name = {g["group"]: g for g in data["groups"]}
    entries = [by_name[name] for name in ordered_groups(by_name)]
    if len(entries) > 1:
        entries.append(data["overall"])
    rows = [[g["group"], str(g["queries"]), str(g["scored"]), str(g["reference_calls"]), str(g["run_calls"]),
             cell(g["call_accuracy"]), cell(g["order_free_accuracy"]), cell(g["rouge_l"]),
             str(len(g["no_run"])), str(len(g["no_reference"]))] for g in entries]
    return HEADER, rows


LISTS = (("no_run", "No run"), ("no_reference", "No reference"), ("mismatched", "Calls differ (see details/)"))


def render(data: dict[str, Any], *, per_query: bool = True) -> str:
    """The table, then the queries that were not scored and those whose calls differ: each
    one on its line with ``per_query``, else how many there are."""
    parts = [f"Calls of {data['run']} against {data['reference']} (%)\n\n" + markdown(*table(data))]
    counts = []
    for key, title in LISTS:
        listed = [(g["group"], item) for g in data["groups"] for item in g[key]]
        if listed and per_query:
            parts.append(f"{title}: {len(listed)} queries\n" + _list(listed))
        elif listed:
            counts.append(f"{title}: {len(listed)} queries")
    if counts:
        parts.append("\n".join(counts))
    unreadable = data["overall"]["unreadable_reference_calls"]
    if unreadable:
        parts.append(f"{unreadable} reference calls have arguments cut short in the source; "
                     "they match only a call written the same way.")
    return "\n\n".join(parts) + "\n"


def _list(items: list[tuple[str, Any]]) -> str:
    lines = []
    for group, item in items:
        if "reason" in item:
            lines.append(f"  {group} {item['query_id']}: {item['reason']}")
            continue
        d = item["first_difference"]
        more = item["mismatched_calls"] - 1
        lines.append(f"  {group} {item['query_id']}, call {item['position']} {item['api']}: {d['part']}: "
                     f"reference {d['reference']!r}, got {d['got']!r}" + (f" (and {more} more)" if more else ""))
    return "\n".join(lines)


def query_detail(q: QueryCalls) -> dict[str, Any]:
    """Everything about one scored query; a mismatch names each part that differs."""
    positions = []
    for i, (ref, diffs) in enumerate(zip(q.reference, q.positions)):
        got = q.run[i] if i < len(q.run) else None
        positions.append({"position": i + 1, "match": not diffs, "reference": ref.as_dict(),
                          "got": got.as_dict() if got else None, "differences": diffs})
    return {
        "group": q.group,
        "query_id": q.query_id,
        "status": "scored",
        "reference_calls": len(q.reference),
        "run_calls": len(q.run),
        "matched": q.matched,
        "order_free_matched": q.order_free,
        "call_accuracy": q.accuracy,
        "order_free_accuracy": q.order_free_accuracy,
        "rouge_l": None if q.rouge_l is None else 100 * q.rouge_l,
        "calls": positions,
        "extra_run_calls": [{"position": i + 1, "got": call.as_dict()}
                            for i, call in enumerate(q.run) if i >= len(q.reference)],
        "order_free": {
            "unmatched": [{"reference": u.reference.as_dict(), "closest": u.closest.as_dict() if u.closest else None,
                           "differences": u.differences} for u in q.unmatched],
            "unmatched_run_calls": [call.as_dict() for call in q.unmatched_run],
        },
    }


def write(folder: str | Path, result: CallsResult, *, verbose: bool = False) -> str:
    """Write the run folder; return the text printed on standard output: every listed
    query with ``verbose``, else their counts and where they are listed."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    data = summary(result)
    (folder / SUMMARY).write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    text = render(data)
    (folder / "table.md").write_text(text, encoding="utf-8")
    brief = render(data, per_query=False)
    if not verbose and brief != text:
        text = brief + f"\nEach of those queries is listed in {folder / 'table.md'} (or printed with -v).\n"
    (folder / "table.csv").write_text(to_csv(*table(data)), encoding="utf-8")
    for g in result.groups:
        details = {q.query_id: query_detail(q) for q in g.results}
        for key, items in (("no_run", g.no_run), ("no_reference", g.no_reference)):
            for m in items:
                entry = details.setdefault(m.query_id, {"group": m.group, "query_id": m.query_id,
                                                        "status": "not scored", "no_run": None, "no_reference": None})
                entry[key] = m.reason
        target = folder / "details" / _safe(g.group)
        target.mkdir(parents=True, exist_ok=True)
        for qid, detail in details.items():
            (target / f"{_safe(qid)}.json").write_text(json.dumps(detail, indent=2, ensure_ascii=False) + "\n",
                                                       encoding="utf-8")
    return text


def _safe(name: str) -> str:
    return _UNSAFE.sub("_", name) or "_"
