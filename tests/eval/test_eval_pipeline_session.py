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
from stbeval.sources import load_queries
from tests.eval.helpers import Script, write_json
from tests.pipeline_run import answers_dir, query_file

SESSION = Path(__file__).parent / "data" / "pipeline_session.yaml"
QIDS = ["1073", "1572", "1856", "2121", "2144", "2213", "2354", "2399", "3308", "3510", "588", "608"]


@pytest.fixture
def pipeline(stb):
    return load_answers(answers_dir(stb)).by_group["G1_instruction"]


def _from_traffic(stb):
    index, problems = load_queries([query_file(stb)])
    assert problems == []
    return load_answers(SESSION, queries=index)


def test_without_queries_each_conversation_gets_a_stable_digest():
    first = load_answers(SESSION).by_group[None]
    assert len(first) == 12 and all(qid.startswith("conv-") for qid in first)
    assert sorted(first) == sorted(load_answers(SESSION).by_group[None])


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


