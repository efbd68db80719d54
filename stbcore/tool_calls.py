"""Which recorded requests call a tool, and which tool: how the kinds of traffic read
their tool calls back off the wire, in one place for the proxy and the evaluator.

An agent's model names a function and its arguments; the request that serves the call
names the same tool in its kind's own way. A kind whose requests carry that name gives a
reader here; stbeval's trajectories use them to pair each tool request with the model's
call it served (by name, not by guessing from the text it holds), and to leave out the
requests of a protocol's own housekeeping. A request no reader takes is plain HTTP: the
evaluator pairs it by the argument values and name parts its URL and body hold.

Readers return a WireCall for a request of their kind, None for any other request.
Standard library only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

from stbcore.toolbench_names import called_api_key, category_key, function_name, standard_tool_name


@dataclass(frozen=True)
class WireCall:
    """A request read as its kind reads it. ``name`` is the function an agent's model calls
    for it (ToolBench's ``<api>_for_<tool>``); None for a request of the kind's own protocol
    that calls no tool, which belongs to no step of a trajectory."""

    kind: str
    name: str | None
    arguments: dict[str, Any] = field(default_factory=dict)


Reader = Callable[[str, str, Any], "WireCall | None"]  # (method, path, parsed JSON body)


def virtual_call(method: str, path: str, body: Any) -> WireCall | None:
    """A StableToolBench /virtual call: ``{category, tool_name, api_name, tool_input}``,
    ``tool_input`` a JSON text (or an object). ``api_name`` may be the API's name or the
    whole function name the agent saw; both give the same function."""
    if method.upper() != "POST" or not path.rstrip("/").endswith("/virtual") or not isinstance(body, dict):
        return None
    tool, api = body.get("tool_name"), body.get("api_name")
    if not isinstance(tool, str) or not isinstance(api, str):
        return None
    category = body.get("category") if isinstance(body.get("category"), str) else ""
    tool_std = standard_tool_name(tool, category_key(category))
    name = function_name(called_api_key(api, tool, category), tool_std)
    return WireCall("stb", name, _arguments(body.get("tool_input")))


READERS: tuple[Reader, ...] = (virtual_call,)


def read_tool_call(method: str, path: str, body: Any) -> WireCall | None:
    """What the first reader that takes the request makes of it, or None (plain HTTP)."""
    for reader in READERS:
        call = reader(method, path, body)
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
