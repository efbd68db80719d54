"""StableToolBench's trained simulator, MirrorAPI: the request its model was trained on, and
what StableToolBench's MirrorAPI server makes of what it writes back. Pure.

The model gets a system prompt (read from the user's StableToolBench checkout at run time,
prompt_file.py) and one user message, ``API doc:\\n{api_doc}\\n\\nRequest:\\n{request}``, where
both are Python dicts as ``str()`` writes them, because that is how StableToolBench's server
formats them (``str.format`` of a dict). The doc's keys come in its order: api_name,
api_description, required_parameters, optional_parameters, tool_description, tool_name,
tool_category; the tool as a /virtual client named it (cut at its first ``_for_``), the
category as its key; the request is the call's arguments without ``toolbench_key``.

The server asks nothing for an API its tool docs do not hold, and fails (HTTP 500):
``stb_finds``. Its replies are one JSON object ``{"error", "response"}`` (the
chain-of-thought model writes a ``mechanism_of_the_api`` member first), but often
malformed: in code fences, followed by prose, with raw newlines or unescaped quotes in
strings, written as a Python dict, cut off at the token limit. Two readings:
``read_reply_stb`` gives what StableToolBench's server gives (JSON, else its patterns, which
keep the closing ``"}`` in the answer and cut an error at its first quote), and
``read_reply`` recovers what can be recovered without guessing and says how.
"""

from __future__ import annotations

import ast
import json
import re
import warnings
from typing import Any, Mapping
from urllib.parse import urlsplit

from stbcore.toolbench_names import category_key, server_names, standardize
from stbproxy.models import Request, Response
from stbproxy.sim.call_facts import CallFacts
from stbproxy.sim.llm_prompt import MAX_REPLY_CHARS, BadReply
from stbproxy.stb.api_doc import ApiDoc
from stbproxy.stb.bodies import answer_parts, api_body_response
from stbproxy.synthesis.templates import truncated_json

USER_MESSAGE = "API doc:\n{api_doc}\n\nRequest:\n{request}"
SEED = 42  # what StableToolBench's server sends
MAX_TOKENS = 2048
_LEFT_OUT = frozenset({"toolbench_key"})
# What StableToolBench's server answers when its model's reply holds neither member.
NO_ANSWER = "Failed to generate fake response"
# What it answers when it fails (FastAPI's answer to an exception): an unknown API, a reply
# that is JSON but no object with both members, a model that cannot be reached.
SERVER_ERROR = Response(500, (("Content-Type", "text/plain; charset=utf-8"),), b"Internal Server Error")
_VIRTUAL_NAMES = ("category", "tool_name", "api_name")


def api_doc(facts: CallFacts) -> dict[str, Any]:
    """The API as StableToolBench's server describes it to the model."""
    doc = facts.doc
    if doc is None:  # an endpoint nobody described: what its request says of it
        parts = urlsplit(facts.request.url)
        return {"api_name": f"{facts.request.method} {parts.path or '/'}", "api_description": "",
                "required_parameters": [], "optional_parameters": [], "tool_description": "",
                "tool_name": parts.hostname or "", "tool_category": ""}
    tool, category = _tool_and_category(facts, doc)
    return {
        "api_name": doc.api,
        "api_description": doc.api_description,
        "required_parameters": [p.to_dict() for p in doc.required_parameters],
        "optional_parameters": [p.to_dict() for p in doc.optional_parameters],
        "tool_description": doc.tool_description,
        "tool_name": tool,
        "tool_category": category,
    }


def _tool_and_category(facts: CallFacts, doc: ApiDoc) -> tuple[str, str]:
    """The tool as the server names it (what the /virtual client sent, cut at its first "_for_")
    and the category's key. Without that body, the doc's standardized names: what
    StableToolBench's pipeline sends."""
    sent = sent_names(facts)
    if sent is not None:
        return sent["tool_name"].split("_for_")[0], category_key(sent["category"])
    return doc.ref.tool.split("_for_")[0], doc.ref.category


def sent_names(facts: CallFacts) -> Mapping[str, str] | None:
    """The names a /virtual client wrote: handed over with the call, or read from its request."""
    return facts.names if facts.names is not None else virtual_body(facts.request)


