"""Answers in: files and folders of converted answers, raw ToolBench answers and cassettes.

Every source becomes an :class:`~stbeval.model.Answer` holding the same tree the judge
sees (``answer_details``: nodes ``{role, message, next}``). A query whose file cannot
be used becomes a :class:`~stbeval.model.Problem` naming the query and the reason, so
one bad file never stops a run. Loading never asks a judge and never imports the proxy
side. This module finds the files and reads converted answers; raw answers are
converted by toolbench.py and cassettes read by cassettes.py.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Iterable, Iterator

from .cassettes import CASSETTE_SUFFIXES, load_cassette, load_session
from .errors import InputError
from .model import Answer, AnswerSet, Problem, function_schemas, main_path, tree_problem
from .queries import QueryIndex
from .toolbench import convert_raw
from .trajectories import UNNAMED_METHOD, Named

# Group names as StableToolBench spells them (G1_instruction, G2_category, ...).
GROUP_RE = re.compile(r"^G\d+_\w+$")


# --- ids ----------------------------------------------------------------------------

def load_ids(path: str | Path) -> dict[str, list[str]]:
    """Query ids by group from an ids file (``{qid: 0}``) or a folder of them.

    The group is the file name without ``.json`` (``G1_instruction.json``). A list of ids
    or a query file (a list of objects with ``query_id``) is accepted too.
    """
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".json")
        if not files:
            raise InputError(f"{path}: no .json id files in this folder")
    elif path.is_file():
        files = [path]
    else:
        raise InputError(f"{path}: no such ids file or folder")
    groups: dict[str, list[str]] = {}
    for file in files:
        data = _read_json(file)
        if isinstance(data, dict):
            ids = [str(k) for k in data]
        elif isinstance(data, list):
            ids = [str(x["query_id"]) if isinstance(x, dict) and "query_id" in x else str(x) for x in data]
        else:
            raise InputError(f"{file}: expected an object {{query_id: 0}} or a list of ids")
        groups[file.stem] = list(dict.fromkeys(ids))  # keep order, drop repeats
    return groups


# --- answers ------------------------------------------------------------------------

def load_answers(path: str | Path, *, seed: int = 0, queries: QueryIndex | None = None) -> AnswerSet:
    """Load converted answers, raw ToolBench answers or cassettes from a file or folder.

    Layouts: a converted group file ``<group>.json``; a folder of them; a folder of raw
    answers ``<qid>_<method>.json``; a folder of cassettes ``<qid>.yaml|json``; a folder
    of session folders ``<qid>/`` holding cassettes; a cassette holding many
    conversations; and folders of any of these named by group (``G1_instruction/``).
    ``seed`` makes the raw answers' path choice repeatable; ``queries`` names recorded
    conversations by the query their task states (trajectories.py).
    """
    path = Path(path)
    result = AnswerSet()
    reader = _Reader(result, seed, queries)
    if path.is_file():
        reader.file(path, _group_of(path.parent))
    elif path.is_dir():
        reader.folder(path, _group_of(path), top=True)
    else:
        raise InputError(f"{path}: no such answers file or folder")
    return result


def add_named(out: AnswerSet, group: str | None, named: list[Named], notes: list[str]) -> None:
    """Add answers read from traffic; a query's own group wins over the folder's."""
    for own_group, item in named:
        out.add(own_group or group, item)
    out.problems.extend(notes)


def name_method(answers: AnswerSet, method: str, *, replace_recorded: bool = False) -> None:
    """Give the answers read from traffic the run's ``method``: those whose recording
    named none, or all of them with ``replace_recorded``. Answer files keep theirs.

    The judge is shown each answer object with its method (parse_answer_status), as in
    the original, whose answer files carry the method that wrote them (``CoT@1``).
    """
    for items in answers.by_group.values():
        for qid, item in items.items():
            if isinstance(item, Answer) and item.source == "cassette" and (
                    replace_recorded or item.method == UNNAMED_METHOD):
                items[qid] = dataclasses.replace(item, method=method)


def _group_of(folder: Path) -> str | None:
    return folder.name if GROUP_RE.match(folder.name) else None


class _Reader:
    def __init__(self, out: AnswerSet, seed: int, queries: QueryIndex | None) -> None:
        self.out, self.seed, self.queries = out, seed, queries

    def folder(self, folder: Path, group: str | None, *, top: bool) -> None:
        for entry in sorted(folder.iterdir(), key=lambda p: p.name):
            if entry.name.startswith("."):
                continue
            if entry.is_dir():
                if not GROUP_RE.match(entry.name) and _is_session(entry):
                    add_named(self.out, group, *load_session(entry, entry.name, self.queries))
                elif top:
                    self.folder(entry, entry.name, top=False)
                else:
                    self.out.problems.append(f"{entry}: nested folder ignored (expected answer files)")
            elif entry.suffix in (".json", *CASSETTE_SUFFIXES):
                self.file(entry, group)

    def file(self, path: Path, group: str | None) -> None:
        out = self.out
        if path.suffix in CASSETTE_SUFFIXES:
            add_named(out, group, *load_cassette(path, path.stem, self.queries))
            return
        try:
            data = _read_json(path)
        except InputError as exc:
            qid = _raw_qid(path)
            if qid is not None:
                out.add(group, Problem(qid, str(exc), str(path)))
            else:
                out.problems.append(str(exc))
            return
        if isinstance(data, dict) and "interactions" in data:
            add_named(out, group, *load_cassette(path, path.stem, self.queries))
        elif isinstance(data, dict) and "answer_generation" in data:
            qid = _raw_qid(path) or path.stem
            method = path.stem.partition("_")[2] or "unknown"
            out.add(group, convert_raw(data, qid=qid, method=method, seed=self.seed, where=str(path)))
        elif isinstance(data, dict):
            file_group = path.stem if GROUP_RE.match(path.stem) or group is None else group
            for item in iter_converted(data, str(path)):
                out.add(file_group, item)
        else:
            out.problems.append(f"{path}: not an answer file (expected a JSON object)")


def _is_session(folder: Path) -> bool:
    files = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")]
    return bool(files) and all(p.suffix in (".json", *CASSETTE_SUFFIXES) for p in files) and all(
        p.suffix in CASSETTE_SUFFIXES or _peek_is_cassette(p) for p in files
    )


def _peek_is_cassette(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(4096)
    return b'"interactions"' in head


def _raw_qid(path: Path) -> str | None:
    head = path.stem.partition("_")[0]
    return head if head.isdigit() else None


def iter_converted(data: dict[str, Any], where: str) -> Iterator[Answer | Problem]:
    """Each query of a converted answers object, or the reason it cannot be used."""
    for qid, entry in data.items():
        yield converted_answer(str(qid), entry, where)


def converted_answer(qid: str, entry: Any, where: str = "") -> Answer | Problem:
    if not isinstance(entry, dict):
        return Problem(qid, "entry is not an object", where)
    missing = [k for k in ("query", "answer") if k not in entry]
    if missing:
        return Problem(qid, f"missing field(s) {', '.join(missing)}", where)
    answer = entry["answer"]
    if not isinstance(answer, dict):
        return Problem(qid, "answer is not an object", where)
    missing = [k for k in ("final_answer", "answer_details") if k not in answer]
    if missing:
        return Problem(qid, f"answer is missing field(s) {', '.join(missing)}", where)
    broken = tree_problem(answer["answer_details"])
    if broken:
        return Problem(qid, f"broken answer tree: {broken}", where)
    tools = entry.get("available_tools") or []
    if not isinstance(tools, list):
        return Problem(qid, "available_tools is not a list", where)
    tools = function_schemas(tools)
    final = answer["final_answer"]
    return Answer(
        query_id=qid,
        query=str(entry["query"]),
        available_tools=tools,
        method=str(answer.get("method", "")),
        total_steps=answer.get("total_steps", len(main_path(answer["answer_details"]))),
        final_answer=final if isinstance(final, str) else json.dumps(final),
        answer_details=answer["answer_details"],
        source="converted",
        shown=answer,
    )


def to_converted(answers: Iterable[Answer]) -> dict[str, Any]:
    """The converted-answers object (the format StableToolBench's evaluator reads)."""
    return {
        a.query_id: {"query": a.query, "available_tools": a.available_tools, "answer": a.judge_view()}
        for a in answers
    }


def _read_json(path: Path) -> Any:
    try:
        with path.open("r", encoding="utf-8") as fh:
            return json.load(fh)
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read ({exc})") from exc
    except ValueError as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from exc


def read_json(path: str | Path) -> Any:
    """Read a JSON file, raising InputError that names the file."""
    return _read_json(Path(path))
