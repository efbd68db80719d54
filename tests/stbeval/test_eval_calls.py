"""Call-level metrics (`stbproxy eval calls`, stbeval.calls): call accuracy in order and in any
order, ROUGE-L of the final answers, and the regression check for tests.

Real data: the twelve answers StableToolBench's pipeline wrote in the tool_calls format
(one API call each, then Finish), the data_example CoT and DFS answers, and the converted
reference answers (tool messages kept as Python-dict text cut to 100 characters).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from rouge_score import rouge_scorer
from vcr.serializers import yamlserializer

from stbeval import calls_report
from stbeval.answers import load_answers
from stbeval.callcheck import assert_call_accuracy
from stbeval.calls import calls_of, compare_runs, tool_call
from stbeval.cli import eval_group
from stbeval.model import Answer, parse_finish
from stbeval.rouge import rouge_l, tokens
from stbproxy import keys
from stbproxy.models import ApiRef
from tests.stbeval.helpers import REPO, table_rows, write_json

PIPELINE = "pipeline_answers_tool_calls/G1_instruction"
GROUP = "G1_instruction"


@pytest.fixture
def pipeline(stb):
    folder = stb / PIPELINE
    raws = {p.name.partition("_")[0]: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
    assert len(raws) == 12
    return folder, raws


def ids_file(tmp_path, qids, name=GROUP):
    return write_json(tmp_path / "ids" / f"{name}.json", {q: 0 for q in qids})


def with_arguments(raw, api, arguments):
    """A copy of a raw answer in which every call of ``api`` passes ``arguments`` (JSON text)."""
    raw = copy.deepcopy(raw)

    def walk(value):
        if isinstance(value, dict):
            if value.get("name") == api and "arguments" in value:
                value["arguments"] = arguments
            for child in value.values():
                walk(child)
        elif isinstance(value, list):
            for child in value:
                walk(child)

    walk(raw)
    return raw


def first_call(raw):
    """(function, arguments text) of the answer's only API call."""
    for message in raw["answer_generation"]["train_messages"][-1]:
        for call in message.get("tool_calls") or []:
            if call["function"]["name"] != "Finish":
                return call["function"]["name"], call["function"]["arguments"]
    raise AssertionError("no API call")


def write_run(folder, raws):
    for qid, raw in raws.items():
        write_json(folder / GROUP / f"{qid}_CoT@1.json", raw)
    return folder


def run_calls(*args):
    result = CliRunner().invoke(eval_group, ["calls", *map(str, args)], catch_exceptions=False)
    return result


def row(stdout, group=GROUP):
    rows = {r[0]: r for r in table_rows(stdout)}
    return rows[group]


# --- one rule for the proxy and the evaluator ----------------------------------------------

@pytest.mark.parametrize("text,args", [
    ('{"seasonid": 46701, "tournamentid": 421, "page": 1}', {"page": "1", "seasonid": 46701, "tournamentid": "421"}),
    ('{"q": "taylor swift", "toolbench_key": "secret"}', {"q": "taylor swift"}),
    ('{"flag": true, "nested": {"b": [1, 2], "a": null}}', {"nested": {"a": None, "b": [1, 2]}, "flag": "true"}),
    ("", {}),
])
def test_a_call_is_identified_by_the_proxys_own_key_rule(text, args):
    api = ApiRef("Sports", "rugbyapi2_for_sports", "leaguenextmatches")
    proxy_digest = keys.api_key(api, args).rsplit("/", 1)[1]
    assert tool_call("leaguenextmatches_for_rugbyapi2", text).identity == proxy_digest


# --- the twelve pipeline answers -----------------------------------------------------------

def test_the_pipeline_run_against_itself_is_100_everywhere(pipeline, tmp_path):
    folder, raws = pipeline
    out = tmp_path / "run"
    result = run_calls("--answers", folder, "--reference", folder, "--ids", ids_file(tmp_path, raws), "--out", out)
    assert result.exit_code == 0, result.output
    assert row(result.stdout) == [GROUP, "12", "12", "12", "12", "100.0", "100.0", "100.0", "0", "0"]
    assert "Calls differ" not in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["overall"]["matched"] == 12 and summary["overall"]["rouge_l_scored"] == 12
    assert sorted(p.stem for p in (out / "details" / GROUP).iterdir()) == sorted(raws)


