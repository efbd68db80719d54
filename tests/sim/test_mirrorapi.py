"""StableToolBench's trained simulator (MirrorAPI) and prompt templates, without a model: the
exact user message its model gets (docs, tool and category named as StableToolBench names them),
its system prompt read from a StableToolBench checkout without running it, replies read leniently
(--mirrorapi-parse recover) as far as they go, and templates filled or refused with the reason."""

from __future__ import annotations

import pytest

from stbproxy.errors import ConfigError
from stbproxy.models import Request
from stbproxy.sim.call_facts import CallFacts
from stbproxy.sim.llm_prompt import BadReply
from stbproxy.sim.mirror_api import read_reply, user_message
from stbproxy.sim.prompt_file import PromptTemplate, stb_system_prompt
from stbproxy.stb.catalog import ApiDoc
from tests.sim.mirrorapi_helpers import (
    COT,
    HEALTH,
    HEALTH_MESSAGE,
    PLAIN,
    TOOLBENCH_KEY,
    checkout,
)


def facts(args, doc=HEALTH) -> CallFacts:
    return CallFacts(Request("POST", "http://127.0.0.1/virtual"), doc, args, ())


# -- the request ------------------------------------------------------------------------------------


def test_the_user_message_is_the_one_the_model_was_trained_on():
    assert user_message(facts({"verbose": True, "toolbench_key": TOOLBENCH_KEY})) == HEALTH_MESSAGE


def test_an_api_nobody_described_is_named_by_its_request():
    message = user_message(CallFacts(Request("GET", "https://api.example.test/v2/items?q=1"), None, {"q": "1"}, ()))
    assert message.startswith("API doc:\n{'api_name': 'GET /v2/items', 'api_description': ''")
    assert "'tool_name': 'api.example.test'" in message and message.endswith("Request:\n{'q': '1'}")


def test_tool_and_category_are_named_as_stabletoolbench_names_them():
    from stbproxy.sim.mirror_api import api_doc

    doc = ApiDoc(category="Business Software", tool="Data for Good", api="Get Stats", url="https://x.example/s")
    described = api_doc(CallFacts(Request("GET", "https://x.example/s"), doc, {}, ()))
    # the category standardized; the tool standardized, cut at its first "_for_" as the server cuts
    # what the client sends (data_for_good); the API by its documented name
    assert (described["tool_category"], described["tool_name"], described["api_name"]) == (
        "Business_Software", "data", "Get Stats")


def test_an_mcp_tool_is_described_from_its_own_doc():
    from stbproxy.mcp.tools import tool_doc

    doc = tool_doc("weather-srv", {"name": "get_forecast", "description": "Forecast for a city", "inputSchema": {
        "type": "object", "required": ["city"],
        "properties": {"city": {"type": "string", "description": "City"}, "days": {"type": "integer", "default": 3}}}})
    message = user_message(CallFacts(Request("POST", "http://127.0.0.1/mcp"), doc, {"city": "Oslo", "days": 2}, ()))
    assert message == (
        "API doc:\n{'api_name': 'get_forecast', 'api_description': 'Forecast for a city', 'required_parameters': "
        "[{'name': 'city', 'type': 'STRING', 'description': 'City', 'default': None}], 'optional_parameters': "
        "[{'name': 'days', 'type': 'INTEGER', 'description': '', 'default': 3}], 'tool_description': "
        "'the MCP server weather-srv', 'tool_name': 'weather_srv', 'tool_category': 'mcp'}\n\n"
        "Request:\n{'city': 'Oslo', 'days': 2}")


def test_the_system_prompt_is_read_from_the_checkout_without_running_it(tmp_path):
    root = checkout(tmp_path / "StableToolBench")
    assert stb_system_prompt(root, "plain") == PLAIN
    assert stb_system_prompt(root, "cot") == COT
    with pytest.raises(ConfigError, match="assigns no COT_SYSTEM"):
        stb_system_prompt(checkout(tmp_path / "other", "SFT_SYSTEM = 'x'\n"), "cot")
    with pytest.raises(ConfigError, match="is --stb-dir a StableToolBench checkout"):
        stb_system_prompt(tmp_path / "nowhere", "plain")
    with pytest.raises(ConfigError, match="SFT_SYSTEM is not a plain string"):
        stb_system_prompt(checkout(tmp_path / "made", "SFT_SYSTEM = make()\n"), "plain")


# -- reading replies ---------------------------------------------------------------------------------


