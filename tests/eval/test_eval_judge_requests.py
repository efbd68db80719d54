"""Judge requests byte for byte as StableToolBench's evaluator (tooleval) sends them.

With its evaluator folder (``template.txt`` and ``config.yaml``), tooleval builds each
request from these rules, which the tests below write down as data: the prompt is the
template's <description> text exactly as written (its framing newlines kept) filled
with ``str.format``; every ``completions_kwargs`` entry but ``functions`` goes to the
chat completion call (``timeout`` is the client's, not a request field); the function's
schema from ``functions`` is the one tool, forced by ``tool_choice``; the pass rate
(check_answer_status, parse_answer_status) and select_better_answer ask for a reason,
so ``reason`` is appended to the schema's properties and ``required``. parse_answer_status
shows the answer object as the converted file holds it; select_better_answer shows each
answer without ``method``, its final answer cut to 1,000 characters.

The expected bodies are sent by an openai client with those arguments, as tooleval
sends them, so the comparison is of raw bytes. The real template and configuration
are read at test time from the StableToolBench data folder (tests/stb_samples.py); the
tests that need them skip without it. The others use small files of our own.
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import openai
import pytest
import yaml
from click.testing import CliRunner

from stbeval.answers import load_answers
from stbeval.cli import eval_group
from tests.eval.helpers import converted_entry, write_json
from tests.fakes.fake_openai import ToolCall
from tests.stb_samples import require_real_stb_data

SESSION = Path(__file__).parent / "data" / "pipeline_session.yaml"
LABELS = {"check_answer_status": ("answer_status", "Unsure"),  # Unsure: parse_answer_status is asked too
          "parse_answer_status": ("answer_status", "Solved"),
          "check_task_solvable": ("task_status", "Solvable"),
          "select_better_answer": ("index", 0)}


def _reply(request: dict[str, Any]) -> ToolCall:
    name = request["tool_choice"]["function"]["name"]
    field, label = LABELS[name]
    return ToolCall(name, {field: label, "reason": "scripted"})


@pytest.fixture
def evaluator_folder() -> Path:
    folder = require_real_stb_data() / "evaluator_template"
    if not (folder / "template.txt").is_file() or not (folder / "config.yaml").is_file():
        pytest.skip(f"{folder} lacks template.txt or config.yaml (StableToolBench's evaluator files)")
    return folder


# -- tooleval's rules, as data ---------------------------------------------------------

def template_prompts(text: str) -> dict[str, str]:
    """Each function's <description>, as written."""
    out = {}
    for block in re.findall(r"<function>(.*?)</function>", text, re.DOTALL):
        name = re.findall(r"<name>(.*?)</name>", block, re.DOTALL)[0]
        out[name] = re.findall(r"<description>(.*?)</description>", block, re.DOTALL)[0]
    return out


def expected_call(folder: Path, name: str, fields: dict[str, str], *, reason: bool = True) -> dict[str, Any]:
    """The keyword arguments of tooleval's chat completion call for one judgment."""
    kwargs = copy.deepcopy(yaml.safe_load((folder / "config.yaml").read_text())["completions_kwargs"])
    function = copy.deepcopy(next(f for f in kwargs.pop("functions") if f["name"] == name))
    if reason:
        function["parameters"]["required"].append("reason")
        function["parameters"]["properties"]["reason"] = {"type": "string", "description": "explain your answer."}
    prompt = template_prompts((folder / "template.txt").read_text())[name].format(**fields)
    return {**kwargs, "messages": [{"role": "user", "content": prompt}],
            "tools": [{"type": "function", "function": function}],
            "tool_choice": {"type": "function", "function": {"name": name}}}


def bodies_sent(fake, calls: list[dict[str, Any]]) -> Counter[bytes]:
    """The raw bodies an openai client sends for these calls (what tooleval's client sends)."""
    fake.reset()
    client = openai.OpenAI(base_url=fake.base_url, api_key="k", max_retries=0)
    try:
        for kwargs in calls:
            client.chat.completions.create(**kwargs)
    finally:
        client.close()
    return raw_bodies(fake)


def raw_bodies(fake) -> Counter[bytes]:
    return Counter(r.body for r in fake.requests if r.path.endswith("/chat/completions"))


def reached_finish(entry: dict[str, Any]) -> bool:
    """tooleval's no-judge rule: the last tool step on the first path is Finish, and the
    final answer is neither empty nor a give-up."""
    node, last = entry["answer"]["answer_details"][0], ""
    while True:
        if node["role"] == "tool" and node["message"]:
            last = str(node["message"])
        if not node.get("next"):
            break
        node = node["next"][0]
    final = entry["answer"]["final_answer"]
    return "'name': 'Finish'" in last and final != "" and "give_up_and_restart" not in final


