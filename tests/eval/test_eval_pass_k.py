"""pass-rate over repeated trials: pass@k and pass^k end to end, against a scripted judge.

Four trials of four queries whose trials pass 4, 3, 2 and 0 times (the table of
test_eval_trials.py). Each answer carries a code the judge reads its labels from, one per
round, and a trial marker so that no two trials' answers are the same prompt.
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import sys
import threading
from collections import Counter

import pytest
from click.testing import CliRunner

from stbeval.cli import eval_group
from stbeval.sources import add_expander, remove_expander
from tests.eval.helpers import REPO, converted_entry, table_rows, write_json
from tests.fakes.fake_openai import ToolCall

PNG = b"\x89PNG\r\n\x1a\n"
ROUNDS = {"PASS": ["Solved"] * 3, "FAIL": ["Unsolved"] * 3,
          "MAJ": ["Solved", "Unsolved", "Solved"],  # passes: two of three rounds say Solved
          "MIN": ["Unsolved", "Solved", "Unsolved"]}  # fails: one of three
# query -> (group, its code in trials 1..4); passes: T-one 4, T-two 3, T-three 2, T-four 0.
TABLE = {"T-one": ("G1_instruction", ["PASS", "PASS", "MAJ", "PASS"]),
         "T-two": ("G1_instruction", ["PASS", "MAJ", "FAIL", "PASS"]),
         "T-three": ("G1_tool", ["MIN", "PASS", "PASS", "FAIL"]),
         "T-four": ("G1_tool", ["FAIL", "MIN", "FAIL", "FAIL"])}
QIDS = {"T-one": "1", "T-two": "2", "T-three": "3", "T-four": "4"}

# By hand, per query (c of n=4): pass^k = C(c,k)/C(4,k), pass@k = 1 - C(4-c,k)/C(4,k).
PASS_HAT = {"1": (1 + 3 / 4 + 2 / 4 + 0) / 4, "2": (1 + 1 / 2 + 1 / 6 + 0) / 4, "3": (1 + 1 / 4 + 0 + 0) / 4,
            "4": (1 + 0 + 0 + 0) / 4}
PASS_AT = {"1": (1 + 3 / 4 + 2 / 4 + 0) / 4, "2": (1 + 1 + 5 / 6 + 0) / 4, "3": (1 + 1 + 1 + 0) / 4,
           "4": (1 + 1 + 1 + 0) / 4}


class CodeJudge:
    """Labels from the code in the answer; a prompt's n-th call is its round n mod 3 (rounds
    run in order, every prompt is one trial's answer, and a run into a new folder starts
    again at round 0). NONE: never a label."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self._lock = threading.Lock()

    def __call__(self, request):
        fn = request["tool_choice"]["function"]["name"]
        prompt = request["messages"][0]["content"]
        code = re.search(r"<<(\w+)>>", prompt).group(1)
        if code == "NONE":
            return "no label in this reply"
        with self._lock:
            r = self.seen[prompt] % 3
            self.seen[prompt] += 1
        return ToolCall(fn, {"reason": "scripted", "answer_status": ROUNDS[code][r]})


def write_trials(root, table=TABLE, drop=()):
    """One folder per trial, ``agent.t<i>``; ``drop`` holds (trial, query) left unanswered."""
    folders = []
    for i in range(4):
        folder = root / f"agent.t{i + 1}"
        for group in ("G1_instruction", "G1_tool"):
            write_json(folder / f"{group}.json", {
                QIDS[q]: converted_entry(q, f"<<{codes[i]}>>", marker=f" #t{i + 1}")
                for q, (g, codes) in table.items() if g == group and (i + 1, q) not in drop})
        folders.append(folder)
    return folders


@pytest.fixture
def ids(tmp_path):
    folder = tmp_path / "ids"
    write_json(folder / "G1_instruction.json", {"1": 0, "2": 0})
    write_json(folder / "G1_tool.json", {"3": 0, "4": 0})
    return folder


def run(fake, *args):
    return CliRunner().invoke(eval_group, ["pass-rate", *args, "--no-progress", "--parse-retries", "0"],
                              env={**fake.env(), "NO_COLOR": "1"}, catch_exceptions=False)


def answers_args(folders):
    return [arg for folder in folders for arg in ("--answers", str(folder))]