def virtual_body(request: Request) -> dict[str, Any] | None:
    """A /virtual call's body with the names as its client wrote them; None for any other request."""
    try:
        path = urlsplit(request.url).path
    except ValueError:
        return None
    if request.method != "POST" or not path.rstrip("/").endswith("/virtual"):
        return None
    try:
        body = json.loads(request.body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    if not isinstance(body, dict) or not all(isinstance(body.get(name), str) for name in _VIRTUAL_NAMES):
        return None
    return body


def stb_finds(facts: CallFacts) -> bool:
    """Whether StableToolBench's MirrorAPI server finds the call's API in its tool docs; it
    fails on any other (HTTP 500), before asking its model. It reads the file named after the
    tool cut at its first "_for_" (so a tool whose name holds "for" is never found), and
    compares the API name as its server reads it (ToolBench's reserved words renamed: an API
    named "id" is looked for as "is_id", never found) with each documented one, all
    standardized. A call that is none of StableToolBench's (MCP, OpenAPI, an endpoint nobody
    described) is not judged by its rules."""
    names = _looked_up(facts)
    if names is None:
        return True
    doc = facts.doc
    return doc is not None and names == (standardize(doc.tool), standardize(doc.api))


def _looked_up(facts: CallFacts) -> tuple[str, str] | None:
    """(tool file, API) as StableToolBench's MirrorAPI server looks the call up: from the names
    a /virtual client wrote, else from the call's ToolBench key (``<tool>_for_<category>``)."""
    sent = sent_names(facts)
    if sent is not None:
        tool, api = sent["tool_name"], server_names(sent["category"], sent["tool_name"], sent["api_name"])[2]
    elif facts.api is not None and facts.api.tool.endswith("_for_" + facts.api.category):
        tool, api = facts.api.tool, facts.api.api
    else:
        return None
    return standardize(tool).split("_for_")[0], standardize(api)


def request_of(facts: CallFacts) -> dict[str, Any]:
    return {name: value for name, value in facts.args.items() if name.lower() not in _LEFT_OUT}


def user_message(facts: CallFacts) -> str:
    return USER_MESSAGE.format(api_doc=api_doc(facts), request=request_of(facts))


# -- reading the model's reply as StableToolBench's server does -------------------------------------


class ServerFailure(BadReply):
    """A reply StableToolBench's server fails on (HTTP 500) rather than answers."""


_MECHANISM = "mechanism_of_the_api"


def read_reply_stb(text: str | None) -> tuple[Any, Any, list[str]]:
    """(error, response, how) as StableToolBench's server reads a reply, in one attempt: the
    members of a JSON object; else, when it is not JSON, the text its patterns take (an
    error up to its first quote, the response to the reply's end, closing ``"}`` and all).
    BadReply when they find neither (the server answers NO_ANSWER); ServerFailure where the
    server fails: JSON that is no object with both members, no text, an answer JSON cannot
    carry (NaN, a lone surrogate)."""
    if text is None:
        raise ServerFailure("the reply has no text")
    how: list[str] = []
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        found = _mechanism_members(text) if _MECHANISM in text else _plain_members(text)
        if found is None:
            raise BadReply(f"StableToolBench's patterns find no error and response in {text[:80]!r}") from None
        value, how = dict(zip(("error", "response"), found)), ["stb pattern"]
    if not isinstance(value, dict) or "error" not in value or "response" not in value:
        raise ServerFailure(f"the reply is JSON but no object with an error and a response: {text[:80]!r}")
    error, response = value["error"], value["response"]
    if not (error or response):
        raise BadReply("the reply has neither a response nor an error")
    try:
        json.dumps({"error": error, "response": response}, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except (ValueError, UnicodeEncodeError) as exc:
        raise ServerFailure(f"the answer cannot be sent as JSON: {exc}") from None
    return error, response, how


def stb_answer(error: Any, response: Any) -> tuple[Response, dict[str, Any]]:
    """StableToolBench's answer object as an API's answer and the facts kept beside it (its
    error text, and the whole object where those two do not give it back: answer_parts). An
    answer that is only an error is its object, as the llm simulator answers it, so that an
    HTTP client reads why."""
    answer = {"error": error, "response": response}
    _, kept = answer_parts(answer)
    if error and response in ("", None):
        return api_body_response(answer), kept
    return api_body_response(response), kept


def _plain_members(text: str) -> tuple[str, str] | None:
    """The first ``"error":`` followed by a quoted text without quotes, ``,``, ``"response":``
    and a quote: that text, and everything after the last quote."""
    at = text.find('"error":')
    while at >= 0:
        start = _after_space(text, at + len('"error":'))
        close = text.find('"', start + 1) if text.startswith('"', start) else -1
        if close >= 0 and text.startswith(",", close + 1):
            value = _after_space(text, close + 2)
            if text.startswith('"response":', value):
                value = _after_space(text, value + len('"response":'))
                if text.startswith('"', value):
                    return text[start + 1:close], text[value + 1:]
        at = text.find('"error":', at + 1)
    return None


def _mechanism_members(text: str) -> tuple[str, str] | None:
    """After the first ``"mechanism_of_the_api": "``: the error between the first ``", "error": "``
    and the next ``", "response": "`` (spaces optional around the colons, any after the
    commas), and the response from there to the reply's end."""
    opening = _first_marker(text, 0, _MECHANISM, leading="")
    if opening is None:
        return None
    error = _first_marker(text, opening[1], "error")
    if error is None:
        return None
    response = _first_marker(text, error[1], "response")
    if response is None:
        return None
    return text[error[1]:response[0]], text[response[1]:]


def _first_marker(text: str, at: int, name: str, leading: str = '",') -> tuple[int, int] | None:
    """(start, end) of the first ``<leading> "name" : "`` from ``at``: any spaces after the
    leading text and around the colon."""
    head = leading or f'"{name}"'
    start = text.find(head, at)
    while start >= 0:
        i = _after_space(text, start + len(leading))
        if text.startswith(f'"{name}"', i):
            i = _after_space(text, i + len(name) + 2)
            if text.startswith(":", i):
                i = _after_space(text, i + 1)
                if text.startswith('"', i):
                    return start, i + 1
        start = text.find(head, start + 1)
    return None


def _after_space(text: str, at: int) -> int:
    while at < len(text) and text[at].isspace():
        at += 1
    return at


# -- reading the model's reply leniently (--mirrorapi-parse recover) ------------------------------

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
