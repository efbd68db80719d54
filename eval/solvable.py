"""Solvable-task filtering: N judge models vote, the majority keeps a task.

Each task (a query with the tools it offers) is judged once by each model; a task is
kept when more than half of the models say Solvable (Unsure, Unsolvable and unscored
votes all count against it). The kept ids are written as ``{qid: 0}`` files per group,
the format ``--ids`` reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .answers import read_json
from .errors import InputError
from .judge import Judge
from .model import function_schemas
from .runner import DEFAULT_CONCURRENCY, Progress, run_rounds


@dataclass(frozen=True, slots=True)
class Task:
    group: str
    qid: str
    query: str
    tools: list[dict[str, Any]]

    def text(self) -> str:
        return json.dumps({"query": self.query, "available_tools": self.tools}, ensure_ascii=False)


@dataclass
class Vote:
    task: Task
    labels: dict[str, str | None]  # model -> label (None = unscored)
    reasons: dict[str, str]

    @property
    def solvable_votes(self) -> int:
        return sum(1 for v in self.labels.values() if v == "Solvable")

    @property
    def kept(self) -> bool:
        return self.solvable_votes * 2 > len(self.labels)


@dataclass
class Solvable:
    models: list[str]
    votes: dict[str, list[Vote]]
    problems: list[str] = field(default_factory=list)

    def kept_ids(self) -> dict[str, dict[str, int]]:
        return {g: {v.task.qid: 0 for v in rows if v.kept} for g, rows in self.votes.items()}


def load_tasks(path: str | Path) -> tuple[list[Task], list[str]]:
    """Tasks from query files (``G1_instruction.json``: a list of queries with ``api_list``),
    a folder of them, or converted answers (their query and ``available_tools``)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such query file or folder")
    files = sorted(p for p in path.iterdir() if p.suffix == ".json") if path.is_dir() else [path]
    tasks: list[Task] = []
    problems: list[str] = []
    for file in files:
        group = file.stem  # G1_instruction.json holds the G1_instruction group
        data = read_json(file)
        if isinstance(data, list):
            for i, entry in enumerate(data):
                if not isinstance(entry, dict) or "query" not in entry or "query_id" not in entry:
                    problems.append(f"{file}: entry #{i} lacks query or query_id; skipped")
                    continue
                tasks.append(Task(group, str(entry["query_id"]), str(entry["query"]), _tools(entry.get("api_list"))))
        elif isinstance(data, dict):
            for qid, entry in data.items():
                if not isinstance(entry, dict) or "query" not in entry:
                    problems.append(f"query {qid}: no query in {file}; skipped")
                    continue
                tools = entry.get("available_tools")
                tasks.append(Task(group, str(qid), str(entry["query"]),
                                  function_schemas(tools) if isinstance(tools, list) else []))
        else:
            problems.append(f"{file}: neither a query list nor converted answers; skipped")
    return tasks, problems


def _tools(api_list: Any) -> list[dict[str, Any]]:
    """What the judge needs to know of each API: its name, purpose and parameters."""
    out = []
    for api in api_list or []:
        if not isinstance(api, dict):
            continue
        out.append({
            "tool": api.get("tool_name"),
            "api": api.get("api_name"),
            "description": api.get("api_description"),
            "required_parameters": [p.get("name") for p in api.get("required_parameters") or [] if isinstance(p, dict)],
            "optional_parameters": [p.get("name") for p in api.get("optional_parameters") or [] if isinstance(p, dict)],
        })
    return out


def solvable(tasks: list[Task], judge: Judge, models: list[str], *, warn: Callable[[str], None] = lambda _m: None,
             concurrency: int = DEFAULT_CONCURRENCY, progress: Progress | None = None) -> Solvable:
    if not models:
        raise ValueError("at least one judge model is needed")
    models = list(dict.fromkeys(models))
    progress = progress or Progress()
    progress.start(len(tasks) * len(models))
    jobs = [(task, model) for task in tasks for model in models]

    def work(job: tuple[Task, str], _r: int) -> tuple[str | None, str]:
        task, model = job
        verdict = judge.check_task_solvable(task.text(), qid=task.qid, model=model)
        return (verdict.label if verdict.status == "ok" else None), verdict.reason

    results = run_rounds(jobs, 1, work, concurrency=concurrency, progress=progress)[0] if jobs else []
    by_task: dict[tuple[str, str], Vote] = {}
    problems: list[str] = []
    for (task, model), (label, reason) in zip(jobs, results):
        vote = by_task.setdefault((task.group, task.qid), Vote(task, {}, {}))
        vote.labels[model] = label
        vote.reasons[model] = reason
        if label is None:
            message = f"query {task.qid} ({task.group}), model {model}: unscored: {reason}"
            problems.append(message)
            warn(message)
    votes: dict[str, list[Vote]] = {}
    for vote in by_task.values():
        votes.setdefault(vote.task.group, []).append(vote)
    return Solvable(models, votes, problems)


def write_ids(result: Solvable, folder: str | Path) -> list[Path]:
    """One ``<group>.json`` of kept ids per group; returns the files written."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for group, ids in result.kept_ids().items():
        target = folder / f"{group}.json"
        target.write_text(json.dumps(ids, indent=2) + "\n", encoding="utf-8")
        written.append(target)
    return written
