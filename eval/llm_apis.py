"""The LLM APIs an agent's recorded traffic is read from, each turned into one shape.

A recorded POST is an LLM call when its path and body say so:

- OpenAI chat completions (``.../chat/completions``): ``messages``, and ``tools`` or the
  legacy ``functions``; the answer as one JSON completion or streamed (server-sent events).
- OpenAI Responses (``.../responses``): ``instructions``, ``input`` (a text or a list of
  items: messages, ``function_call``, ``function_call_output``), ``tools``; a request
  that names ``previous_response_id`` continues the conversation of that earlier answer.
  The answer's ``output`` items, as JSON or streamed (``response.completed``).
- Anthropic Messages (``.../messages``, a body with ``model`` and ``messages``):
  ``system``, content blocks (``text``, ``tool_use``, ``tool_result``), ``tools`` with
  ``input_schema``; the answer as JSON or streamed (content blocks and their deltas).

Each call becomes an :class:`LlmCall`: the whole conversation it sent as chat-completions
messages in today's format (``tool_calls``, ``role: tool``; the legacy ``function_call``
shape is kept as it is, messages.py reads both), the functions it offered as bare
schemas, and the assistant message it got back. Pure: no files, no network.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass
from typing import Any, Mapping

from stbcore.llm_apis import CHAT, MESSAGES, RESPONSES, conversation_api_of  # noqa: F401  (MESSAGES re-exported)

from .messages import text_of
from .model import function_schemas


class BadCall(Exception):
    """An LLM request or answer that cannot be read; the message says why."""


@dataclass
class LlmCall:
    """One recorded LLM call, in chat-completions terms."""

    index: int  # its position in the recording
    api: str
    messages: list[dict[str, Any]]  # the whole conversation the request carried
    tools: list[dict[str, Any]]  # bare function schemas
    reply: dict[str, Any] | None  # the assistant message; None when the call failed
    error: str | None = None  # why a 2xx answer could not be read (then reply is None)
    response_id: str | None = None  # Responses API: what a later request may continue from


def api_of(method: str, path: str, body: Any) -> str | None:
    """Which LLM API a request is a call of, or None for any other request."""
    return conversation_api_of(method, path, body)


def read_call(index: int, api: str, body: Any, status: int, answer: str,
              earlier: Mapping[str, list[dict[str, Any]]] = {}) -> LlmCall:
    """The call recorded at ``index``: ``body`` is its parsed request, ``answer`` the
    response text. ``earlier`` maps Responses ids to their whole conversations so far.
    Raises BadCall for a request that is not a call of ``api``."""
    if not isinstance(body, dict):
        raise BadCall(f"{api} request #{index} is not a JSON object")
    if api == CHAT:
        messages, tools = _chat_request(body, index)
    elif api == RESPONSES:
        messages, tools = _responses_request(body, index, earlier)
    else:
        messages, tools = _messages_request(body, index)
    call = LlmCall(index, api, messages, tools, None)
    if status >= 400:
        return call
    try:
        if api == CHAT:
            call.reply = _chat_reply(answer)
        elif api == RESPONSES:
            call.reply, call.response_id = _responses_reply(answer)
        else:
            call.reply = _messages_reply(answer)
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        noun = "a completion" if api == CHAT else f"an answer of the {api} API"
        call.error = f"{api} reply #{index} is not {noun} ({type(exc).__name__})"
    return call


def body_text(body: Any, headers: Mapping[str, Any] | None) -> str:
    """A recorded body as text, gunzipped or inflated when the recorder kept it encoded."""
    if body is None:
        return ""
    if isinstance(body, str):
        return body
    encoding = ",".join(_header(headers or {}, "content-encoding")).lower()
    try:
        if "gzip" in encoding:
            body = gzip.decompress(body)
        elif "deflate" in encoding:
            body = zlib.decompress(body)
    except (OSError, zlib.error):
        pass  # already decoded by the recorder (decode_compressed_response)
    return body.decode("utf-8", errors="replace")


# --- OpenAI chat completions --------------------------------------------------------

def _chat_request(body: dict[str, Any], index: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise BadCall(f"chat-completion request #{index} has no messages")
    listed = body.get("tools") if isinstance(body.get("tools"), list) else body.get("functions")
    return [m for m in messages if isinstance(m, dict)], function_schemas(listed) if isinstance(listed, list) else []


def _chat_reply(raw: str) -> dict[str, Any]:
    if raw.lstrip().startswith("data:"):
        return _chat_stream(raw)
    return dict(json.loads(raw)["choices"][0]["message"])


def _chat_stream(raw: str) -> dict[str, Any]:
    """A streamed completion put together into one message."""
    content: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    for event in _sse_data(raw):
        try:
            delta = event["choices"][0].get("delta") or {}
        except (KeyError, IndexError, TypeError, AttributeError):
            continue  # a usage-only chunk
        content.append(delta.get("content") or "")
        for part in delta.get("tool_calls") or []:
            slot = calls.setdefault(part.get("index", 0), {"id": None, "type": "function",
                                                           "function": {"name": "", "arguments": ""}})
            slot["id"] = part.get("id") or slot["id"]
            fn = part.get("function") or {}
            slot["function"]["name"] += fn.get("name") or ""
            slot["function"]["arguments"] += fn.get("arguments") or ""
        legacy = delta.get("function_call")
        if isinstance(legacy, dict):
            slot = calls.setdefault(-1, {"legacy": True, "name": "", "arguments": ""})
            slot["name"] += legacy.get("name") or ""
            slot["arguments"] += legacy.get("arguments") or ""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(content)}
    legacy_call = calls.pop(-1, None)
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    if legacy_call:
        message["function_call"] = {"name": legacy_call["name"], "arguments": legacy_call["arguments"]}
    return message


# --- OpenAI Responses ---------------------------------------------------------------

def _responses_request(
    body: dict[str, Any], index: int, earlier: Mapping[str, list[dict[str, Any]]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    messages: list[dict[str, Any]] = []
    previous = body.get("previous_response_id")
    if isinstance(previous, str):
        if previous not in earlier:
            raise BadCall(f"responses request #{index} continues {previous}, which the recording does not hold")
        messages = list(earlier[previous])
    items = body.get("input")
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        raise BadCall(f"responses request #{index} has no input")
    if isinstance(body.get("instructions"), str) and body["instructions"]:
        # New instructions replace the earlier ones; without any, the conversation keeps
        # the ones it started with, so its requests still share their leading messages.
        messages = [{"role": "system", "content": body["instructions"]},
                    *(m for m in messages if m.get("role") != "system")]
    messages.extend(_from_items(items))
    tools = [{k: v for k, v in t.items() if k in ("name", "description", "parameters")}
             for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "function" and "name" in t]
    return messages, tools


def _from_items(items: list[Any]) -> list[dict[str, Any]]:
    """Responses items as chat messages: consecutive function calls join the assistant
    message before them, so a reply and its echo in the next request read the same."""
    out: list[dict[str, Any]] = []
    for item in items:
        if not isinstance(item, dict):
            continue
        kind = item.get("type", "message")
        if kind == "message" and "role" in item:
            role = "system" if item["role"] == "developer" else item["role"]
            out.append({"role": role, "content": _parts_text(item.get("content"))})
        elif kind == "function_call":
            call = {"id": item.get("call_id"), "type": "function",
                    "function": {"name": item.get("name", ""), "arguments": item.get("arguments", "")}}
            if out and out[-1]["role"] == "assistant":
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            out.append({"role": "tool", "tool_call_id": item.get("call_id"),
                        "content": output if isinstance(output, str) else _parts_text(output)})
    return out


def _responses_reply(raw: str) -> tuple[dict[str, Any], str | None]:
    if raw.lstrip().startswith(("data:", "event:")):
        done = [e["response"] for e in _sse_data(raw)
                if isinstance(e, dict) and e.get("type") in ("response.completed", "response.incomplete")]
        if not done:
            raise ValueError("stream without response.completed")
        response = done[-1]
    else:
        response = json.loads(raw)
    messages = _from_items(response["output"])
    reply: dict[str, Any] = {"role": "assistant", "content": "".join(text_of(m) for m in messages
                                                                     if m["role"] == "assistant")}
    calls = [c for m in messages for c in m.get("tool_calls", [])]
    if calls:
        reply["tool_calls"] = calls
    return reply, response.get("id") if isinstance(response.get("id"), str) else None


# --- Anthropic Messages -------------------------------------------------------------

def _messages_request(body: dict[str, Any], index: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    messages: list[dict[str, Any]] = []
    system = body.get("system")
    system_text = system if isinstance(system, str) else _parts_text(system)
    if system_text:
        messages.append({"role": "system", "content": system_text})
    for message in body["messages"]:
        if not isinstance(message, dict):
            continue
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        if message.get("role") == "assistant":
            messages.append(_assistant_from_blocks(blocks))
            continue
        for block in blocks:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                result = block.get("content")
                messages.append({"role": "tool", "tool_call_id": block.get("tool_use_id"),
                                 "content": result if isinstance(result, str) else _parts_text(result)})
        text = _parts_text([b for b in blocks if isinstance(b, dict) and b.get("type") == "text"])
        if text or not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in blocks):
            messages.append({"role": str(message.get("role", "user")), "content": text})
    tools = [{"name": t["name"], "description": t.get("description", ""), "parameters": t["input_schema"]}
             for t in body.get("tools") or [] if isinstance(t, dict) and "name" in t and "input_schema" in t]
    return messages, tools


def _assistant_from_blocks(blocks: list[Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": _parts_text(
        [b for b in blocks if isinstance(b, dict) and b.get("type") == "text"])}
    calls = [{"id": b.get("id"), "type": "function",
              "function": {"name": b.get("name", ""), "arguments": b["input"] if isinstance(b.get("input"), str)
                           else json.dumps(b.get("input", {}), ensure_ascii=False)}}
             for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"]
    if calls:
        message["tool_calls"] = calls
    return message


def _messages_reply(raw: str) -> dict[str, Any]:
    if not raw.lstrip().startswith(("event:", "data:")):
        answer = json.loads(raw)
        if answer.get("type") == "error":
            raise ValueError("an error object")
        return _assistant_from_blocks(answer["content"])
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    for event in _sse_data(raw):
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "content_block_start":
            blocks[event["index"]] = dict(event["content_block"])
        elif kind == "content_block_delta":
            delta = event["delta"]
            block = blocks.setdefault(event["index"], {"type": "text", "text": ""})
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + delta.get("text", "")
            elif delta.get("type") == "input_json_delta":
                partial.setdefault(event["index"], []).append(delta.get("partial_json", ""))
    for i, pieces in partial.items():
        blocks[i]["input"] = "".join(pieces) or "{}"
    return _assistant_from_blocks([blocks[i] for i in sorted(blocks)])


# --- shared -------------------------------------------------------------------------

def _parts_text(parts: Any) -> str:
    """The text of a content value: a string, or the text of its parts (any API's)."""
    if isinstance(parts, str):
        return parts
    if not isinstance(parts, list):
        return ""
    return "".join(p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str))


def _sse_data(raw: str) -> list[Any]:
    """The JSON payloads of a server-sent event stream (anything else is skipped)."""
    out = []
    for line in raw.splitlines():
        line = line.strip()
        if not line.startswith("data:") or line == "data: [DONE]":
            continue
        try:
            out.append(json.loads(line[5:]))
        except ValueError:
            continue
    return out


def _header(headers: Mapping[str, Any], name: str) -> list[str]:
    for key, value in headers.items():
        if key.lower() == name:
            return [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return []
