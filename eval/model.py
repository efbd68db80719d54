"""The data every stbeval module shares: an answer, a problem, an answer set, the answer tree.

An :class:`Answer` holds StableToolBench's converted shape whatever it was read from
(converted answers, raw ToolBench answers, cassettes): the tree the judge sees
(``answer_details``: nodes ``{role, message, next}``) and the final answer. A query
whose file cannot be used is a :class:`Problem` naming the query and the reason. This
module reads nothing from disk and imports no other stbeval module, so the readers
(answers.py, toolbench.py, cassettes.py) and the scorers can all build on it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

ROLES = frozenset({"system", "user", "assistant", "tool"})
FINISH = "Finish"
GIVE_UP = "give_up_and_restart"
#: The original preference judge sees final answers cut to this many characters.
SELECT_FINAL_ANSWER_CHARS = 1000
SELECT_DETAILS_ENTRIES = 3000  # and answer_details to this many entries (a tree has one root)
# Reference answers store tool messages as the text of a Python dict, sometimes cut short.
_NAME_IN_TEXT = re.compile(r"""['"]name['"]\s*:\s*['"]([^'"]*)['"]""")


@dataclass(frozen=True, slots=True)
class Answer:
    """One agent's answer to one query, in StableToolBench's converted shape."""

    query_id: str
    query: str
    #: Function schemas, always bare (``{name, description, parameters}``).
    available_tools: list[dict[str, Any]]
    method: str
    total_steps: int | str
    final_answer: str
    answer_details: list[dict[str, Any]]
    source: str
    #: True when the agent was never offered ``Finish`` (cassettes of plain tool-calling
    #: agents): its last assistant message is then its final answer.
    finish_optional: bool = False
    #: Rebuilt from traffic: per tool call of the answer (Finish aside), in order, how the
    #: proxy answered it (``{"source": "cache", "key": "http/..."}``; empty when unknown).
    calls: tuple[dict[str, Any], ...] = ()
    #: Converted answers: the answer object as the file holds it. The original shows the
    #: judge that object itself, so its keys, their order and any extra field count.
    shown: dict[str, Any] | None = None

    def judge_view(self) -> dict[str, Any]:
        """The answer object as the original evaluator serializes it for the pass-rate judge."""
        if self.shown is not None:
            return self.shown
        return {
            "method": self.method,
            "total_steps": self.total_steps,
            "final_answer": self.final_answer,
            "answer_details": self.answer_details,
        }

    def select_view(self) -> dict[str, Any]:
        """The answer as the preference judge sees it: no method name, the final answer cut short.

        The method name would tell the judge which system wrote the answer; the cut keeps
        two long answers inside the prompt. Both as in the original evaluator, which cuts
        the fields in place (their order stays) and cuts ``answer_details`` to 3,000
        entries, a list of one root.
        """
        view = dict(self.judge_view())
        final = view.get("final_answer")
        if isinstance(final, str):
            view["final_answer"] = final[:SELECT_FINAL_ANSWER_CHARS]
        details = view.get("answer_details")
        if isinstance(details, list):
            view["answer_details"] = details[:SELECT_DETAILS_ENTRIES]
        view.pop("method", None)
        return view

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


def function_schemas(tools: list[Any]) -> list[dict[str, Any]]:
    """Function schemas in the bare legacy shape, from either way of listing them.

    Today's OpenAI format wraps each one as ``{"type": "function", "function": {...}}``;
    the legacy format lists the function objects themselves. Anything else is dropped.
    """
    out: list[dict[str, Any]] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        inner = tool.get("function")
        out.append(inner if isinstance(inner, dict) and "name" not in tool else tool)
    return out


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


def chain(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Link a sequence of ``{role, message}`` steps into a one-branch tree."""
    root: list[dict[str, Any]] = []
    tail = root
    for step in steps:
        linked = {"role": step["role"], "message": step["message"], "next": []}
        tail.append(linked)
        tail = linked["next"]
    return root


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


def last_tool_step(answer: Answer) -> dict[str, Any] | None:
    """The last tool node on the main path (the original's "final step"), or None."""
    tools = [n for n in main_path(answer.answer_details) if n.get("role") == "tool" and n.get("message")]
    return tools[-1] if tools else None


def parse_finish(final_answer: str) -> tuple[str | None, str]:
    """(return_type, answer text) of a final answer stored as the Finish call's arguments.

    Arguments that parse as a JSON object are read by their fields. Anything else is
    text: a cassette answer of an agent without Finish, or arguments the model broke;
    such text counts as a give-up when it names ``give_up_and_restart``, the only sign
    left (and the original's test for every answer).
    """
    try:
        args = json.loads(final_answer)
    except ValueError:
        args = None
    if isinstance(args, dict):
        inner = args.get("final_answer", "")
        return_type = args.get("return_type")
        return (return_type if isinstance(return_type, str) else None,
                inner if isinstance(inner, str) else json.dumps(inner))
    if GIVE_UP in final_answer:
        return GIVE_UP, ""
    return None, final_answer
