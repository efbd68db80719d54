"""JSON-RPC 2.0 messages as MCP carries them, read once, and an answer's ``id`` put back
to the one a client is waiting for. Pure.

A stored answer keeps the id the recording client used; a later client (another run, the
same calls in another order) waits for its own. ``with_id`` changes that one member of
the top-level object and nothing else, so an answer to a request with the recorded id
comes back byte for byte.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from stbproxy import jsonsafe

REQUEST, NOTIFICATION, RESPONSE, BATCH, INVALID = "request", "notification", "response", "batch", "invalid"

# JSON-RPC's own error codes, and those the MCP specification adds.
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = -32700, -32600, -32601, -32602, -32603
HEADER_MISMATCH = -32020  # 2026-07-28: Mcp-Method / Mcp-Name / MCP-Protocol-Version differ from the body


@dataclass(frozen=True, slots=True)
class Message:
    """One client message. ``kind``: REQUEST (a method and an id), NOTIFICATION (a method,
    no id), RESPONSE (the client answering a server's request), BATCH (an array, 2025-03-26
    only) or INVALID (``why`` says what is wrong)."""

    kind: str
    method: str = ""
    id: Any = None
    params: Any = None
    why: str = ""


def read(body: bytes) -> Message:
    """What a POST body holds."""
    try:
        value = jsonsafe.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        return Message(INVALID, why=f"not JSON ({exc})")
    if isinstance(value, list):
        return Message(BATCH, why="a JSON-RPC batch")
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        return Message(INVALID, why='not a JSON-RPC 2.0 message (no "jsonrpc": "2.0")')
    method = value.get("method")
    if method is None:
        if "result" in value or "error" in value:
            return Message(RESPONSE, id=value.get("id"))
        return Message(INVALID, why="neither a method nor a result")
    if not isinstance(method, str) or not method:
        return Message(INVALID, why="the method is not a string")
    params = value.get("params")
    if params is not None and not isinstance(params, (dict, list)):
        return Message(INVALID, method, value.get("id"), why="params is neither an object nor an array")
    if "id" not in value:
        return Message(NOTIFICATION, method, params=params)
    if not isinstance(value["id"], (str, int)) or isinstance(value["id"], bool):
        return Message(INVALID, method, why="the id is neither a string nor an integer")
    return Message(REQUEST, method, value["id"], params)


# Where clients write a request's id: last (the Python SDK 1.x: ``...,"jsonrpc":"2.0","id":3}``)
# or first after the version (``{"jsonrpc":"2.0","id":3,"method":...``).
ID_TAIL = 96  # where the last member can be: an id, "jsonrpc", and room for whitespace
_ID_LAST = re.compile(rb',\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*\}\s*$')
_ID_FIRST = re.compile(rb'\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")\s*,')


def id_apart(body: bytes) -> tuple[Any, bytes] | None:
    """(the id, the body without it) when a request writes its id where clients do, else
    None: two messages that differ by their id alone have the same remainder."""
    found = _ID_LAST.search(body, max(0, len(body) - ID_TAIL)) or _ID_FIRST.match(body)
    if found is None:
        return None
    try:
        message_id = json.loads(found.group(1))
    except ValueError:
        return None
    start, end = found.span(1)
    return message_id, body[:start] + body[end:]


def error_body(message_id: Any, code: int, text: str, data: Any = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": text}
    if data is not None:
        error["data"] = data
    return json.dumps({"jsonrpc": "2.0", "id": message_id, "error": error}, ensure_ascii=False).encode()


def result_body(message_id: Any, result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": message_id, "result": result}, ensure_ascii=False).encode()


def one_line(body: bytes) -> bytes:
    """A JSON message on one line, as stdio framing and an event's one data line want it."""
    if b"\n" not in body and b"\r" not in body:
        return body
    try:
        return json.dumps(json.loads(body), ensure_ascii=False, separators=(",", ":")).encode()
    except ValueError:
        return body.replace(b"\r", b"").replace(b"\n", b" ")


def answer_of(body: bytes) -> dict | None:
    """The JSON-RPC response object of a JSON answer body, or None."""
    try:
        value = jsonsafe.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        return None
    return value if "result" in value or "error" in value else None


# How servers write an answer's head (``{"jsonrpc":"2.0","id":7,"result"``): found by one
# match, where the general scan below walks the object byte by byte.
ANSWER_HEAD = re.compile(rb'\{\s*"jsonrpc"\s*:\s*"2\.0"\s*,\s*"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*"|null)'
                         rb'\s*,\s*"(?:result|error)"')


def with_id(text: bytes, new_id: Any) -> bytes:
    """``text`` (one JSON object) with its top-level ``id`` member set to ``new_id``; the
    same bytes when it already holds it, or when it has no such member."""
    head = ANSWER_HEAD.match(text)
    span = head.span(1) if head else _top_level_member(text, b"id")
    if span is None:
        return text
    encoded = json.dumps(new_id, ensure_ascii=False).encode()
    start, end = span
    if text[start:end] == encoded:
        return text
    return text[:start] + encoded + text[end:]


def _top_level_member(text: bytes, name: bytes) -> tuple[int, int] | None:
    """Where the value of member ``name`` of the outermost object lies (start, end), for a
    string, number or literal value; None when there is none."""
    depth = 0
    i, n = 0, len(text)
    expect_key = False
    while i < n:
        c = text[i]
        if c == 0x22:  # a string: a key when the outermost object expects one
            end = _string_end(text, i)
            if end < 0:
                return None
            if depth == 1 and expect_key:
                key = text[i + 1:end - 1]
                j = _skip_space(text, end)
                if j < n and text[j] == 0x3A:  # ':'
                    if key == name:
                        start = _skip_space(text, j + 1)
                        return start, _value_end(text, start)
                    expect_key = False
                    i = j + 1
                    continue
            i = end
            continue
        if c in (0x7B, 0x5B):  # { [
            depth += 1
            expect_key = depth == 1 and c == 0x7B
        elif c in (0x7D, 0x5D):  # } ]
            depth -= 1
        elif c == 0x2C and depth == 1:  # ',' between members of the outermost object
            expect_key = True
        i += 1
    return None


def _string_end(text: bytes, start: int) -> int:
    """The index just past the string that starts at ``start`` (its opening quote)."""
    i = start + 1
    n = len(text)
    while i < n:
        c = text[i]
        if c == 0x5C:  # backslash: skip the escaped character
            i += 2
            continue
        if c == 0x22:
            return i + 1
        i += 1
    return -1


def _skip_space(text: bytes, i: int) -> int:
    while i < len(text) and text[i] in b" \t\r\n":
        i += 1
    return i


def _value_end(text: bytes, start: int) -> int:
    if start < len(text) and text[start] == 0x22:
        end = _string_end(text, start)
        return end if end > 0 else len(text)
    i = start
    while i < len(text) and text[i] not in b",}] \t\r\n":
        i += 1
    return i
