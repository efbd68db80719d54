"""Answers rebuilt from vcrpy cassettes: recorded for real through vcrpy, and hand-made edge cases."""

from __future__ import annotations

import json

import httpx
import openai
import vcr
from vcr.serializers import jsonserializer, yamlserializer

from stbeval.answers import load_answers
from stbeval.model import FINISH, Answer, Problem, main_path, parse_finish
from stbeval.passrate import precheck
from tests.fakes.fake_openai import ToolCall

WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "weather", "parameters": {}}}
FINISH_TOOL = {"type": "function", "function": {"name": FINISH, "description": "end", "parameters": {}}}


def test_cassette_recorded_by_vcrpy_becomes_an_answer(fake_openai, tmp_path):
    replies = iter([ToolCall("get_weather", {"city": "Paris"}),
                    ToolCall(FINISH, {"return_type": "give_answer", "final_answer": "Sunny in Paris"})])
    fake_openai.handler = lambda _req: next(replies)
    cassette = tmp_path / "cassettes" / "1234.yaml"
    user = {"role": "user", "content": "What is the weather in Paris?"}
    with vcr.use_cassette(str(cassette), record_mode="all"):
        with openai.OpenAI(base_url=fake_openai.base_url, api_key="k", max_retries=0) as client:
            first = client.chat.completions.create(model="agent", messages=[user], tools=[WEATHER, FINISH_TOOL])
            call = first.choices[0].message.tool_calls[0]
            observation = httpx.get(f"{fake_openai.url}/v1/models").text  # the agent's tool HTTP call
            client.chat.completions.create(model="agent", tools=[WEATHER, FINISH_TOOL], messages=[
                user, first.choices[0].message.model_dump(exclude_none=True),
                {"role": "tool", "tool_call_id": call.id, "content": observation}])

    answer = load_answers(cassette.parent).by_group[None]["1234"]
    assert isinstance(answer, Answer), str(answer)
    assert answer.query == "What is the weather in Paris?" and answer.source == "cassette"
    assert answer.tool_names() == ["get_weather", FINISH]
    steps = main_path(answer.answer_details)
    assert [s["role"] for s in steps] == ["system", "user", "tool", "tool"]
    assert steps[2]["message"] == {"name": "get_weather", "arguments": '{"city": "Paris"}', "response": observation}
    assert parse_finish(answer.final_answer) == ("give_answer", "Sunny in Paris")
    assert precheck(answer) is None


def _chat(messages, reply, tools=(WEATHER, FINISH_TOOL), status=200):
    return {
        "request": {"method": "POST", "uri": "https://llm.example/v1/chat/completions",
                    "body": json.dumps({"model": "m", "messages": messages, "tools": list(tools)}), "headers": {}},
        "response": {"status": {"code": status, "message": "OK"}, "headers": {},
                     "body": {"string": reply if isinstance(reply, str) else json.dumps(
                         {"choices": [{"index": 0, "message": reply}]})}},
    }


def _http(uri, body):
    return {"request": {"method": "GET", "uri": uri, "body": None, "headers": {}},
            "response": {"status": {"code": 200, "message": "OK"}, "headers": {}, "body": {"string": body}}}


def _write(path, interactions, serializer=yamlserializer):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(serializer.serialize({"version": 1, "interactions": interactions}))
    return path


USER = {"role": "user", "content": "Find the weather"}


def _call(name, args, call_id="c1"):
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}]}


def test_agent_without_finish_ends_with_its_last_message(tmp_path):
    history = [USER, _call("get_weather", {"city": "Oslo"}), {"role": "tool", "tool_call_id": "c1", "content": "rain"}]
    _write(tmp_path / "7.json", [_chat([USER], _call("get_weather", {"city": "Oslo"}), tools=[WEATHER]),
                                 _chat(history, {"role": "assistant", "content": "It rains in Oslo."},
                                       tools=[WEATHER])],
           jsonserializer)
    answer = load_answers(tmp_path).by_group[None]["7"]
    assert answer.finish_optional and answer.final_answer == "It rains in Oslo."
    assert main_path(answer.answer_details)[-1] == {"role": "assistant", "message": "It rains in Oslo.", "next": []}
    assert precheck(answer) is None


def test_finish_offered_but_not_called_is_unsolved(tmp_path):
    _write(tmp_path / "8.yaml", [_chat([USER], {"role": "assistant", "content": "I could not do it."})])
    answer = load_answers(tmp_path / "8.yaml").by_group[None]["8"]
    assert not answer.finish_optional and answer.final_answer == ""
    assert precheck(answer) == "last step is not a Finish call"


def test_missing_tool_result_comes_from_the_recorded_http_call(tmp_path):
    # The agent stopped right after calling a tool: the result is only in the HTTP log.
    _write(tmp_path / "9.yaml", [_chat([USER], _call("get_weather", {"city": "Rome"})),
                                 _http("https://weather.p.rapidapi.com/now?city=Rome", '{"temp": 30}')])
    answer = load_answers(tmp_path).by_group[None]["9"]
    tool = main_path(answer.answer_details)[-1]
    assert tool["message"]["response"] == '{"temp": 30}'