CHANGED = {"2121": '{"year": "2023", "statid": "186"}',
           "2213": '{"seasonid": 46701, "tournamentid": 421, "page": 2}',
           "608": '{"cursor": "0", "channel_name": "xqc"}'}


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
            "  G1_instruction 2121, call 1 world_ranking_for_live_golf_data: argument:year: reference '2023', got '2022'\n"
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
    reference = write_run(tmp_path / "reference", {"608": with_arguments(raws["608"], "get_channel_clips_for_kick_com_api_kick_api",
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
    result = run_calls("--answers", run, "--reference", folder, "--ids", ids_file(tmp_path, raws), "--out", tmp_path / "o",
                       "-v")
    assert row(result.stdout)[1:3] == ["12", "11"] and row(result.stdout)[8] == "1"
    assert "G1_instruction 588: " in result.stdout and "not valid JSON" in result.stdout


def test_queries_are_counted_by_default_and_listed_with_v_or_in_table_md(pipeline, tmp_path):
    folder, raws = pipeline
    unknown = [str(n) for n in range(900000, 900060)]  # 60 ids that neither side answered
    ids = ids_file(tmp_path, [*raws, *unknown])
    brief = run_calls("--answers", folder, "--reference", folder, "--ids", ids, "--out", tmp_path / "a")
    assert brief.exit_code == 0, brief.output
    assert row(brief.stdout)[8:] == ["60", "60"]
    out = tmp_path / "a"
    assert brief.stdout.endswith(f"No run: 60 queries\nNo reference: 60 queries\n\n"
                                 f"Each of those queries is listed in {out / 'table.md'} (or printed with -v).\n")
    assert "900000" not in brief.stdout and len(brief.stdout.splitlines()) < 20
    listed = run_calls("--answers", folder, "--reference", folder, "--ids", ids, "--out", tmp_path / "b", "-v")
    every = [f"  {GROUP} {qid}: no answer" for qid in unknown]
    assert listed.stdout.count("\n  G1_instruction 9") == 120 and "\n".join(every) in listed.stdout
    assert (out / "table.md").read_text() == listed.stdout  # the file lists every one, -v or not


# --- order, extra calls, ROUGE-L -------------------------------------------------------------

def answer(qid, calls, final="done"):
    """A converted answer making ``calls`` ([(name, arguments text)]) then Finish with ``final``."""
    finish = json.dumps({"return_type": "give_answer", "final_answer": final})
    nodes = [{"role": "system", "message": ""}, {"role": "user", "message": "q"},
             *({"role": "tool", "message": {"name": n, "arguments": a, "response": "ok"}} for n, a in calls),
             {"role": "tool", "message": {"name": "Finish", "arguments": finish, "response": ""}}]
    root: list = []
    tail = root
    for n in nodes:
        tail.append({**n, "next": []})
        tail = tail[-1]["next"]
    return Answer(qid, "q", [], "m", len(nodes), finish, root, "converted")


def test_order_free_accuracy_forgives_order_and_extra_calls_are_listed():
    a, b, c = ("a_for_t", '{"x": 1}'), ("b_for_t", '{"y": 2}'), ("c_for_t", "{}")
    run = answer("1", [b, a, c, ("d_for_t", "{}")])
    reference = answer("1", [a, b, c])
    result = assert_call_accuracy(run, reference, minimum=100.0, order_free=True)
    q = result.overall.results[0]
    assert (q.matched, q.order_free, len(q.reference)) == (1, 3, 3)  # only c is where the reference has it
    assert [call.api for call in q.unmatched_run] == ["d_for_t"]
    detail = calls_report.query_detail(q)
    assert detail["extra_run_calls"] == [{"position": 4, "got": {"api": "d_for_t", "arguments": {}}}]
    assert detail["calls"][0]["differences"] == [{"part": "api", "reference": "a_for_t", "got": "b_for_t"}]
    with pytest.raises(AssertionError, match=r"33\.3% is below the minimum 100\.0% \(1 of 3 golden calls matched in order\)"):
        assert_call_accuracy(run, reference)


def test_a_run_that_stops_early_names_the_calls_it_never_made():
    reference = answer("1", [("a_for_t", "{}"), ("b_for_t", "{}")])
    with pytest.raises(AssertionError) as failure:
        assert_call_accuracy(answer("1", [("a_for_t", "{}")]), reference)
    assert "query 1, call 2 b_for_t:\n    no call at this position" in str(failure.value)


def test_a_long_failure_lists_the_first_20_mismatched_calls():
    reference = answer("1", [(f"f{i}_for_t", '{"n": 1}') for i in range(25)])
    with pytest.raises(AssertionError) as failure:
        assert_call_accuracy(answer("1", [(f"f{i}_for_t", '{"n": 2}') for i in range(25)]), reference)
    message = str(failure.value)
    assert message.count("argument:n: golden '1', got '2'") == 20 and "call 20 f19_for_t:" in message
    assert message.endswith("... and 5 more mismatched calls (`stbproxy eval calls` lists them all)")


def test_rouge_l_is_the_packages_score_and_skips_a_reference_without_text():
    ref, cand = "The Lumineers play at the Aware Super Theatre.", "the lumineers play at Aware Super Theatre!"
    package = rouge_scorer.RougeScorer(["rougeL"]).score(ref, cand)["rougeL"].fmeasure
    assert rouge_l(ref, cand) == pytest.approx(package) and 0 < package < 1
    # Letters outside ASCII are kept (the package's default tokenizer drops them), ideographs one by one.
    assert tokens("Zürich 北京 ok_go") == ["zürich", "北", "京", "ok", "go"]
    assert rouge_l("北京很好", "北京很好") == 1.0 and rouge_l("北京很好", "上海") == 0.0

    with_text = compare_runs(_set(answer("1", [], final="")), _set(answer("1", [], final="some answer")), {"g": ["1"]})
    assert with_text.overall.results[0].rouge_l == 0.0
    no_text = compare_runs(_set(answer("1", [], final="x")), _set(answer("1", [], final=" ")), {"g": ["1"]})
    assert no_text.overall.results[0].rouge_l is None and no_text.overall.rouge_l is None


def _set(item):
    from stbeval.model import AnswerSet
    answers = AnswerSet()
    answers.add(None, item)
    return answers


# --- data_example: CoT against DFS -------------------------------------------------------------

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
    assert detail["calls"][3]["differences"] == [{"part": "argument:id_artist", "reference": "lionel-messi", "got": "28003"}]
    assert detail["rouge_l"] is None


# --- converted reference answers: tool messages as text, cut short ---------------------------

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


# --- the regression check, as a test suite uses it ----------------------------------------------

def golden_cassette(raw, path):
    """The pipeline's conversation as the agent's chat-completion traffic, recorded in a cassette."""
    gen = raw["answer_generation"]
    conversation = gen["train_messages"][-1]
    interactions = []
    for end, message in enumerate(conversation):
        if message["role"] != "assistant":
            continue
        body = {"model": "agent", "messages": conversation[:end], "tools": gen["function"]}
        reply = {"choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]}
        interactions.append({
            "request": {"method": "POST", "uri": "http://127.0.0.1:9/v1/chat/completions",
                        "body": json.dumps(body), "headers": {"Content-Type": ["application/json"]}},
            "response": {"status": {"code": 200, "message": "OK"}, "headers": {"Content-Type": ["application/json"]},
                         "body": {"string": json.dumps(reply)}}})
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yamlserializer.serialize({"version": 1, "interactions": interactions}))
    return path


def test_a_fresh_run_against_a_golden_cassette(pipeline, tmp_path):
    folder, raws = pipeline
    golden = golden_cassette(raws["2121"], tmp_path / "cassettes" / "golden_golf.yaml")
    fresh = write_json(tmp_path / "fresh" / "2121_CoT@1.json", raws["2121"])
    result = assert_call_accuracy(fresh, golden)
    assert result.overall.accuracy == 100.0 and result.overall.rouge_l == 100.0

    drifted = write_json(tmp_path / "drifted" / "2121_CoT@1.json",
                         with_arguments(raws["2121"], "world_ranking_for_live_golf_data", '{"year": "2023", "statid": "186"}'))
    with pytest.raises(AssertionError) as failure:
        assert_call_accuracy(drifted, golden, minimum=90.0)
    assert str(failure.value) == (
        "call accuracy 0.0% is below the minimum 90.0% (0 of 1 golden calls matched in order)\n"
        "query golden_golf, call 1 world_ranking_for_live_golf_data:\n"
        "    argument:year: golden '2022', got '2023'")


def test_golden_queries_the_run_lacks_fail_the_check_unless_allowed(pipeline, tmp_path):
    folder, raws = pipeline
    partial = write_run(tmp_path / "partial", {q: r for q, r in raws.items() if q != "3308"})
    with pytest.raises(AssertionError, match=r"golden queries the run does not answer: query 3308 \(G1_instruction\) \(no answer\)"):
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


def test_queries_option_names_the_conversations(pipeline, tmp_path):
    folder, raws = pipeline
    queries = REPO.parent / "shared" / "data" / "stabletoolbench" / "solvable_queries" / "test_instruction" / "G1_instruction.json"
    result = CliRunner().invoke(eval_group, ["calls", "--answers", str(folder), "--reference", str(folder), "--ids",
                                             str(ids_file(tmp_path, raws)), "--out", str(tmp_path / "o"),
                                             "--queries", str(queries)])
    assert result.exit_code == 0, result.output
    assert row(result.stdout)[5] == "100.0"
