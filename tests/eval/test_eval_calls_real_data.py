"""eval calls on StableToolBench's real answers: the twelve pipeline answers by query id,
data_example, the reference answers.

These tests check exact facts of StableToolBench's real files (ids, counts, the original
evaluator's outputs); the formats themselves are also checked on small generated files in
test_eval_calls.py. Without the real files this module is one skip (see tests/stb_samples.py).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from rouge_score import rouge_scorer

from stbeval.answers import load_answers
from stbeval.callcheck import assert_call_accuracy
from stbeval.calls import calls_of
from stbeval.model import parse_finish
from tests.eval.helpers import write_json
from tests.eval.test_eval_calls import (  # noqa: F401  (helpers and fixtures)
    CHANGED,
    GROUP,
    first_call,
    golden_cassette,
    ids_file,
    pipeline,
    row,
    run_calls,
    with_arguments,
    write_run,
)
from tests.stb_samples import real_stb_data, require_real_stb_data, skip_reason  # noqa: E402

if real_stb_data() is None:
    pytest.skip(skip_reason(), allow_module_level=True)


@pytest.fixture
def stb():
    return require_real_stb_data()


def test_changed_arguments_in_3_of_12_queries_give_75_with_those_3_named(pipeline, tmp_path):
    folder, raws = pipeline
    reference = write_run(tmp_path / "reference", {
        qid: with_arguments(raw, first_call(raw)[0], CHANGED[qid]) if qid in CHANGED else raw
        for qid, raw in raws.items()})
    out = tmp_path / "run"
    result = run_calls("--answers", folder, "--reference", reference, "--ids", ids_file(tmp_path, raws), "--out", out,
                       "-v")
    assert result.exit_code == 0, result.output
    # 12 reference calls, one per query; 9 made the same way. Final answers are unchanged.
    assert row(result.stdout) == [GROUP, "12", "12", "12", "12", "75.0", "75.0", "100.0", "0", "0"]
    assert ("Calls differ (see details/): 3 queries\n"
            "  G1_instruction 2121, call 1 world_ranking_for_live_golf_data: argument:year: "
            "reference '2023', got '2022'\n"
            "  G1_instruction 2213, call 1 leaguenextmatches_for_rugbyapi2: argument:page: reference '2', got '1'\n"
            "  G1_instruction 608, call 1 get_channel_clips_for_kick_com_api_kick_api: argument:channel_name: "
            "reference 'xqc', got 'gmhikaru'\n") in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert sorted(m["query_id"] for m in summary["groups"][0]["mismatched"]) == sorted(CHANGED)

    detail = json.loads((out / "details" / GROUP / "2121.json").read_text())
    assert detail["call_accuracy"] == 0.0 and detail["calls"][0]["match"] is False
    assert detail["calls"][0]["differences"] == [{"part": "argument:year", "reference": "2023", "got": "2022"}]
    assert detail["order_free"]["unmatched"][0]["differences"] == detail["calls"][0]["differences"]
    page = json.loads((out / "details" / GROUP / "2213.json").read_text())["calls"][0]["differences"]
    assert page == [{"part": "argument:page", "reference": "2", "got": "1"}]
    both = json.loads((out / "details" / GROUP / "608.json").read_text())["calls"][0]["differences"]
    assert both == [{"part": "argument:channel_name", "reference": "xqc", "got": "gmhikaru"}]
    untouched = json.loads((out / "details" / GROUP / "1073.json").read_text())
    assert untouched["call_accuracy"] == 100.0 and untouched["calls"][0]["differences"] == []


def test_argument_order_value_types_and_secrets_do_not_matter(pipeline, tmp_path):
    folder, raws = pipeline
    same = {"2213": '{"page": "1", "tournamentid": "421", "seasonid": "46701"}',   # reordered, numbers as text
            "2121": '{"statid": 186, "year": 2022}',                              # text as numbers
            "1073": '{"toolbench_key": "not-the-same-key", "q": "taylor swift"}'}  # a secret field added
    reference = write_run(tmp_path / "reference", {
        qid: with_arguments(raw, first_call(raw)[0], same[qid]) if qid in same else raw for qid, raw in raws.items()})
    result = run_calls("--answers", folder, "--reference", reference, "--ids", ids_file(tmp_path, raws),
                       "--out", tmp_path / "run")
    assert result.exit_code == 0, result.output
    assert row(result.stdout)[5:7] == ["100.0", "100.0"]
    assert "not-the-same-key" not in "".join(p.read_text() for p in (tmp_path / "run").rglob("*.json"))


def test_a_volatile_field_is_left_out_when_asked(pipeline, tmp_path):
    folder, raws = pipeline
    reference = write_run(tmp_path / "reference",
                          {"608": with_arguments(raws["608"], "get_channel_clips_for_kick_com_api_kick_api",
                                                 '{"cursor": "17", "channel_name": "gmhikaru"}')})
    ids = ids_file(tmp_path, ["608"])
    plain = run_calls("--answers", folder, "--reference", reference, "--ids", ids, "--out", tmp_path / "a")
    assert row(plain.stdout)[5] == "0.0"
    volatile = run_calls("--answers", folder, "--reference", reference, "--ids", ids, "--out", tmp_path / "b",
                         "--volatile-field", "Cursor")
    assert row(volatile.stdout)[5] == "100.0"


def test_missing_queries_are_counted_apart_never_as_zero(pipeline, tmp_path):
    folder, raws = pipeline
    run = write_run(tmp_path / "run_answers", {q: r for q, r in raws.items() if q != "588"})
    reference = write_run(tmp_path / "reference", {q: r for q, r in raws.items() if q != "1073"})
    out = tmp_path / "out"
    result = run_calls("--answers", run, "--reference", reference, "--ids", ids_file(tmp_path, [*raws, "999"]),
                       "--out", out, "--verbose")
    assert result.exit_code == 0, result.output
    # 13 ids: 588 has no run, 1073 no reference, 999 neither; the 10 others are scored, all matching.
    assert row(result.stdout) == [GROUP, "13", "10", "10", "10", "100.0", "100.0", "100.0", "2", "2"]
    assert "No run: 2 queries\n  G1_instruction 588: no answer\n  G1_instruction 999: no answer" in result.stdout
    assert "No reference: 2 queries\n  G1_instruction 1073: no answer\n  G1_instruction 999: no answer" in result.stdout
    detail = json.loads((out / "details" / GROUP / "999.json").read_text())
    assert detail == {"group": GROUP, "query_id": "999", "status": "not scored", "no_run": "no answer",
                      "no_reference": "no answer"}


def test_an_unreadable_answer_file_is_a_missing_query_with_its_reason(pipeline, tmp_path):
    folder, raws = pipeline
    run = write_run(tmp_path / "run_answers", raws)
    (run / GROUP / "588_CoT@1.json").write_text("{not json")
    result = run_calls("--answers", run, "--reference", folder, "--ids", ids_file(tmp_path, raws),
                       "--out", tmp_path / "o", "-v")
    assert row(result.stdout)[1:3] == ["12", "11"] and row(result.stdout)[8] == "1"
    assert "G1_instruction 588: " in result.stdout and "not valid JSON" in result.stdout


def test_data_example_dfs_against_cot(stb, tmp_path):
    example = stb / "data_example" / "answer"
    cot, dfs = example / "virtual_chatgpt_cot", example / "virtual_chatgpt_dfs"
    out = tmp_path / "run"
    result = run_calls("--answers", dfs, "--reference", cot, "--ids", ids_file(tmp_path, ["588", "608", "1073"]),
                       "--out", out)
    assert result.exit_code == 0, result.output
    # 1073 and 608: both calls alike (2 + 2). 588: CoT makes 6 calls, DFS 4; only the first
    # (transfermarkt_search "Lionel Messi") agrees, in order and in any order. 5 of 10.
    assert row(result.stdout)[:7] == [GROUP, "3", "3", "10", "8", "50.0", "50.0"]
    cot_answers, dfs_answers = load_answers(cot).by_group[GROUP], load_answers(dfs).by_group[GROUP]
    # ROUGE-L: 588's CoT answer is empty, so the mean is over 608 and 1073, by the package itself.
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    expected = [scorer.score(parse_finish(cot_answers[q].final_answer)[1],
                             parse_finish(dfs_answers[q].final_answer)[1])["rougeL"].fmeasure for q in ("608", "1073")]
    assert row(result.stdout)[7] == f"{100 * sum(expected) / 2:.1f}"
    detail = json.loads((out / "details" / GROUP / "588.json").read_text())
    assert detail["calls"][3]["differences"] == [{"part": "argument:id_artist", "reference": "lionel-messi",
                                                  "got": "28003"}]
    assert detail["rouge_l"] is None


def test_reference_answers_read_calls_from_cut_dict_text(stb, tmp_path):
    source = stb / "reference_answers_gpt-3.5-turbo_CoT" / "G1_instruction.json"
    answers = load_answers(source).by_group[GROUP]
    vins = calls_of(answers["42700"])  # three whole calls whose responses were cut
    assert [(c.api, c.arguments) for c in vins] == [("vin_decode_for_vin_decoder_v4", {"vin": v}) for v in
                                                    ("WBAWY32040L678750", "WVWZZZAUZGW001953", "WBAPE12060WJ88925")]
    cut = [c for a in answers.values() for c in calls_of(a) if c.arguments is None]
    assert cut and all(c.unreadable == "cut short in the source" and c.api for c in cut)

    ids = write_json(tmp_path / "ids" / "G1_instruction.json", {q: 0 for q in answers})
    result = run_calls("--answers", source, "--reference", source, "--ids", ids, "--out", tmp_path / "o")
    assert row(result.stdout)[5:8] == ["100.0", "100.0", "100.0"]
    assert f"{len(cut)} reference calls have arguments cut short in the source" in result.stdout


def test_a_fresh_run_against_a_golden_cassette(pipeline, tmp_path):
    folder, raws = pipeline
    golden = golden_cassette(raws["2121"], tmp_path / "cassettes" / "golden_golf.yaml")
    fresh = write_json(tmp_path / "fresh" / "2121_CoT@1.json", raws["2121"])
    result = assert_call_accuracy(fresh, golden)
    assert result.overall.accuracy == 100.0 and result.overall.rouge_l == 100.0

    drifted = write_json(tmp_path / "drifted" / "2121_CoT@1.json",
                         with_arguments(raws["2121"], "world_ranking_for_live_golf_data",
                                        '{"year": "2023", "statid": "186"}'))
    with pytest.raises(AssertionError) as failure:
        assert_call_accuracy(drifted, golden, minimum=90.0)
    assert str(failure.value) == (
        "call accuracy 0.0% is below the minimum 90.0% (0 of 1 golden calls matched in order)\n"
        "query golden_golf, call 1 world_ranking_for_live_golf_data:\n"
        "    argument:year: golden '2022', got '2023'")


def test_golden_queries_the_run_lacks_fail_the_check_unless_allowed(pipeline, tmp_path):
    folder, raws = pipeline
    partial = write_run(tmp_path / "partial", {q: r for q, r in raws.items() if q != "3308"})
    with pytest.raises(AssertionError,
                       match=r"golden queries the run does not answer: query 3308 \(G1_instruction\) \(no answer\)"):
        assert_call_accuracy(partial, folder)
    result = assert_call_accuracy(partial, folder, allow_missing=True)
    assert result.overall.accuracy == 100.0 and len(result.overall.results) == 11


def test_pytest_shows_the_mismatches_in_the_failure(pipeline, tmp_path):
    folder, raws = pipeline
    golden = golden_cassette(raws["2213"], tmp_path / "golden.yaml")
    drifted = write_json(tmp_path / "fresh" / "2213_CoT@1.json",
                         with_arguments(raws["2213"], "leaguenextmatches_for_rugbyapi2",
                                        '{"seasonid": 46701, "tournamentid": 421, "page": 3}'))
    test_file = tmp_path / "test_agent_calls.py"
    test_file.write_text(
        "from stbeval.callcheck import assert_call_accuracy\n\n"
        "def test_agent_calls():\n"
        f"    assert_call_accuracy({str(drifted)!r}, {str(golden)!r}, minimum=100.0)\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stdout + run.stderr
    assert "AssertionError: call accuracy 0.0% is below the minimum 100.0%" in run.stdout
    assert "argument:page: golden '1', got '3'" in run.stdout

