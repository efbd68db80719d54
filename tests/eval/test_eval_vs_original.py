"""Where stbeval matches StableToolBench's evaluator and where it deliberately differs.

One test per line of the table "Differences from the original evaluator" in
docs/eval.md; each names the original's behaviour it keeps or changes.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from stbeval.answers import converted_answer, load_answers, load_ids
from stbeval.model import FINISH, main_path
from stbeval.passrate import pass_rate, precheck
from stbeval.toolbench import convert_raw
from stbeval.winrate import win_rate
from tests.eval.helpers import Script, converted_entry, make_judge, node, write_json
from tests.fakes.fake_openai import ToolCall

GIVE_UP = "give_up_and_restart"


def finish_args(text, return_type="give_answer"):
    return json.dumps({"return_type": return_type, "final_answer": text})


def entry(query, final_answer, *tail, finish_arguments=None):
    """A converted answer: one tool call, a Finish with ``finish_arguments`` (the final
    answer by default), then the nodes in ``tail``."""
    finish = {"name": FINISH, "arguments": final_answer if finish_arguments is None else finish_arguments,
              "response": ""}
    last = node("tool", finish)
    here = last
    for extra in tail:
        here["next"] = [extra]
        here = extra
    tree = [node("system", "", node("user", "", node("tool", {"name": "get_for_x", "arguments": "{}",
                                                             "response": '{"error": "", "response": "7"}'}, last)))]
    return {"query": query, "available_tools": [{"name": "get_for_x"}, {"name": FINISH}],
            "answer": {"method": "m", "total_steps": 4, "final_answer": final_answer, "answer_details": tree}}


def run_pass_rate(fake, tmp_path, entries, labels):
    answers = write_json(tmp_path / "answers" / "G1_tool.json", entries)
    ids = write_json(tmp_path / "ids" / "G1_tool.json", {qid: 0 for qid in entries})
    fake.handler = Script(labels)
    result = pass_rate(load_answers(answers), load_ids(ids), make_judge(fake, tmp_path / "run"), method="m", rounds=1)
    return {o.qid: o for o in result.outcomes["G1_tool"]}


def asked(fake, function):
    return [r for r in fake.chat_requests() if r["tool_choice"]["function"]["name"] == function]


# --- pass rate ------------------------------------------------------------------------

def test_blank_answer_inside_the_finish_arguments_is_unsolved_without_a_judge(fake_openai, tmp_path):
    # The original sends these to the judge: its test is final_answer == "" on the raw text.
    outcomes = run_pass_rate(fake_openai, tmp_path, {
        "1": entry("D-blank-json", finish_args("   ")),
        "2": entry("D-no-text", json.dumps({"return_type": "give_answer"})),
        "3": entry("D-spaces", "  \n "),
        "4": entry("D-fine", finish_args("7 items")),
    }, {"D-fine": ["Solved"]})
    assert {q: o.reasons[0] for q, o in outcomes.items() if not o.judged} == {
        "1": "empty final answer", "2": "empty final answer", "3": "empty final answer"}
    assert outcomes["4"].labels == ["Solved"] and fake_openai.calls == 1


def test_the_final_answer_field_decides_a_give_up_not_the_tree(fake_openai, tmp_path):
    # As in the original: only the answer's final_answer is checked for a give-up.
    outcomes = run_pass_rate(fake_openai, tmp_path, {
        "1": entry("D-field-answers", finish_args("It is 7."), finish_arguments=finish_args("", GIVE_UP)),
        "2": entry("D-field-gives-up", finish_args("", GIVE_UP), finish_arguments=finish_args("It is 7.")),
    }, {"D-field-answers": ["Solved"]})
    assert outcomes["1"].judged and outcomes["1"].labels == ["Solved"]
    assert outcomes["2"].reasons == ["gave up (give_up_and_restart)"]
    assert fake_openai.calls == 1


def test_the_give_up_phrase_inside_a_given_answer_is_judged(fake_openai, tmp_path):
    # The original finds the phrase anywhere in the final answer and calls it a give-up;
    # stbeval reads return_type when the arguments parse, the phrase only when they do not.
    outcomes = run_pass_rate(fake_openai, tmp_path, {
        "1": entry("D-mention", finish_args("I did not give_up_and_restart: the answer is 7.")),
        "2": entry("D-broken", '{"return_type": "give_up_and_restart", "final_ans'),
        "3": entry("D-text", "give_up_and_restart"),
        "4": entry("D-declared", finish_args("", GIVE_UP)),
    }, {"D-mention": ["Solved"]})
    assert outcomes["1"].judged and outcomes["1"].labels == ["Solved"]
    assert {q: outcomes[q].reasons[0] for q in "234"} == {q: "gave up (give_up_and_restart)" for q in "234"}
    assert fake_openai.calls == 1


def test_assistant_text_after_finish_is_still_judged(fake_openai, tmp_path):
    # As in the original: its "final step" is the last tool node of the path.
    outcomes = run_pass_rate(fake_openai, tmp_path, {
        "1": entry("D-remark", finish_args("It is 7."), node("assistant", "Glad to help."), node("assistant", "")),
        "2": entry("D-called-again", finish_args("It is 7."),
                   node("tool", {"name": "get_for_x", "arguments": "{}", "response": "8"})),
    }, {"D-remark": ["Solved"]})
    assert outcomes["1"].judged and outcomes["1"].labels == ["Solved"]
    assert outcomes["2"].reasons == ["last step is not a Finish call"]


def test_missing_answers_count_as_unsolved_unless_asked_otherwise(fake_openai, tmp_path):
    answers = write_json(tmp_path / "answers" / "G1_tool.json", {"1": converted_entry("D-one")})
    ids = write_json(tmp_path / "ids" / "G1_tool.json", {"1": 0, "2": 0})
    fake_openai.handler = Script({"D-one": ["Solved"]})
    judge = make_judge(fake_openai, tmp_path / "run")
    ours = pass_rate(load_answers(answers), load_ids(ids), judge, method="m", rounds=1)
    original = pass_rate(load_answers(answers), load_ids(ids), judge, method="m", rounds=1, missing="skip")
    assert (ours.groups[0].mean, original.groups[0].mean) == (50.0, 100.0)


# --- win rate -------------------------------------------------------------------------

def duel(fake, tmp_path, cand, ref, handler, rounds=3):
    ids = write_json(tmp_path / "ids" / "G1_tool.json", {qid: 0 for qid in {**cand, **ref}})
    fake.handler = handler
    result = win_rate(load_answers(write_json(tmp_path / "cand" / "G1_tool.json", cand)),
                      load_answers(write_json(tmp_path / "ref" / "G1_tool.json", ref)), load_ids(ids),
                      make_judge(fake, tmp_path / "run"), candidate_name="c", reference_name="r", rounds=rounds)
    return {d.qid: d for d in result.duels["G1_tool"]}, result


def test_identical_answers_tie_without_a_judge_call(fake_openai, tmp_path):
    # The original picks one of two identical answers at random (unseeded), no call made.
    same = entry("W-same", finish_args("It is 7."))
    renamed = json.loads(json.dumps(same))
    renamed["answer"]["method"] = "another_method"  # the judge never sees the method
    duels, result = duel(fake_openai, tmp_path, {"1": same}, {"1": renamed}, Script({"W-same": ["Solved"] * 3}))
    assert duels["1"].how == ["identical"] * 3 and duels["1"].votes == (0, 0) and duels["1"].result == "tie"
    assert asked(fake_openai, "select_better_answer") == []
    # Identical prompts share one judgment per round: three calls label both sides.
    assert fake_openai.calls == 3
    assert result.groups[0].judge_calls_saved == 3


def test_different_labels_decide_the_round_without_a_comparison(fake_openai, tmp_path):
    # As in the original: Solved over Unsure over Unsolved, with no select call.
    cand = {"1": converted_entry("W-su", marker="@cand"), "2": converted_entry("W-uu", marker="@cand"),
            "3": converted_entry("W-nu", marker="@cand")}
    ref = {q: converted_entry(e["query"], marker="@ref") for q, e in cand.items()}
    script = Script(labels={"W-su": ["Solved"] * 3, "W-uu": ["Unsure"] * 3, "W-nu": ["Unsolved"] * 3},
                    ref_labels={"W-su": ["Unsure"] * 3, "W-uu": ["Unsolved"] * 3, "W-nu": ["Unsure"] * 3},
                    trace={"W-su": ["Unsure"] * 3, "W-uu": ["Unsure"] * 3, "W-nu": ["Unsure"] * 3})
    duels, _ = duel(fake_openai, tmp_path, cand, ref, script)
    assert {q: (d.votes, d.how) for q, d in duels.items()} == {
        "1": ((3, 0), ["shortcut"] * 3), "2": ((3, 0), ["shortcut"] * 3), "3": ((0, 3), ["shortcut"] * 3)}
    assert asked(fake_openai, "select_better_answer") == [] and asked(fake_openai, "check_task_solvable") == []


def test_equal_labels_go_to_the_judge_without_a_solvability_check(fake_openai, tmp_path):
    # The original asks check_task_solvable before comparing two Unsure or two Unsolved
    # answers and never uses the reply; stbeval does not ask.
    cand = {"1": converted_entry("W-nn", marker="@cand")}
    ref = {"1": converted_entry("W-nn", marker="@ref")}
    script = Script(labels={"W-nn": ["Unsolved"]}, ref_labels={"W-nn": ["Unsolved"]}, picks={"W-nn": ["ref"]})
    duels, _ = duel(fake_openai, tmp_path, cand, ref, script, rounds=1)
    assert duels["1"].how == ["judge"] and duels["1"].votes == (0, 1)
    assert len(asked(fake_openai, "select_better_answer")) == 1 and asked(fake_openai, "check_task_solvable") == []


def shown_answers(prompt):
    """The two answer objects a select_better_answer prompt shows, in order."""
    decoder = json.JSONDecoder()
    out = []
    for label in ("Answer 0:", "Answer 1:"):
        start = prompt.index(label) + len(label)
        out.append(decoder.raw_decode(prompt[start:].lstrip())[0])
    return out


def test_the_preference_judge_sees_no_method_and_a_final_answer_cut_to_1000_characters(fake_openai, tmp_path):
    long_text = "".join(f"{i:04d} " for i in range(400))  # 2,000 characters
    long_answer = entry("W-long", finish_args(long_text))
    short_answer = entry("W-long", finish_args("7"))

    def handler(request):
        fn = request["tool_choice"]["function"]["name"]
        if fn == "select_better_answer":
            return ToolCall(fn, {"reason": "x", "index": 0})
        return ToolCall(fn, {"reason": "x", "answer_status": "Solved"})

    duel(fake_openai, tmp_path, {"1": long_answer}, {"1": short_answer}, handler, rounds=1)
    [select] = asked(fake_openai, "select_better_answer")
    views = {len(v["final_answer"]): v for v in shown_answers(select["messages"][0]["content"])}
    full = long_answer["answer"]["final_answer"]
    assert sorted(views) == [len(finish_args("7")), 1000]
    assert views[1000]["final_answer"] == full[:1000]
    assert all(set(v) == {"total_steps", "final_answer", "answer_details"} for v in views.values())
    # The pass-rate label that decides the shortcut was given on the whole answer.
    checks = [r["messages"][0]["content"] for r in asked(fake_openai, "check_answer_status")]
    assert any(full in c for c in checks)


def test_win_rate_reuses_the_pass_rate_labels(fake_openai, tmp_path):
    # The original re-judges both answers in every round of the comparison; stbeval
    # takes the round's pass-rate label, so after the pass rates only comparisons cost.
    cand = {"1": converted_entry("W-a", marker="@cand"), "2": converted_entry("W-b", marker="@cand")}
    ref = {"1": converted_entry("W-a", marker="@ref"),
           # never called Finish: Unsolved by the pass-rate rules, whatever its text says
           "2": converted_entry("W-b", finish=False, marker="@ref")}
    ref["2"]["answer"]["final_answer"] = finish_args("a final answer without a Finish call")
    cand_file = write_json(tmp_path / "cand" / "G1_tool.json", cand)
    ref_file = write_json(tmp_path / "ref" / "G1_tool.json", ref)
    ids = load_ids(write_json(tmp_path / "ids" / "G1_tool.json", {"1": 0, "2": 0}))
    fake_openai.handler = Script(labels={"W-a": ["Solved"] * 3, "W-b": ["Solved"] * 3},
                                 ref_labels={"W-a": ["Solved"] * 3}, picks={"W-a": ["cand", "ref", "cand"]})
    for side in (cand_file, ref_file):
        pass_rate(load_answers(side), ids, make_judge(fake_openai, tmp_path / "run"), method="m")
    labelled = fake_openai.calls
    assert labelled == 3 * 3  # W-a on both sides, W-b on the candidate's
    judge = make_judge(fake_openai, tmp_path / "run")
    result = win_rate(load_answers(cand_file), load_answers(ref_file), ids, judge, candidate_name="c",
                      reference_name="r")
    assert fake_openai.calls - labelled == 3  # the three comparisons of W-a, nothing else
    duels = {d.qid: d for d in result.duels["G1_tool"]}
    assert duels["1"].votes == (2, 1) and duels["2"].how == ["shortcut"] * 3
    assert Counter(r["tool_choice"]["function"]["name"] for r in fake_openai.chat_requests()) == {
        "check_answer_status": 9, "select_better_answer": 3}


# --- raw answers ----------------------------------------------------------------------

def test_a_call_without_its_result_stays_in_the_tree():
    # The original's converter leaves such a call out of the tree; stbeval keeps it,
    # with an empty response, so the judge sees every call the agent made.
    conversation = [
        {"role": "system", "content": "s"}, {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "search_for_x", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": FINISH, "arguments": finish_args("7")}}]},
    ]
    raw = {"answer_generation": {"valid_data": True, "query": "q", "final_answer": finish_args("7"),
                                 "function": [], "train_messages": [conversation]}}
    answer = convert_raw(raw, qid="1", method="DFS_woFilter_w2")
    steps = main_path(answer.answer_details)[2:]
    assert [s["message"] for s in steps] == [{"name": "search_for_x", "arguments": "{}", "response": ""},
                                            {"name": FINISH, "arguments": finish_args("7"), "response": ""}]
    assert precheck(answer) is None


def test_converted_answers_list_functions_in_either_shape():
    wrapped = converted_entry("q")
    wrapped["available_tools"] = [{"type": "function", "function": t} for t in wrapped["available_tools"]]
    assert converted_answer("1", wrapped).available_tools == converted_entry("q")["available_tools"]


@pytest.mark.parametrize("final", [finish_args("It is 7."), "It is 7."])
def test_a_plain_finished_answer_goes_to_the_judge(final):
    assert precheck(converted_answer("1", entry("q", final))) is None
