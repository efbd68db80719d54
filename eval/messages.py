"""Chat messages, in either OpenAI format, read as the steps of an answer.

Agents write their conversation in one of two shapes, often both within one study:

- legacy: an assistant message calls one function with ``function_call: {name,
  arguments}``; its result follows as ``role: function`` (with ``name``);
- today's: an assistant message calls any number of tools with ``tool_calls: [{id,
  type: "function", function: {name, arguments}}]``; each result is a ``role: tool``
  message carrying the call's ``tool_call_id``. Writers leave ``"function_call": null``
  on such messages.

:func:`read_steps` turns either (or a mix) into the steps the judge sees: each call its
own tool step ``{name, arguments, response}`` in the order the agent made them, and the
agent's text as assistant steps. It is the one place that knows these shapes; raw
ToolBench answers and cassettes both read their conversations through it.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

from .model import FINISH


@dataclass(frozen=True, slots=True)
class Call:
    """One function call an assistant message makes; ``id`` is None in the legacy shape."""

    id: str | None
    name: str
    arguments: str


@dataclass
class Steps:
    """What a conversation amounts to."""

    #: ``{"role": "assistant", "message": text}`` and ``{"role": "tool", "message":
    #: {name, arguments, response}}`` steps, in order.
    steps: list[dict[str, Any]] = field(default_factory=list)
    #: The arguments of the last ``Finish`` call, None when the agent never called it.
    finish_arguments: str | None = None
    #: The text of the last assistant message when that message calls nothing.
    closing_text: str = ""


def read_steps(messages: Iterable[dict[str, Any]], *, thoughts: bool = True,
               late_results: Iterable[str] = ()) -> Steps:
    """The steps of the conversation ``messages`` (the part after the user's query).

    - An assistant message without calls is an assistant step (its text, maybe empty).
    - A message that calls tools gives one tool step per call, in order; its text comes
      first as an assistant step when ``thoughts`` is true and the text is not empty
      (ToolBench's converter drops it, so its reader passes False).
    - A call's response is the ``role: tool`` message with its id; for a call without
      an id, the next unclaimed result without an id (``role: function``) before the
      next assistant message. A call whose result is not in the conversation takes the
      next of ``late_results`` (what a recording saw after the last model call), else "".
    - ``Finish`` gets an empty response and ends its message: calls listed after it in
      the same message are never part of the answer (both as ToolBench's converter has it).
    - Messages of other roles only supply results.
    """
    messages = [m for m in messages if isinstance(m, dict)]
    by_id = {m["tool_call_id"]: text_of(m) for m in messages
             if m.get("role") == "tool" and isinstance(m.get("tool_call_id"), str)}
    claimed: set[int] = set()
    late = deque(late_results)
    out = Steps()
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        text = text_of(message)
        calls = calls_of(message)
        out.closing_text = "" if calls else text
        if not calls or (thoughts and text):
            out.steps.append({"role": "assistant", "message": text})
        for call in calls:
            if call.name == FINISH:
                out.steps.append(_tool(call, ""))
                out.finish_arguments = call.arguments
                break
            if call.id is not None and call.id in by_id:
                response = by_id[call.id]
            elif (anonymous := _next_anonymous(messages, index, claimed)) is not None:
                response = anonymous
            else:
                response = late.popleft() if late else ""
            out.steps.append(_tool(call, response))
    return out


def calls_of(message: dict[str, Any]) -> list[Call]:
    """The calls an assistant message makes: its ``tool_calls`` in order, then a legacy
    ``function_call`` (a ``null`` one is no call)."""
    calls: list[Call] = []
    for item in message.get("tool_calls") or []:
        if not isinstance(item, dict):
            continue
        fn = item.get("function") or {}
        call_id = item.get("id")
        calls.append(Call(call_id if isinstance(call_id, str) else None, str(fn.get("name", "")),
                          _arguments(fn.get("arguments"))))
    legacy = message.get("function_call")
    if isinstance(legacy, dict):
        calls.append(Call(None, str(legacy.get("name", "")), _arguments(legacy.get("arguments"))))
    return calls


def text_of(message: dict[str, Any]) -> str:
    """A message's text: its content string, or the text parts of a content list."""
    content = message.get("content")
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return content if isinstance(content, str) else ""


def _next_anonymous(messages: list[dict[str, Any]], after: int, claimed: set[int]) -> str | None:
    """The first unclaimed id-less result after ``after`` and before the next assistant message."""
    for index in range(after + 1, len(messages)):
        message = messages[index]
        role = message.get("role")
        if role == "assistant":
            return None
        if index not in claimed and (role == "function" or (role == "tool" and not message.get("tool_call_id"))):
            claimed.add(index)
            return text_of(message)
    return None


def _tool(call: Call, response: str) -> dict[str, Any]:
    return {"role": "tool", "message": {"name": call.name, "arguments": call.arguments, "response": response}}


def _arguments(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)
