"""Reports: tables in the paper's layout, run summaries, per-query details, a bar chart.

Tables put groups as columns in the paper's order with the average last, each cell
``mean±std`` with one decimal. A run folder holds ``summary.json`` (everything a later
``report`` needs), ``table.md`` / ``table.csv`` (the table), ``scores.csv`` (one row per
group with the label counts) and ``details/`` (per-query files whose content matches
the original evaluator's outputs, plus the reasons). A pass-rate run of repeated trials
adds pass@k and pass^k: a ``trials`` object in the summary, a table, ``details/trials.csv``
and a ``pass_k.png`` line chart.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Callable, Iterable

from .errors import InputError
from .exec_report import text as exec_text
from .model import main_path
from .passrate import AVERAGE, PassRate
from .report_queries import QUERIES_FILE, query_record, write_queries
from .solvable import Solvable
from .tables import SUMMARY, markdown, to_csv
from .trials import OVERALL, PASSED, Trials, left_out_why
from .winrate import WinRate

PAPER_GROUPS = ("G1_instruction", "G1_category", "G1_tool", "G2_instruction", "G2_category", "G3_instruction")
COUNT_COLUMNS = ("Solved", "Unsure", "Unsolved", "unscored", "missing", "no_judge")


def cell(mean: float | None, std: float | None = None) -> str:
    if mean is None:
        return "n/a"
    return f"{mean:.1f}" if std is None else f"{mean:.1f}±{std:.1f}"


def ordered_groups(names: Iterable[str]) -> list[str]:
    """The paper's group order first, any other groups after in the order given."""
    names = list(dict.fromkeys(names))
    return [g for g in PAPER_GROUPS if g in names] + [g for g in names if g not in PAPER_GROUPS]


# --- summaries ------------------------------------------------------------------------

def pass_rate_summary(result: PassRate | Trials, judge: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": "pass_rate",
        "method": result.method,
        "rounds": result.rounds,
        "missing": result.missing,
        "groups": [g.as_dict() for g in result.groups],
        "average": result.average.as_dict() if result.average else None,
        "judge": judge,
        "problems": result.problems,
    }


def trials_summary(result: Trials, judge: dict[str, Any]) -> dict[str, Any]:
    """A pass-rate summary whose SoPR is over trials, with a ``trials`` object: per group
    and overall, pass@k and pass^k (fractions, by k) and each trial's SoPR (%)."""
    summary = pass_rate_summary(result, judge)
    per_group: dict[str, Any] = {}
    for name in [*(g.group for g in result.groups), OVERALL]:
        scores = result.scores.get(name)
        per_trial = [_trial_group(run, name) for run in result.runs]
        entry = scores.to_dict() if scores else {"trials": len(result.runs), "queries": 0, "pass@k": {}, "pass^k": {}}
        entry["sopr"] = [g.mean if g else None for g in per_trial]
        entry["sopr_std"] = [g.std if g else None for g in per_trial]  # over each trial's rounds
        entry["left_out"] = result.left_out[name]
        per_group[name] = entry
    summary["trials"] = {"count": len(result.runs), "sources": result.sources,
                         "overall": per_group.pop(OVERALL), "groups": per_group}
    return summary


def _trial_group(run: PassRate, name: str) -> Any:
    """A trial's score for a group; for OVERALL, its SoPR average over groups."""
    if name == OVERALL:
        return run.average
    return next((g for g in run.groups if g.group == name), None)


def win_rate_summary(result: WinRate, judge: dict[str, Any]) -> dict[str, Any]:
    average = result.average.as_dict() if result.average else None
    if average is not None:
        average["win_rate"] = result.average_rate  # mean of group rates, as the paper averages
    return {
        "kind": "win_rate",
        "candidate": result.candidate,
        "reference": result.reference,
        "rounds": result.rounds,
        "missing": result.missing,
        "seed": result.seed,
        "groups": [g.as_dict() for g in result.groups],
        "average": average,
        "judge": judge,
        "problems": result.problems,
    }


