"""Answers in: one model for converted answers, raw ToolBench answers and cassettes.

Every source becomes an :class:`Answer` holding the same tree the judge sees
(``answer_details``: nodes ``{role, message, next}``). A query whose file cannot be
used becomes a :class:`Problem` naming the query and the reason, so one bad file never
stops a run. Loading never asks a judge and never imports the proxy side.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from .errors import InputError

ROLES = frozenset({"system", "user", "assistant", "tool"})
FINISH = "Finish"
GIVE_UP = "give_up_and_restart"
# Group names as StableToolBench spells them (G1_instruction, G2_category, ...).
GROUP_RE = re.compile(r"^G\d+_\w+$")
# Reference answers store tool messages as the text of a Python dict, sometimes cut short.
_NAME_IN_TEXT = re.compile(r"""['"]name['"]\s*:\s*['"]([^'"]*)['"]""")
CASSETTE_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True, slots=True)
class Answer:
    """One agent's answer to one query, in StableToolBench's converted shape."""

    query_id: str
    query: str
    available_tools: list[dict[str, Any]]
    method: str
    total_steps: int | str
    final_answer: str
    answer_details: list[dict[str, Any]]
    source: str
    #: True when the agent was never offered ``Finish`` (cassettes of plain tool-calling
    #: agents): its last assistant message is then its final answer.
    finish_optional: bool = False

    def judge_view(self) -> dict[str, Any]:
        """The answer object as the original evaluator serializes it for the judge."""
        return {
            "method": self.method,
            "total_steps": self.total_steps,
            "final_answer": self.final_answer,
            "answer_details": self.answer_details,
        }

    def tool_names(self) -> list[str]:
        return [str(t.get("name", "")) for t in self.available_tools if isinstance(t, dict)]


@dataclass(frozen=True, slots=True)
class Problem:
    """A query whose answer could not be loaded, and why."""

    query_id: str
    reason: str
    where: str = ""

    def __str__(self) -> str:
        where = f" ({self.where})" if self.where else ""
        return f"query {self.query_id}: {self.reason}{where}"


@dataclass
class AnswerSet:
    """Answers by group (None when the source names no group), then by query id."""

    by_group: dict[str | None, dict[str, Answer | Problem]] = field(default_factory=dict)
    #: File-level trouble that no single query id can carry (unreadable file, ...).
    problems: list[str] = field(default_factory=list)

    def add(self, group: str | None, item: Answer | Problem) -> None:
        self.by_group.setdefault(group, {})[item.query_id] = item

    def for_group(self, group: str, *, only_group: bool) -> dict[str, Answer | Problem]:
        """The answers that belong to ``group`` of the ids.

        Groups are matched by name; a source without group names (or a single group
        evaluated against a single ids file) applies as a whole. Query ids repeat across
        groups in general, so nothing else is guessed.
        """
        if group in self.by_group:
            return self.by_group[group]
        if None in self.by_group:
            return self.by_group[None]
        if only_group and len(self.by_group) == 1:
            return next(iter(self.by_group.values()))
        return {}

    def count(self) -> int:
        return sum(len(v) for v in self.by_group.values())


# --- the tree ---------------------------------------------------------------------

def tree_problem(details: Any) -> str | None:
    """Why ``details`` is not a usable answer tree, or None when it is."""
    if not isinstance(details, list) or not details:
        return "answer_details is not a non-empty list of nodes"
    stack: list[tuple[Any, str]] = [(n, f"answer_details[{i}]") for i, n in enumerate(details)]
    while stack:
        node, where = stack.pop()
        if not isinstance(node, dict):
            return f"{where} is not an object"
        role = node.get("role")
        if role not in ROLES:
            return f"{where} has unknown role {role!r}"
        if "message" not in node:
            return f"{where} has no message"
        nxt = node.get("next", [])
        if not isinstance(nxt, list):
            return f"{where}.next is not a list"
        if role == "tool" and step_name(node) is None:
            return f"{where} is a tool node without a function name"
        stack.extend((child, f"{where}.next[{i}]") for i, child in enumerate(nxt))
    return None


