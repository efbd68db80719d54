"""Trajectories from traffic: conversations grouped, tool requests attributed, queries named.

Hand-made recordings of the three LLM APIs read, written with vcrpy's serializer; the
recorded pipeline run is in test_eval_pipeline_session.py.
"""

from __future__ import annotations

import json

from vcr.serializers import yamlserializer

from stbeval.answers import load_answers
from stbeval.cassettes import load_document
from stbeval.model import FINISH, Answer, main_path, parse_finish
from stbeval.queries import Query, QueryIndex

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": {}}},
         {"type": "function", "function": {"name": FINISH, "description": "end", "parameters": {}}}]
SYSTEM = {"role": "system", "content": "You are a helpful agent."}


def _interaction(uri, request_body, status, response_body, content_type="application/json", method="POST"):
    return {
        "request": {"method": method, "uri": uri, "headers": {},
                    "body": request_body if request_body is None or isinstance(request_body, str)
                    else json.dumps(request_body)},
        "response": {"status": {"code": status, "message": "OK"}, "headers": {"Content-Type": [content_type]},
                     "body": {"string": response_body if isinstance(response_body, str)
                              else json.dumps(response_body)}},
    }


def _chat(messages, reply, tools=TOOLS):
    return _interaction("https://llm.example/v1/chat/completions", {"model": "m", "messages": messages, "tools": tools},
                        200, {"choices": [{"index": 0, "message": reply}]})


def _tool(uri, body):
    return _interaction(uri, None, 200, body, method="GET")


def _user(task):
    return {"role": "user", "content": task}


def _calls(*calls):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        for cid, name, args in calls]}


def _result(cid, text):
    return {"role": "tool", "tool_call_id": cid, "content": text}


def _finish(cid, text):
    return _calls((cid, FINISH, {"return_type": "give_answer", "final_answer": text}))


def _conversation(task, city, prefix):
    """The three requests of one weather conversation, and its tool request."""
    user = _user(task)
    first = _calls((f"{prefix}1", "get_weather", {"city": city}))
    history = [SYSTEM, user, first, _result(f"{prefix}1", f"sunny in {city}")]
    return (_chat([SYSTEM, user], first),
            _tool(f"https://weather.example/now?city={city}", f"sunny in {city}"),
            _chat(history, _finish(f"{prefix}2", f"{city}: sunny")))


def _document(interactions):
    return {"version": 1, "interactions": interactions}


def _answers(interactions, queries=None):
    named, notes = load_document(_document(interactions), "rec", queries)
    return {qid: item for (_g, item) in named for qid in [item.query_id]}, notes


def test_interleaved_conversations_each_become_one_answer():
    a1, a_tool, a2 = _conversation("Weather in Oslo?", "Oslo", "a")
    b1, b_tool, b2 = _conversation("Weather in Rome?", "Rome", "b")
    answers, notes = _answers([a1, b1, b_tool, a_tool, b2, a2])
    assert notes == [] and len(answers) == 2
    by_query = {a.query: a for a in answers.values()}
    for city in ("Oslo", "Rome"):
        answer = by_query[f"Weather in {city}?"]
        steps = main_path(answer.answer_details)
        assert [s["role"] for s in steps] == ["system", "user", "tool", "tool"]
        assert [s["message"] for s in steps[:2]] == ["", ""]  # blank, as converted answers carry them
        assert steps[2]["message"] == {"name": "get_weather", "arguments": json.dumps({"city": city}),
                                       "response": f"sunny in {city}"}
        assert parse_finish(answer.final_answer) == ("give_answer", f"{city}: sunny")
        assert answer.tool_names() == ["get_weather", FINISH] and answer.total_steps == 4


