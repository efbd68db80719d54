"""Answers rebuilt from vcrpy cassettes (one cassette, or one session folder, per query).

A cassette holds the agent's chat-completion calls to an OpenAI-compatible endpoint and
the tool HTTP calls it made. The last chat-completion call carries the whole conversation,
so the trajectory is read from its messages plus the reply, in either message format
(messages.py): assistant text becomes an assistant node, each tool call a tool node
with the result the agent was shown. A tool call whose result never reached the model
takes the next tool HTTP response recorded after that call. The final answer is the ``Finish`` call's arguments; an agent that was
never offered ``Finish`` ends with its last assistant message.

Cassettes are read with vcrpy's own deserializer, never through the proxy package.
"""

from __future__ import annotations

import gzip
import json
import zlib
from pathlib import Path
from typing import Any

from vcr.serialize import deserialize
from vcr.serializers import jsonserializer, yamlserializer

from .messages import read_steps, text_of
from .model import FINISH, Answer, Problem, chain, function_schemas, tree_problem

CASSETTE_SUFFIXES = (".yaml", ".yml")
_CHAT_PATH = "/chat/completions"


class _Bad(Exception):
    """A cassette that cannot become an answer; the message says why."""


def load_cassette(path: Path, qid: str) -> Answer | Problem:
    """The answer recorded in one cassette file, named by its query id."""
    try:
        interactions, meta = _read(path)
        return _rebuild(qid, interactions, meta, str(path))
    except _Bad as exc:
        return Problem(qid, str(exc), str(path))


def load_session(folder: Path, qid: str) -> Answer | Problem:
    """The answer recorded across the cassettes of a session folder, in file-name order."""
    interactions: list[tuple[Any, dict[str, Any]]] = []
    meta: dict[str, Any] = {}
    try:
        for file in sorted(folder.iterdir(), key=lambda p: p.name):
            if file.is_file() and file.suffix in (".json", *CASSETTE_SUFFIXES):
                more, file_meta = _read(file)
                interactions.extend(more)
                meta.update(file_meta)
        return _rebuild(qid, interactions, meta, str(folder))
    except _Bad as exc:
        return Problem(qid, str(exc), str(folder))


def _read(path: Path) -> tuple[list[tuple[Any, dict[str, Any]]], dict[str, Any]]:
    serializer = yamlserializer if path.suffix in CASSETTE_SUFFIXES else jsonserializer
    try:
        text = path.read_text(encoding="utf-8")
        loaded = deserialize(text, serializer)
    except Exception as exc:  # vcrpy raises ValueError, yaml and json errors alike
        raise _Bad(f"not a readable vcrpy cassette ({type(exc).__name__}: {exc})") from exc
    requests, responses = loaded[0], loaded[1]
    meta = loaded[2] if len(loaded) > 2 and isinstance(loaded[2], dict) else {}
    return list(zip(requests, responses)), meta


def _rebuild(qid: str, interactions: list[tuple[Any, dict[str, Any]]], meta: dict[str, Any], where: str) -> Answer | Problem:
    chats: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = []
    tool_http: list[tuple[int, str]] = []
    for index, (request, response) in enumerate(interactions):
        if request.method.upper() == "POST" and request.path.rstrip("/").endswith(_CHAT_PATH):
            body = _json_body(request.body, {}, "chat-completion request")
            if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
                raise _Bad(f"chat-completion request #{index} has no messages")
            chats.append((index, body, _chat_reply(response, index)))
        else:
            tool_http.append((index, _text(response.get("body", {}).get("string"), response.get("headers", {}))))
    if not chats:
        raise _Bad("cassette holds no chat-completion call")

    last_index, request, reply = chats[-1]
    messages = list(request["messages"])
    if reply is not None:
        messages.append(reply)
    query = meta.get("query") or _query(messages)
    if not query:
        raise _Bad("no user message to take the query from")
    tools = _tools(request)
    offered_finish = any(t.get("name") == FINISH for t in tools)
    late_results = [text for i, text in tool_http if i > last_index]

    first_user = next((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "user"), -1)
    read = read_steps(messages[first_user + 1:], late_results=late_results)
    if read.finish_arguments is not None:
        final_answer = read.finish_arguments
    elif not offered_finish and read.closing_text:
        final_answer = read.closing_text
    else:
        final_answer = ""
    details = chain([{"role": "system", "message": ""}, {"role": "user", "message": query}, *read.steps])
    broken = tree_problem(details)
    if broken:
        raise _Bad(f"broken answer tree: {broken}")
    return Answer(
        query_id=str(meta.get("query_id", qid)),
        query=query,
        available_tools=tools,
        method=str(meta.get("method", "cassette")),
        total_steps=len(read.steps) + 2,
        final_answer=final_answer,
        answer_details=details,
        source="cassette",
        finish_optional=not offered_finish,
    )


def _query(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        if isinstance(message, dict) and message.get("role") == "user":
            return text_of(message)
    return ""


def _tools(request: dict[str, Any]) -> list[dict[str, Any]]:
    """The functions the agent was offered: ``tools`` (either shape) or legacy ``functions``."""
    listed = request.get("tools") if isinstance(request.get("tools"), list) else request.get("functions")
    return function_schemas(listed) if isinstance(listed, list) else []


def _chat_reply(response: dict[str, Any], index: int) -> dict[str, Any] | None:
    """The assistant message a recorded chat-completion call returned (None for an error)."""
    status = (response.get("status") or {}).get("code", 200)
    if status >= 400:
        return None
    raw = _text(response.get("body", {}).get("string"), response.get("headers", {}))
    if raw.lstrip().startswith("data:"):
        return _from_stream(raw)
    try:
        body = json.loads(raw)
        return dict(body["choices"][0]["message"])
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise _Bad(f"chat-completion reply #{index} is not a completion ({type(exc).__name__})") from exc


def _from_stream(raw: str) -> dict[str, Any]:
    """Assemble a streamed (server-sent events) completion into one message."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for line in raw.splitlines():
        line = line.strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        try:
            delta = json.loads(line[5:])["choices"][0].get("delta", {})
        except (ValueError, KeyError, IndexError, TypeError):
            continue
        content.append(delta.get("content") or "")
        for part in delta.get("tool_calls") or []:
            slot = calls.setdefault(part.get("index", 0), {"id": None, "function": {"name": "", "arguments": ""}})
            slot["id"] = part.get("id") or slot["id"]
            fn = part.get("function") or {}
            slot["function"]["name"] += fn.get("name") or ""
            slot["function"]["arguments"] += fn.get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def _text(body: Any, headers: dict[str, Any]) -> str:
    if body is None:
        return ""
    if isinstance(body, str):
        return body
    encoding = ",".join(_header(headers, "content-encoding")).lower()
    try:
        if "gzip" in encoding:
            body = gzip.decompress(body)
        elif "deflate" in encoding:
            body = zlib.decompress(body)
    except (OSError, zlib.error):
        pass  # already decoded by the recorder (decode_compressed_response)
    return body.decode("utf-8", errors="replace")


def _header(headers: dict[str, Any], name: str) -> list[str]:
    for key, value in (headers or {}).items():
        if key.lower() == name:
            return [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return []


def _json_body(body: Any, headers: dict[str, Any], what: str) -> Any:
    try:
        return json.loads(_text(body, headers) or "null")
    except ValueError as exc:
        raise _Bad(f"{what} body is not JSON") from exc