def solvable_summary(result: Solvable, judge: dict[str, Any]) -> dict[str, Any]:
    groups = []
    for group in ordered_groups(result.votes):
        rows = result.votes[group]
        groups.append({"group": group, "tasks": len(rows), "kept": sum(v.kept for v in rows)})
    return {"kind": "solvable", "models": result.models, "groups": groups, "judge": judge, "problems": result.problems}


def load_summary(folder: str | Path) -> dict[str, Any]:
    path = Path(folder)
    path = path / SUMMARY if path.is_dir() else path
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"{path}: no run summary here ({exc.strerror})") from exc
    except ValueError as exc:
        raise InputError(f"{path}: run summary is not valid JSON ({exc})") from exc
    if not isinstance(data, dict) or data.get("kind") not in ("pass_rate", "win_rate", "solvable", "exec"):
        raise InputError(f"{path}: not an stbeval run summary")
    return data


# --- tables ---------------------------------------------------------------------------

def _by_group(summaries: list[dict[str, Any]], first: str, name: Callable[[dict[str, Any]], str],
              value: Callable[[dict[str, Any]], str]) -> tuple[list[str], list[list[str]]]:
    """One row per run, groups as columns in the paper's order, the average last."""
    groups = ordered_groups(g["group"] for s in summaries for g in s["groups"])
    rows = []
    for s in summaries:
        by_group = {g["group"]: g for g in s["groups"]}
        rows.append([name(s), *(value(by_group[g]) if g in by_group else "" for g in groups),
                     value(s.get("average") or {})])
    return [first, *groups, AVERAGE], rows