@pytest.mark.parametrize("reply,error,response,how", [
    ('{"error": "", "response": "{\\"status\\": \\"ok\\"}"}', "", '{"status": "ok"}', ""),
    ('```json\n{"error": "", "response": {"status": "ok"}}\n```', "", {"status": "ok"}, "code fence"),
    ('{"mechanism_of_the_api": "It reports health.", "error": "", "response": "{\\"status\\": \\"ok\\"}"}',
     "", '{"status": "ok"}', "mechanism field left out"),
    # the model's own unescaped quotes in the mechanism, then the output cut off inside the response
    ('{"mechanism_of_the_api": "It says "up" or "down"", "error": "", "response": "{\\"status\\": \\"o',
     "", '{"status": "o', "mechanism field left out, members read one by one, unclosed string"),
    ('{"error": "", "response": "The service is up."}\nHope this helps!', "", "The service is up.",
     "text around the object left out"),
    ('{"error": "", "response": {"checks": [{"db": "ok"}, {"cache": "sl', "", {"checks": [{"db": "ok"}]},
     "members read one by one, truncated JSON closed after its last complete member"),
    ('```\n{"error": "", "response": "fine"', "", "fine", "code fence, members read one by one"),
    ('{"error": "Missing required parameter: city", "response": ""}', "Missing required parameter: city", "", ""),
    # a string holding JSON cut at the token limit: its complete members, closed, in the model's own spelling
    ('{"error":"","response":"{\\"results\\":[{\\"id\\":1},{\\"id\\":2', "", '{"results":[{"id":1}]}',
     "members read one by one, unclosed string, truncated JSON closed after its last complete member"),
    # the answer's JSON written with its quotes unescaped: kept whole, not cut at its first quote
    ('{"error": "", "response": "{"status": "ok", "n": 1}"}', "", '{"status": "ok", "n": 1}',
     "members read one by one, unescaped quotes kept"),
    ('{"error": "Param "x" is bad", "response": ""}', 'Param "x" is bad', "",
     "members read one by one, unescaped quotes kept"),
    ('{"error": "", "response": "{"a": {"b": "c"}}"}\nHope this "helps"', "", '{"a": {"b": "c"}}',
     "members read one by one, unescaped quotes kept"),
    # raw newlines in a string (not JSON, but what the model meant): no trailing quote and brace kept
    ('{"error": "", "response": "line 1\nline 2"}', "", "line 1\nline 2", "raw control characters in strings read"),
    ("{\"error\": \"\", \"response\": \"it\\'s \\u00e9t\\u00e9 \\ud83d\\ude00\"}", "", "it's \u00e9t\u00e9 \U0001f600",
     "members read one by one"),
    ('{"error": "", "response": "caf\\u00e9 \\u00', "", "caf\u00e9 ", "members read one by one, unclosed string"),
    ("{'error': '', 'response': {'ok': True, 'n': None}}", "", {"ok": True, "n": None}, "python literal"),
    ('Sure {see below}: {"error": "", "response": {"a": 1}} Done.', "", {"a": 1}, "text around the object left out"),
    # member names inside other values are not members: the mechanism's prose, the answer's own "error"
    ('{"mechanism_of_the_api": "It says "error": "x" at times", "error": "", "response": "ok"',
     "", "ok", "mechanism field left out, members read one by one"),
    ('{"response": "{"error": "inner"}"}', "", '{"error": "inner"}', "members read one by one, unescaped quotes kept"),
])
def test_malformed_replies_are_read_as_far_as_they_go(reply, error, response, how):
    got_error, got_response, notes = read_reply(reply)
    assert (got_error, got_response, ", ".join(notes)) == (error, response, how)


@pytest.mark.parametrize("reply", ["", "   ", "I am sorry, I cannot help with that.", '{"error": "", "response": ""}',
                                   '{"result": 1}', "x" * 70_000,
                                   # cut before its first complete member: nothing honest to keep
                                   '{"error": "", "response": {"status": "u',
                                   '```json\n{"mechanism_of_the_api": "It reports the status of'])
def test_replies_with_nothing_to_recover_are_bad(reply):
    with pytest.raises(BadReply):
        read_reply(reply)


# -- templates ---------------------------------------------------------------------------------------


def test_a_template_fills_known_placeholders_and_leaves_other_braces():
    template = PromptTemplate.parse(
        "[system]\nYou are {api_doc_json}'s server.\n[user]\nDoc: {api_doc}\nCall: {request_json}\n"
        'Reply as {"error": "", "response": {}} with {{request}} literal.\n{examples}', "t.txt")
    system, user = template.messages(facts({"verbose": True}), [("{}", "up")], "ignored: the template has one")
    assert system["role"] == "system" and system["content"].startswith('You are {"api_name": "Health"')
    assert user["content"].split("\n")[0] == "Doc: " + HEALTH_MESSAGE.split("\n")[1]
    assert 'Call: {"verbose": true}' in user["content"]
    assert 'Reply as {"error": "", "response": {}} with {request} literal.' in user["content"]
    assert user["content"].endswith("Call 1 arguments: {}\nCall 1 answer: up")


def test_a_template_without_sections_is_the_user_message_and_takes_the_given_system_prompt():
    template = PromptTemplate.parse("API doc:\n{api_doc}\n\nRequest:\n{request}")
    assert template.messages(facts({"verbose": True}), [], PLAIN) == [
        {"role": "system", "content": PLAIN}, {"role": "user", "content": HEALTH_MESSAGE}]
    assert template.messages(facts({"verbose": True}), [], None) == [{"role": "user", "content": HEALTH_MESSAGE}]


@pytest.mark.parametrize("text,words", [
    ("Call {api_name}", "unknown placeholder {api_name}; the known ones are {api_doc}, {api_doc_json}"),
    ("[user]\n{{api_doc}} is fine, {Request} is not", "unknown placeholder {Request}"),
    ("[system]\nonly a system\n", "no user message"),
    ("preamble\n[user]\nx", "text before its first [system] or [user] line"),
    ("[user]\na\n[user]\nb", "two [user] sections"),
])
def test_bad_templates_are_refused_with_the_reason(text, words):
    with pytest.raises(ConfigError) as caught:
        PromptTemplate.parse(text, "t.txt")
    assert words in str(caught.value)