def test_four_trials_give_the_hand_computed_pass_at_k_and_pass_hat_k(fake_openai, ids, tmp_path):
    fake_openai.handler = CodeJudge()
    out = tmp_path / "run"
    result = run(fake_openai, *answers_args(write_trials(tmp_path)), "--ids", str(ids), "--out", str(out))
    assert result.exit_code == 0, result.output
    trials = json.loads((out / "summary.json").read_text())["trials"]
    overall = trials["overall"]
    assert (trials["count"], overall["trials"], overall["queries"]) == (4, 4, 4)
    assert overall["pass^k"] == pytest.approx(PASS_HAT) and overall["pass@k"] == pytest.approx(PASS_AT)
    assert overall["pass^k"]["2"] == pytest.approx((1 + 0.5 + 1 / 6 + 0) / 4)
    # Per group: G1_instruction holds the 4- and 3-pass queries, G1_tool the 2- and 0-pass ones.
    assert trials["groups"]["G1_instruction"]["pass^k"]["2"] == pytest.approx((1 + 0.5) / 2)
    assert trials["groups"]["G1_tool"]["pass^k"]["2"] == pytest.approx(1 / 6 / 2)
    assert trials["groups"]["G1_tool"]["pass@k"]["2"] == pytest.approx(5 / 6 / 2)

    rows = table_rows(result.stdout)
    assert ["pass^2", "75.0", "8.3", "41.7"] in rows
    assert ["pass@4", "100.0", "50.0", "75.0"] in rows
    labels = [row[0] for row in rows if row[0].startswith("pass")]
    assert labels == ["pass@1", "pass@2", "pass@3", "pass@4", "pass^1", "pass^2", "pass^3", "pass^4"]
    assert "pass@k and pass^k over 4 trials" in result.stdout

    # SoPR per trial (mean±std over its rounds) and across them (mean±std over trials).
    # Trial 2 rounds: G1_instruction (1+1)/2, (1+0)/2, (1+1)/2; G1_tool (1+0)/2, (1+1)/2, (1+0)/2.
    assert ["trial 2", "83.3±23.6", "66.7±23.6", "75.0±0.0"] in rows
    assert trials["groups"]["G1_instruction"]["sopr"] == pytest.approx([100, 250 / 3, 100 / 3, 100])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["method"] == "agent"  # what agent.t1 .. agent.t4 share
    assert summary["groups"][0]["mean"] == pytest.approx((100 + 250 / 3 + 100 / 3 + 100) / 4)
    assert "mean±std over trials" in result.stdout

    assert (out / "pass_k.png").read_bytes().startswith(PNG) and (out / "sopr.png").exists()
    verdicts = list(csv.DictReader((out / "details" / "trials.csv").open()))
    assert [v["trial_1"] for v in verdicts] == ["passed", "passed", "failed", "failed"]
    assert [v["passed"] for v in verdicts] == ["4", "3", "2", "0"]
    detail = json.loads((out / "details" / "trial_3" / "G1_instruction_agent.json").read_text())
    assert detail["1"]["is_solved"] == {"0": "AnswerStatus.Solved", "1": "AnswerStatus.Unsolved",
                                        "2": "AnswerStatus.Solved"}

    calls = fake_openai.calls
    again = run(fake_openai, *answers_args(write_trials(tmp_path)), "--ids", str(ids), "--out", str(out))
    assert fake_openai.calls == calls and again.stdout == result.stdout  # all from the log


def test_a_missing_trial_fails_under_unsolved_and_leaves_its_query_out_under_skip(fake_openai, ids, tmp_path):
    folders = write_trials(tmp_path, drop={(2, "T-two")})
    fake_openai.handler = CodeJudge()
    unsolved = run(fake_openai, *answers_args(folders), "--ids", str(ids), "--out", str(tmp_path / "u"))
    assert unsolved.exit_code == 0, unsolved.output
    overall = json.loads((tmp_path / "u" / "summary.json").read_text())["trials"]["overall"]
    # T-two passes trials 1 and 4 only now: 4, 2, 2, 0.
    assert overall["queries"] == 4 and overall["pass^k"]["2"] == pytest.approx((1 + 1 / 6 + 1 / 6 + 0) / 4)
    assert "trial 2: G1_instruction: 1 of 2 ids have no usable answer, counted as Unsolved" in unsolved.stderr

    skip = run(fake_openai, *answers_args(folders), "--ids", str(ids), "--out", str(tmp_path / "s"),
               "--missing", "skip")
    assert skip.exit_code == 0, skip.output
    trials = json.loads((tmp_path / "s" / "summary.json").read_text())["trials"]
    assert trials["overall"]["queries"] == 3 and trials["overall"]["left_out"] == {"missing": 1, "unscored": 0}
    assert trials["overall"]["pass^k"]["2"] == pytest.approx((1 + 1 / 6 + 0) / 3)
    assert "warning: pass@k and pass^k: 1 queries without a usable answer in some trial left out " \
           "(--missing skip)" in skip.stderr
    row = next(v for v in csv.DictReader((tmp_path / "s" / "details" / "trials.csv").open()) if v["query_id"] == "2")
    assert (row["trial_2"], row["pass_k"]) == ("missing", "left out: missing")


