"""Server-sent events as an MCP server answers a POST with them: read into events, and
the answer's JSON-RPC id put back to a client's own, everything else kept as it was
recorded (event ids, priming events, comments, the order of events). Pure."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, TypeGuard

from stbproxy import jsonsafe
from stbproxy.mcp.jsonrpc import ANSWER_HEAD, with_id

EVENT_STREAM = "text/event-stream"
_BLOCK_END = re.compile(rb"\r\n\r\n|\n\n|\r\r")


@dataclass(frozen=True, slots=True)
class Event:
    data: bytes  # the data lines joined by "\n" (empty for a priming event or a comment block)
    event: str = "message"
    id: str | None = None


def is_event_stream(content_type: str | None) -> TypeGuard[str]:
    return content_type is not None and content_type.split(";", 1)[0].strip().lower() == EVENT_STREAM


def events(body: bytes) -> list[Event]:
    """The events of a stream, in order (comment-only blocks left out)."""
    found = []
    for block in _blocks(body):
        event = _event(block)
        if event is not None:
            found.append(event)
    return found


def messages(body: bytes) -> list[Any]:
    """The JSON-RPC messages the events carry (what a client reads), in order."""
    out = []
    for event in events(body):
        if event.data.strip():
            try:
                out.append(jsonsafe.loads(event.data))
            except (ValueError, UnicodeDecodeError):
                out.append(None)
    return out


def answer_in(body: bytes) -> dict | None:
    """The JSON-RPC response a stream carries (its last result or error), or None."""
    for message in reversed(messages(body)):
        if isinstance(message, dict) and ("result" in message or "error" in message):
            return message
    return None


def with_answer_id(body: bytes, new_id: Any) -> bytes:
    """``body`` with the id of each JSON-RPC response event (a result or an error) set to
    ``new_id``; every other byte as it was."""
    out = bytearray()
    for block, separator in _blocks_with_separators(body):
        out += _rewritten(block, new_id) + separator
    return bytes(out)


def split_blocks(buffer: bytes) -> tuple[list[bytes], bytes]:
    """The complete events of what a stream sent so far (each with its blank line), and what
    is left of an event still arriving."""
    blocks = []
    position = 0
    for found in _BLOCK_END.finditer(buffer):
        blocks.append(buffer[position:found.end()])
        position = found.end()
    return blocks, buffer[position:]


def blocks_with_separators(body: bytes) -> list[tuple[bytes, bytes]]:
    """Each event block of a stream with the blank line after it (empty for the last when none)."""
    return _blocks_with_separators(body)


def message_of(block: bytes) -> dict | None:
    """The JSON-RPC message one event block carries, or None."""
    event = _event(block)
    if event is None or not event.data.strip():
        return None
    try:
        value = jsonsafe.loads(event.data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def is_answer_block(block: bytes) -> bool:
    """Whether an event carries a JSON-RPC answer (a result or an error), not a notification
    or a server's request."""
    if b'"result"' not in block and b'"error"' not in block:
        return False
    message = message_of(block)
    return message is not None and "method" not in message and ("result" in message or "error" in message)


def with_request_ids(body: bytes, new_id: Any, progress_token: Any) -> bytes:
    """``body`` as the stream of a request with id ``new_id`` and progress token
    ``progress_token`` (None: it asked for no progress): the answer's id, each progress
    notification's token (left out when no progress was asked for) and a cancellation's
    request id set to this request's; every other byte as it was."""
    out = bytearray()
    for block, separator in _blocks_with_separators(body):
        if b'"notifications/progress"' in block or b'"notifications/cancelled"' in block:
            rewritten = _notification_for(block, new_id, progress_token)
            if rewritten is None:
                continue
        else:
            rewritten = _rewritten(block, new_id)
        out += rewritten + separator
    return bytes(out)


def _notification_for(block: bytes, new_id: Any, progress_token: Any) -> bytes | None:
    message = message_of(block)
    params = message.get("params") if message else None
    if not message or not isinstance(params, dict):
        return block
    if message.get("method") == "notifications/progress":
        if progress_token is None:
            return None  # the request asked for no progress: a client would find no one waiting for it
        field, value = "progressToken", progress_token
    elif message.get("method") == "notifications/cancelled":
        field, value = "requestId", new_id
    else:
        return block
    if params.get(field) == value:
        return block
    message = {**message, "params": {**params, field: value}}
    return with_data(block, json.dumps(message, ensure_ascii=False, separators=(",", ":")).encode())