def pass_rate_table(summaries: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    return _by_group(summaries, "Method", lambda s: s["method"], lambda g: cell(g.get("mean"), g.get("std")))


def _sopr_title(passes: list[dict[str, Any]]) -> str:
    with_trials = sum("trials" in s for s in passes)
    if not with_trials:
        return "SoPR (%, mean±std over rounds)"
    if with_trials == len(passes):
        return "SoPR (%, mean±std over trials; a trial's SoPR is its mean over rounds)"
    return "SoPR (%, mean±std over rounds; for runs of repeated trials, over trials)"


def per_trial_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per trial: its SoPR per group, mean±std over its rounds."""
    trials = summary["trials"]
    groups = ordered_groups(trials["groups"])
    rows = []
    for i in range(trials["count"]):
        rows.append([f"trial {i + 1}", *(cell(trials["groups"][g]["sopr"][i], trials["groups"][g]["sopr_std"][i])
                                         for g in groups),
                     cell(trials["overall"]["sopr"][i], trials["overall"]["sopr_std"][i])])
    return ["Trial", *groups, AVERAGE], rows


def pass_k_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Rows pass@1..pass@N then pass^1..pass^N, in %, and the queries counted."""
    trials = summary["trials"]
    entries = [trials["groups"][g] for g in ordered_groups(trials["groups"])] + [trials["overall"]]
    ks = [str(k) for k in range(1, trials["count"] + 1)]
    rows = [[f"{name}{k}", *(cell(None if e[key].get(k) is None else 100 * e[key][k]) for e in entries)]
            for name, key in (("pass@", "pass@k"), ("pass^", "pass^k")) for k in ks]
    rows.append(["queries", *(str(e["queries"]) for e in entries)])
    return ["Measure", *ordered_groups(trials["groups"]), OVERALL], rows


def trials_text(summary: dict[str, Any], named: bool) -> list[str]:
    """The sections of a run of repeated trials: SoPR per trial, pass@k and pass^k."""
    trials = summary["trials"]
    who = f"{summary['method']}: " if named else ""
    return [f"{who}SoPR per trial (%, mean±std over rounds; trial i is the i-th source of --answers)\n\n"
            + markdown(*per_trial_table(summary)),
            f"{who}pass@k and pass^k over {trials['count']} trials (%, mean over queries; a trial passes when "
            f"the majority of its rounds say Solved; {OVERALL}: every counted query)\n\n"
            + markdown(*pass_k_table(summary))]


def counts_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Label counts per group over all rounds (unscored and missing in their own columns)."""
    header = ["Group", "Queries", *COUNT_COLUMNS]
    entries = {g["group"]: g for g in summary["groups"]}
    rows = [[name, str(entries[name]["queries"]), *(str(entries[name]["counts"].get(k, 0)) for k in COUNT_COLUMNS)]
            for name in ordered_groups(entries)]
    if summary.get("average") and len(entries) > 1:
        total = summary["average"]
        rows.append(["Total", str(total["queries"]), *(str(total["counts"].get(k, 0)) for k in COUNT_COLUMNS)])
    return header, rows


def win_rate_table(summaries: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    return _by_group(summaries, "Candidate vs reference", lambda s: f"{s['candidate']} vs {s['reference']}",
                     lambda g: cell(g.get("win_rate")))


def wins_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["Group", "Wins", "Ties", "Losses", "Queries", "Shortcut rounds"]
    entries = {g["group"]: g for g in summary["groups"]}
    rows = [[g, *(str(entries[g][k]) for k in ("wins", "ties", "losses", "queries", "shortcut_rounds"))]
            for g in ordered_groups(entries)]
    avg = summary.get("average")
    if avg and len(entries) > 1:
        rows.append(["Total", *(str(avg[k]) for k in ("wins", "ties", "losses", "queries", "shortcut_rounds"))])
    return header, rows


def solvable_table(summary: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    header = ["Group", "Tasks", "Solvable (kept)"]
    rows = [[g["group"], str(g["tasks"]), str(g["kept"])] for g in summary["groups"]]
    rows.append(["Total", str(sum(g["tasks"] for g in summary["groups"])),
                 str(sum(g["kept"] for g in summary["groups"]))])
    return header, rows


def render(summaries: list[dict[str, Any]]) -> str:
    """The Markdown text for any mix of run summaries."""
    parts = []
    passes = [s for s in summaries if s["kind"] == "pass_rate"]
    wins = [s for s in summaries if s["kind"] == "win_rate"]
    if passes:
        parts.append(f"{_sopr_title(passes)}\n\n" + markdown(*pass_rate_table(passes)))
        for s in passes:
            if "trials" in s:
                parts.extend(trials_text(s, named=len(passes) > 1))
        if len(passes) == 1:
            over = " of all trials" if "trials" in passes[0] else ""
            parts.append(f"Judgments (over all rounds{over})\n\n" + markdown(*counts_table(passes[0])))
    if wins:
        parts.append("SoWR (%)\n\n" + markdown(*win_rate_table(wins)))
        for s in wins:
            parts.append(f"{s['candidate']} vs {s['reference']}\n\n" + markdown(*wins_table(s)))
    for s in summaries:
        if s["kind"] == "solvable":
            parts.append(f"Solvable tasks (majority of {', '.join(s['models'])})\n\n" + markdown(*solvable_table(s)))
        if s["kind"] == "exec":
            parts.append(exec_text(s).rstrip("\n"))
    return "\n\n".join(parts) + "\n"


# --- files ----------------------------------------------------------------------------

def write_run(folder: str | Path, summary: dict[str, Any]) -> str:
    """Write summary.json, table.md, table.csv and scores.csv; return the Markdown."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / SUMMARY).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    text = render([summary])
    (folder / "table.md").write_text(text, encoding="utf-8")
    kind = summary["kind"]
    if kind == "pass_rate":
        header, rows = pass_rate_table([summary])
        # With repeated trials a group's runs are its trials' SoPR, not rounds.
        runs = (f"trial_{i + 1}" for i in range(summary["trials"]["count"])) if "trials" in summary else \
            (f"run_{i}" for i in range(summary["rounds"]))
        long_header = ["method", "group", "mean", "std", "queries", *runs, *COUNT_COLUMNS]
        entries = [*summary["groups"], *([summary["average"]] if summary["average"] else [])]
        long_rows = [[summary["method"], g["group"], _num(g["mean"]), _num(g["std"]), g["queries"],
                      *(_num(None if v is None else 100 * v) for v in g["runs"]),
                      *(g["counts"].get(k, 0) for k in COUNT_COLUMNS)] for g in entries]
    elif kind == "win_rate":
        header, rows = win_rate_table([summary])
        long_header = ["candidate", "reference", "group", "win_rate", "wins", "ties", "losses", "queries",
                       "shortcut_rounds"]
        entries = [*summary["groups"], *([summary["average"]] if summary["average"] else [])]
        long_rows = [[summary["candidate"], summary["reference"], g["group"], _num(g["win_rate"]),
                      *(g[k] for k in ("wins", "ties", "losses", "queries", "shortcut_rounds"))] for g in entries]
    else:
        header, rows = solvable_table(summary)
        long_header, long_rows = header, rows
    (folder / "table.csv").write_text(to_csv(header, rows), encoding="utf-8")
    (folder / "scores.csv").write_text(to_csv(long_header, long_rows), encoding="utf-8")
    return text


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def write_pass_rate_details(folder: str | Path, result: PassRate, *, into: str = "details") -> list[Path]:
    """Per group ``<group>_<method>.json`` and ``.csv`` in the original evaluator's shape."""
    target = Path(folder) / into
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for group, outcomes in result.outcomes.items():
        entries: dict[str, Any] = {}
        rows = []
        for o in outcomes:
            steps, final = _steps_text(o.answer)
            statuses = {str(r): _status_text(o.status(r)) for r in range(result.rounds)}
            entries[o.qid] = {
                "query": o.answer.query if o.answer else "",
                "tool_names": o.answer.tool_names() if o.answer else [],
                "answer_steps": steps,
                "final_step": final,
                "is_solved": statuses,
                "reasons": {str(r): o.reasons[r] for r in range(result.rounds)},
                "judged": o.judged,
            }
            rows.append([entries[o.qid]["query"], str(entries[o.qid]["tool_names"]), steps, final,
                         result.method, o.qid, str(statuses)])
        as_json, as_csv = target / f"{group}_{result.method}.json", target / f"{group}_{result.method}.csv"
        as_json.write_text(json.dumps(entries, indent=4, ensure_ascii=False) + "\n", encoding="utf-8")
        out = io.StringIO()
        writer = csv.writer(out, delimiter="\t", lineterminator="\n")
        writer.writerow(["query", "available_tools", "model_intermediate_steps", "model_final_step", "model",
                         "query_id", "is_solved"])
        writer.writerows(rows)
        as_csv.write_text(out.getvalue(), encoding="utf-8")
        written += [as_json, as_csv]
    # Every query with its trajectory, for `eval report --html` (report_queries.py).
    records = (query_record(group, o, result.rounds) for group, outcomes in result.outcomes.items() for o in outcomes)
    written.append(write_queries(target / QUERIES_FILE, records))
    return written


def write_trials_details(folder: str | Path, result: Trials) -> list[Path]:
    """``details/trial_<i>/`` per trial as for one run, and ``details/trials.csv``: each
    query's verdict per trial (passed, failed, unscored, missing) and whether pass@k
    counts it."""
    written = [path for i, run in enumerate(result.runs, 1)
               for path in write_pass_rate_details(folder, run, into=f"details/trial_{i}")]
    n = len(result.runs)
    rows = []
    for group, verdicts in result.verdicts.items():
        for qid, row in verdicts.items():
            why = left_out_why(row, result.missing)
            rows.append([group, qid, *row, row.count(PASSED), f"left out: {why}" if why else "counted"])
    path = Path(folder) / "details" / "trials.csv"
    path.write_text(to_csv(["group", "query_id", *(f"trial_{i}" for i in range(1, n + 1)), "passed", "pass_k"],
                           rows), encoding="utf-8")
    return [*written, path]


def write_win_rate_details(folder: str | Path, result: WinRate) -> list[Path]:
    """Per group ``<group>_<candidate>_<reference>.json``: round votes per query, as the
    original's preference output, with how each round was decided."""
    target = Path(folder) / "details"
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for group, duels in result.duels.items():
        entries: dict[str, Any] = {}
        for d in duels:
            won, lost = d.votes
            entry: dict[str, Any] = {result.candidate: won, result.reference: lost}
            if result.candidate == result.reference:  # same name both sides: keep both counts
                entry = {"candidate": won, "reference": lost}
            for r in range(result.rounds):
                entry[f"round_{r}"] = d.how[r]
            entry["result"] = d.result
            entry["rounds"] = [{"winner": d.rounds[r], "how": d.how[r], "reason": d.reasons[r]}
                               for r in range(result.rounds)]
            entries[d.qid] = entry
        path = target / f"{group}_{result.candidate}_{result.reference}.json"
        path.write_text(json.dumps(entries, indent=4, ensure_ascii=False) + "\n", encoding="utf-8")
        written.append(path)
    return written


def write_solvable_details(folder: str | Path, result: Solvable) -> Path:
    path = Path(folder) / "details" / "solvable_votes.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {group: {v.task.qid: {"kept": v.kept, "labels": v.labels, "reasons": v.reasons} for v in rows}
            for group, rows in result.votes.items()}
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def _status_text(status: str) -> str:
    # The original writes its enum's text; unscored and missing are stbeval's own states.
    return f"AnswerStatus.{status}" if status in ("Solved", "Unsure", "Unsolved") else status