def test_without_queries_ids_are_stable_digests_and_a_rerun_of_a_task_gets_a_suffix():
    a1, _, a2 = _conversation("Weather in Oslo?", "Oslo", "a")
    b1, _, b2 = _conversation("Weather in Oslo?", "Oslo", "b")  # the same task again, interleaved
    first, _ = _answers([a1, b1, a2, b2])
    again, _ = _answers([a1, b1, a2, b2])
    assert sorted(first) == sorted(again) and len(first) == 2
    plain = min(first, key=len)
    assert plain.startswith("conv-") and set(first) == {plain, f"{plain}-2"}
    # Each run kept its own steps: the later requests were told apart by the answer they continue.
    assert {parse_finish(a.final_answer)[1] for a in first.values()} == {"Oslo: sunny"}
    assert all(len(main_path(a.answer_details)) == 4 for a in first.values())


def test_queries_name_conversations_and_unmatched_ones_are_reported_by_their_first_words():
    a1, _, a2 = _conversation("\nWhat is the weather   in Oslo today?\nBegin!\n", "Oslo", "a")
    b1, _, b2 = _conversation("Please help. Task: what is the weather in Rome today? Thanks", "Rome", "b")
    c1, _, c2 = _conversation("Tell me a joke about the weather in Paris please now", "Paris", "c")
    index = QueryIndex([Query("11", "What is the weather in Oslo today?", "G1_instruction"),
                        Query("12", "what is the weather in Rome today?", "G1_instruction")])
    named, notes = load_document(_document([a1, b1, c1, a2, b2, c2]), "rec", index)
    assert sorted((g, a.query_id) for g, a in named) == [("G1_instruction", "11"), ("G1_instruction", "12")]
    assert {a.query for _g, a in named} == {"What is the weather in Oslo today?", "what is the weather in Rome today?"}
    assert notes == ['rec: conversation "Tell me a joke about the weather in ..." matches no query; left out']


def test_query_matching_never_guesses():
    index = QueryIndex([Query("1", "weather in Oslo", None), Query("2", "weather in Rome", None),
                        Query("3", "Find flights", "G1_tool"), Query("4", "Find flights", "G2_category")])
    assert index.match("\n weather  in\tOslo \nBegin!\n").query_id == "1"
    assert index.match("Compare the weather in Oslo and the weather in Rome") == "its task holds the text of 2 queries"
    assert index.match("Find flights") == "matches several queries: 3 (G1_tool), 4 (G2_category)"
    assert index.match("weather in Paris") == "matches no query"


def test_tool_requests_go_to_the_conversation_whose_call_they_carry():
    # The agent never showed the model its last results: they come from the recorded
    # HTTP requests, which interleave; each goes to the conversation whose call it makes.
    results = {}
    interactions = []
    for prefix, city in (("a", "Oslo"), ("b", "Rome")):
        user = _user(f"Weather in {city}, then stop")
        interactions.append(_chat([user], _calls((f"{prefix}1", "get_weather", {"city": city}),
                                                 (f"{prefix}2", FINISH, {"return_type": "give_answer",
                                                                          "final_answer": f"{city} done"}))))
        results[city] = _tool(f"https://weather.example/now?city={city}", f"{{\"temp\": \"{city}\"}}")
    interactions += [results["Rome"], results["Oslo"]]
    answers, notes = _answers(interactions)
    for answer in answers.values():
        city = answer.query.split()[2].rstrip(",")
        assert main_path(answer.answer_details)[2]["message"]["response"] == f"{{\"temp\": \"{city}\"}}"
    assert notes == []


def _virtual(tool, api, tool_input, response):
    return _interaction("http://127.0.0.1:8080/virtual", {
        "category": "Weather", "tool_name": tool, "api_name": api, "tool_input": json.dumps(tool_input),
        "strip": "", "toolbench_key": ""}, 200, {"error": "", "response": response})


