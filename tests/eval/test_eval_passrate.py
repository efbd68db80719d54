"""SoPR against a judge scripted per query and round, with the expected numbers worked out here."""

from __future__ import annotations

import json
import math

import pytest

from stbeval.answers import load_answers, load_ids
from stbeval.judgelog import LOG_NAME, read_records
from stbeval.passrate import pass_rate, precheck
from tests.eval.helpers import Script, converted_entry, make_judge, write_json
from tests.fakes.fake_openai import HttpError


def pstd(values):
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / len(values))


@pytest.fixture
def two_groups(tmp_path):
    answers = tmp_path / "answers"
    write_json(answers / "G1_instruction.json", {
        "1": converted_entry("Q-alpha"),
        "2": converted_entry("Q-beta"),
        "3": converted_entry("Q-gamma", finish=False),  # never called Finish: Unsolved, no judge
        "4": converted_entry("Q-delta"),
    })
    write_json(answers / "G2_category.json", {"5": converted_entry("Q-eps")})  # id 6 has no answer
    ids = tmp_path / "ids"
    write_json(ids / "G1_instruction.json", {"1": 0, "2": 0, "3": 0, "4": 0})
    write_json(ids / "G2_category.json", {"5": 0, "6": 0})
    return answers, ids


SCRIPT = dict(
    labels={"Q-alpha": ["Solved", "Solved", "Unsolved"], "Q-beta": ["Unsure"] * 3,
            "Q-delta": ["Unsolved", "Solved", "Solved"], "Q-eps": ["Solved"] * 3},
    trace={"Q-beta": ["Solved", "Unsolved", "Unsure"]},
)


def run(answers, ids, judge, **kw):
    return pass_rate(load_answers(answers), load_ids(ids), judge, method="m", **kw)


def by_group(result):
    return {g.group: g for g in result.groups}


def test_scores_match_hand_computation(fake_openai, two_groups, tmp_path):
    answers, ids = two_groups
    fake_openai.handler = Script(**SCRIPT)
    judge = make_judge(fake_openai, tmp_path / "run")
    warnings = []
    result = run(answers, ids, judge, rounds=3, warn=warnings.append)

    # G1: alpha 1,1,0; beta (Unsure, then the trace) 1,0,0.5; gamma 0,0,0; delta 0,1,1.
    g1_runs = [(1 + 1 + 0 + 0) / 4, (1 + 0 + 0 + 1) / 4, (0 + 0.5 + 0 + 1) / 4]
    # G2: eps Solved in every round; id 6 has no answer and counts as Unsolved.
    g2_runs = [(1 + 0) / 2] * 3
    avg_runs = [(a + b) / 2 for a, b in zip(g1_runs, g2_runs)]
    groups = by_group(result)
    assert groups["G1_instruction"].runs == pytest.approx(g1_runs)
    assert groups["G1_instruction"].mean == pytest.approx(100 * sum(g1_runs) / 3)
    assert groups["G1_instruction"].std == pytest.approx(100 * pstd(g1_runs))
    assert round(groups["G1_instruction"].mean, 1) == 45.8 and round(groups["G1_instruction"].std, 1) == 5.9
    assert groups["G2_category"].mean == pytest.approx(50.0) and groups["G2_category"].std == pytest.approx(0.0)
    assert result.average.mean == pytest.approx(100 * sum(avg_runs) / 3)
    assert result.average.std == pytest.approx(100 * pstd(avg_runs))
    # alpha 3 + beta 3x2 (first check, then the trace) + delta 3 + eps 3; gamma and id 6 cost nothing.
    assert fake_openai.calls == 15
    assert judge.stats.judged == 15 and judge.stats.reused == 0
    assert groups["G1_instruction"].counts["no_judge"] == 1
    assert groups["G2_category"].counts["missing"] == 1
    # One line per group about ids without an answer; the ids themselves are kept for the summary.
    assert "G2_category: 1 of 2 ids have no usable answer, counted as Unsolved" in warnings
    assert not any("query 6" in w for w in warnings) and "query 6 (G2_category): no answer" in result.problems
    # Token usage from the replies is summed.
    assert judge.stats.prompt_tokens > 0 and judge.stats.completion_tokens > 0
    logged = read_records(tmp_path / "run" / LOG_NAME)
    assert sum(r["prompt_tokens"] for r in logged) == judge.stats.prompt_tokens


def test_skip_policy_leaves_missing_out(fake_openai, two_groups, tmp_path):
    answers, ids = two_groups
    fake_openai.handler = Script(**SCRIPT)
    result = run(answers, ids, make_judge(fake_openai, tmp_path / "run"), missing="skip")
    g2 = by_group(result)["G2_category"]
    assert g2.mean == pytest.approx(100.0) and g2.queries == 1


def test_rerun_on_same_folder_makes_no_call_and_same_numbers(fake_openai, two_groups, tmp_path):
    answers, ids = two_groups
    fake_openai.handler = Script(**SCRIPT)
    first = run(answers, ids, make_judge(fake_openai, tmp_path / "run"), concurrency=8)
    calls = fake_openai.calls
    again_judge = make_judge(fake_openai, tmp_path / "run")
    second = run(answers, ids, again_judge, concurrency=8)
    assert fake_openai.calls == calls  # nothing new reached the server
    assert again_judge.stats.judged == 0 and again_judge.stats.reused == calls
    assert [(g.group, g.runs) for g in second.groups] == [(g.group, g.runs) for g in first.groups]
    assert (second.average.mean, second.average.std) == (first.average.mean, first.average.std)


