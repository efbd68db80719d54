"""Score a run from its traffic: a live session in the store, read by ``stbproxy eval``,
and exported one cassette per conversation, each replayed on its own.

Two recordings of StableToolBench's twelve pipeline answers, each made on two threads
into one session of a real ``stbproxy serve`` (tests/pipeline_run.py): ``pipeline``
(virtual mode, LLM calls passed through and logged, tools over POST /virtual) and
``http`` (record mode, LLM calls recorded and streamed, RapidAPI-style tool calls).
Each recording starts a real proxy and takes a few seconds, so each is made once for
the module; the offline checks of the same run are in tests/eval.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import vcr
import yaml
from click.testing import CliRunner

from stbproxy.cli import main
from stbproxy.serve_process import ServeProcess
from tests.conftest import STB_SOURCES
from tests.eval.helpers import Script as Judge
from tests.eval.helpers import write_json
from tests.fakes.fake_openai import fake_openai  # noqa: F401  (the fixture)
from tests.pipeline_run import (
    OPENAI_KEY,
    RAPIDAPI_KEY,
    SESSION,
    TOOLBENCH_KEY,
    Script,
    answers_dir,
    query_file,
    record,
    run_query,
)
from tests.stb_samples import require_real_stb_data

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", params=STB_SOURCES)
def stb(request) -> Path:
    """The generated sample's pipeline answers, then the real twelve when they are there."""
    return request.getfixturevalue("stb_sample") if request.param == "sample" else require_real_stb_data()


@pytest.fixture(scope="module")
def script(stb) -> Script:
    return Script.load(stb)


@pytest.fixture(scope="module")
def QIDS(script) -> list[str]:
    return sorted(script.items)


def _tool_calls(item) -> int:
    return sum(1 for m in item.assistant_turns for c in m.get("tool_calls") or [] if c["function"]["name"] != "Finish")


@pytest.fixture(scope="module")
def pipeline_run(script, tmp_path_factory):
    return record(script, tmp_path_factory.mktemp("pipeline") / "store", variant="pipeline")


@pytest.fixture(scope="module")
def http_run(script, tmp_path_factory):
    return record(script, tmp_path_factory.mktemp("http") / "store", variant="http")


@pytest.fixture(params=["pipeline", "http"])
def run(request, script):  # (script: so that the data folder parametrizes every test)
    return request.getfixturevalue(f"{request.param}_run")


def _cli(*args: str):
    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_the_agent_made_the_pipelines_conversations(run, script, QIDS):
    # The scripted agent is faithful: its conversations are the files' train_messages.
    assert sorted(run.histories) == QIDS
    for qid, history in run.histories.items():
        assert history == script.items[qid].conversation, qid
    # one real tool call per call in the files (one a query in the real twelve), none answered twice
    assert len(run.tool_calls) == sum(_tool_calls(item) for item in script.items.values())


def test_eval_convert_reads_the_session_into_the_pipelines_converted_answers(run, stb, QIDS, tmp_path):
    mine, theirs = tmp_path / "traffic.json", tmp_path / "files.json"
    result = _cli("eval", "convert", "--answers", SESSION, "--store", str(run.store),
                  "--queries", str(query_file(stb)), "--out", str(mine))
    assert "warning" not in result.stderr
    _cli("eval", "convert", "--answers", str(answers_dir(stb)), "--out", str(theirs))
    rebuilt, converted = json.loads(mine.read_text()), json.loads(theirs.read_text())
    assert sorted(rebuilt) == sorted(converted) == QIDS
    for qid in QIDS:
        assert rebuilt[qid]["query"] == converted[qid]["query"]
        assert rebuilt[qid]["available_tools"] == converted[qid]["available_tools"]
        for part in ("answer_details", "final_answer", "total_steps"):
            assert rebuilt[qid]["answer"][part] == converted[qid]["answer"][part], (qid, part)


def test_eval_pass_rate_on_a_session_equals_the_files(run, stb, QIDS, fake_openai, tmp_path):
    queries = {str(q["query_id"]): q["query"] for q in json.loads(query_file(stb).read_text())}
    ids = write_json(tmp_path / "ids" / "G1_instruction.json", {q: 0 for q in QIDS})
    tables = []
    for name, source in (("traffic", ["--answers", SESSION, "--store", str(run.store),
                                      "--queries", str(query_file(stb))]),
                         ("files", ["--answers", str(answers_dir(stb))])):
        fake_openai.handler = Judge({queries[q]: [["Solved"] * 3, ["Unsolved", "Solved", "Unsure"]][i % 2]
                                     for i, q in enumerate(QIDS)}, trace={queries[q]: ["Solved"] * 3 for q in QIDS})
        result = CliRunner().invoke(main, ["eval", "pass-rate", *source, "--ids", str(ids), "--method", "m",
                                           "--out", str(tmp_path / name), "--no-progress", "--no-chart",
                                           "--base-url", fake_openai.base_url, "--api-key", "judge-key"],
                                    catch_exceptions=False)
        assert result.exit_code == 0, result.output
        tables.append(result.stdout)
    assert tables[0] == tables[1] and "| m " in tables[0]


