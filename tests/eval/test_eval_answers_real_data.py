"""Loading StableToolBench's real answers and ids: data_example converted exactly like the original,
the reference answers of every group, the solvable ids.

These tests check exact facts of StableToolBench's real files (ids, counts, the original
evaluator's outputs); the formats themselves are also checked on small generated files in
test_eval_answers.py. Without the real files this module is one skip (see tests/stb_samples.py).
"""

from __future__ import annotations

import json

import pytest

from stbeval.answers import load_answers, load_ids, to_converted
from stbeval.model import Answer, Problem
from stbeval.passrate import precheck
from tests.eval.test_eval_answers import (  # noqa: F401  (helpers and fixtures)
    GROUPS,
)
from tests.stb_samples import real_stb_data, require_real_stb_data, skip_reason  # noqa: E402

if real_stb_data() is None:
    pytest.skip(skip_reason(), allow_module_level=True)


@pytest.fixture
def stb():
    return require_real_stb_data()


@pytest.mark.parametrize("method", ["cot", "dfs"])
def test_raw_answers_convert_exactly_like_the_original(stb, method):
    example = stb / "data_example"
    loaded = load_answers(example / "answer" / f"virtual_chatgpt_{method}")
    assert loaded.problems == [] and list(loaded.by_group) == ["G1_instruction"]
    mine = to_converted(loaded.by_group["G1_instruction"].values())
    original = json.loads((example / "model_predictions_converted" / f"virtual_chatgpt_{method}" /
                           "G1_instruction.json").read_text())
    assert mine == original


@pytest.mark.parametrize("group", GROUPS)
def test_reference_answers_load_for_every_group(stb, group):
    loaded = load_answers(stb / "reference_answers_gpt-3.5-turbo_CoT" / f"{group}.json")
    answers = loaded.by_group[group]
    assert len(answers) == 100
    problems = [str(a) for a in answers.values() if isinstance(a, Problem)]
    assert all(isinstance(a, Answer) for a in answers.values()), problems
    # Their tool messages are dicts written out as text; Finish is still recognised.
    finished = [a for a in answers.values() if precheck(a) is None]
    assert 20 < len(finished) < 100
    assert all(a.query and a.available_tools for a in answers.values())


def test_reference_folder_loads_all_groups_at_once(stb):
    loaded = load_answers(stb / "reference_answers_gpt-3.5-turbo_CoT")
    assert sorted(loaded.by_group) == sorted(GROUPS) and loaded.count() == 600


def test_real_ids_files(stb):
    ids = load_ids(stb / "solvable_queries" / "test_query_ids")
    assert {g: len(v) for g, v in ids.items()} == {"G1_instruction": 163, "G1_category": 153, "G1_tool": 158,
                                                   "G2_instruction": 106, "G2_category": 124, "G3_instruction": 61}