def _steps_text(answer: Any) -> tuple[str, str]:
    """The 'Step n: ...' and 'Final step: ...' text of the original's detail files:
    every tool call along the answer's path, and the last one again as the final step."""
    if answer is None:
        return "", ""
    tools = [n.get("message") for n in main_path(answer.answer_details) if n.get("role") == "tool"]
    steps = "\n".join(f"Step {i + 1}: {message}" for i, message in enumerate(tools))
    return steps, (f"Final step: {tools[-1]}" if tools else "")


# --- chart ----------------------------------------------------------------------------

def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


def _finish(plt, fig, ax, path: str | Path, title: str) -> Path:
    """A percent chart's common end: its scale, title and legend, written as PNG to ``path``."""
    ax.set_ylim(0, 100)
    ax.set_title(title)
    ax.legend(fontsize="small")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def bar_chart(summaries: list[dict[str, Any]], path: str | Path, *, title: str = "SoPR by group") -> Path:
    """Grouped bars of SoPR per group (and the average) with std error bars, one colour per method."""
    plt = _pyplot()
    passes = [s for s in summaries if s["kind"] == "pass_rate"]
    if not passes:
        raise InputError("no pass-rate runs to chart")
    groups = [*ordered_groups(g["group"] for s in passes for g in s["groups"]), AVERAGE]
    width = 0.8 / len(passes)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(groups)), 4.0))
    for i, s in enumerate(passes):
        by_group = {g["group"]: g for g in s["groups"]}
        if s.get("average"):
            by_group[AVERAGE] = s["average"]
        means = [by_group[g]["mean"] if g in by_group and by_group[g]["mean"] is not None else 0.0 for g in groups]
        stds = [by_group[g]["std"] if g in by_group and by_group[g]["std"] is not None else 0.0 for g in groups]
        xs = [j + (i - (len(passes) - 1) / 2) * width for j in range(len(groups))]
        ax.bar(xs, means, width, yerr=stds, capsize=3, label=s["method"])
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, rotation=20, ha="right")
    ax.set_ylabel("SoPR (%)")
    return _finish(plt, fig, ax, path, title)


def pass_k_chart(summary: dict[str, Any], path: str | Path, *, title: str = "pass@k and pass^k") -> Path:
    """pass@k and pass^k (%) against k over every counted query, from a summary of
    trials, with the run's SoPR as a dashed line."""
    plt = _pyplot()
    overall = (summary.get("trials") or {}).get("overall")
    if not overall or not overall["pass@k"]:
        raise InputError("no pass@k to chart (a run of repeated trials with counted queries)")
    ks = sorted(int(k) for k in overall["pass@k"])
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for key, marker in (("pass@k", "o"), ("pass^k", "s")):
        ax.plot(ks, [100 * overall[key][str(k)] for k in ks], marker=marker, label=key)
    sopr = (summary.get("average") or {}).get("mean")
    if sopr is not None:  # for scale: the run's SoPR, which counts Unsure as half
        ax.axhline(sopr, color="grey", linestyle="--", linewidth=1, label="SoPR (mean over trials)")
    ax.set_xticks(ks)
    ax.set_xlabel("k (trials drawn)")
    ax.set_ylabel("%")
    return _finish(plt, fig, ax, path, title)