def test_a_virtual_call_goes_to_the_conversation_that_asked_for_its_tool():
    # Both conversations wait, and the words of each request fit both equally (the forecast
    # call's city sits in the alerts call's region): the tool a /virtual call names decides.
    forecast, alerts = "forecast_for_weatherapi", "alerts_for_weatherapi"
    interactions = [
        _chat([_user("Forecast for Oslo, then stop")], _calls(("a1", forecast, {"city": "Oslo"}))),
        _chat([_user("Alerts near Oslo, then stop")], _calls(("b1", alerts, {"region": "Oslo forecast"}))),
        # api_name as ToolBench's server reads it: the API's own name, or the whole function name
        _virtual("WeatherAPI", alerts, {"region": "Oslo forecast"}, "storm warning"),
        _virtual("WeatherAPI", "Forecast", {"city": "Oslo"}, "sunny"),
    ]
    answers, notes = _answers(interactions)
    got = {a.query: main_path(a.answer_details)[2]["message"] for a in answers.values()}
    assert got["Forecast for Oslo, then stop"]["name"] == forecast
    assert got["Forecast for Oslo, then stop"]["response"] == json.dumps({"error": "", "response": "sunny"})
    assert got["Alerts near Oslo, then stop"]["response"] == json.dumps({"error": "", "response": "storm warning"})
    assert notes == []


def _mcp(message, response, status=200, method="POST", session="s1"):
    interaction = _interaction("http://127.0.0.1:9/mcp", None if message is None else json.dumps(message), status,
                               response, content_type="text/event-stream" if response.startswith("event:")
                               else "application/json", method=method)
    interaction["request"]["headers"] = {"Mcp-Session-Id": [session]} if session else {}
    return interaction


def test_mcp_housekeeping_is_no_step_and_a_tool_answer_is_its_result_text():
    # The agent stops right after asking for a tool, which its MCP client then calls in a
    # session it opens only now: the handshake, the list and the session's end are no
    # steps; the call's answer (streamed) is read as the tool's text.
    result = {"jsonrpc": "2.0", "id": 2, "result": {"content": [{"type": "text", "text": "sunny in Oslo"}],
                                                    "isError": False}}
    interactions = [
        _chat([_user("Weather in Oslo, then stop")], _calls(("a1", "demo__forecast", {"city": "Oslo"}))),
        _mcp({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}},
             json.dumps({"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-11-25"}}), session=None),
        _mcp({"jsonrpc": "2.0", "method": "notifications/initialized"}, "", status=202),
        _mcp(None, "", status=405, method="GET"),
        _mcp({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, json.dumps({"jsonrpc": "2.0", "id": 1,
                                                                              "result": {"tools": []}})),
        _mcp({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "forecast",
                                                                             "arguments": {"city": "Oslo"}}},
             f"event: message\r\ndata: {json.dumps(result)}\r\n\r\n"),
        _mcp(None, "", method="DELETE"),
    ]
    answers, notes = _answers(interactions)
    (answer,) = answers.values()
    step = main_path(answer.answer_details)[2]["message"]
    assert step == {"name": "demo__forecast", "arguments": json.dumps({"city": "Oslo"}), "response": "sunny in Oslo"}
    assert notes == []


def test_retried_request_and_failed_answers():
    user = _user("Weather in Oslo?")
    failed = _interaction("https://llm.example/v1/chat/completions", {"model": "m", "messages": [user], "tools": TOOLS},
                          500, {"error": {"message": "overloaded"}})
    broken = _interaction("https://llm.example/v1/chat/completions", "not json", 200, "{}")
    answers, notes = _answers([failed, broken, _chat([user], _finish("f", "sunny"))])
    [answer] = answers.values()
    assert parse_finish(answer.final_answer) == ("give_answer", "sunny")
    assert notes == ["rec: chat-completions request #1 is not a JSON object"]


