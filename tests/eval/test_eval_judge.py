"""The judge: forced calls, reply parsing, template files, the log and its re-use."""

from __future__ import annotations

import json

import pytest

from stbeval.errors import JudgeFatalError, TemplateError
from stbeval.judge import Judge, JudgeSettings, normalize_label, parse_reply
from stbeval.judgelog import LOG_NAME, JudgeLog, read_records
from stbeval.prompts import DEFAULT_PROMPTS, FUNCTIONS, Prompts, load_template, parse_template
from tests.eval.helpers import make_judge
from tests.fakes.fake_openai import HttpError, ToolCall

CHECK = FUNCTIONS["check_answer_status"]
SELECT = FUNCTIONS["select_better_answer"]


def body(message):
    return json.dumps({"choices": [{"message": message}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}})


def call(name, args):
    return {"role": "assistant", "tool_calls": [{"function": {"name": name, "arguments": json.dumps(args)}}]}


@pytest.mark.parametrize("message,expected", [
    (call("check_answer_status", {"reason": "r", "answer_status": "Solved"}), ("Solved", "r")),
    (call("check_answer_status", {"answer_status": "unsure"}), ("Unsure", "")),
    (call("check_answer_status", {"answer_status": "AnswerStatus.Unsolved"}), ("Unsolved", "")),
    ({"role": "assistant", "function_call": {"name": "check_answer_status",
                                             "arguments": '{"answer_status": "Solved"}'}}, ("Solved", "")),
    ({"role": "assistant", "content": 'Verdict: {"answer_status": "Solved", "reason": "ok"}'}, ("Solved", "ok")),
    ({"role": "assistant", "content": "Sorry, I cannot help with that."}, (None, "")),
    (call("check_answer_status", {"answer_status": "Maybe"}), (None, "")),
    (call("check_answer_status", "not an object"), (None, "")),
    (call("other_function", {"answer_status": "Solved"}), (None, "")),
])
def test_parse_reply(message, expected):
    label, reason = parse_reply(body(message), CHECK)
    assert (label, reason if expected[1] else "") == expected


def test_parse_reply_garbage_bodies():
    assert parse_reply("{broken", CHECK) == (None, "")
    assert parse_reply(json.dumps({"choices": []}), CHECK) == (None, "")
    assert parse_reply("", CHECK) == (None, "")


@pytest.mark.parametrize("value,expected", [(0, 0), (1, 1), (1.0, 1), ("1", 1), (" 0 ", 0), (2, None),
                                            (True, None), ("first", None), (0.5, None)])
def test_index_labels(value, expected):
    assert normalize_label(value, SELECT.labels) == expected


def test_forced_call_request_shape(fake_openai, tmp_path):
    fake_openai.handler = lambda req: ToolCall("select_better_answer", {"reason": "r", "index": 1})
    judge = make_judge(fake_openai, tmp_path, temperature=0.7, model="judge-m")
    verdict = judge.select_better_answer("Q?", "A0", "A1", qid="5", round=2)
    assert (verdict.label, verdict.status) == (1, "ok")
    request = fake_openai.chat_requests()[0]
    assert request["model"] == "judge-m" and request["temperature"] == 0.7
    assert request["tool_choice"] == {"type": "function", "function": {"name": "select_better_answer"}}
    schema = request["tools"][0]["function"]
    assert schema["parameters"]["required"] == ["reason", "index"]
    assert schema["parameters"]["properties"]["index"]["enum"] == [0, 1]
    prompt = request["messages"][0]["content"]
    assert "Q?" in prompt and prompt.index("A0") < prompt.index("A1")


def test_sample_template_is_parsed_and_used_verbatim(stb, fake_openai, tmp_path):
    path = stb / "evaluator_template" / "template.txt"
    prompts = load_template(path)
    assert prompts.overridden == set(FUNCTIONS)
    text = path.read_text()
    start = text.index("<description>", text.index("<name>check_answer_status</name>")) + len("<description>")
    # Sent as written, the newlines that frame it included, as the original sends it.
    expected = text[start:text.index("</description>", start)].format(query="QQ", answer="AA")
    assert expected.startswith("\n") and expected.endswith("\n")
    fake_openai.handler = lambda req: ToolCall("check_answer_status", {"answer_status": "Solved"})
    judge = Judge(JudgeSettings(base_url=fake_openai.base_url, api_key="k"), prompts, JudgeLog(tmp_path / LOG_NAME))
    judge.check_answer_status("QQ", "AA", qid="1", round=0)
    assert fake_openai.chat_requests()[0]["messages"] == [{"role": "user", "content": expected}]


