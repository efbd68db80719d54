"""A recorded run (data/pipeline_session.yaml) scored from its traffic alone, against
StableToolBench's real pipeline answer files it was recorded from.

These tests check exact facts of StableToolBench's real files (ids, counts, the original
evaluator's outputs); the formats themselves are also checked on small generated files in
test_eval_pipeline_session.py. Without the real files this module is one skip (see tests/stb_samples.py).
"""

from __future__ import annotations

import json

import pytest

from stbeval.answers import load_answers
from stbeval.model import Answer
from stbeval.sources import load_queries
from tests.eval.helpers import write_json
from tests.eval.test_eval_pipeline_session import (  # noqa: F401  (helpers and fixtures)
    QIDS,
    SESSION,
    _from_traffic,
    _pass_rate,
    pipeline,
)
from tests.pipeline_run import answers_dir, query_file
from tests.stb_samples import real_stb_data, require_real_stb_data, skip_reason  # noqa: E402

if real_stb_data() is None:
    pytest.skip(skip_reason(), allow_module_level=True)


@pytest.fixture
def stb():
    return require_real_stb_data()


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


def test_sopr_from_traffic_equals_sopr_from_the_pipeline_files(fake_openai, stb, tmp_path):
    traffic = _pass_rate(fake_openai, stb, tmp_path / "traffic" / "run", "--answers", str(SESSION),
                         "--queries", str(query_file(stb)))
    files = _pass_rate(fake_openai, stb, tmp_path / "files" / "run", "--answers", str(answers_dir(stb)))
    assert traffic[0] == files[0]  # the same table
    assert traffic[1]["groups"] == files[1]["groups"] and traffic[1]["problems"] == files[1]["problems"] == []
    assert traffic[2] == files[2] and len(traffic[2]) == 12
    # The labels were really mixed: not every query scored the same.
    assert 0 < traffic[1]["groups"][0]["mean"] < 100

