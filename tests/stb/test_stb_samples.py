"""Where the tests find StableToolBench's real files, and the generated sample they also run on."""

from __future__ import annotations

import json

import pytest

from tests import stb_samples
from tests.stb_samples import BESIDE_THE_REPO, GROUPS, STB_DATA_ENV, is_sample, stb_data_path, write_sample_stb


def test_the_data_folder_comes_from_the_variable_else_beside_the_repository(monkeypatch, tmp_path):
    monkeypatch.delenv(STB_DATA_ENV, raising=False)
    assert stb_data_path() == BESIDE_THE_REPO == stb_samples.REPO.parent / "shared" / "data" / "stabletoolbench"
    monkeypatch.setenv(STB_DATA_ENV, str(tmp_path))
    assert stb_data_path() == tmp_path and stb_samples.real_stb_data() == tmp_path
    monkeypatch.setenv(STB_DATA_ENV, str(tmp_path / "none"))
    assert stb_samples.real_stb_data() is None
    reason = stb_samples.skip_reason()
    assert f"set {STB_DATA_ENV} to a StableToolBench data folder, or put it at {BESIDE_THE_REPO}" in reason
    assert f"{STB_DATA_ENV}={tmp_path / 'none'} is not a folder" in reason
    with pytest.raises(pytest.skip.Exception, match=STB_DATA_ENV):
        stb_samples.require_real_stb_data()


def test_the_sample_has_the_real_layout_and_says_it_is_a_sample(tmp_path):
    root = write_sample_stb(tmp_path / "stb")
    assert is_sample(root) and not is_sample(tmp_path)
    for group in GROUPS:
        queries = json.loads((root / "solvable_queries" / "test_instruction" / f"{group}.json").read_text())
        ids = json.loads((root / "solvable_queries" / "test_query_ids" / f"{group}.json").read_text())
        assert sorted(ids) == sorted(str(q["query_id"]) for q in queries)
        for query in queries:
            assert {"query", "query_id", "relevant APIs", "api_list"} <= set(query)
            for api in query["api_list"]:
                assert {"category_name", "tool_name", "api_name", "api_description", "required_parameters",
                        "optional_parameters", "method", "template_response"} <= set(api)
                assert "url" not in api  # query files carry no URL
    answers = sorted((root / "pipeline_answers_tool_calls" / "G1_instruction").glob("*_CoT@1.json"))
    assert [p.name for p in answers] == ["100_CoT@1.json", "101_CoT@1.json"]
    assert "<name>select_better_answer</name>" in (root / "evaluator_template" / "template.txt").read_text()
