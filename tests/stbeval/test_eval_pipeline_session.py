"""A recorded run scored from its traffic alone, against the pipeline's own answer files.

``data/pipeline_session.yaml`` is one proxy session: StableToolBench's twelve pipeline
answers (G1_instruction, CoT@1) played again by tests/pipeline_run.py on two threads
through a real ``stbproxy serve`` (virtual mode, the agent's LLM calls passed through,
tool calls as POST /virtual), then exported. Rebuilt from that traffic, the answers
must be the ones the pipeline's files convert to, and score the same SoPR with the
same scripted judge.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stbeval.answers import load_answers
from stbeval.cli import eval_group
from stbeval.model import Answer
from stbeval.sources import load_queries
from tests.pipeline_run import answers_dir, query_file
from tests.stbeval.helpers import Script, write_json

SESSION = Path(__file__).parent / "data" / "pipeline_session.yaml"
QIDS = ["1073", "1572", "1856", "2121", "2144", "2213", "2354", "2399", "3308", "3510", "588", "608"]


@pytest.fixture
def pipeline(stb):
    return load_answers(answers_dir(stb)).by_group["G1_instruction"]


def _from_traffic(stb):
    index, problems = load_queries([query_file(stb)])
    assert problems == []
    return load_answers(SESSION, queries=index)


def test_twelve_conversations_twelve_ids(stb):
    loaded = _from_traffic(stb)
    assert loaded.problems == []
    assert list(loaded.by_group) == ["G1_instruction"]  # the query file's group
    assert sorted(loaded.by_group["G1_instruction"]) == sorted(QIDS)


def test_rebuilt_answers_equal_the_pipelines_converted_answers(stb, pipeline):
    rebuilt = _from_traffic(stb).by_group["G1_instruction"]
    assert sorted(pipeline) == sorted(rebuilt) == sorted(QIDS)
    for qid in QIDS:
        mine, theirs = rebuilt[qid], pipeline[qid]
        assert isinstance(mine, Answer) and isinstance(theirs, Answer), (mine, theirs)
        assert mine.answer_details == theirs.answer_details, qid
        assert mine.final_answer == theirs.final_answer, qid
        assert (mine.query, mine.available_tools, mine.total_steps) == (theirs.query, theirs.available_tools,
                                                                         theirs.total_steps), qid


def test_without_queries_each_conversation_gets_a_stable_digest():
    first = load_answers(SESSION).by_group[None]
    assert len(first) == 12 and all(qid.startswith("conv-") for qid in first)
    assert sorted(first) == sorted(load_answers(SESSION).by_group[None])


def test_a_query_file_without_some_queries_reports_them_by_their_first_words(stb, tmp_path):
    queries = json.loads(query_file(stb).read_text())
    left = {str(q["query_id"]): q["query"] for q in queries if str(q["query_id"]) in ("588", "608")}
    partial = write_json(tmp_path / "G1_instruction.json", [q for q in queries if str(q["query_id"]) not in left])
    index, _ = load_queries([partial])
    loaded = load_answers(SESSION, queries=index)
    assert sorted(loaded.by_group["G1_instruction"]) == sorted(set(QIDS) - set(left))
    assert sorted(loaded.problems) == sorted(
        f'{SESSION}: conversation "{" ".join(text.split()[:8])} ..." matches no query; left out'
        for text in left.values())


# Scripted labels per query and round (Unsure goes on to parse_answer_status).
ROUNDS = [["Solved"] * 3, ["Unsolved", "Solved", "Unsure"], ["Unsure"] * 3, ["Solved", "Unsolved", "Solved"]]


def _pass_rate(fake, stb, out, *answers_args):
    queries = {str(q["query_id"]): q["query"] for q in json.loads(query_file(stb).read_text())}
    fake.handler = Script({queries[q]: ROUNDS[i % 4] for i, q in enumerate(QIDS)},
                          trace={queries[q]: ["Solved", "Unsolved", "Unsure"] for q in QIDS})
    ids = write_json(out.parent / "ids" / "G1_instruction.json", {q: 0 for q in QIDS})
    result = CliRunner().invoke(eval_group, ["pass-rate", *answers_args, "--ids", str(ids), "--out", str(out),
                                             "--no-progress", "--no-chart", "--method", "m"],
                                env={**fake.env(), "NO_COLOR": "1"}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "summary.json").read_text())
    details = json.loads((out / "details" / "G1_instruction_m.json").read_text())
    return result.stdout, summary, {qid: row["is_solved"] for qid, row in details.items()}


def test_sopr_from_traffic_equals_sopr_from_the_pipeline_files(fake_openai, stb, tmp_path):
    traffic = _pass_rate(fake_openai, stb, tmp_path / "traffic" / "run", "--answers", str(SESSION),
                         "--queries", str(query_file(stb)))
    files = _pass_rate(fake_openai, stb, tmp_path / "files" / "run", "--answers", str(answers_dir(stb)))
    assert traffic[0] == files[0]  # the same table
    assert traffic[1]["groups"] == files[1]["groups"] and traffic[1]["problems"] == files[1]["problems"] == []
    assert traffic[2] == files[2] and len(traffic[2]) == 12
    # The labels were really mixed: not every query scored the same.
    assert 0 < traffic[1]["groups"][0]["mean"] < 100