def test_eval_on_a_session_without_queries_says_that_sessions_need_them(pipeline_run, QIDS, tmp_path):
    ids = write_json(tmp_path / "ids" / "G1_instruction.json", {q: 0 for q in QIDS})
    judge = ["--base-url", "http://127.0.0.1:9/v1", "--api-key", "judge-key", "--no-progress"]  # never called
    for command in (["pass-rate", "--answers", SESSION], ["win-rate", "--candidate", SESSION, "--reference", SESSION]):
        result = CliRunner().invoke(main, ["eval", *command, "--store", str(pipeline_run.store), "--ids", str(ids),
                                           "--out", str(tmp_path / "run"), *judge])
        assert result.exit_code == 1, result.output
        (line,) = result.output.splitlines()
        assert line.startswith(f"stbproxy: error: {SESSION}: its {len(QIDS)} recorded conversations are named by "
                               "digest (such as conv-")
        assert line.endswith("not by query id: a recorded session or cassette needs --queries (StableToolBench's "
                             "query files) so that each conversation gets the id of the query it states")
        assert not (tmp_path / "run").exists()


def test_unknown_session_names_the_sessions_there_are(run, tmp_path):
    result = CliRunner().invoke(main, ["eval", "convert", "--answers", "no-such-run", "--store", str(run.store),
                                       "--out", str(tmp_path / "x.json")])
    assert result.exit_code != 0
    assert f"no-such-run: no such answers file or folder, nor a session in {run.store} (sessions: {SESSION})" \
        in result.output


def _export(run, folder: Path, stb: Path, script: Script) -> list[Path]:
    result = _cli("export", "--session", SESSION, "--store", str(run.store), "--by-conversation",
                  "--queries", str(query_file(stb)), "-o", str(folder))
    items = script.items.values()
    # per conversation: its LLM calls (one per assistant turn) and its tool calls
    interactions = sum(len(i.assistant_turns) + _tool_calls(i) for i in items)
    assert result.stdout.startswith(f"wrote {len(items)} cassettes ({interactions} interactions) to {folder}")
    return sorted(folder.glob("*.yaml"))


def test_export_by_conversation_writes_one_cassette_per_query(run, script, stb, QIDS, tmp_path):
    files = _export(run, tmp_path / "by-query", stb, script)
    assert sorted(p.stem for p in files) == QIDS
    for path in files:
        text = path.read_text()
        assert not any(secret in text for secret in (OPENAI_KEY, TOOLBENCH_KEY, RAPIDAPI_KEY))
        interactions = yaml.safe_load(text)["interactions"]
        item = script.items[path.stem]  # its LLM calls and its tool calls, this query's only
        assert len(interactions) == len(item.assistant_turns) + _tool_calls(item)
        task = script.items[path.stem].conversation[1]["content"]
        assert all(json.loads(i["request"]["body"])["messages"][1]["content"] == task
                   for i in interactions if i["request"]["uri"].endswith("/chat/completions"))


def _uris(path: Path) -> tuple[str, str]:
    """The LLM base URL and the tool server's base URL a cassette was recorded with."""
    uris = [i["request"]["uri"] for i in yaml.safe_load(path.read_text())["interactions"]]
    llm = next(u for u in uris if u.endswith("/chat/completions"))
    tool = next(u for u in uris if not u.endswith("/chat/completions"))
    return llm.rsplit("/chat/completions", 1)[0], "/".join(tool.split("/")[:3])


def test_each_exported_conversation_replays_in_plain_vcrpy(http_run, script, stb, tmp_path):
    # The RapidAPI-style run: its cassettes hold the very requests the agent makes.
    for path in _export(http_run, tmp_path / "by-query", stb, script):
        llm, tools = _uris(path)
        with vcr.use_cassette(str(path), record_mode="none",
                              match_on=["method", "scheme", "host", "port", "path", "query", "body"]) as cassette:
            history = run_query(script.items[path.stem], llm_base_url=llm, tools="rapidapi", tool_base=tools,
                                stream=True)
            assert cassette.all_played, path.name
        assert history == script.items[path.stem].conversation, path.name


def test_an_exported_conversation_replays_through_the_plugins_proxy(run, script, stb, tmp_path):
    # What the pytest plugin starts for a test marked with the cassette, nothing else up:
    # the LLM answers and the tool answers (RapidAPI-style, or POST /virtual) all come
    # from the one conversation's cassette.
    path = _export(run, tmp_path / "by-query", stb, script)[0]
    llm, tools = _uris(path)
    report = tmp_path / "playback.json"
    with ServeProcess(tmp_path / "replay" / "store", "--cassette", str(path), "--ordered", "--report",
                      str(report)) as proxy:
        options = ({"tools": "rapidapi", "tool_base": tools, "stream": True} if run.variant == "http"
                   else {"tools": "virtual", "service_url": f"{proxy.url}/virtual"})
        history = run_query(script.items[path.stem], llm_base_url=llm, proxy_url=proxy.url, **options)
    assert history == script.items[path.stem].conversation
    played = json.loads(report.read_text())
    item = script.items[path.stem]
    assert (played["played"], played["unplayed"], played["unmatched"]) == \
        (len(item.assistant_turns) + _tool_calls(item), [], [])
