"""stbcore.tool_calls: tool calls read back off the wire, as the evaluator pairs them with
the model's calls."""

from __future__ import annotations

import json

import pytest

from stbcore.tool_calls import WireCall, read_tool_call
from stbcore.toolbench_names import function_name


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
