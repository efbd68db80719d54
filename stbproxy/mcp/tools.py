"""The tools an MCP server lists, as a simulator needs them: found in the ``tools/list``
answers the proxy stored or passed on, described in ToolBench's doc fields, and the
``CallToolResult`` a simulated answer is wrapped in. Pure (the store is read through the
function a ToolIndex is given)."""

from __future__ import annotations

import json
from typing import Any, Callable, Iterable, Mapping

from stbproxy.mcp import jsonrpc, sse
from stbproxy.models import Response
from stbproxy.recent import Recent
from stbproxy.stb.api_doc import ApiDoc, Param

SERVERS_KEPT = 256
CATEGORY = "mcp"

# The stored answer bodies (JSON or server-sent events) under a key prefix.
StoredBodies = Callable[[str], Iterable[Response]]


class ToolIndex:
    """Tool definitions by server, from every ``tools/list`` answer seen (all pages), and
    from the store the first time a server's tools are asked for."""

    def __init__(self, stored: StoredBodies | None = None) -> None:
        self._stored = stored
        self._tools: Recent[dict[str, dict]] = Recent(SERVERS_KEPT)

    def note(self, server: str, response: Response) -> None:
        """Remember the tools a ``tools/list`` answer lists."""
        tools = listed_tools(response)
        if tools:
            known = self._tools.get(server)
            if known is None:
                known = self._tools.put(server, {})
            known.update(tools)

    def tool(self, server: str, name: str, prefix: str) -> dict | None:
        """The definition of tool ``name`` on ``server`` (``prefix``: where its tools/list
        answers are stored), or None when no answer seen or stored lists it."""
        known = self._tools.get(server)
        if (known is None or name not in known) and self._stored is not None:
            for response in self._stored(prefix):
                self.note(server, response)
            known = self._tools.get(server)
        return known.get(name) if known else None


def listed_tools(response: Response) -> dict[str, dict]:
    """The tools of one ``tools/list`` answer, by name."""
    answer = answer_object(response)
    result = answer.get("result") if answer else None
    tools = result.get("tools") if isinstance(result, dict) else None
    if not isinstance(tools, list):
        return {}
    return {t["name"]: t for t in tools if isinstance(t, dict) and isinstance(t.get("name"), str)}


def answer_object(response: Response) -> dict | None:
    """The JSON-RPC response an answer carries, whether as JSON or as server-sent events."""
    if sse.is_event_stream(response.header("content-type")):
        return sse.answer_in(response.body)
    return jsonrpc.answer_of(response.body)


def tool_doc(server_name: str, tool: Mapping[str, Any]) -> ApiDoc:
    """A tool in the doc fields every simulator reads (its schemas kept whole beside them)."""
    given = tool.get("inputSchema")
    schema: dict[str, Any] = given if isinstance(given, dict) else {}
    listed = schema.get("properties")
    properties: dict[str, Any] = listed if isinstance(listed, dict) else {}
    required = set(schema.get("required") or ())

    def param(name: str, spec: Any) -> Param:
        spec = spec if isinstance(spec, dict) else {}
        return Param(name, str(spec.get("type") or "string").upper(), str(spec.get("description") or ""),
                     spec.get("default"))

    description = str(tool.get("description") or tool.get("title") or "")
    return ApiDoc(
        category=CATEGORY, tool=server_name, api=str(tool["name"]), method="POST",
        tool_description=f"the MCP server {server_name}", api_description=description,
        required_parameters=tuple(param(n, s) for n, s in properties.items() if n in required),
        optional_parameters=tuple(param(n, s) for n, s in properties.items() if n not in required),
        input_schema=schema or None, output_schema=tool.get("outputSchema"),
    )


def call_tool_result(value: Any, tool: Mapping[str, Any], is_error: bool = False) -> dict:
    """A ``CallToolResult`` holding ``value``: as text, and as ``structuredContent`` when the
    tool declares an ``outputSchema`` (its text then being the same JSON, as servers write it)."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, indent=2)
    result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
    if tool.get("outputSchema") is not None and not is_error:
        result["structuredContent"] = value
    result["isError"] = is_error
    return result
