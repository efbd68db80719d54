"""Call-level metrics (`stbproxy eval calls`, stbeval.calls): call accuracy in order and in any
order, ROUGE-L of the final answers, and the regression check for tests.

Real data: the twelve answers StableToolBench's pipeline wrote in the tool_calls format
(one API call each, then Finish), the data_example CoT and DFS answers, and the converted
reference answers (tool messages kept as Python-dict text cut to 100 characters).
"""

from __future__ import annotations

import copy
import json

import pytest
from click.testing import CliRunner
from rouge_score import rouge_scorer
from vcr.serializers import yamlserializer

from stbeval import calls_report
from stbeval.answers import load_answers
from stbeval.callcheck import assert_call_accuracy
from stbeval.calls import calls_of, compare_runs, tool_call
from stbeval.cli import eval_group
from stbeval.model import Answer
from stbeval.rouge import rouge_l, tokens
from stbproxy import keys
from stbproxy.models import ApiRef
from tests.eval.helpers import table_rows, write_json
from tests.stb_samples import PIPELINE_FUNCTIONS, is_sample, reference_entry

PIPELINE = "pipeline_answers_tool_calls/G1_instruction"
GROUP = "G1_instruction"


@pytest.fixture
def pipeline(stb):
    folder = stb / PIPELINE
    raws = {p.name.partition("_")[0]: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
    assert len(raws) == (len(PIPELINE_FUNCTIONS) if is_sample(stb) else 12)
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


def calls_in(raw):
    """The API calls (not Finish) of each assistant message of a raw answer in today's format."""
    return [[c for c in m.get("tool_calls") or [] if c["function"]["name"] != "Finish"]
            for m in raw["answer_generation"]["train_messages"][-1] if m["role"] == "assistant"]


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
    n, calls = str(len(raws)), str(sum(len(c) for r in raws.values() for c in calls_in(r)))
    assert row(result.stdout) == [GROUP, n, n, calls, calls, "100.0", "100.0", "100.0", "0", "0"]
    assert "Calls differ" not in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert summary["overall"]["matched"] == int(calls) and summary["overall"]["rouge_l_scored"] == len(raws)
    assert sorted(p.stem for p in (out / "details" / GROUP).iterdir()) == sorted(raws)


CHANGED = {"2121": '{"year": "2023", "statid": "186"}',
           "2213": '{"seasonid": 46701, "tournamentid": 421, "page": 2}',
           "608": '{"cursor": "0", "channel_name": "xqc"}'}


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
    with pytest.raises(AssertionError,
                       match=r"33\.3% is below the minimum 100\.0% \(1 of 3 golden calls matched in order\)"):
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

# --- converted reference answers: tool messages as text, cut short ---------------------------

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


def test_queries_option_names_the_conversations(pipeline, tmp_path):
    folder, raws = pipeline
    queries = folder.parents[1] / "solvable_queries" / "test_instruction" / "G1_instruction.json"
    result = CliRunner().invoke(eval_group, ["calls", "--answers", str(folder), "--reference", str(folder), "--ids",
                                             str(ids_file(tmp_path, raws)), "--out", str(tmp_path / "o"),
                                             "--queries", str(queries)])
    assert result.exit_code == 0, result.output
    assert row(result.stdout)[5] == "100.0"


def test_reference_style_answers_read_calls_from_cut_dict_text(tmp_path):
    # Converted answers whose tool messages are dicts written out as text and cut short, as
    # in the published reference answers (tests/stb_samples.py writes them).
    short = reference_entry("Decode these car ids for me.", [("vin_lookup_for_cars", '{"vin": "A1"}'),
                                                              ("vin_lookup_for_cars", '{"vin": "B2"}')], "two cars")
    long_args = json.dumps({"text": "x" * 120})
    cut = reference_entry("Summarise this text.", [("summarise_for_words", long_args)], "a summary")
    source = write_json(tmp_path / "G1_instruction.json", {"7": short, "8": cut})
    answers = load_answers(source).by_group[GROUP]
    expected = [("vin_lookup_for_cars", {"vin": v}) for v in ("A1", "B2")]
    assert [(c.api, c.arguments) for c in calls_of(answers["7"])] == expected
    (unreadable,) = calls_of(answers["8"])
    assert unreadable.api == "summarise_for_words" and unreadable.arguments is None
    assert unreadable.unreadable == "cut short in the source"
    result = run_calls("--answers", source, "--reference", source, "--ids", ids_file(tmp_path, ["7", "8"]),
                       "--out", tmp_path / "o")
    assert "1 reference calls have arguments cut short in the source" in result.stdout
