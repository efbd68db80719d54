"""What an ``eval exec`` run writes and prints: the table per task, ``summary.json``,
``items.csv`` (one row per item) and ``items.jsonl`` (everything the HTML report shows of
each item); and the run as a report reads it back (report_data.py, exec_html.py).

Nothing here holds a time, a duration or the proxy's address, so two runs scored from the
same store write the same bytes.
"""

from __future__ import annotations

import csv
import io
import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import InputError
from .exec_score import NO_ANSWER, STATUSES
from .tables import SUMMARY, markdown, read_json_lines

if TYPE_CHECKING:  # a report reads run folders without loading the runner (and httpx)
    from .exec_run import ExecRun

FORMAT = "stbeval-exec/1"
ITEMS_CSV = "items.csv"
ITEMS_JSONL = "items.jsonl"
MAX_LISTED = 40  # items not successful printed; all of them are in items.csv
CSV_COLUMNS = ("id", "task", "status", "precision", "recall", "f1", "best_label", "source", "reason", "command")
_HEAD = ["Task", "Items", "Scored", "Success", "Crash", "Precision", "Recall", "F1", "Differs", "Crashed",
         "Not executable", "Missed", "Unscored"]


def summary_of(run: ExecRun, name: str, items_file: str) -> dict[str, Any]:
    tasks, overall = run.tallies()
    problems = [f"item {r.item.id}: {r.reason}" for r in run.results if r.status == "unscored"]
    return {"kind": "exec", "format": FORMAT, "name": name, "items_file": items_file,
            "tasks": [t.as_dict() for t in tasks], "overall": overall.as_dict(), "sources": run.sources(),
            "keys": run.keys.described(), "problems": problems}


def write(folder: Path, run: ExecRun, summary: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SUMMARY).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    records = [r.record() for r in run.results]
    with (folder / ITEMS_JSONL).open("w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for record in records:
        prediction = record["prediction"] or {}
        writer.writerow([record["id"], record["task"], record["status"], _fraction(record["precision"]),
                         _fraction(record["recall"]), _fraction(record["f1"]), record["best_label"] or "",
                         prediction.get("source") or "", record["reason"], prediction.get("command") or ""])
    (folder / ITEMS_CSV).write_text(out.getvalue(), encoding="utf-8")


def _fraction(value: float) -> str:
    return f"{value:.4f}"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}"


def table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    rows = []
    tasks = list(summary.get("tasks") or [])
    for tally in tasks + ([summary["overall"]] if len(tasks) > 1 else []):
        rows.append([tally["task"], str(tally["items"]), str(tally["scored"]), _pct(tally["success_rate"]),
                     _pct(tally["crash_rate"]), _pct(tally["precision"]), _pct(tally["recall"]), _pct(tally["f1"]),
                     str(tally["differs"]), str(tally["crashed"]), str(tally["not_executable"]), str(tally["missed"]),
                     str(tally["unscored"])])
    return _HEAD, rows


def text(summary: dict[str, Any]) -> str:
    """The table of a run, as ``eval exec`` and ``eval report`` print it."""
    return f"Execution scores of {summary.get('name')} (%)\n\n" + markdown(*table(summary)) + "\n"


def item_lines(run: ExecRun) -> list[str]:
    """One line per item that did not succeed (at most MAX_LISTED)."""
    lines = [f"  {r.item.task} {r.item.id}: {r.status}" + (f": {r.reason}" if r.reason else "")
             for r in run.results if r.status != "success"]
    if len(lines) > MAX_LISTED:
        lines = lines[:MAX_LISTED] + [f"  ... and {len(lines) - MAX_LISTED} more (all in {ITEMS_CSV})"]
    return lines


def sources_line(summary: dict[str, Any]) -> str:
    def counted(counts: dict[str, int]) -> str:
        return ", ".join(f"{n} {source}" for source, n in counts.items()) or "none"

    sources = summary.get("sources") or {}
    return (f"answers by X-Stb-Source: labels {counted(sources.get('labels') or {})}; "
            f"predictions {counted(sources.get('predictions') or {})}")


def labels_text(run: ExecRun) -> str:
    """A labels-only run (recording the labels' answers): per task, how many answered."""
    counts: dict[str, dict[str, int]] = {}
    for result in run.results:
        row = counts.setdefault(result.item.task, {"answered": 0, "crashed": 0, "refused": 0, "missed": 0})
        for label in result.labels:
            row[label.status] += 1
    head = ["Task", "Labels", "Answered", "Crashed", "Refused", "Missed"]
    rows = [[task, str(sum(c.values())), str(c["answered"]), str(c["crashed"]), str(c["refused"]), str(c["missed"])]
            for task, c in counts.items()]
    return "Labels run through the proxy\n\n" + markdown(head, rows) + "\n"


# -- read back by a report -----------------------------------------------------------------------

def read_items(folder: Path) -> list[dict[str, Any]]:
    path = folder / ITEMS_JSONL
    if not path.is_file():
        raise InputError(f"{folder}: no {ITEMS_JSONL} (an eval exec run folder holds one)")
    return read_json_lines(path)


def report_run(folder: Path, summary: dict[str, Any], run: dict[str, Any]) -> None:
    """An exec run in a report document (report_data.read_run): its rates as the summary's
    metrics, its tasks as groups, and its items under ``exec`` (exec_html.py shows them)."""
    overall = summary.get("overall") or {}
    run["name"] = summary.get("name") or folder.name
    scored, items = overall.get("scored", 0), overall.get("items", 0)
    crashed = sum(overall.get(status, 0) for status in NO_ANSWER)
    run["metrics"] = [
        {"label": "success", "value": overall.get("success_rate"), "std": None,
         "detail": f"{overall.get('success', 0)} of {scored} scored items (of {items}) with F1 = 1"},
        {"label": "crash", "value": overall.get("crash_rate"), "std": None,
         "detail": f"{crashed} predictions without an answer to compare"},
        {"label": "F1", "value": overall.get("f1"), "std": None,
         "detail": f"precision {_pct(overall.get('precision'))}, recall {_pct(overall.get('recall'))}"},
    ]
    run["groups"] = [{"name": t["task"], "metrics": {"success": [t.get("success_rate"), None]}}
                     for t in summary.get("tasks") or []]
    sources = summary.get("sources") or {}
    run["sources"] = dict(Counter(sources.get("labels") or {}) + Counter(sources.get("predictions") or {}))
    run["exec"] = {"tasks": summary.get("tasks") or [], "overall": overall, "statuses": list(STATUSES),
                   "items": read_items(folder)}