def test_an_unscored_trial_leaves_its_query_out_and_none_scored_does_not_crash(fake_openai, ids, tmp_path):
    table = {**TABLE, "T-three": ("G1_tool", ["MIN", "NONE", "PASS", "FAIL"])}
    fake_openai.handler = CodeJudge()
    result = run(fake_openai, *answers_args(write_trials(tmp_path, table)), "--ids", str(ids),
                 "--out", str(tmp_path / "a"))
    assert result.exit_code == 0, result.output
    overall = json.loads((tmp_path / "a" / "summary.json").read_text())["trials"]["overall"]
    assert overall["queries"] == 3 and overall["left_out"] == {"missing": 0, "unscored": 1}
    assert overall["pass^k"]["1"] == pytest.approx((1 + 3 / 4 + 0) / 3)
    assert "warning: pass@k and pass^k: 1 queries with an unscored trial left out (each counted query needs " \
           "all 4 trials scored)" in result.stderr

    nothing = {q: (g, ["PASS", "PASS", "NONE", "PASS"]) for q, (g, _codes) in TABLE.items()}
    result = run(fake_openai, *answers_args(write_trials(tmp_path / "n", nothing)), "--ids", str(ids),
                 "--out", str(tmp_path / "b"))
    assert result.exit_code == 0, result.output
    assert "no query has all 4 trials scored; not computed" in result.stderr
    assert ["pass^2", "n/a", "n/a", "n/a"] in table_rows(result.stdout)
    assert not (tmp_path / "b" / "pass_k.png").exists()


def test_one_answers_is_a_plain_run_and_the_same_answers_twice_are_judged_once(fake_openai, ids, tmp_path):
    [first, *_] = write_trials(tmp_path)
    fake_openai.handler = CodeJudge()
    one = run(fake_openai, "--answers", str(first), "--ids", str(ids), "--out", str(tmp_path / "one"))
    assert one.exit_code == 0, one.output
    assert "pass@" not in one.stdout and "SoPR (%, mean±std over rounds)" in one.stdout
    assert "trials" not in json.loads((tmp_path / "one" / "summary.json").read_text())
    assert not (tmp_path / "one" / "pass_k.png").exists() and not (tmp_path / "one" / "details" / "trials.csv").exists()

    calls = fake_openai.calls
    twice = run(fake_openai, "--answers", str(first), "--answers", str(first), "--ids", str(ids),
                "--out", str(tmp_path / "two"))
    assert twice.exit_code == 0, twice.output
    assert fake_openai.calls - calls == calls  # trial 2 re-uses trial 1's judgments
    overall = json.loads((tmp_path / "two" / "summary.json").read_text())["trials"]["overall"]
    assert overall["pass@k"] == overall["pass^k"] == {"1": 0.5, "2": 0.5}  # trials that agree


def test_a_registered_expander_turns_one_answers_into_its_trials(fake_openai, ids, tmp_path):
    folders = write_trials(tmp_path)

    def expand(text):
        return [str(f) for f in folders] if text == "agent-run" else None

    fake_openai.handler = CodeJudge()
    add_expander(expand)
    try:
        result = run(fake_openai, "--answers", "agent-run", "--ids", str(ids), "--out", str(tmp_path / "x"))
    finally:
        remove_expander(expand)
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "x" / "summary.json").read_text())
    assert summary["method"] == "agent-run" and summary["trials"]["sources"] == [str(f) for f in folders]
    assert summary["trials"]["overall"]["pass^k"] == pytest.approx(PASS_HAT)
    # unregistered again: the name is no source any more
    gone = run(fake_openai, "--answers", "agent-run", "--ids", str(ids), "--out", str(tmp_path / "y"))
    assert gone.exit_code != 0 and "agent-run: no such answers file or folder" in gone.output


def test_python_m_stbeval_reports_the_trials(fake_openai, ids, tmp_path):
    fake_openai.handler = CodeJudge()
    command = [sys.executable, "-m", "stbeval", "pass-rate", *answers_args(write_trials(tmp_path)),
               "--ids", str(ids), "--out", str(tmp_path / "m"), "--no-progress", "--no-chart"]
    env = {**os.environ, **fake_openai.env(), "PYTHONPATH": str(REPO)}
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert ["pass^2", "75.0", "8.3", "41.7"] in table_rows(result.stdout)
    assert not (tmp_path / "m" / "pass_k.png").exists()


def test_expansion_leaves_paths_and_unknown_names_alone_and_refuses_an_empty_one(tmp_path):
    from stbeval.errors import InputError
    from stbeval.sources import expand_sources

    def expand(text):
        return {"run": ["run.t1", "run.t2"], "empty": []}.get(text)

    (tmp_path / "run").mkdir()
    add_expander(expand)
    try:
        assert expand_sources(["run", "other"]) == ["run.t1", "run.t2", "other"]
        assert expand_sources([str(tmp_path / "run")]) == [str(tmp_path / "run")]  # a folder is never a name
        with pytest.raises(InputError, match="empty: names no trials"):
            expand_sources(["empty"])
    finally:
        remove_expander(expand)
    assert expand_sources(["run"]) == ["run"]
