"""Answers in today's message format, against StableToolBench's real files: the twelve pipeline
answers beside data_example's legacy answers and their converted form.

These tests check exact facts of StableToolBench's real files (ids, counts, the original
evaluator's outputs); the formats themselves are also checked on small generated files in
test_eval_tool_calls.py. Without the real files this module is one skip (see tests/stb_samples.py).
"""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from stbeval.answers import load_answers
from stbeval.cli import eval_group
from stbeval.model import Answer, main_path
from stbeval.passrate import precheck
from stbproxy.cli import main as stbproxy_main
from tests.eval.helpers import Script, table_rows, write_json
from tests.eval.test_eval_tool_calls import (  # noqa: F401  (helpers and fixtures)
    legacy_copy,
    pipeline,
    scripted_labels,
)
from tests.stb_samples import real_stb_data, require_real_stb_data, skip_reason  # noqa: E402

if real_stb_data() is None:
    pytest.skip(skip_reason(), allow_module_level=True)


@pytest.fixture
def stb():
    return require_real_stb_data()


def test_eval_convert_writes_the_same_fields_as_for_legacy_answers(stb, pipeline, tmp_path):
    folder, raws = pipeline

    def convert(source, target):
        result = CliRunner().invoke(eval_group, ["convert", "--answers", str(source), "--out", str(target)])
        assert result.exit_code == 0, result.output
        return json.loads(target.read_text())

    today = convert(folder, tmp_path / "today.json")
    legacy = convert(legacy_copy(raws, tmp_path / "legacy" / "G1_instruction"), tmp_path / "legacy.json")
    assert today == legacy

    def fields(converted):
        """The field names at every level, over all entries."""
        seen = {"entry": set(), "answer": set(), "tool": set(), "node": set(), "tool message": set()}
        for entry in converted.values():
            seen["entry"] |= set(entry)
            seen["answer"] |= set(entry["answer"])
            for tool in entry["available_tools"]:
                seen["tool"] |= set(tool)
            for node in main_path(entry["answer"]["answer_details"]):
                seen["node"] |= set(node)
                if node["role"] == "tool":
                    seen["tool message"] |= set(node["message"])
        return seen

    # The same fields, at every level, as the original converter's output for legacy answers.
    original = json.loads((stb / "data_example" / "model_predictions_converted" / "virtual_chatgpt_cot" /
                           "G1_instruction.json").read_text())
    assert fields(today) == fields(original)
    assert fields(today)["tool"] == {"name", "description", "parameters"}


def test_pass_rate_on_the_twelve_pipeline_answers(pipeline, fake_openai, tmp_path):
    folder, raws = pipeline
    labels = scripted_labels(raws)
    ids = write_json(tmp_path / "ids" / "G1_instruction.json", {name.split("_")[0]: 0 for name in raws})
    # Rounds 9/12, 6/12, 3/12: mean 50.0, population std 20.4.
    runs = [0.75, 0.5, 0.25]
    expected = "50.0±20.4"

    def run(answers, out):
        fake_openai.reset()
        fake_openai.handler = Script(labels)
        result = CliRunner().invoke(stbproxy_main, ["eval", "pass-rate", "--answers", str(answers), "--ids", str(ids),
                                                    "--out", str(out), "--method", "pipeline", "--no-progress",
                                                    "--no-chart"],
                                    env={**fake_openai.env(), "NO_COLOR": "1"}, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        prompts = sorted(r["messages"][0]["content"] for r in fake_openai.chat_requests())
        return result, prompts

    today, today_prompts = run(folder, tmp_path / "today")
    # One judge call per finished answer and round, and the score the labels give.
    assert len(today_prompts) == 12 * 3
    assert ["pipeline", expected, expected] in table_rows(today.stdout)
    summary = json.loads((tmp_path / "today" / "summary.json").read_text())
    assert summary["groups"][0]["runs"] == pytest.approx(runs)

    # The same answers in the legacy format: the same prompts, hence the same score.
    legacy, legacy_prompts = run(legacy_copy(raws, tmp_path / "legacy" / "G1_instruction"), tmp_path / "legacy")
    assert legacy_prompts == today_prompts
    assert ["pipeline", expected, expected] in table_rows(legacy.stdout)
    assert json.loads((tmp_path / "legacy" / "summary.json").read_text())["groups"][0]["runs"] == pytest.approx(runs)


def test_pipeline_answers_among_legacy_answers_in_one_run(stb, pipeline, tmp_path):
    # A study often holds both: the data_example CoT answers (legacy) beside new ones.
    folder, raws = pipeline
    legacy_folder = stb / "data_example" / "answer" / "virtual_chatgpt_cot" / "G1_instruction"
    mixed = tmp_path / "mixed" / "G1_instruction"
    mixed.mkdir(parents=True)
    for source in legacy_folder.glob("*.json"):
        shutil.copy(source, mixed / f"9{source.name}")  # ids apart from the pipeline's
    for name, raw in raws.items():
        write_json(mixed / name, raw)
    loaded = load_answers(mixed).by_group["G1_instruction"]
    assert len(loaded) == 15 and all(isinstance(a, Answer) for a in loaded.values())
    alone = {**{f"9{q}": a for q, a in load_answers(legacy_folder).by_group["G1_instruction"].items()},
             **load_answers(folder).by_group["G1_instruction"]}
    for qid, answer in loaded.items():
        assert (answer.answer_details, answer.available_tools, answer.final_answer) == (
            alone[qid].answer_details, alone[qid].available_tools, alone[qid].final_answer)
    # The legacy CoT answer to 588 never called Finish; everything else goes to the judge.
    assert {q for q, a in loaded.items() if precheck(a) is not None} == {"9588"}

