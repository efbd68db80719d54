"""The eval commands end to end: tables on stdout, run folders, re-runs, bad input, resuming."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from stbeval.cli import eval_group
from stbeval.judgelog import LOG_NAME, read_records
from tests.eval.helpers import REPO, Script, converted_entry, table_rows, write_json
from tests.fakes.fake_openai import HttpError, ToolCall
from tests.processes import foreground

PNG = b"\x89PNG\r\n\x1a\n"


def invoke(fake, *args):
    result = CliRunner().invoke(eval_group, [*args, "--no-progress"] if args[0] != "report" else list(args),
                                env={**fake.env(), "NO_COLOR": "1"}, catch_exceptions=False)
    return result


@pytest.fixture
def files(tmp_path):
    answers = tmp_path / "answers" / "my_agent"
    write_json(answers / "G1_instruction.json", {"1": converted_entry("Q-one"), "2": converted_entry("Q-two")})
    write_json(answers / "G1_tool.json", {"3": converted_entry("Q-three"),
                                          "4": converted_entry("Q-four", finish=False)})
    ids = tmp_path / "ids"
    write_json(ids / "G1_instruction.json", {"1": 0, "2": 0})
    write_json(ids / "G1_tool.json", {"3": 0, "4": 0})
    return answers, ids


LABELS = {"Q-one": ["Solved"] * 3, "Q-two": ["Unsolved", "Solved", "Unsure"], "Q-three": ["Solved"] * 3}
TRACE = {"Q-two": ["Unsure"]}


def test_pass_rate_command_writes_the_run_and_reruns_free(fake_openai, files, tmp_path):
    answers, ids = files
    fake_openai.handler = Script(LABELS, trace=TRACE)
    out = tmp_path / "run"
    first = invoke(fake_openai, "pass-rate", "--answers", str(answers), "--ids", str(ids), "--out", str(out))
    assert first.exit_code == 0, first.output
    # G1_instruction rounds: (1+0)/2, (1+1)/2, (1+0.5)/2 -> 75.0±20.4; G1_tool: (1+0)/2 each -> 50.0±0.0.
    assert ["my_agent", "75.0±20.4", "50.0±0.0", "62.5±10.2"] in table_rows(first.stdout)
    assert first.stdout.index("G1_instruction") < first.stdout.index("G1_tool") < first.stdout.index("Average")
    assert "10 judgments (10 made with 10 calls, 0 from the log)" in first.stderr
    calls = fake_openai.calls
    assert calls == 3 + 4 + 3  # Q-two's Unsure in round 2 also asks for the trace
    assert sorted(p.name for p in out.iterdir()) == ["details", LOG_NAME, "scores.csv", "sopr.png", "summary.json",
                                                    "table.csv", "table.md"]
    assert (out / "sopr.png").read_bytes().startswith(PNG)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["method"] == "my_agent" and summary["judge"]["stats"]["judged"] == 10
    detail = json.loads((out / "details" / "G1_instruction_my_agent.json").read_text())
    assert detail["2"]["is_solved"] == {"0": "AnswerStatus.Unsolved", "1": "AnswerStatus.Solved",
                                        "2": "AnswerStatus.Unsure"}
    assert {"query", "tool_names", "answer_steps", "final_step", "is_solved"} <= set(detail["1"])
    assert detail["1"]["final_step"].startswith("Final step: {'name': 'Finish'")
    header = (out / "details" / "G1_tool_my_agent.csv").read_text().splitlines()[0]
    assert header.split("\t") == ["query", "available_tools", "model_intermediate_steps", "model_final_step",
                                  "model", "query_id", "is_solved"]

    again = invoke(fake_openai, "pass-rate", "--answers", str(answers), "--ids", str(ids), "--out", str(out))
    assert fake_openai.calls == calls
    assert again.stdout == first.stdout
    assert "10 from the log" in again.stderr


def test_win_rate_and_report_commands(fake_openai, tmp_path):
    cand = write_json(tmp_path / "cand" / "G1_tool.json", {"1": converted_entry("W-a", marker="@cand"),
                                                           "2": converted_entry("W-b", marker="@cand")})
    ref = write_json(tmp_path / "ref" / "G1_tool.json", {"1": converted_entry("W-a", marker="@ref"),
                                                         "2": converted_entry("W-b", finish=False, marker="@ref")})
    ids = write_json(tmp_path / "ids" / "G1_tool.json", {"1": 0, "2": 0})
    fake_openai.handler = Script({"W-a": ["Solved"] * 3, "W-b": ["Solved"] * 3}, ref_labels={"W-a": ["Solved"] * 3},
                                 picks={"W-a": ["ref", "ref", "cand"]})
    out = tmp_path / "wr"
    result = invoke(fake_openai, "win-rate", "--candidate", str(cand), "--reference", str(ref), "--ids", str(ids),
                    "--out", str(out), "--candidate-name", "mine", "--reference-name", "gpt35")
    assert result.exit_code == 0, result.output
    assert ["mine vs gpt35", "50.0", "50.0"] in table_rows(result.stdout)
    assert ["G1_tool", "1", "0", "1", "2", "3"] in table_rows(result.stdout)  # wins ties losses queries shortcuts
    detail = json.loads((out / "details" / "G1_tool_mine_gpt35.json").read_text())
    assert detail["1"]["mine"] == 1 and detail["1"]["gpt35"] == 2 and detail["2"]["round_0"] == "shortcut"

    fake_openai.handler = Script({"W-a": ["Solved"] * 3, "W-b": ["Unsolved"] * 3})
    pr = tmp_path / "pr"
    assert invoke(fake_openai, "pass-rate", "--answers", str(cand), "--ids", str(ids), "--out", str(pr),
                  "--method", "mine", "--no-chart").exit_code == 0
    rep = tmp_path / "rep"
    report = invoke(fake_openai, "report", str(pr), str(out), "--out", str(rep))
    assert report.exit_code == 0, report.output
    assert ["mine", "50.0±0.0", "50.0±0.0"] in table_rows(report.stdout) and "SoWR" in report.stdout
    assert (rep / "sopr.png").read_bytes().startswith(PNG)
    assert [s["kind"] for s in json.loads((rep / "report.json").read_text())] == ["pass_rate", "win_rate"]
    assert (rep / "report.csv").read_text().startswith("Method,G1_tool,Average\nmine,50.0±0.0,50.0±0.0")
    # the page shows what SoWR is made of beside it: wins, ties and losses
    page = tmp_path / "report.html"
    assert invoke(fake_openai, "report", str(pr), str(out), "--html", str(page)).exit_code == 0
    assert '<td class="num">50.0<div class="cell-detail">1 win, 0 ties, 1 loss</div></td>' in page.read_text()
    # a page or chart into a folder that is not there: refused, as export -o is, and no folder made
    for option, name in (("--html", "r.html"), ("--chart", "c.png")):
        nowhere = tmp_path / "nowhere" / name
        refused = invoke(fake_openai, "report", str(pr), option, str(nowhere))
        assert refused.exit_code == 1 and not nowhere.parent.exists()
        assert f"cannot write {nowhere}: the directory {nowhere.parent} does not exist" in refused.stderr
    into_out = tmp_path / "new-out"  # the --out folder, which the command makes, takes the chart
    made = invoke(fake_openai, "report", str(pr), "--out", str(into_out), "--chart", str(into_out / "c.png"))
    assert made.exit_code == 0, made.output
    assert (into_out / "c.png").read_bytes().startswith(PNG)


def test_solvable_command_majority_vote(fake_openai, tmp_path):
    queries = write_json(tmp_path / "q" / "G2_category.json", [
        {"query_id": 1, "query": "S-1", "api_list": [{"tool_name": "t", "api_name": "a", "api_description": "d",
                                                        "required_parameters": [{"name": "x"}]}]},
        {"query_id": 2, "query": "S-2", "api_list": []},
        {"query_id": 3, "query": "S-3", "api_list": []},
        {"oops": True},
    ])
    fake_openai.handler = Script(solvable={
        "S-1": {"m1": "Solvable", "m2": "Solvable", "m3": "Unsolvable"},
        "S-2": {"m1": "Solvable", "m2": "Unsure", "m3": "Unsolvable"},
        "S-3": {"m1": "Solvable", "m2": "Solvable", "m3": "Solvable"}})
    out = tmp_path / "solv"
    result = invoke(fake_openai, "solvable", "--queries", str(queries.parent), "--out", str(out),
                    "--judge-model", "m1", "--judge-model", "m2", "--judge-model", "m3")
    assert result.exit_code == 0, result.output
    assert json.loads((out / "test_query_ids" / "G2_category.json").read_text()) == {"1": 0, "3": 0}
    assert ["G2_category", "3", "2"] in table_rows(result.stdout)
    assert "entry #3 lacks query" in result.stderr
    assert fake_openai.calls == 9
    s1 = [r["messages"][0]["content"] for r in fake_openai.chat_requests() if '"S-1"' in r["messages"][0]["content"]]
    assert len(s1) == 3 and all('"required_parameters": ["x"]' in prompt for prompt in s1)


def test_help_shows_complete_examples():
    runner = CliRunner()
    for command, example in [("pass-rate", "stbproxy eval pass-rate --answers"),
                             ("win-rate", "stbproxy eval win-rate --candidate"),
                             ("solvable", "stbproxy eval solvable --queries"),
                             ("report", "stbproxy eval report runs/")]:
        result = runner.invoke(eval_group, [command, "--help"])
        assert result.exit_code == 0 and example in result.output


def test_bad_input_gets_clear_messages(fake_openai, files, tmp_path):
    answers, _ = files
    bad_ids = tmp_path / "bad.json"
    bad_ids.write_text("{oops")
    result = invoke(fake_openai, "pass-rate", "--answers", str(answers), "--ids", str(bad_ids),
                    "--out", str(tmp_path / "o"))
    assert result.exit_code == 1 and "bad.json: not valid JSON" in result.stderr
    template = tmp_path / "t.txt"
    template.write_text("<function><name>check_answer_status</name><description>{nope}</description></function>")
    result = invoke(fake_openai, "pass-rate", "--answers", str(answers), "--ids", str(bad_ids.parent / "ids"),
                    "--out", str(tmp_path / "o"), "--judge-template", str(template))
    assert result.exit_code == 1 and "unknown field(s) ['nope']" in result.stderr
    result = invoke(fake_openai, "report", str(tmp_path))
    assert result.exit_code == 1 and "no run summary here" in result.stderr


def test_unknown_and_missing_ids_are_named(fake_openai, files, tmp_path):
    answers, _ = files
    ids = write_json(tmp_path / "ids2" / "G1_instruction.json", {"1": 0, "99": 0})
    fake_openai.handler = Script(LABELS, trace=TRACE)
    result = invoke(fake_openai, "pass-rate", "--answers", str(answers), "--ids", str(ids),
                    "--out", str(tmp_path / "o"), "--method", "agent-v1.5")
    assert result.exit_code == 0
    assert "warning: G1_instruction: 1 of 2 ids have no usable answer, counted as Unsolved" in result.stderr
    assert "query 99" not in result.stderr
    problems = json.loads((tmp_path / "o" / "summary.json").read_text())["problems"]
    assert "query 99 (G1_instruction): no answer" in problems
    assert "warning: query 2: answer for an id not in the ids of G1_instruction; ignored" in result.stderr
    assert ["agent-v1.5", "50.0±0.0", "50.0±0.0"] in table_rows(result.stdout)  # id 99 counts as Unsolved
    detail = json.loads((tmp_path / "o" / "details" / "G1_instruction_agent-v1.5.json").read_text())
    assert detail["99"]["is_solved"] == {"0": "missing", "1": "missing", "2": "missing"}


def test_refusing_endpoint_stops_with_a_message(fake_openai, files, tmp_path):
    answers, ids = files
    fake_openai.handler = lambda req: HttpError(401, "invalid api key")
    result = invoke(fake_openai, "pass-rate", "--answers", str(answers), "--ids", str(ids),
                    "--out", str(tmp_path / "o"))
    assert result.exit_code == 1
    assert "judge at http://127.0.0.1:" in result.stderr and "refused the call" in result.stderr
    assert "invalid api key" in result.stderr and "no score written" in result.stderr
    assert not (tmp_path / "o" / "summary.json").exists()


def test_interrupted_run_resumes_where_it_stopped(fake_openai, tmp_path):
    n = 30
    answers = write_json(tmp_path / "a" / "G1_tool.json", {str(i): converted_entry(f"R-{i:02d}") for i in range(n)})
    ids = write_json(tmp_path / "ids" / "G1_tool.json", {str(i): 0 for i in range(n)})
    fake_openai.handler = lambda req: ToolCall("check_answer_status", {"answer_status": "Solved"})
    fake_openai.latency = 0.2  # the whole run takes 9 s, so Ctrl-C finds it at work even on a loaded machine
    out = tmp_path / "run"
    command = [sys.executable, "-m", "stbeval", "pass-rate", "--answers", str(answers), "--ids", str(ids),
               "--out", str(out), "--concurrency", "2", "--no-progress"]
    env = {**os.environ, **fake_openai.env(), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=foreground)  # (Ctrl-C reaches it even when the suite runs in the background)
    try:
        deadline = time.monotonic() + 30
        while fake_openai.calls < 10 and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.02)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130 and "run the same command again to resume" in err
    kept = [r for r in read_records(out / LOG_NAME) if r["status"] == "ok"]
    assert 5 <= len(kept) < 3 * n  # calls in flight at the interrupt may be lost, nothing else

    fake_openai.latency = 0.0
    before = fake_openai.calls
    result = invoke(fake_openai, "pass-rate", "--answers", str(answers), "--ids", str(ids), "--out", str(out))
    assert result.exit_code == 0
    assert fake_openai.calls - before == 3 * n - len(kept)
    assert ["a", "100.0±0.0", "100.0±0.0"] in table_rows(result.stdout)


# -- through the installed `stbproxy eval` command, as a user runs it ----------------------------

def stbproxy_eval(*args, env):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "STBPROXY_"))}
    script = os.path.join(os.path.dirname(sys.executable), "stbproxy")
    return subprocess.run([script, "eval", *args], env={**base, **env}, capture_output=True, text=True, timeout=120)


def one_error_line(result) -> str:
    assert result.returncode != 0 and "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("stbproxy: error: ") and result.stdout == ""
    return lines[0]


def test_no_judge_configured_stops_with_one_line_and_no_score(files, tmp_path):
    answers, ids = files
    out = tmp_path / "run"
    result = stbproxy_eval("pass-rate", "--answers", str(answers), "--ids", str(ids), "--out", str(out), env={})
    line = one_error_line(result)
    assert line.startswith("stbproxy: error: no judge is configured: set OPENAI_BASE_URL and OPENAI_API_KEY")
    assert "https://api.openai.com/v1" in line and "no score written" in line
    assert not (out / "summary.json").exists() and not (out / "table.md").exists()


def test_unreachable_judge_stops_with_one_line_naming_the_endpoint(files, tmp_path):
    answers, ids = files
    out = tmp_path / "run"
    with socket.socket() as closed:  # a port that nothing listens on
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}/v1"
    result = stbproxy_eval("pass-rate", "--answers", str(answers), "--ids", str(ids), "--out", str(out),
                           "--max-retries", "0", env={"OPENAI_BASE_URL": endpoint, "OPENAI_API_KEY": "k"})
    line = one_error_line(result)
    assert line.startswith(f"stbproxy: error: the judge at {endpoint} cannot be reached: APIConnectionError")
    assert "no score written" in line
    assert not (out / "summary.json").exists() and not (out / "scores.csv").exists()


def test_ids_folder_evaluates_the_groups_with_answers_and_says_one_line_per_group(fake_openai, files, tmp_path):
    answers, ids = files
    write_json(ids / "G2_tool.json", {str(i): 0 for i in range(100, 130)})  # a group nobody answered
    write_json(ids / "G1_tool.json", {"3": 0, "4": 0, "5": 0, "6": 0})  # two ids without answers
    fake_openai.handler = Script(LABELS, trace=TRACE)
    out = tmp_path / "run"
    result = stbproxy_eval("pass-rate", "--answers", str(answers), "--ids", str(ids), "--out", str(out),
                           env=fake_openai.env())
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == ["warning: G1_tool: 2 of 4 ids have no usable answer, counted as Unsolved",
                        "warning: G2_tool: none of its 30 ids has an answer; group not evaluated"]
    header = next(row for row in table_rows(result.stdout) if row[0] == "Method")
    assert header == ["Method", "G1_instruction", "G1_tool", "Average"]  # no 0.0 for G2_tool
    problems = json.loads((out / "summary.json").read_text())["problems"]
    assert "query 100 (G2_tool): no answer" in problems and "query 5 (G1_tool): no answer" in problems
