"""StableToolBench's trained simulator, MirrorAPI: the request its model was trained on, and
a tolerant reading of what it writes back. Pure.

The model gets a system prompt (read from the user's StableToolBench checkout at run time,
prompt_file.py) and one user message, ``API doc:\\n{api_doc}\\n\\nRequest:\\n{request}``, where
both are Python dicts as ``str()`` writes them, because that is how StableToolBench's server
formats them (``str.format`` of a dict). The doc's keys come in its order: api_name,
api_description, required_parameters, optional_parameters, tool_description, tool_name,
tool_category; the request is the call's arguments without ``toolbench_key``.

Its replies are one JSON object ``{"error", "response"}`` (the chain-of-thought model writes a
``mechanism_of_the_api`` member first), but often malformed: in code fences, followed by
prose, with raw newlines or unescaped quotes in strings, written as a Python dict, cut off
at the token limit. ``read_reply`` recovers what can be recovered without guessing (never
StableToolBench's own regex reading, which keeps the closing ``"}`` in the answer and cuts
an error at its first quote) and says how, or raises BadReply.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any
from urllib.parse import urlsplit

from stbproxy.sim.call_facts import CallFacts
from stbproxy.sim.llm_prompt import MAX_REPLY_CHARS, BadReply
from stbproxy.sim.schema import truncated_json

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
_NAMES = r"(?:mechanism_of_the_api|error|response)"  # the members the models write, in this order
_MEMBER = re.compile(rf'"({_NAMES})"\s*:\s*')
# What may follow a string's closing quote: another member, or the object's end.
_CONTINUES = re.compile(r'\s*(?:,\s*"[^"\n]*"\s*:|[}\]]|\Z)')
# For a string known to hold stray quotes, what follows its real closing quote, best first:
# one of the answer's own members, or the object's end ending the reply; the object's end
# on a line of its own (prose after it); the reply's end (its closing brace lost).
_ENDS = re.compile(rf'\s*(?:,\s*"{_NAMES}"\s*:|}}\s*\Z)')
_ENDS_LINE = re.compile(r"\s*}[ \t]*(?:\n|\Z)")
_ENDS_REPLY = re.compile(r"\s*\Z")
_STRICT = json.JSONDecoder()
_LENIENT = json.JSONDecoder(strict=False)  # raw newlines and tabs inside strings
_ESCAPE = re.compile(r"\\(?:u([0-9a-fA-F]{4})|u[0-9a-fA-F]{0,3}\Z|\Z|(.))", re.DOTALL)
_SIMPLE_ESCAPES = {"b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}
_NOTHING = object()  # no value could be read at a member
TRUNCATED = "truncated JSON closed after its last complete member"


def read_reply(text: str | None) -> tuple[str, Any, list[str]]:
    """(error, response, how it was recovered) of a reply; BadReply when nothing can be."""
    if text is None or not text.strip():
        raise BadReply("empty reply")
    if len(text) > MAX_REPLY_CHARS:
        raise BadReply(f"reply of {len(text)} characters is over the {MAX_REPLY_CHARS}-character cap")
    how: list[str] = []
    body = text.strip()
    fenced = _FENCE.search(body)
    if fenced is not None:
        body, how = fenced.group(1).strip(), ["code fence"]
    if "mechanism_of_the_api" in body:
        how.append("mechanism field left out")
    found = _whole_object(body, how)
    if found is None:
        found = _python_literal(body, how)
    if found is None:
        found = _members(body, how)
    return _checked(found.get("error"), found.get("response"), how)


def _whole_object(body: str, how: list[str]) -> dict | None:
    """The reply as one JSON object, perhaps with prose around it; None when it is not.

    Only braces before the first member name can open it: a later one is inside the answer."""
    first_member = _MEMBER.search(body)
    limit = first_member.start() if first_member else len(body)
    for start in [i for i, ch in enumerate(body[:limit]) if ch == "{"][::-1][:20]:  # nearest first
        for decoder, note in ((_STRICT, ""), (_LENIENT, "raw control characters in strings read")):
            try:
                value, end = decoder.raw_decode(body, start)
            except ValueError:
                continue
            if isinstance(value, dict) and {"error", "response"} & value.keys():
                how.extend([note] if note else [])
                if body[end:].strip() or body[:start].strip():
                    how.append("text around the object left out")
                return value
            break
    return None


def _python_literal(body: str, how: list[str]) -> dict | None:
    """A dict written in Python's syntax (single-quoted names, True, None). Only then: Python
    reads some JSON too, but not the same way (a surrogate pair's escapes stay two halves)."""
    start, end = body.find("{"), body.rfind("}")
    if not 0 <= start < end or ("'error'" not in body and "'response'" not in body):
        return None
    try:
        with warnings.catch_warnings():  # "invalid escape sequence" warnings: the text is the model's
            warnings.simplefilter("ignore")
            value = ast.literal_eval(body[start:end + 1])
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    if not isinstance(value, dict) or not {"error", "response"} & value.keys():
        return None
    how.append("python literal")
    if body[:start].strip() or body[end + 1:].strip():
        how.append("text around the object left out")
    return value


def _members(body: str, how: list[str]) -> dict[str, Any]:
    """error and response read one after the other, each as far as it goes; BadReply when
    neither is there. Each search starts after the value before, so a member name inside a
    value (the mechanism's prose, an answer's own "error") is never taken for one."""
    how.append("members read one by one")
    found: dict[str, Any] = {}
    at = 0
    while (match := _MEMBER.search(body, at)) is not None:
        value, end, notes = _value_at(body, match.end())
        at = max(end, match.end())
        if value is not _NOTHING and match.group(1) != "mechanism_of_the_api" and match.group(1) not in found:
            found[match.group(1)] = value
            how.extend(notes)
    if not found:
        raise BadReply(f"no 'error' or 'response' can be read in the reply: {body[:80]!r}")
    return found


def _value_at(text: str, at: int) -> tuple[Any, int, list[str]]:
    """The JSON value that starts at ``at``, read leniently: (value, where it ends, notes on
    how it was recovered); the value is _NOTHING when none can be read there."""
    if at >= len(text):
        return _NOTHING, at, []
    if text[at] == '"':
        return _string_at(text, at)
    for decoder in (_STRICT, _LENIENT):
        try:
            value, end = decoder.raw_decode(text, at)
            return value, end, []
        except ValueError:
            pass
    if text[at] in "{[":  # cut off: its complete members kept, its open brackets closed
        closed = truncated_json(text[at:].rstrip())
        if closed is not None:
            return closed[1], len(text), [TRUNCATED]
        return _NOTHING, len(text), []  # not one complete member: nothing honest to keep
    return _NOTHING, at, []


def _string_at(text: str, at: int) -> tuple[Any, int, list[str]]:
    """A JSON string from its opening quote: whole, with stray unescaped quotes kept, or as
    far as it goes when the reply stops inside it."""
    quotes = []
    i = at + 1
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == '"':
            quotes.append(i)
        i += 1
    notes: list[str] = []
    close = None
    if quotes and _CONTINUES.match(text, quotes[0] + 1):
        close = quotes[0]
    elif quotes:  # the first quote is the value's own text: its closing one is further on
        for ends, order in ((_ENDS, quotes), (_ENDS_LINE, quotes[::-1]), (_ENDS_REPLY, quotes[::-1])):
            close = next((q for q in order if ends.match(text, q + 1)), None)
            if close is not None:
                break
        if close is not None:
            notes.append("unescaped quotes kept")
    if close is not None:
        return _unescape(text[at + 1:close]), close + 1, notes
    value = _unescape(text[at + 1:].rstrip())
    if value[-1:] and "\ud800" <= value[-1] <= "\udbff":  # cut between the halves of a character
        value = value[:-1]
    notes.append("unclosed string")
    if value.lstrip()[:1] in ("{", "["):  # a JSON answer cut off at the token limit
        closed = truncated_json(value.strip())
        if closed is not None and closed[0] != value.strip():
            value = closed[0]
            notes.append(TRUNCATED)
    return value, len(text), notes


def _unescape(raw: str) -> str:
    """A JSON string's text with its escapes read: the valid ones as JSON reads them, a
    needless one (``\\'``) as its character, one cut off at the end left out."""
    try:
        return _LENIENT.decode(f'"{raw}"')
    except ValueError:
        pass

    def one(escape: re.Match) -> str:
        code, other = escape.groups()
        if code is not None:
            return chr(int(code, 16))
        if other is None:  # a backslash or a \u escape the reply stops in
            return ""
        return _SIMPLE_ESCAPES.get(other, other)
    text = _ESCAPE.sub(one, raw)
    # \ud83d\ude00 read one by one is two halves of one character: join them.
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _checked(error: Any, response: Any, how: list[str]) -> tuple[str, Any, list[str]]:
    error = "" if error is None else error if isinstance(error, str) else json.dumps(error, ensure_ascii=False)
    if not error and response in ("", None):
        raise BadReply("reply has neither a response nor an error")
    return error, response, how
