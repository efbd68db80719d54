"""The four judge functions: their prompts, their forced-call schemas, template files.

Each judge function is one user prompt (a ``str.format`` template with named fields)
answered through one forced function call carrying a ``reason`` and a label. The
default prompts and schemas are stbeval's own. ``load_template`` reads the original
evaluator's template format, blocks of ``<function><name>N</name><description>PROMPT
</description></function>``, so published numbers can be reproduced with the prompts
they used; the schemas that go with them come from the evaluator's configuration
(judgeconfig.py).
"""

from __future__ import annotations

import copy
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .errors import TemplateError

CHECK_ANSWER = "check_answer_status"
PARSE_ANSWER = "parse_answer_status"
CHECK_TASK = "check_task_solvable"
SELECT_BETTER = "select_better_answer"


@dataclass(frozen=True, slots=True)
class JudgeFunction:
    name: str
    fields: tuple[str, ...]  # the prompt's placeholders
    label_field: str  # the argument of the forced call that carries the label
    labels: tuple[Any, ...]
    description: str


FUNCTIONS: dict[str, JudgeFunction] = {
    f.name: f
    for f in (
        JudgeFunction(CHECK_ANSWER, ("query", "answer"), "answer_status", ("Solved", "Unsolved", "Unsure"),
                      "Report whether the final answer solves the query."),
        JudgeFunction(PARSE_ANSWER, ("query", "answer"), "answer_status", ("Solved", "Unsolved", "Unsure"),
                      "Report whether the whole execution trace solves the query."),
        JudgeFunction(CHECK_TASK, ("task",), "task_status", ("Solvable", "Unsolvable", "Unsure"),
                      "Report whether the task can be solved with the tools it offers."),
        JudgeFunction(SELECT_BETTER, ("query", "answer_0", "answer_1"), "index", (0, 1),
                      "Report the index (0 or 1) of the better answer."),
    )
}

# stbeval's own wording. Each prompt asks for the reason first so the label follows it.
DEFAULT_PROMPTS: dict[str, str] = {
    CHECK_ANSWER: """You are grading an AI assistant that used tools to serve a user request.
Look only at its final answer below and decide whether the request was met.

- Unsolved: the answer apologises, refuses, gives up, talks about something else, or
  leaves out a part of the request.
- Solved: the answer gives the user what every part of the request asked for, stated
  plainly enough that you can tell it was done.
- Unsure: the answer reads like a real reply, but from the answer alone you cannot tell
  whether it is correct or complete.

User request:
{query}

Final answer:
{answer}

Call check_answer_status with a short reason and answer_status.""",
    PARSE_ANSWER: """You are checking an AI assistant's work on a user request from its execution trace.
The trace below is a JSON tree: "tool" nodes show each function called, its arguments
and the response it got; "final_answer" is what the user was told.

- Unsolved: every tool call failed, or the final answer states things the tool
  responses do not support.
- Solved: successful tool calls produced the information the request needed and the
  final answer reports it faithfully.
- Unsure: the trace does not let you confirm or refute the final answer.

User request:
{query}

Execution trace:
{answer}

Call parse_answer_status with a short reason and answer_status.""",
    CHECK_TASK: """Decide whether the task below can be completed with the tools it lists.

- Unsolvable: the task relies on information that is invalid (a malformed email,
  phone number, id) or missing (it names no target where one is needed).
- Solvable: the listed tools are enough to do everything the task asks.
- Unsure: you cannot tell either way.

Task, with its available tools:
{task}

Call check_task_solvable with a short reason and task_status.""",
    SELECT_BETTER: """Two AI assistants answered the same user request with tools. Pick the better answer.

User request:
{query}

Answer 0:
{answer_0}

Answer 1:
{answer_1}

Judge first by "final_answer": does it give everything the request needs, is it true
to what the tools returned, and if it failed, does it explain why? Only when that
leaves them even, look at "answer_details": fewer failed or repeated tool calls,
fewer steps, more of the request's sub-tasks done, more useful tools tried. The order
in which the answers appear says nothing about their quality.

Call select_better_answer with a short reason and the index (0 or 1) of the better answer.""",
}

