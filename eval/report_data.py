"""The data of an HTML report (html_report.py renders it): run folders read into one
document, ``stbeval-report/1``: each run's summary, its queries as the run wrote them
(report_queries.py), and per query what changed since a baseline run.
"""

from __future__ import annotations

import csv
from collections import Counter
from pathlib import Path
from typing import Any

from stbcore.volatile import same_answer

from .errors import InputError
from .exec_report import report_run as _exec_run
from .model import FINISH, parse_finish
from .report import load_summary
from .report_queries import QUERIES_FILE
from .tables import read_json_lines

FORMAT = "stbeval-report/1"
_VERDICT_STATUS = {"passed": "solved", "failed": "unsolved", "unscored": "unscored", "missing": "missing"}


def build_document(folders: list[Path], *, baseline: Path | None = None, stability: dict | None = None,
                   title: str | None = None) -> dict[str, Any]:
    """The report of ``folders`` (the first one's queries are listed), with ``baseline``'s
    summary and per-query differences when given."""
    runs = [read_run(folder) for folder in folders]
    if stability is not None:
        runs[0]["stability"] = stability
    base = read_run(baseline) if baseline is not None else None
    if base is not None:
        compare(runs[0], base)
    return {"format": FORMAT, "title": title or f"Evaluation of {runs[0]['name']}", "runs": runs,
            "baseline": base}


def read_run(folder: Path) -> dict[str, Any]:
    summary = load_summary(folder)
    kind = summary.get("kind")
    readers = {"pass_rate": _pass_rate_run, "win_rate": _win_rate_run, "calls": _calls_run, "exec": _exec_run}
    if kind not in readers:
        raise InputError(f"{folder}: a {kind or 'unknown'} run has no report "
                         "(pass-rate, win-rate, calls and exec runs do)")
    run = {"name": "", "folder": str(folder), "kind": kind, "rounds": summary.get("rounds") or 0,
           "status_of": "rounds", "metrics": [], "groups": [], "pass_k": None, "sources": {}, "stability": None,
           "queries": []}
    readers[kind](Path(folder), summary, run)
    totals: Counter[str] = Counter()
    for query in run["queries"]:
        totals.update(query.get("sources") or {})
        _read_finish(query)
    run["sources"] = dict(totals) or run["sources"]  # an exec run counts its commands' sources itself
    return run


def _pass_rate_run(folder: Path, summary: dict[str, Any], run: dict[str, Any]) -> None:
    run["name"] = summary.get("method") or folder.name
    average = summary.get("average") or {}
    trials = summary.get("trials")
    over = f"over {trials['count']} trials" if trials else f"over {run['rounds']} rounds"
    run["metrics"].append(_metric("SoPR", average.get("mean"), average.get("std"), f"mean ± std {over}"))
    run["groups"] = [{"name": g["group"], "metrics": {"SoPR": [g.get("mean"), g.get("std")]}}
                     for g in summary.get("groups", [])]
    if trials:
        overall = trials["overall"]
        ks = sorted(int(k) for k in overall.get("pass^k", {}))
        if ks:
            n = ks[-1]
            run["pass_k"] = {"k": ks, "pass@k": [overall["pass@k"][str(k)] for k in ks],
                             "pass^k": [overall["pass^k"][str(k)] for k in ks]}
            run["metrics"] += [_metric(f"pass^{n}", 100 * overall["pass^k"][str(n)], None,
                                       f"all {n} trials pass ({overall.get('queries', 0)} queries)"),
                               _metric(f"pass@{n}", 100 * overall["pass@k"][str(n)], None,
                                       f"at least one of {n} trials passes")]
        run["queries"] = _trial_queries(folder, trials["count"])
        run["status_of"] = "trials"
    else:
        run["queries"] = _read_queries(folder / "details" / QUERIES_FILE)