def test_concurrency_does_not_change_results(fake_openai, two_groups, tmp_path):
    answers, ids = two_groups
    fake_openai.handler = Script(**SCRIPT)
    one = run(answers, ids, make_judge(fake_openai, tmp_path / "a"), concurrency=1)
    fake_openai.handler = Script(**SCRIPT)
    many = run(answers, ids, make_judge(fake_openai, tmp_path / "b"), concurrency=16)
    assert [g.runs for g in one.groups] == [g.runs for g in many.groups]


def test_no_judge_rules(tmp_path):
    from stbeval.answers import converted_answer

    finished = converted_answer("1", converted_entry("q"))
    assert precheck(finished) is None
    assert precheck(converted_answer("2", converted_entry("q", finish=False))) == "last step is not a Finish call"
    assert "gave up" in precheck(converted_answer("3", converted_entry("q", give_up=True)))
    assert precheck(converted_answer("4", converted_entry("q", final_text=""))) == "empty final answer"
    assert precheck(converted_answer("5", converted_entry("q", final_text=None))) == "empty final answer"


def test_rules_decide_without_any_judge_call(fake_openai, tmp_path):
    answers = write_json(tmp_path / "G1_tool.json", {
        "1": converted_entry("Q-a", finish=False), "2": converted_entry("Q-b", give_up=True),
        "3": converted_entry("Q-c", final_text=""),
    })
    ids = write_json(tmp_path / "ids" / "G1_tool.json", {"1": 0, "2": 0, "3": 0})
    fake_openai.handler = Script()
    result = run(answers, ids, make_judge(fake_openai, tmp_path / "run"))
    assert fake_openai.calls == 0
    assert result.groups[0].mean == 0.0
    assert {o.reasons[0] for o in result.outcomes["G1_tool"]} == {
        "last step is not a Finish call", "gave up (give_up_and_restart)", "empty final answer"}


def test_unparseable_replies_are_unscored_not_guessed(fake_openai, tmp_path):
    answers = write_json(tmp_path / "G1_tool.json", {"1": converted_entry("Q-a"), "2": converted_entry("Q-b")})
    ids = write_json(tmp_path / "ids" / "G1_tool.json", {"1": 0, "2": 0})
    fake_openai.handler = Script({"Q-a": ["Solved"] * 3, "Q-b": ["I refuse", "no idea", "Unsolved", "Unsolved"]})
    warnings = []
    result = run(answers, ids, make_judge(fake_openai, tmp_path / "run", parse_retries=1), warn=warnings.append)
    g = result.groups[0]
    # Round 0: Q-b unscored (two unusable replies) so only Q-a counts; then 1 and 0.
    assert g.runs == pytest.approx([1.0, 0.5, 0.5])
    assert g.counts["unscored"] == 1
    assert fake_openai.calls == 3 + 2 + 2
    assert any("query 2" in w and "round 0" in w and "unscored" in w for w in warnings)
    records = read_records(tmp_path / "run" / LOG_NAME)
    unscored = [r for r in records if r["status"] == "unscored"]
    assert len(unscored) == 1 and unscored[0]["qid"] == "2" and len(unscored[0]["rejected"]) == 1
    assert "I refuse" in unscored[0]["rejected"][0] and "no idea" in unscored[0]["raw"]


def test_judge_timeout_is_reported_and_the_rest_continues(fake_openai, tmp_path):
    answers = write_json(tmp_path / "G1_tool.json", {"1": converted_entry("Q-slow"), "2": converted_entry("Q-fast")})
    ids = write_json(tmp_path / "ids" / "G1_tool.json", {"1": 0, "2": 0})
    fake_openai.handler = Script({"Q-slow": ["Solved"] * 6, "Q-fast": ["Unsolved"] * 3})
    fake_openai.latency = lambda req: 1.0 if "Q-slow" in req["messages"][0]["content"] else 0.0
    warnings = []
    result = run(answers, ids, make_judge(fake_openai, tmp_path / "run", timeout=0.3), rounds=1, warn=warnings.append)
    assert result.groups[0].counts["unscored"] == 1 and result.groups[0].runs == [0.0]
    assert any("query 1" in w and "Timeout" in w for w in warnings)

    # Failed calls are not re-used: the next run asks again, only for them.
    fake_openai.latency = 0.0
    before = fake_openai.calls
    again = run(answers, ids, make_judge(fake_openai, tmp_path / "run"), rounds=1)
    assert fake_openai.calls == before + 1
    assert again.groups[0].runs == [0.5]


def test_http_errors_continue_run(fake_openai, tmp_path):
    answers = write_json(tmp_path / "G1_tool.json", {"1": converted_entry("Q-a"), "2": converted_entry("Q-b")})
    ids = write_json(tmp_path / "ids" / "G1_tool.json", {"1": 0, "2": 0})
    fake_openai.handler = Script({"Q-a": [HttpError(500)], "Q-b": ["Solved"]})
    warnings = []
    result = run(answers, ids, make_judge(fake_openai, tmp_path / "run"), rounds=1, warn=warnings.append)
    assert result.groups[0].runs == [1.0]
    assert any(w.startswith("query 1 (G1_tool), round 0: unscored: judge call failed") for w in warnings)


def _original_labels(path):
    data = json.loads(path.read_text())
    return {qid: [v["is_solved"][str(r)].split(".")[-1] for r in range(3)] for qid, v in data.items()}, data