_BLOCK = re.compile(r"<function>(.*?)</function>", re.DOTALL)
_NAME = re.compile(r"<name>(.*?)</name>", re.DOTALL)
_DESCRIPTION = re.compile(r"<description>(.*?)</description>", re.DOTALL)


def schema(fn: JudgeFunction) -> dict[str, Any]:
    """The function definition the judge is forced to call."""
    label: dict[str, Any]
    if fn.name == SELECT_BETTER:
        label = {"type": "integer", "enum": list(fn.labels), "description": "0 for Answer 0, 1 for Answer 1."}
    else:
        label = {"type": "string", "enum": list(fn.labels)}
    return {
        "name": fn.name,
        "description": fn.description,
        "parameters": {
            "type": "object",
            "properties": {
                "reason": {"type": "string", "description": "Why, in one or two sentences."},
                fn.label_field: label,
            },
            "required": ["reason", fn.label_field],
        },
    }


class Prompts:
    """The prompt text and forced-call schema of each judge function: stbeval's own,
    overridden by a template file (text) and an evaluator configuration (schemas)."""

    def __init__(self, overrides: Mapping[str, str] | None = None, *, origin: str = "built-in",
                 schemas: Mapping[str, dict[str, Any]] | None = None, schemas_origin: str = "built-in") -> None:
        self._text = {**DEFAULT_PROMPTS, **(overrides or {})}
        self._schemas = dict(schemas or {})
        self.origin = origin
        self.schemas_origin = schemas_origin if schemas else "built-in"
        self.overridden = frozenset(overrides or ())

    def text(self, name: str) -> str:
        return self._text[name]

    def schema(self, name: str) -> dict[str, Any]:
        """The function definition sent for ``name`` (a fresh copy: callers may keep it)."""
        given = self._schemas.get(name)
        return copy.deepcopy(given) if given is not None else schema(FUNCTIONS[name])

    def render(self, name: str, fields: Mapping[str, str]) -> str:
        return self._text[name].format(**fields)


def parse_template(text: str, *, where: str = "template") -> dict[str, str]:
    """Prompt text by function name from a template in the original format.

    The description is used exactly as written, newlines that frame it included, as a
    ``str.format`` template: that is the text the original sends, so stripping anything
    would change every request it makes. As in the original, the first <name> and
    <description> of a block count, and a later block of the same name wins.
    """
    prompts: dict[str, str] = {}
    for block in _BLOCK.findall(text):
        name = _NAME.search(block)
        description = _DESCRIPTION.search(block)
        if not name or not description:
            raise TemplateError(f"{where}: a <function> block lacks <name> or <description>")
        key = name.group(1).strip()
        if key not in FUNCTIONS:
            raise TemplateError(f"{where}: unknown judge function {key!r} (known: {', '.join(FUNCTIONS)})")
        prompts[key] = description.group(1)
    if not prompts:
        raise TemplateError(f"{where}: no <function> blocks found")
    for key, prompt in prompts.items():
        _check_fields(key, prompt, where)
    return prompts


def load_template(path: str | Path, *, schemas: Mapping[str, dict[str, Any]] | None = None,
                  schemas_origin: str = "built-in") -> Prompts:
    """Prompts from a template file; functions it does not define keep stbeval's wording.
    ``schemas`` (an evaluator configuration's) replace stbeval's for the functions named."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TemplateError(f"{path}: cannot read template ({exc})") from exc
    return Prompts(parse_template(text, where=str(path)), origin=str(path), schemas=schemas,
                   schemas_origin=schemas_origin)


def _check_fields(name: str, prompt: str, where: str) -> None:
    expected = set(FUNCTIONS[name].fields)
    try:
        used = {f for _, f, _, _ in string.Formatter().parse(prompt) if f is not None}
    except ValueError as exc:
        raise TemplateError(f"{where}: {name}: not a valid format string ({exc})") from exc
    unknown = used - expected
    if unknown:
        raise TemplateError(f"{where}: {name} uses unknown field(s) {sorted(unknown)}; allowed: {sorted(expected)}")