def test_streamed_replies_and_legacy_function_calls(tmp_path):
    stream = "".join(f"data: {json.dumps(c)}\n\n" for c in [
        {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "s1", "function": {
            "name": "Finish", "arguments": '{"return_type": "give_answer", '}}]}}]},
        {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {
            "arguments": '"final_answer": "streamed"}'}}]}}]},
    ]) + "data: [DONE]\n\n"
    legacy = [USER, {"role": "assistant", "content": "look it up",
                     "function_call": {"name": "get_weather", "arguments": "{}"}},
              {"role": "function", "name": "get_weather", "content": "cloudy"}]
    _write(tmp_path / "s" / "10.yaml", [_chat(legacy, stream)])
    answer = load_answers(tmp_path / "s").by_group[None]["10"]
    steps = main_path(answer.answer_details)
    assert [s["role"] for s in steps] == ["system", "user", "assistant", "tool", "tool"]
    assert steps[3]["message"]["response"] == "cloudy"
    assert parse_finish(answer.final_answer) == ("give_answer", "streamed")


def test_session_folder_spans_several_cassettes(tmp_path):
    session = tmp_path / "sessions" / "11"
    _write(session / "01.yaml", [_chat([USER], _call("get_weather", {}))])
    history = [USER, _call("get_weather", {}), {"role": "tool", "tool_call_id": "c1", "content": "hot"}]
    _write(session / "02.yaml", [_chat(history, _call(FINISH, {"return_type": "give_answer", "final_answer": "hot"},
                                                      "c2"))])
    answer = load_answers(tmp_path / "sessions").by_group[None]["11"]
    assert isinstance(answer, Answer) and parse_finish(answer.final_answer)[1] == "hot"


def test_broken_cassettes_name_the_query(tmp_path):
    (tmp_path / "20.yaml").write_text("interactions: [oops")
    _write(tmp_path / "21.yaml", [_http("https://x.example/", "{}")])
    _write(tmp_path / "22.yaml", [_chat([USER], "<html>bad gateway</html>")])
    items = load_answers(tmp_path).by_group[None]
    assert all(isinstance(items[q], Problem) for q in ("20", "21", "22"))
    assert "not a readable vcrpy cassette" in str(items["20"]) and str(items["20"]).startswith("query 20:")
    assert "no chat-completion call" in items["21"].reason
    assert "not a completion" in items["22"].reason


def test_parallel_tool_calls_and_the_legacy_form_give_the_same_answer(tmp_path):
    # Today's format: two calls in one message, results by id in another order,
    # "function_call": null left on messages, tools wrapped as {type, function}.
    finish_args = {"return_type": "give_answer", "final_answer": "Oslo 3C, Rome 20C"}
    today = [USER, {"role": "assistant", "content": "Both cities at once.", "function_call": None, "tool_calls": [
        {"id": "o", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
        {"id": "r", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'}}]},
        {"role": "tool", "tool_call_id": "r", "content": "20C"}, {"role": "tool", "tool_call_id": "o", "content": "3C"}]
    reply = {"role": "assistant", "content": None, "function_call": None, "tool_calls": [
        {"id": "f", "type": "function", "function": {"name": FINISH, "arguments": json.dumps(finish_args)}}]}
    _write(tmp_path / "today" / "30.yaml", [_chat(today, reply)])
    # Legacy format: one function_call per message, role: function results, bare functions.
    legacy = [USER, {"role": "assistant", "content": "Both cities at once.",
                     "function_call": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
              {"role": "function", "name": "get_weather", "content": "3C"},
              {"role": "assistant", "content": None,
               "function_call": {"name": "get_weather", "arguments": '{"city": "Rome"}'}},
              {"role": "function", "name": "get_weather", "content": "20C"}]
    legacy_reply = {"role": "assistant", "content": None,
                    "function_call": {"name": FINISH, "arguments": json.dumps(finish_args)}}
    interaction = _chat(legacy, legacy_reply)
    body = json.loads(interaction["request"]["body"])
    body["functions"] = [t["function"] for t in body.pop("tools")]
    interaction["request"]["body"] = json.dumps(body)
    _write(tmp_path / "legacy" / "30.yaml", [interaction])

    answers = [load_answers(tmp_path / side).by_group[None]["30"] for side in ("today", "legacy")]
    for answer in answers:
        assert isinstance(answer, Answer), str(answer)
        steps = main_path(answer.answer_details)
        assert [s["role"] for s in steps] == ["system", "user", "assistant", "tool", "tool", "tool"]
        assert [s["message"]["response"] for s in steps[3:5]] == ["3C", "20C"]
        assert answer.tool_names() == ["get_weather", FINISH]
        assert parse_finish(answer.final_answer) == ("give_answer", "Oslo 3C, Rome 20C")
        assert precheck(answer) is None
    assert answers[0].answer_details == answers[1].answer_details