def _cli(fake, *args: str) -> Any:
    result = CliRunner().invoke(eval_group, [*args, "--no-progress", "--base-url", fake.base_url, "--api-key", "k"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


# -- pass rate and win rate against the real evaluator files -------------------------

def test_pass_rate_requests_are_tooleval_s_byte_for_byte(evaluator_folder, fake_openai, tmp_path):
    answers = evaluator_folder.parent / "data_example" / "model_predictions_converted" / "virtual_chatgpt_cot"
    entries = json.loads((answers / "G1_instruction.json").read_text())
    judged = {qid: e for qid, e in entries.items() if reached_finish(e)}
    assert 0 < len(judged) < len(entries)
    expected = []
    for entry in judged.values():
        expected.append(expected_call(evaluator_folder, "check_answer_status",
                                      {"query": entry["query"], "answer": entry["answer"]["final_answer"]}))
        expected.append(expected_call(evaluator_folder, "parse_answer_status",
                                      {"query": entry["query"], "answer": json.dumps(entry["answer"])}))
    fake_openai.handler = _reply
    theirs = bodies_sent(fake_openai, expected)
    assert all("max_tokens" in json.loads(body) and "timeout" not in json.loads(body) for body in theirs)

    fake_openai.reset()
    ids = write_json(tmp_path / "ids" / "G1_instruction.json", {q: 0 for q in entries})
    # The config.yaml beside the template gives the model, max_tokens, temperature and schemas.
    _cli(fake_openai, "pass-rate", "--answers", str(answers), "--ids", str(ids), "--out", str(tmp_path / "run"),
         "--rounds", "1", "--no-chart", "--judge-template", str(evaluator_folder / "template.txt"))
    assert raw_bodies(fake_openai) == theirs


def test_win_rate_select_better_answer_requests_are_tooleval_s(evaluator_folder, fake_openai, tmp_path):
    example = evaluator_folder.parent / "data_example" / "model_predictions_converted"
    cot = json.loads((example / "virtual_chatgpt_cot" / "G1_instruction.json").read_text())
    dfs = json.loads((example / "virtual_chatgpt_dfs" / "G1_instruction.json").read_text())
    ids = write_json(tmp_path / "ids" / "G1_instruction.json", {q: 0 for q in cot})
    fake_openai.handler = _reply
    _cli(fake_openai, "win-rate", "--candidate", str(example / "virtual_chatgpt_dfs"),
         "--reference", str(example / "virtual_chatgpt_cot"), "--ids", str(ids), "--out", str(tmp_path / "run"),
         "--rounds", "1", "--judge-config", str(evaluator_folder / "config.yaml"))
    ours = [r for r in fake_openai.requests
            if r.json and r.json["tool_choice"]["function"]["name"] == "select_better_answer"]

    def shown(entry: dict[str, Any]) -> str:
        answer = copy.deepcopy(entry["answer"])
        answer["final_answer"] = answer["final_answer"][:1000]
        answer["answer_details"] = answer["answer_details"][:3000]
        answer.pop("method", None)
        return json.dumps(answer)

    expected = []
    for request in ours:  # whichever order stbeval drew, tooleval builds the same text for it
        prompt = request.json["messages"][0]["content"]
        qid = next(q for q in cot if cot[q]["query"] in prompt)
        sides = [shown(dfs[qid]), shown(cot[qid])]
        if prompt.index(sides[0]) > prompt.index(sides[1]):
            sides.reverse()
        expected.append(expected_call(evaluator_folder, "select_better_answer",
                                      {"query": cot[qid]["query"], "answer_0": sides[0], "answer_1": sides[1]}))
    assert ours, "no comparison was asked for"
    assert Counter(r.body for r in ours) == bodies_sent(fake_openai, expected)


# -- the configuration's parts, with files of our own ---------------------------------

OUR_TEMPLATE = """<function>
<name>check_answer_status</name>
<description>
Grade this. Query: {query}
Answer: {answer}
</description>
</function>
<function>
<name>parse_answer_status</name>
<description>Trace of {query}: {answer}</description>
</function>
"""


def our_config(**kwargs: Any) -> dict[str, Any]:
    label = {"type": "object",
             "properties": {"answer_status": {"type": "string", "enum": ["Solved", "Unsolved", "Unsure"]}},
             "required": ["answer_status"]}
    functions = [{"name": name, "description": f"our {name}", "parameters": copy.deepcopy(label)}
                 for name in ("check_answer_status", "parse_answer_status")]
    return {"prompt_template": "ours.txt", "completions_kwargs": {**kwargs, "functions": functions}}


def _folder(tmp_path: Path, config: dict[str, Any]) -> Path:
    folder = tmp_path / "evaluator"
    folder.mkdir(exist_ok=True)
    (folder / "ours.txt").write_text(OUR_TEMPLATE)
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return folder


def _one_answer(tmp_path: Path, answer: dict[str, Any]) -> tuple[Path, Path]:
    entry = converted_entry("What is up?")
    entry["answer"] = answer
    answers = write_json(tmp_path / "answers" / "G1_instruction.json", {"7": entry})
    return answers, write_json(tmp_path / "ids" / "G1_instruction.json", {"7": 0})


def test_options_given_win_over_the_configuration_and_absent_fields_are_not_sent(fake_openai, tmp_path):
    folder = _folder(tmp_path, our_config(model="cfg-model", max_tokens=77, top_p=0.5, timeout=9))
    answers, ids = _one_answer(tmp_path, converted_entry("What is up?")["answer"])
    fake_openai.handler = _reply
    # --judge-config alone: its prompt_template beside it gives the prompts.
    _cli(fake_openai, "pass-rate", "--answers", str(answers), "--ids", str(ids), "--out", str(tmp_path / "a"),
         "--rounds", "1", "--no-chart", "--judge-config", str(folder / "config.yaml"))
    first = fake_openai.chat_requests()[0]
    assert {k: first[k] for k in ("model", "max_tokens", "top_p")} == {"model": "cfg-model", "max_tokens": 77,
                                                                       "top_p": 0.5}
    assert "temperature" not in first and "timeout" not in first  # none configured; a client option
    assert first["messages"][0]["content"].startswith("\nGrade this. Query: What is up?")
    assert first["tools"][0]["function"]["description"] == "our check_answer_status"
    assert first["tools"][0]["function"]["parameters"]["required"] == ["answer_status", "reason"]

    fake_openai.reset()
    _cli(fake_openai, "pass-rate", "--answers", str(answers), "--ids", str(ids), "--out", str(tmp_path / "b"),
         "--rounds", "1", "--no-chart", "--judge-config", str(folder / "config.yaml"),
         "--judge-model", "mine", "--temperature", "0.3", "--max-tokens", "12")
    given = fake_openai.chat_requests()[0]
    assert (given["model"], given["temperature"], given["max_tokens"], given["top_p"]) == ("mine", 0.3, 12, 0.5)


def test_the_answer_object_is_shown_as_the_file_holds_it(fake_openai, tmp_path):
    entry = converted_entry("What is up?")
    answer = {"final_answer": entry["answer"]["final_answer"], "extra": "kept ü",
              "answer_details": entry["answer"]["answer_details"]}  # no method nor total_steps, another order
    answers, ids = _one_answer(tmp_path, answer)
    folder = _folder(tmp_path, our_config(model="m"))
    fake_openai.handler = _reply
    _cli(fake_openai, "pass-rate", "--answers", str(answers), "--ids", str(ids), "--out", str(tmp_path / "run"),
         "--rounds", "1", "--no-chart", "--judge-config", str(folder / "config.yaml"))
    parse = fake_openai.chat_requests()[1]
    assert parse["messages"][0]["content"] == f"Trace of What is up?: {json.dumps(answer)}"


@pytest.mark.parametrize("config,message", [
    ({"completions_kwargs": {"model": "m", "functions": [{"name": "grade", "parameters": {}}]}},
     "unknown judge function 'grade'"),
    ({"completions_kwargs": {"model": "m", "functions": [
        {"name": "check_answer_status", "parameters": {"type": "object", "properties": {"label": {}}}}]}},
     "check_answer_status has no parameters.properties.answer_status"),
    ({"completions_kwargs": {"model": "m", "temprature": 0.2}}, "does not take: temprature"),
    ({"model": "m"}, "no completions_kwargs"),
])
def test_a_bad_configuration_stops_before_any_call(config, message, fake_openai, tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    answers, ids = _one_answer(tmp_path, converted_entry("What is up?")["answer"])
    result = CliRunner().invoke(eval_group, ["pass-rate", "--answers", str(answers), "--ids", str(ids),
                                             "--out", str(tmp_path / "run"), "--judge-config", str(path),
                                             "--base-url", fake_openai.base_url, "--api-key", "k"])
    assert result.exit_code == 1 and message in result.output and str(path) in result.output
    assert fake_openai.calls == 0


# -- the method of answers read from traffic ------------------------------------------

def _parse_prompts(fake, tmp_path: Path, name: str, *extra: str) -> list[str]:
    digests = sorted(load_answers(SESSION).by_group[None])
    ids = write_json(tmp_path / "ids" / "G1_instruction.json", {q: 0 for q in digests})
    fake.reset()
    fake.handler = _reply
    _cli(fake, "pass-rate", "--answers", str(SESSION), "--ids", str(ids), "--out", str(tmp_path / name),
         "--rounds", "1", "--no-chart", *extra)
    return [r["messages"][0]["content"] for r in fake.chat_requests()
            if r["tool_choice"]["function"]["name"] == "parse_answer_status"]


def test_answers_from_traffic_show_the_judge_the_runs_method(fake_openai, tmp_path):
    given = _parse_prompts(fake_openai, tmp_path, "given", "--answers-method", "CoT@1")
    assert given and all('"method": "CoT@1", "total_steps"' in p for p in given)
    # By default a recording that names no method gets the run's name (here the cassette's).
    default = _parse_prompts(fake_openai, tmp_path, "default")
    assert default and all('"method": "pipeline_session", "total_steps"' in p for p in default)


def test_name_method_keeps_recorded_methods_unless_told(tmp_path):
    from stbeval.answers import name_method

    answers = load_answers(SESSION)
    name_method(answers, "CoT@1")
    assert {a.method for a in answers.by_group[None].values()} == {"CoT@1"}
    name_method(answers, "other")  # already named: kept
    assert {a.method for a in answers.by_group[None].values()} == {"CoT@1"}
    name_method(answers, "other", replace_recorded=True)
    assert {a.method for a in answers.by_group[None].values()} == {"other"}