def test_default_prompts_are_our_own_wording(stb):
    template = (stb / "evaluator_template" / "template.txt").read_text()
    sentences = [line.strip() for line in template.splitlines() if len(line.strip()) > 40]
    ours = "\n".join(DEFAULT_PROMPTS.values())
    assert sentences and not [s for s in sentences if s in ours]
    for name, fn in FUNCTIONS.items():
        Prompts().render(name, {f: "x" for f in fn.fields})  # every default fills its fields


def test_bad_templates_are_refused(tmp_path):
    with pytest.raises(TemplateError, match="no <function> blocks"):
        parse_template("just text")
    with pytest.raises(TemplateError, match="unknown judge function 'grade'"):
        parse_template("<function><name>grade</name><description>{query}</description></function>")
    with pytest.raises(TemplateError, match=r"unknown field\(s\) \['task'\]"):
        parse_template("<function><name>check_answer_status</name><description>{task}</description></function>")
    with pytest.raises(TemplateError, match="lacks <name> or <description>"):
        parse_template("<function><name>check_answer_status</name></function>")
    with pytest.raises(TemplateError, match="cannot read"):
        load_template(tmp_path / "none.txt")
    partial = Prompts(parse_template(
        "<function><name>check_task_solvable</name><description>Is {task} ok?</description></function>"))
    assert partial.render("check_task_solvable", {"task": "T"}) == "Is T ok?"
    assert partial.text("check_answer_status") == DEFAULT_PROMPTS["check_answer_status"]


def test_log_keys_by_round_and_model_and_reuses(fake_openai, tmp_path):
    fake_openai.handler = lambda req: ToolCall("check_task_solvable", {"task_status": "Solvable"})
    judge = make_judge(fake_openai, tmp_path / "a")
    judge.check_task_solvable("T", qid="1")
    judge.check_task_solvable("T", qid="1")  # same everything: from the log
    judge.check_task_solvable("T", qid="1", model="other")
    judge.ask("check_task_solvable", {"task": "T"}, qid="1", round=1)
    assert fake_openai.calls == 3 and judge.stats.reused == 1
    records = read_records(tmp_path / "a" / LOG_NAME)
    assert len({r["key"] for r in records}) == 3
    assert all(r["prompt_sha256"] == records[0]["prompt_sha256"] for r in records)
    assert {"key", "fn", "qid", "round", "model", "prompt_sha256", "raw", "label", "reason", "status",
            "prompt_tokens", "completion_tokens"} <= set(records[0])
    # Another run's log can be re-used explicitly.
    other = Judge(JudgeSettings(model="judge-x", base_url=fake_openai.base_url, api_key="k"), Prompts(),
                  JudgeLog(tmp_path / "b" / LOG_NAME, reuse=[tmp_path / "a" / LOG_NAME]))
    assert other.check_task_solvable("T", qid="1").reused
    assert fake_openai.calls == 3


def test_interrupted_log_line_is_skipped_and_sealed(fake_openai, tmp_path):
    fake_openai.handler = lambda req: ToolCall("check_task_solvable", {"task_status": "Unsure"})
    judge = make_judge(fake_openai, tmp_path)
    judge.check_task_solvable("T1", qid="1")
    judge.log.close()
    log = tmp_path / LOG_NAME
    log.write_text(log.read_text() + '{"key": "cut sho')
    judge = make_judge(fake_openai, tmp_path)
    assert judge.log.skipped_lines == 1 and len(judge.log) == 1
    judge.check_task_solvable("T2", qid="2")
    judge.log.close()
    assert [r["qid"] for r in read_records(log)] == ["1", "2"]


def test_retry_unscored_asks_again(fake_openai, tmp_path):
    replies = iter(["no", "no", "no", ToolCall("check_task_solvable", {"task_status": "Solvable"})])
    fake_openai.handler = lambda req: next(replies)
    assert make_judge(fake_openai, tmp_path).check_task_solvable("T", qid="1").status == "unscored"
    assert fake_openai.calls == 3  # one call and two further attempts
    assert make_judge(fake_openai, tmp_path).check_task_solvable("T", qid="1").status == "unscored"
    assert fake_openai.calls == 3
    again = make_judge(fake_openai, tmp_path, retry_unscored=True).check_task_solvable("T", qid="1")
    assert (again.status, again.label, fake_openai.calls) == ("ok", "Solvable", 4)


@pytest.mark.parametrize("status", [401, 403, 404])
def test_refusing_endpoints_stop_the_run(fake_openai, tmp_path, status):
    fake_openai.handler = lambda req: HttpError(status, "no such model")
    with pytest.raises(JudgeFatalError, match="no such model"):
        make_judge(fake_openai, tmp_path).check_task_solvable("T", qid="1")
