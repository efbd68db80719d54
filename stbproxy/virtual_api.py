"""``POST /virtual``: StableToolBench's virtual server, field for field.

Request: ``{category, tool_name, api_name, tool_input, strip, toolbench_key}``.
Answer: HTTP 200 with ``{"error": ..., "response": ...}``, whatever happened, except a
body that is not a /virtual request at all (not a JSON object, a required field missing
or of the wrong type): that gets a 422 JSON error naming the field. The call follows the
same calling rules and the same key as proxied HTTP traffic (routing.Call).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Mapping

from stbproxy import jsonsafe, keys
from stbproxy.catalog import Catalog, api_key_name, category_key, tool_key
from stbproxy.engine import SOURCE_HEADER, Answer, Engine
from stbproxy.models import ApiRef, Request, Source
from stbproxy.bodies import body_value
from stbproxy.routing import Call, api_request, stored_request

CHAT_WITH_USER = "chat_with_user"
_TEXT_FIELDS = ("category", "tool_name", "api_name")


@dataclass(frozen=True)
class VirtualReply:
    status: int
    document: dict
    source: str

    def body(self) -> bytes:
        return json.dumps(self.document, ensure_ascii=False).encode("utf-8", "surrogatepass")


def error_reply(message: str, status: int = 200, source: str = "error") -> VirtualReply:
    return VirtualReply(status, {"error": message, "response": ""}, source)


@dataclass(frozen=True)
class VirtualRequest:
    category: str
    tool_name: str
    api_name: str
    args: dict[str, Any]
    raw: dict[str, Any]  # the body as sent, for a ToolBench-style upstream


# A surrogate escape, or one encoded raw (json reads bytes with surrogatepass): only such
# bodies need the full check.
_SURROGATE_ESCAPE = re.compile(rb"\\[uU][dD][89a-fA-F]|\xed[\xa0-\xbf]")


def _is_unicode(value: Any) -> bool:
    """Whether a parsed JSON value is free of lone surrogates (it encodes as UTF-8)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def parse(body: bytes) -> VirtualRequest | VirtualReply:
    """The request, or the reply that explains why it is not one."""
    try:
        raw = jsonsafe.loads(body)
    except jsonsafe.JsonTooDeep as exc:
        return error_reply(f"the request body is {exc}", 422)
    except (ValueError, UnicodeDecodeError) as exc:
        return error_reply(f"the request body is not JSON: {exc}", 422)
    if not isinstance(raw, dict):
        return error_reply("the request body must be a JSON object with category, tool_name, api_name "
                           "and tool_input", 422)
    for name in _TEXT_FIELDS:
        if name not in raw:
            return error_reply(f"field {name!r} is missing", 422)
        if not isinstance(raw[name], str):
            return error_reply(f"field {name!r} must be a string, not {type(raw[name]).__name__}", 422)
    tool_input = raw.get("tool_input", "")
    if isinstance(tool_input, str):
        try:
            args = jsonsafe.loads(tool_input) if tool_input.strip() else {}
        except jsonsafe.JsonTooDeep as exc:
            return error_reply(f"field 'tool_input' is {exc}", 422)
        except ValueError as exc:
            # As the original server: a 200 with an error the agent can read and fix.
            return error_reply(f"tool_input is not valid JSON: {exc}")
    elif isinstance(tool_input, dict) or tool_input is None:
        args = tool_input or {}
    else:
        return error_reply(f"field 'tool_input' must be a JSON string or object, not {type(tool_input).__name__}", 422)
    if not isinstance(args, dict):
        return error_reply(f"tool_input must hold a JSON object of arguments, not {type(args).__name__}")
    if _SURROGATE_ESCAPE.search(body) and not (_is_unicode(raw) and _is_unicode(args)):
        return error_reply("the request holds a lone surrogate (a \\ud800-\\udfff escape without its pair), "
                           "which is not Unicode text and cannot be forwarded", 422)
    return VirtualRequest(raw["category"], raw["tool_name"], raw["api_name"], args, raw)


class VirtualApi:
    def __init__(self, engine: Engine, catalog: Catalog | None, *, toolbench_url: str | None = None,
                 rapidapi_key: str | None = None) -> None:
        self.engine = engine
        self.catalog = catalog
        self.toolbench_url = toolbench_url
        self.rapidapi_key = rapidapi_key

    async def handle(self, body: bytes, session: str | None = None) -> VirtualReply:
        parsed = parse(body)
        if isinstance(parsed, VirtualReply):
            return parsed
        if parsed.api_name == CHAT_WITH_USER:
            return VirtualReply(200, {"error": "", "response": "Chat with user."}, "chat")
        answer = await self.engine.answer(self.call_for(parsed), session)
        return reply_from_answer(answer)

    def call_for(self, request: VirtualRequest) -> Call:
        doc = self.catalog.lookup(request.category, request.tool_name, request.api_name) if self.catalog else None
        if doc is not None:
            ref = doc.ref
        else:  # unknown API: still keyed by its standardized names, so it caches
            cat = category_key(request.category)
            ref = ApiRef(cat, tool_key(request.tool_name, request.category), api_key_name(request.api_name))
        rules = self.engine.config.rules
        key = keys.api_key(ref, request.args, rules)
        stored = stored_request(ref, doc, request.args)
        secret = (("X-RapidAPI-Key", self.rapidapi_key),) if self.rapidapi_key else ()
        real = api_request(doc, request.args, secret) if doc is not None else None
        if self.toolbench_url:
            upstream = Request("POST", self.toolbench_url, (("Content-Type", "application/json"),),
                               json.dumps(request.raw, ensure_ascii=False).encode())
            return Call(key, stored, upstream, ref, request.args, stored.host, "virtual")
        return Call(key, stored, real, ref, request.args, stored.host)


def reply_from_answer(answer: Answer) -> VirtualReply:
    """Turn the engine's HTTP-shaped answer back into a StableToolBench answer object."""
    response = answer.response
    source = answer.source.value
    value = body_value(response.body, response.header("content-type"))
    if answer.source is Source.MISS and isinstance(value, Mapping):  # replay: say why, and what was near
        return VirtualReply(200, {"error": value.get("error", "no stored answer"), "response": "",
                                  "closest": value.get("closest")}, source)
    if answer.source in (Source.SIMULATED_ERROR, Source.INJECTED) or (
        source == Source.UPSTREAM.value and response.status >= 400
    ):
        if isinstance(value, Mapping) and "error" in value and "response" in value:
            return VirtualReply(200, dict(value), source)
        return VirtualReply(200, {"error": f"HTTP {response.status}", "response": value}, source)
    error = answer.meta.get("error", "") if answer.meta else ""
    if response.status >= 400 and not error:
        error = f"HTTP {response.status}"
    return VirtualReply(200, {"error": error, "response": value}, source)


def virtual_headers(reply: VirtualReply) -> dict[str, str]:
    return {"Content-Type": "application/json", SOURCE_HEADER: reply.source}
