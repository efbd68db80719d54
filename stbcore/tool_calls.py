"""Which recorded requests call a tool, and which tool: how the kinds of traffic read
their tool calls back off the wire, in one place for the proxy and the evaluator.

An agent's model names a function and its arguments; the request that serves the call
names the same tool in its kind's own way. A kind whose requests carry that name gives a
reader here; stbeval's trajectories use them to pair each tool request with the model's
call it served (by name, not by guessing from the text it holds), and to leave out the
requests of a protocol's own housekeeping. A request no reader takes is plain HTTP: the
evaluator pairs it by the argument values and name parts its URL and body hold. Readers:
StableToolBench's /virtual calls, and MCP's messages (``tools/call`` names its tool).

Readers return a WireCall for a request of their kind, None for any other request.
Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from stbcore.toolbench_names import called_api_key, category_key, function_name, standard_tool_name


@dataclass(frozen=True)
class WireCall:
    """A request read as its kind reads it. ``name`` is the function an agent's model calls
    for it (ToolBench's ``<api>_for_<tool>``); None for a request of the kind's own protocol
    that calls no tool, which belongs to no step of a trajectory."""

    kind: str
    name: str | None
    arguments: dict[str, Any] = field(default_factory=dict)


# (method, path, parsed JSON body, request headers with lower-case names)
Reader = Callable[[str, str, Any, Mapping[str, str]], "WireCall | None"]


def virtual_call(method: str, path: str, body: Any, headers: Mapping[str, str]) -> WireCall | None:
    """A StableToolBench /virtual call: ``{category, tool_name, api_name, tool_input}``,
    ``tool_input`` a JSON text (or an object). ``api_name`` may be the API's name or the
    whole function name the agent saw; both give the same function."""
    if method.upper() != "POST" or not path.rstrip("/").endswith("/virtual") or not isinstance(body, dict):
        return None
    tool, api = body.get("tool_name"), body.get("api_name")
    if not isinstance(tool, str) or not isinstance(api, str):
        return None
    category = body.get("category")
    category = category if isinstance(category, str) else ""
    tool_std = standard_tool_name(tool, category_key(category))
    name = function_name(called_api_key(api, tool, category), tool_std)
    return WireCall("stb", name, _arguments(body.get("tool_input")))


# MCP: a JSON-RPC message whose method is MCP's, or a session's GET stream or DELETE.
_MCP_SESSION = "mcp-session-id"
_MCP_ONLY = ("initialize", "ping", "tools/", "resources/", "prompts/", "completion/", "server/", "logging/",
             "notifications/", "subscriptions/", "tasks/")


def mcp_call(method: str, path: str, body: Any, headers: Mapping[str, str]) -> WireCall | None:
    """An MCP message: ``tools/call`` names its tool (the name an agent's model calls, or
    ends with when its host prefixes a server name); every other message of MCP's (the
    handshake, lists, notifications, a session's GET stream and end) is housekeeping."""
    method = method.upper()
    if method in ("GET", "DELETE"):
        return WireCall("mcp", None) if _MCP_SESSION in headers else None
    if method != "POST" or not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        return None
    rpc = body.get("method")
    if rpc is None:  # the client answering a server's request
        return WireCall("mcp", None) if _MCP_SESSION in headers or "mcp-protocol-version" in headers else None
    if not isinstance(rpc, str) or not rpc.startswith(_MCP_ONLY):
        return None
    params = body.get("params")
    params = params if isinstance(params, dict) else {}
    if rpc == "tools/call" and isinstance(params.get("name"), str):
        arguments = params.get("arguments")
        return WireCall("mcp", params["name"], arguments if isinstance(arguments, dict) else {})
    return WireCall("mcp", None)


READERS: tuple[Reader, ...] = (virtual_call, mcp_call)


def answer_text(call: WireCall, response_text: str) -> str:
    """What the tool answered, as an agent's model reads it: for MCP the result's text
    content (its structured content when it has no text; the error's message for an
    error), from a JSON answer or the events of a streamed one; else the text as it is."""
    if call.kind != "mcp":
        return response_text
    message = _json_rpc_answer(response_text)
    if message is None:
        return response_text
    error = message.get("error")
    if isinstance(error, dict):
        return f"error {error.get('code')}: {error.get('message')}"
    result = message.get("result")
    result = result if isinstance(result, dict) else {}
    texts = [c["text"] for c in result.get("content") or [] if isinstance(c, dict) and isinstance(c.get("text"), str)]
    if texts:
        return "\n".join(texts)
    if "structuredContent" in result:
        return json.dumps(result["structuredContent"], ensure_ascii=False)
    return json.dumps(result, ensure_ascii=False)


def _json_rpc_answer(text: str) -> dict[str, Any] | None:
    candidates = [text]
    if not text.lstrip().startswith("{"):  # server-sent events: the data of each event
        candidates = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
    for candidate in reversed(candidates):
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict) and value.get("jsonrpc") == "2.0" and ("result" in value or "error" in value):
            return value
    return None


def names_match(called: str, wire_name: str) -> bool:
    """Whether the function a model called is the tool a request names: the same name, or
    the tool's name after a host's prefix (``demo__forecast``, ``demo.forecast``)."""
    return called == wire_name or (called.endswith(wire_name) and called[-len(wire_name) - 1] in "_.-/:")


def read_tool_call(method: str, path: str, body: Any, headers: Mapping[str, str] | None = None) -> WireCall | None:
    """What the first reader that takes the request makes of it, or None (plain HTTP).
    ``headers``: the request's, names in lower case."""
    for reader in READERS:
        call = reader(method, path, body, headers or {})
        if call is not None:
            return call
    return None


def _arguments(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}
