"""messages.read_steps: conversations in the legacy and today's OpenAI formats, and mixes."""

from __future__ import annotations

from stbeval.messages import Call, calls_of, read_steps, text_of


def call(call_id, name, args="{}"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def tool(call_id, content, name="x"):
    return {"role": "tool", "name": name, "content": content, "tool_call_id": call_id}


def tools_of(result):
    return [(s["message"]["name"], s["message"]["arguments"], s["message"]["response"]) for s in result.steps
            if s["role"] == "tool"]


def test_several_tool_calls_per_message_each_become_a_step_in_order():
    messages = [
        {"role": "assistant", "content": None, "function_call": None,
         "tool_calls": [call("a", "first", '{"n": 1}'), call("b", "second", '{"n": 2}'), call("c", "third")]},
        tool("c", "third result"), tool("a", "first result"), tool("b", "second result"),
    ]
    result = read_steps(messages)
    assert tools_of(result) == [("first", '{"n": 1}', "first result"), ("second", '{"n": 2}', "second result"),
                                ("third", "{}", "third result")]
    assert result.finish_arguments is None and result.closing_text == ""


def test_legacy_function_calls_take_the_result_that_follows():
    messages = [
        {"role": "assistant", "content": "", "function_call": {"name": "look", "arguments": '{"q": 1}'}},
        {"role": "function", "name": "look", "content": "one"},
        {"role": "assistant", "content": "", "function_call": {"name": "look", "arguments": '{"q": 2}'}},
        {"role": "function", "name": "look", "content": "two"},
        {"role": "assistant", "content": "",
         "function_call": {"name": "Finish", "arguments": '{"return_type": "give_answer"}'}},
    ]
    result = read_steps(messages)
    assert tools_of(result) == [("look", '{"q": 1}', "one"), ("look", '{"q": 2}', "two"),
                                ("Finish", '{"return_type": "give_answer"}', "")]
    assert result.finish_arguments == '{"return_type": "give_answer"}'


def test_both_formats_in_one_conversation():
    messages = [
        {"role": "assistant", "content": None, "function_call": {"name": "old", "arguments": "{}"}},
        {"role": "function", "name": "old", "content": "old result"},
        {"role": "assistant", "content": None, "function_call": None, "tool_calls": [call("n1", "new")]},
        tool("n1", "new result"),
    ]
    assert tools_of(read_steps(messages)) == [("old", "{}", "old result"), ("new", "{}", "new result")]


def test_a_legacy_call_without_its_result_does_not_take_a_later_one():
    messages = [
        {"role": "assistant", "content": None, "function_call": {"name": "lost", "arguments": "{}"}},
        {"role": "assistant", "content": None, "function_call": {"name": "kept", "arguments": "{}"}},
        {"role": "function", "name": "kept", "content": "kept result"},
    ]
    assert tools_of(read_steps(messages)) == [("lost", "{}", ""), ("kept", "{}", "kept result")]
    # Results seen only after the conversation (a recording's HTTP log) fill the gaps in order.
    late = read_steps(messages + [{"role": "assistant", "tool_calls": [call("z", "pending")]}],
                      late_results=["L1", "L2"])
    assert tools_of(late) == [("lost", "{}", "L1"), ("kept", "{}", "kept result"), ("pending", "{}", "L2")]


def test_finish_ends_its_message_and_has_no_response():
    messages = [{"role": "assistant", "content": "done", "tool_calls": [
        call("a", "search"), call("f", "Finish", '{"return_type": "give_answer", "final_answer": "x"}'),
        call("b", "after")]}, tool("a", "found"), tool("f", "successfully giving the final answer."), tool("b", "late")]
    result = read_steps(messages)
    assert tools_of(result) == [("search", "{}", "found"),
                                ("Finish", '{"return_type": "give_answer", "final_answer": "x"}', "")]
    assert result.finish_arguments == '{"return_type": "give_answer", "final_answer": "x"}'


def test_text_beside_calls_is_a_thought_unless_asked_otherwise():
    messages = [{"role": "assistant", "content": "I will look.", "tool_calls": [call("a", "look")]}, tool("a", "r"),
                {"role": "assistant", "content": [{"type": "text", "text": "All "}, {"type": "text", "text": "done."}]}]
    kept = read_steps(messages)
    assert [s["role"] for s in kept.steps] == ["assistant", "tool", "assistant"]
    assert kept.steps[0]["message"] == "I will look." and kept.closing_text == "All done."
    dropped = read_steps(messages, thoughts=False)
    assert [s["role"] for s in dropped.steps] == ["tool", "assistant"]
    # A message without calls is a step even when it is empty, as ToolBench's converter has it.
    assert read_steps([{"role": "assistant", "content": None}]).steps == [{"role": "assistant", "message": ""}]


def test_calls_of_and_text_of():
    message = {"role": "assistant", "content": None, "function_call": None,
               "tool_calls": [call("a", "one", '{"k": 1}'),
                              {"id": 5, "function": {"name": "two", "arguments": {"k": 2}}}]}
    assert calls_of(message) == [Call("a", "one", '{"k": 1}'), Call(None, "two", '{"k": 2}')]
    assert calls_of({"role": "assistant", "function_call": {"name": "f"}}) == [Call(None, "f", "")]
    assert text_of({"content": None}) == "" and text_of({"content": "hi"}) == "hi"
