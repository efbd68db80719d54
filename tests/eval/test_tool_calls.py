"""stbcore.tool_calls: tool calls read back off the wire, as the evaluator pairs them with
the model's calls."""

from __future__ import annotations

import json

import pytest

from stbcore.tool_calls import WireCall, answer_text, names_match, read_tool_call
from stbcore.toolbench_names import function_name
from tests.mcp_demo import rpc


def virtual(**fields):
    return {"category": "Data", "tool_name": "TheClique", "api_name": "Songkick concert",
            "tool_input": json.dumps({"id_conc": "1-band"}), "strip": "", "toolbench_key": "", **fields}


@pytest.mark.parametrize("method,path,body,expected", [
    # the API's name, or the whole function name the agent was shown: one function
    ("POST", "/virtual", virtual(), WireCall("stb", "songkick_concert_for_theclique", {"id_conc": "1-band"})),
    ("POST", "/s/run-1/virtual", virtual(api_name="songkick_concert_for_theclique"),
     WireCall("stb", "songkick_concert_for_theclique", {"id_conc": "1-band"})),
    # a tool name that carries its category suffix, as StableToolBench's cache folders do
    ("POST", "/virtual", virtual(tool_name="theclique_for_Data"),
     WireCall("stb", "songkick_concert_for_theclique", {"id_conc": "1-band"})),
    # tool_input as an object, empty, or not JSON: the call is still named
    ("POST", "/virtual", virtual(tool_input={"id_conc": 7}), WireCall("stb", "songkick_concert_for_theclique",
                                                                      {"id_conc": 7})),
    ("POST", "/virtual", virtual(tool_input=""), WireCall("stb", "songkick_concert_for_theclique", {})),
    ("POST", "/virtual", virtual(tool_input="{not json"), WireCall("stb", "songkick_concert_for_theclique", {})),
    # not a /virtual call: plain HTTP, which no reader takes
    ("GET", "/virtual", virtual(), None),
    ("POST", "/virtual/more", virtual(), None),
    ("POST", "/virtual", {"tool_name": "TheClique"}, None),
    ("POST", "/virtual", ["not", "an", "object"], None),
    ("POST", "/weather", {"city": "Oslo"}, None),
])
def test_read_tool_call(method, path, body, expected):
    assert read_tool_call(method, path, body) == expected


def test_a_long_name_is_cut_as_the_agent_saw_it():
    tool, api = "A tool with a rather long name indeed", "an api whose name is long as well, and longer"
    wire = read_tool_call("POST", "/virtual", virtual(tool_name=tool, api_name=api))
    assert wire.name == function_name(api, tool) and len(wire.name) == 64


mcp = rpc


SESSION = {"mcp-session-id": "s1"}


@pytest.mark.parametrize("method,body,headers,expected", [
    ("POST", mcp("tools/call", {"name": "forecast", "arguments": {"city": "Oslo"}}), {},
     WireCall("mcp", "forecast", {"city": "Oslo"})),
    ("POST", mcp("tools/call", {"name": "forecast"}), {}, WireCall("mcp", "forecast", {})),
    # the rest of MCP is housekeeping: no step of a trajectory
    ("POST", mcp("initialize", {"protocolVersion": "2025-11-25"}), {}, WireCall("mcp", None)),
    ("POST", mcp("tools/list"), {}, WireCall("mcp", None)),
    ("POST", mcp("notifications/initialized", message_id=None), SESSION, WireCall("mcp", None)),
    ("POST", {"jsonrpc": "2.0", "id": "srv", "result": {}}, SESSION, WireCall("mcp", None)),
    ("GET", None, SESSION, WireCall("mcp", None)),
    ("DELETE", None, SESSION, WireCall("mcp", None)),
    # not MCP's
    ("GET", None, {}, None),
    ("POST", {"jsonrpc": "2.0", "id": "srv", "result": {}}, {}, None),
    ("POST", mcp("eth_call"), {}, None),
    ("POST", {"method": "tools/call"}, {}, None),
])
def test_mcp_messages(method, body, headers, expected):
    assert read_tool_call(method, "/mcp", body, headers) == expected


def test_what_an_mcp_tool_answered():
    wire = WireCall("mcp", "forecast")
    result = {"jsonrpc": "2.0", "id": 3, "result": {"content": [{"type": "text", "text": "sunny"},
                                                                {"type": "text", "text": "21 C"}]}}
    assert answer_text(wire, json.dumps(result)) == "sunny\n21 C"
    streamed = f"event: message\r\ndata: {json.dumps(result)}\r\n\r\n"
    assert answer_text(wire, streamed) == "sunny\n21 C"
    structured = {"jsonrpc": "2.0", "id": 3, "result": {"content": [], "structuredContent": {"high": 21}}}
    assert answer_text(wire, json.dumps(structured)) == '{"high": 21}'
    error = {"jsonrpc": "2.0", "id": 3, "error": {"code": -32602, "message": "Unknown tool"}}
    assert answer_text(wire, json.dumps(error)) == "error -32602: Unknown tool"
    assert answer_text(wire, "not json") == "not json"
    assert answer_text(WireCall("stb", "x"), '{"error": "", "response": 1}') == '{"error": "", "response": 1}'


@pytest.mark.parametrize("called,wire,match", [
    ("forecast", "forecast", True), ("demo__forecast", "forecast", True), ("demo.forecast", "forecast", True),
    ("myforecast", "forecast", False), ("forecast", "demo__forecast", False), ("cast", "forecast", False),
])
def test_names_match(called, wire, match):
    assert names_match(called, wire) is match