def test_openai_responses_api_plain_streamed_and_continued():
    tools = [{"type": "function", "name": "get_weather", "description": "w", "parameters": {}},
             {"type": "function", "name": FINISH, "description": "end", "parameters": {}}]
    url = "https://llm.example/v1/responses"
    call = {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city": "Oslo"}'}
    first = _interaction(url, {"model": "m", "instructions": "Be brief.", "input": "Weather in Oslo?", "tools": tools},
                         200, {"id": "resp_1", "output": [
                             {"type": "message", "role": "assistant",
                              "content": [{"type": "output_text", "text": "Looking."}]}, call]})
    # Continued by id: the request carries only the new item.
    finish = {"type": "function_call", "call_id": "c2", "name": FINISH,
              "arguments": '{"return_type": "give_answer", "final_answer": "cold"}'}
    done = {"type": "response.completed", "response": {"id": "resp_2", "output": [finish]}}
    stream = (f"event: response.created\ndata: {json.dumps({'type': 'response.created'})}\n\n"
              f"event: response.completed\ndata: {json.dumps(done)}\n\n")
    second = _interaction(url, {"model": "m", "previous_response_id": "resp_1", "tools": tools, "stream": True,
                                "input": [{"type": "function_call_output", "call_id": "c1", "output": "-3C"}]},
                          200, stream, content_type="text/event-stream")
    [answer] = _answers([first, second])[0].values()
    steps = main_path(answer.answer_details)
    assert [s["role"] for s in steps] == ["system", "user", "assistant", "tool", "tool"]
    assert steps[2]["message"] == "Looking."
    assert steps[3]["message"]["response"] == "-3C"
    assert parse_finish(answer.final_answer) == ("give_answer", "cold")
    assert answer.query == "Weather in Oslo?" and answer.tool_names() == ["get_weather", FINISH]


def test_anthropic_messages_plain_and_streamed():
    url = "https://api.anthropic.example/v1/messages"
    tools = [{"name": "get_weather", "description": "w", "input_schema": {"type": "object"}},
             {"name": FINISH, "description": "end", "input_schema": {"type": "object"}}]
    user = {"role": "user", "content": [{"type": "text", "text": "Weather in Rome?"}]}
    use = {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Rome"}}
    first = _interaction(url, {"model": "claude", "max_tokens": 100, "system": "Be brief.", "tools": tools,
                               "messages": [user]},
                         200, {"type": "message", "role": "assistant", "content": [use]})
    events = [
        {"type": "message_start", "message": {"content": []}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Done."}},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t2", "name": FINISH,
                                                                      "input": {}}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
                                                              "partial_json": '{"return_type": "give_answer", '}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta",
                                                              "partial_json": '"final_answer": "warm"}'}},
        {"type": "message_stop"},
    ]
    stream = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
    second = _interaction(url, {"model": "claude", "max_tokens": 100, "system": "Be brief.", "tools": tools,
                                "stream": True, "messages": [
                                    user, {"role": "assistant", "content": [use]},
                                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                                                  "content": [{"type": "text", "text": "25C"}]}]}]},
                          200, stream, content_type="text/event-stream")
    [answer] = _answers([first, second])[0].values()
    steps = main_path(answer.answer_details)
    assert [s["role"] for s in steps] == ["system", "user", "tool", "assistant", "tool"]
    assert steps[2]["message"] == {"name": "get_weather", "arguments": '{"city": "Rome"}', "response": "25C"}
    assert parse_finish(answer.final_answer) == ("give_answer", "warm")


def test_a_cassette_with_many_conversations_is_read_from_a_folder_too(tmp_path):
    a1, a_tool, a2 = _conversation("Weather in Oslo?", "Oslo", "a")
    b1, b_tool, b2 = _conversation("Weather in Rome?", "Rome", "b")
    folder = tmp_path / "G1_instruction"
    folder.mkdir()
    (folder / "run.yaml").write_text(yamlserializer.serialize(_document([a1, b1, a_tool, b_tool, a2, b2])))
    (folder / "7.yaml").write_text(yamlserializer.serialize(_document([a1, a_tool, a2])))
    index = QueryIndex([Query("1", "Weather in Oslo?", None), Query("2", "Weather in Rome?", None)])
    loaded = load_answers(tmp_path, queries=index).by_group["G1_instruction"]
    # run.yaml holds two conversations named by query; 7.yaml is one query's cassette,
    # and a matching query names it too.
    assert sorted(loaded) == ["1", "2"]
    assert all(isinstance(a, Answer) for a in loaded.values())
    unnamed = load_answers(tmp_path).by_group["G1_instruction"]
    assert "7" in unnamed and sum(q.startswith("conv-") for q in unnamed) == 2