def with_data(block: bytes, data: bytes) -> bytes:
    """An event block with its data lines replaced by ``data`` (one line), its other fields kept."""
    lines = block.splitlines(keepends=True)
    kept, placed = [], False
    for line in lines:
        if line.startswith(b"data:"):
            if not placed:
                ending = line[len(line.rstrip(b"\r\n")):]
                kept.append(b"data: " + data + ending)
                placed = True
            continue
        kept.append(line)
    if not placed:
        kept.append(b"data: " + data)
    return b"".join(kept)


def encode(items: list[Event]) -> bytes:
    """Events as a stream."""
    out = bytearray()
    for item in items:
        if item.id is not None:
            out += b"id: " + item.id.encode() + b"\n"
        if item.event != "message":
            out += b"event: " + item.event.encode() + b"\n"
        for line in item.data.split(b"\n"):
            out += b"data: " + line + b"\n"
        out += b"\n"
    return bytes(out)


def _rewritten(block: bytes, new_id: Any) -> bytes:
    if b'"result"' not in block and b'"error"' not in block:
        return block  # a notification, a server's request, a priming event: as recorded
    lines = block.splitlines(keepends=True)  # each line keeps its own ending
    data_lines = [i for i, line in enumerate(lines) if line.startswith(b"data:")]
    if not data_lines:
        return block
    data = b"\n".join(_field_value(lines[i].rstrip(b"\r\n")) for i in data_lines)
    if ANSWER_HEAD.match(data) is None:  # not written as servers write answers: read it to be sure
        try:
            message = jsonsafe.loads(data)
        except (ValueError, UnicodeDecodeError):
            return block
        if not isinstance(message, dict) or not ("result" in message or "error" in message) or "method" in message:
            return block
    rewritten = with_id(data, new_id)
    if rewritten is data:
        return block
    if len(data_lines) == 1:
        i = data_lines[0]
        line = lines[i]
        bare = line.rstrip(b"\r\n")
        prefix = bare[:len(bare) - len(_field_value(bare))]
        lines[i] = prefix + rewritten + line[len(bare):]
        return b"".join(lines)
    # Data over several lines: the rewritten message over as many, where the first one was.
    first, last = lines[data_lines[0]], lines[data_lines[-1]]
    between = first[len(first.rstrip(b"\r\n")):] or b"\n"
    ending = last[len(last.rstrip(b"\r\n")):]
    parts = rewritten.split(b"\n")
    replacement = between.join(b"data: " + part for part in parts) + ending
    kept = [line for j, line in enumerate(lines) if j not in data_lines[1:]]
    kept[data_lines[0]] = replacement
    return b"".join(kept)


def _field_value(line: bytes) -> bytes:
    value = line.split(b":", 1)[1] if b":" in line else b""
    return value[1:] if value.startswith(b" ") else value


def _blocks(body: bytes) -> list[bytes]:
    return [block for block, _sep in _blocks_with_separators(body) if block.strip()]


def _blocks_with_separators(body: bytes) -> list[tuple[bytes, bytes]]:
    out = []
    position = 0
    for found in _BLOCK_END.finditer(body):
        out.append((body[position:found.start()], found.group()))
        position = found.end()
    if position < len(body):
        out.append((body[position:], b""))
    return out


def _event(block: bytes) -> Event | None:
    data: list[bytes] = []
    name, event_id, seen = "message", None, False
    for line in block.splitlines():
        if not line or line.startswith(b":"):
            continue
        field = line.split(b":", 1)[0]
        value = _field_value(line)
        if field == b"data":
            data.append(value)
            seen = True
        elif field == b"event":
            name, seen = value.decode("utf-8", "replace"), True
        elif field == b"id":
            event_id, seen = value.decode("utf-8", "replace"), True
        elif field == b"retry":
            seen = True
    return Event(b"\n".join(data), name, event_id) if seen else None
