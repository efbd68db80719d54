"""StableToolBench's trained simulator, MirrorAPI: the request its model was trained on, and
a tolerant reading of what it writes back. Pure.

The model gets a system prompt (read from the user's StableToolBench checkout at run time,
prompt_file.py) and one user message, ``API doc:\\n{api_doc}\\n\\nRequest:\\n{request}``, where
both are Python dicts as ``str()`` writes them, because that is how StableToolBench's server
formats them (``str.format`` of a dict). The doc's keys come in its order: api_name,
api_description, required_parameters, optional_parameters, tool_description, tool_name,
tool_category; the request is the call's arguments without ``toolbench_key``.

Its replies are one JSON object ``{"error", "response"}`` (the chain-of-thought model writes a
``mechanism_of_the_api`` member first), but often malformed: in code fences, cut off at the
token limit, followed by prose. ``read_reply`` recovers what can be
recovered and says how, or raises BadReply.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

from stbproxy.sim.call_facts import CallFacts
from stbproxy.sim.llm_prompt import MAX_REPLY_CHARS, BadReply
from stbproxy.sim.schema import repair_truncated_json

USER_MESSAGE = "API doc:\n{api_doc}\n\nRequest:\n{request}"
SEED = 42  # what StableToolBench's server sends
MAX_TOKENS = 2048
_LEFT_OUT = frozenset({"toolbench_key"})


def api_doc(facts: CallFacts) -> dict[str, Any]:
    """The API as StableToolBench's server describes it to the model."""
    doc = facts.doc
    if doc is None:  # an endpoint nobody described: what its request says of it
        parts = urlsplit(facts.request.url)
        return {"api_name": f"{facts.request.method} {parts.path or '/'}", "api_description": "",
                "required_parameters": [], "optional_parameters": [], "tool_description": "",
                "tool_name": parts.hostname or "", "tool_category": ""}
    return {
        "api_name": doc.api,
        "api_description": doc.api_description,
        "required_parameters": [p.to_dict() for p in doc.required_parameters],
        "optional_parameters": [p.to_dict() for p in doc.optional_parameters],
        "tool_description": doc.tool_description,
        "tool_name": doc.ref.tool.split("_for_")[0],  # the server cuts at the first "_for_"
        "tool_category": doc.ref.category,
    }


def request_of(facts: CallFacts) -> dict[str, Any]:
    return {name: value for name, value in facts.args.items() if name.lower() not in _LEFT_OUT}


def user_message(facts: CallFacts) -> str:
    return USER_MESSAGE.format(api_doc=api_doc(facts), request=request_of(facts))


# -- reading the model's reply --------------------------------------------------------------------

_FENCE = re.compile(r"```[A-Za-z0-9_-]*[ \t]*\n?(.*?)(?:```|\Z)", re.DOTALL)
_MEMBER = re.compile(r'"(error|response)"\s*:\s*')


def read_reply(text: str | None) -> tuple[str, Any, list[str]]:
    """(error, response, how it was recovered) of a reply; BadReply when nothing can be."""
    if text is None or not text.strip():
        raise BadReply("empty reply")
    if len(text) > MAX_REPLY_CHARS:
        raise BadReply(f"reply of {len(text)} characters is over the {MAX_REPLY_CHARS}-character cap")
    how: list[str] = []
    body = text.strip()
    fenced = _FENCE.search(body)
    if fenced is not None and "```" in body:
        body, how = fenced.group(1).strip(), ["code fence"]
    if '"mechanism_of_the_api"' in body:
        how.append("mechanism field left out")
    whole = _whole_object(body, how)
    if whole is not None:
        return _checked(whole.get("error"), whole.get("response"), how)
    how.append("members read one by one")  # the whole is no JSON object
    found: dict[str, Any] = {}
    for match in _MEMBER.finditer(body):
        if match.group(1) in found:
            continue
        value, note = _value_at(body, match.end())
        if note is not None:
            found[match.group(1)] = value
            if note:
                how.append(note)
    if not found:
        raise BadReply(f"no 'error' or 'response' can be read in the reply: {body[:80]!r}")
    return _checked(found.get("error"), found.get("response"), how)


def _whole_object(body: str, how: list[str]) -> dict | None:
    """The reply as one JSON object, perhaps followed or preceded by prose; None when it is not."""
    start = body.find("{")
    if start < 0:
        return None
    try:
        value, end = json.JSONDecoder().raw_decode(body, start)
    except ValueError:
        return None
    if not isinstance(value, dict) or not ({"error", "response"} & value.keys()):
        return None
    if body[end:].strip() or body[:start].strip():
        how.append("text around the object left out")
    return value


def _value_at(text: str, at: int) -> tuple[Any, str | None]:
    """The JSON value that starts at ``at``, read leniently: (value, "" when whole, a note on
    how it was recovered); (None, None) when nothing is there."""
    if at >= len(text):
        return None, None
    if text[at] == '"':
        return _string_at(text, at)
    try:
        value, _ = json.JSONDecoder().raw_decode(text, at)
        return value, ""
    except ValueError:
        pass
    if text[at] in "{[":  # cut off: its complete members kept, the open brackets closed
        closed = repair_truncated_json(text[at:].rstrip())
        if closed is not None:
            return closed, "truncated value closed after its last complete member"
        return text[at:].rstrip(), "truncated value kept as text"
    return None, None


def _string_at(text: str, at: int) -> tuple[str, str]:
    """A JSON string from its opening quote: whole, or as far as it goes when unclosed."""
    i, end = at + 1, len(text)
    while i < end:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == '"':
            return _unescape(text[at + 1:i]), ""
        i += 1
    raw = text[at + 1:].rstrip()
    for tail in ('"}', '"\n}', "}"):  # the object's end, with the closing quote lost
        if raw.endswith(tail):
            raw = raw[: -len(tail)].rstrip()
            break
    return _unescape(raw), "unclosed string"


def _unescape(raw: str) -> str:
    try:
        return json.loads(f'"{raw}"')
    except ValueError:
        # A broken escape (cut in the middle, or a raw newline): drop what cannot be read.
        cleaned = re.sub(r"\\u[0-9a-fA-F]{0,3}$|\\$", "", raw).replace("\n", "\\n").replace("\t", "\\t")
        try:
            return json.loads(f'"{cleaned}"')
        except ValueError:
            return raw


def _checked(error: Any, response: Any, how: list[str]) -> tuple[str, Any, list[str]]:
    error = "" if error is None else error if isinstance(error, str) else json.dumps(error, ensure_ascii=False)
    if not error and response in ("", None):
        raise BadReply("reply has neither a response nor an error")
    return error, response, how