def main_path(details: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The nodes from the first root along each first child, as the original reads them."""
    path: list[dict[str, Any]] = []
    node = details[0] if details else None
    while node is not None:
        path.append(node)
        nxt = node.get("next") or []
        node = nxt[0] if nxt else None
    return path


def step_name(node: dict[str, Any]) -> str | None:
    """The function a tool node calls (dict messages, or the dict-as-text of reference answers)."""
    message = node.get("message")
    if isinstance(message, dict):
        name = message.get("name")
        return name if isinstance(name, str) else None
    if isinstance(message, str):
        found = _NAME_IN_TEXT.search(message)
        return found.group(1) if found else None
    return None


def last_step(answer: Answer) -> dict[str, Any] | None:
    path = main_path(answer.answer_details)
    return path[-1] if path else None


def parse_finish(final_answer: str) -> tuple[str | None, str]:
    """(return_type, answer text) of a final answer stored as the Finish call's arguments.

    Converted answers keep the raw JSON arguments of ``Finish``; cassette answers of agents
    without Finish keep plain text, which is returned as is.
    """
    text = final_answer.strip()
    if text.startswith("{"):
        try:
            args = json.loads(text)
        except ValueError:
            args = None
        if isinstance(args, dict):
            inner = args.get("final_answer", "")
            return args.get("return_type"), inner if isinstance(inner, str) else json.dumps(inner)
        if GIVE_UP in text:
            return GIVE_UP, ""
    return None, final_answer


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

def load_answers(path: str | Path, *, seed: int = 0) -> AnswerSet:
    """Load converted answers, raw ToolBench answers or cassettes from a file or folder.

    Layouts: a converted group file ``<group>.json``; a folder of them; a folder of raw
    answers ``<qid>_<method>.json``; a folder of cassettes ``<qid>.yaml|json``; a folder
    of session folders ``<qid>/`` holding cassettes; and folders of any of these named by
    group (``G1_instruction/``). ``seed`` makes the raw answers' path choice repeatable.
    """
    path = Path(path)
    result = AnswerSet()
    if path.is_file():
        _load_file(path, _group_of(path.parent), result, seed)
    elif path.is_dir():
        _load_dir(path, _group_of(path), result, seed, top=True)
    else:
        raise InputError(f"{path}: no such answers file or folder")
    return result


def _group_of(folder: Path) -> str | None:
    return folder.name if GROUP_RE.match(folder.name) else None


def _load_dir(folder: Path, group: str | None, out: AnswerSet, seed: int, *, top: bool) -> None:
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.startswith("."):
            continue
        if entry.is_dir():
            if not GROUP_RE.match(entry.name) and _is_session(entry):
                from .cassettes import load_session  # the readers import this module's model

                out.add(group, load_session(entry, entry.name))
            elif top:
                _load_dir(entry, entry.name, out, seed, top=False)
            else:
                out.problems.append(f"{entry}: nested folder ignored (expected answer files)")
        elif entry.suffix in (".json", *CASSETTE_SUFFIXES):
            _load_file(entry, group, out, seed)


def _is_session(folder: Path) -> bool:
    files = [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")]
    return bool(files) and all(p.suffix in (".json", *CASSETTE_SUFFIXES) for p in files) and all(
        p.suffix in CASSETTE_SUFFIXES or _peek_is_cassette(p) for p in files
    )


def _peek_is_cassette(path: Path) -> bool:
    with path.open("rb") as fh:
        head = fh.read(4096)
    return b'"interactions"' in head


def _load_file(path: Path, group: str | None, out: AnswerSet, seed: int) -> None:
    from .cassettes import load_cassette  # imported here: the readers import this module's model
    from .toolbench import convert_raw

    if path.suffix in CASSETTE_SUFFIXES:
        out.add(group, load_cassette(path, path.stem))
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
        out.add(group, load_cassette(path, path.stem))
    elif isinstance(data, dict) and "answer_generation" in data:
        qid = _raw_qid(path) or path.stem
        method = path.stem.partition("_")[2] or "unknown"
        out.add(group, convert_raw(data, qid=qid, method=method, seed=seed, where=str(path)))
    elif isinstance(data, dict):
        file_group = path.stem if GROUP_RE.match(path.stem) or group is None else group
        for item in iter_converted(data, str(path)):
            out.add(file_group, item)
    else:
        out.problems.append(f"{path}: not an answer file (expected a JSON object)")


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