def _trial_queries(folder: Path, trials: int) -> list[dict[str, Any]]:
    """A trials run lists trial 1's trajectories, with each trial's verdict as its status
    and the judge's first reason in that trial as its reason."""
    queries = _read_queries(folder / "details" / "trial_1" / QUERIES_FILE)
    reasons: dict[tuple[str, str], list[str]] = {}
    for trial in range(1, trials + 1):
        for other in _read_queries(folder / "details" / f"trial_{trial}" / QUERIES_FILE):
            first = next((reason for reason in other.get("reasons", []) if reason), "")
            reasons.setdefault((other["group"], other["id"]), [""] * trials)[trial - 1] = first
    verdicts = {}
    table = folder / "details" / "trials.csv"
    if table.is_file():
        with table.open(encoding="utf-8", newline="") as handle:
            for row in csv.DictReader(handle):
                columns = sorted((k for k in row if k.startswith("trial_")), key=lambda k: int(k[6:]))
                verdicts[(row["group"], row["query_id"])] = [_VERDICT_STATUS.get(row[k], row[k]) for k in columns]
    for query in queries:
        where = (query["group"], query["id"])
        query["status"] = verdicts.get(where, query["status"])
        query["reasons"] = reasons.get(where, [])
    return queries


def _read_finish(query: dict[str, Any]) -> None:
    """The final answer as its text (``final``: the return type and the text), where it is the
    Finish call's arguments as ToolBench keeps it; each Finish step likewise (``finish``)."""
    if isinstance(query.get("final_answer"), str):
        query["final"] = _finish_view(query["final_answer"])
    for step in query.get("trajectory") or []:
        tool = step.get("tool") if isinstance(step, dict) else None
        if isinstance(tool, dict) and tool.get("name") == FINISH and isinstance(tool.get("arguments"), str):
            step["finish"] = _finish_view(tool["arguments"])


def _finish_view(text: str) -> dict[str, Any]:
    return_type, answer = parse_finish(text)
    return {"return_type": return_type, "text": answer}


def _counted(n: Any, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _win_rate_run(folder: Path, summary: dict[str, Any], run: dict[str, Any]) -> None:
    run["name"] = f"{summary.get('candidate', '?')} vs {summary.get('reference', '?')}"
    average = summary.get("average") or {}
    run["metrics"].append(_metric("SoWR", average.get("win_rate"), None,
                                  f"{_counted(average.get('wins', 0), 'win', 'wins')}, "
                                  f"{_counted(average.get('ties', 0), 'tie', 'ties')}, "
                                  f"{_counted(average.get('losses', 0), 'loss', 'losses')}"))
    run["groups"] = [{"name": g["group"], "metrics": {"SoWR": [g.get("win_rate"), None]}}
                     for g in summary.get("groups", [])]


def _calls_run(folder: Path, summary: dict[str, Any], run: dict[str, Any]) -> None:
    run["name"] = f"{summary.get('run', '?')} calls"
    overall = summary.get("overall") or {}
    run["metrics"].append(_metric("call accuracy", overall.get("call_accuracy"), None,
                                  f"{overall.get('matched', 0)} of {overall.get('reference_calls', 0)} reference "
                                  "calls matched in order"))
    run["groups"] = [{"name": g["group"], "metrics": {"call accuracy": [g.get("call_accuracy"), None]}}
                     for g in summary.get("groups", [])]


def _metric(label: str, value: float | None, std: float | None, detail: str) -> dict[str, Any]:
    return {"label": label, "value": value, "std": std, "detail": detail}


def _read_queries(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise InputError(f"{path.parent.parent}: no {path.relative_to(path.parent.parent)}; evaluate the run again "
                         "with this version to list its queries")
    return read_json_lines(path)


def compare(run: dict[str, Any], base: dict[str, Any]) -> None:
    """Each query of ``run`` with what changed since ``base``: status, steps, and the tool
    steps whose answers differ (by position; timestamps and request ids aside)."""
    theirs = {(q["group"], q["id"]): q for q in base["queries"]}
    for query in run["queries"]:
        other = theirs.get((query["group"], query["id"]))
        if other is None:
            query["baseline"] = None
            continue
        changed_steps = [i for i, step in enumerate(query["trajectory"]) if step["role"] == "tool"
                         and not same_answer(_answer_at(other, i), step.get("answer"))]
        changed = [name for name, differs in (("status", query["status"] != other["status"]),
                                              ("steps", query["steps"] != other["steps"]),
                                              ("answers", bool(changed_steps))) if differs]
        query["baseline"] = {"status": other["status"], "steps": other["steps"], "changed": changed,
                             "changed_steps": changed_steps}
    base["queries"] = []  # its summary is what the page shows of it


def _answer_at(query: dict[str, Any], index: int) -> str | None:
    trajectory = query.get("trajectory") or []
    return trajectory[index].get("answer") if index < len(trajectory) else None
