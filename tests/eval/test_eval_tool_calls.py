"""Answers in today's OpenAI message format (tool_calls, role: tool), as StableToolBench's
pipeline writes them now: the twelve real pipeline answers, DFS trees built in that
format, their legacy rewrites, and both mixed in one run."""

from __future__ import annotations

import json

import pytest

from stbeval.answers import load_answers, to_converted
from stbeval.model import FINISH, Answer, main_path, parse_finish
from stbeval.passrate import precheck
from stbeval.toolbench import convert_raw
from tests.eval.helpers import to_legacy, write_json
from tests.stb_samples import PIPELINE_FUNCTIONS, is_sample

PIPELINE = "pipeline_answers_tool_calls/G1_instruction"


@pytest.fixture
def pipeline(stb):
    folder = stb / PIPELINE
    files = sorted(folder.glob("*.json"))
    assert len(files) == (len(PIPELINE_FUNCTIONS) if is_sample(stb) else 12)
    return folder, {f.name: json.loads(f.read_text()) for f in files}


def legacy_copy(raws, folder):
    for name, raw in raws.items():
        write_json(folder / name, to_legacy(raw))
    return folder


def test_the_twelve_pipeline_answers_read_every_call(pipeline):
    folder, raws = pipeline
    loaded = load_answers(folder)
    assert loaded.problems == [] and list(loaded.by_group) == ["G1_instruction"]
    answers = loaded.by_group["G1_instruction"]
    assert sorted(answers) == sorted(name.split("_")[0] for name in raws)
    for name, raw in raws.items():
        answer = answers[name.split("_")[0]]
        assert isinstance(answer, Answer), str(answer)
        gen = raw["answer_generation"]
        # Tool results are matched to their calls by tool_call_id.
        results = {m["tool_call_id"]: m["content"] for m in gen["train_messages"][-1] if m["role"] == "tool"}
        calls = [c for m in gen["train_messages"][-1] if m["role"] == "assistant" for c in m.get("tool_calls") or []]
        steps = main_path(answer.answer_details)[2:]
        assert [s["message"]["name"] for s in steps] == [c["function"]["name"] for c in calls]
        assert [s["message"]["response"] for s in steps] == [results.get(c["id"], "") for c in calls]
        assert steps[-1]["message"] == {"name": FINISH, "arguments": gen["final_answer"], "response": ""}
        assert all(s["message"]["response"] for s in steps[:-1])
        # Functions listed as {type: function, function: {...}} become bare schemas.
        assert answer.tool_names() == [f["function"]["name"] for f in gen["function"]]
        assert answer.tool_names()[-1] == FINISH
        assert parse_finish(answer.final_answer)[0] == "give_answer"
        assert precheck(answer) is None  # every one of them goes to the judge

    # One of them, by hand.
    if "100" in answers:  # the generated sample: one call, then two in one message, then Finish
        steps = main_path(answers["100"].answer_details)
        assert [n["role"] for n in steps] == ["system", "user", "tool", "tool", "tool", "tool"]
        assert steps[2]["message"] == {"name": "get_a_specific_team_for_free_nba", "arguments": '{"is_id": "14"}',
                                       "response": '{"error": "", "response": "sample answer 1 of '
                                                   'get_a_specific_team_for_free_nba"}'}
        assert [n["message"]["name"] for n in steps[3:5]] == ["songkick_concert_for_theclique",
                                                              "songkick_artist_for_theclique"]
        return
    first = main_path(answers["1073"].answer_details)
    assert [n["role"] for n in first] == ["system", "user", "tool", "tool"]
    assert first[2]["message"] == {"name": "popularsitesforquery_for_keyword_analysis",
                                   "arguments": '{"q": "taylor swift"}',
                                   "response": '{"error": "", "response": "simulated 93c880a84711"}'}
    assert answers["1073"].total_steps == 4


def test_legacy_rewrite_converts_to_the_same_answers(pipeline, tmp_path):
    folder, raws = pipeline
    legacy = legacy_copy(raws, tmp_path / "legacy" / "G1_instruction")
    assert "function_call" in json.dumps(to_legacy(next(iter(raws.values())))) and "tool_calls" not in json.dumps(
        [to_legacy(r)["answer_generation"]["train_messages"] for r in raws.values()])
    today = to_converted(load_answers(folder).by_group["G1_instruction"].values())
    before = to_converted(load_answers(legacy).by_group["G1_instruction"].values())
    assert today == before and len(today) == len(raws)


def test_both_formats_mixed_in_one_folder(pipeline, tmp_path):
    folder, raws = pipeline
    mixed = tmp_path / "mixed" / "G1_instruction"
    for i, (name, raw) in enumerate(sorted(raws.items())):
        write_json(mixed / name, to_legacy(raw) if i % 2 else raw)
    loaded = load_answers(mixed).by_group["G1_instruction"]
    assert to_converted(loaded.values()) == to_converted(load_answers(folder).by_group["G1_instruction"].values())


def test_cot_tries_of_the_real_answers_give_the_same_calls(pipeline):
    # Read from the try instead of the conversation (as an invalid answer is), the same
    # calls come out with the same arguments and results.
    _, raws = pipeline
    for name, raw in raws.items():
        qid = name.split("_")[0]
        from_messages = convert_raw(raw, qid=qid, method="CoT@1")
        invalid = dict(raw, answer_generation=dict(raw["answer_generation"], valid_data=False))
        from_try = convert_raw(invalid, qid=qid, method="CoT@1")
        a = [s["message"] for s in main_path(from_messages.answer_details)[2:]]
        b = [s["message"] for s in main_path(from_try.answer_details)[2:]]
        assert [(m["name"], m["arguments"]) for m in a] == [(m["name"], m["arguments"]) for m in b]
        assert [m["response"] for m in a[:-1]] == [m["response"] for m in b[:-1]]


# --- DFS trees in today's format ------------------------------------------------------

FUNCTIONS = [{"type": "function", "function": {"name": n, "description": f"{n} tool", "parameters": {
    "type": "object", "properties": {}, "required": []}}} for n in ("find_for_x", "price_for_x", "stock_for_x", FINISH)]
ANSWER = json.dumps({"return_type": "give_answer", "final_answer": "Item 7 costs 3 EUR and 5 are in stock."})


def _act(name, args, observation, children=()):
    return {"node_type": "Action", "description": name, "children": [
        {"node_type": "Action Input", "description": args, "observation": observation, "observation_code": 0,
         "children": list(children)}]}


def _call(call_id, name, args):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def dfs_answer(valid: bool) -> dict:
    """A DFS answer as today's pipeline writes it: one model reply with a thought and two
    parallel calls, then a Finish; a pruned sibling branch; None-valued keys dropped."""
    finish = _act(FINISH, ANSWER, '{"response":"successfully giving the final answer."}')
    tree = {"node_type": "Action Input", "description": "", "children": [
        {"node_type": "Thought", "description": "Find the item, then its price and stock.", "children": [
            _act("find_for_x", '{"q": "item"}', '{"error": "", "response": "id 7"}', [
                _act("price_for_x", '{"id": 7}', '{"error": "", "response": "3 EUR"}', [
                    _act("stock_for_x", '{"id": 7}', '{"error": "", "response": "5"}', [finish])]),
                _act("stock_for_x", '{"id": 0}', '{"error": "bad id", "response": ""}')])]}]}
    conversation = [
        {"role": "system", "content": "You are AutoGPT ..."},
        {"role": "user", "content": "How much is the item and how many are in stock?\nBegin!\n"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c1", "find_for_x", '{"q": "item"}')]},
        {"role": "tool", "name": "find_for_x", "content": '{"error": "", "response": "id 7"}', "tool_call_id": "c1"},
        {"role": "assistant", "content": "Now price and stock, together.", "tool_calls": [
            _call("c2", "price_for_x", '{"id": 7}'), _call("c3", "stock_for_x", '{"id": 7}')]},
        # Parallel results may come back in any order; the id decides.
        {"role": "tool", "name": "stock_for_x", "content": '{"error": "", "response": "5"}', "tool_call_id": "c3"},
        {"role": "tool", "name": "price_for_x", "content": '{"error": "", "response": "3 EUR"}', "tool_call_id": "c2"},
        {"role": "assistant", "tool_calls": [_call("c4", FINISH, ANSWER)]},
    ]
    return {
        "win": valid,
        "tree": {"size": 12, "max_length": 9, "tree": tree},
        "forward_args": {"single_chain_max_step": 12, "tree_beam_size": 2},
        "compare_candidates": [],
        "answer_generation": {
            "valid_data": valid, "query_count": 4, "total_tokens": 900, "finish_type": "give_answer",
            "final_answer": ANSWER if valid else "", "function": FUNCTIONS, "chain": [],
            "query": "How much is the item and how many are in stock?",
            **({"train_messages": [conversation[:3], conversation[:5], conversation]} if valid else {}),
        },
    }


def _names(answer):
    return [(s["role"], s["message"]["name"] if s["role"] == "tool" else s["message"])
            for s in main_path(answer.answer_details)[2:]]


def test_valid_dfs_answer_reads_parallel_calls_in_order():
    answer = convert_raw(dfs_answer(True), qid="77", method="DFS_woFilter_w2")
    assert isinstance(answer, Answer), str(answer)
    steps = main_path(answer.answer_details)[2:]
    assert [(s["message"]["name"], s["message"]["response"]) for s in steps] == [
        ("find_for_x", '{"error": "", "response": "id 7"}'),
        ("price_for_x", '{"error": "", "response": "3 EUR"}'),
        ("stock_for_x", '{"error": "", "response": "5"}'),
        (FINISH, ""),
    ]
    assert [s["message"]["arguments"] for s in steps[1:3]] == ['{"id": 7}', '{"id": 7}']
    assert answer.tool_names() == ["find_for_x", "price_for_x", "stock_for_x", FINISH]
    assert precheck(answer) is None
    # Legacy form: one function_call per message, results as role: function.
    legacy = convert_raw(to_legacy(dfs_answer(True)), qid="77", method="DFS_woFilter_w2")
    assert to_converted([legacy]) == to_converted([answer])


def test_invalid_dfs_answer_walks_the_tree_of_parallel_calls():
    paths = set()
    for seed in range(30):
        answer = convert_raw(dfs_answer(False), qid="77", method="DFS_woFilter_w2", seed=seed)
        assert isinstance(answer, Answer), str(answer)
        paths.add(tuple(_names(answer)))
        assert precheck(answer) is not None  # no answer was given: Unsolved without a judge
    thought = ("assistant", "Find the item, then its price and stock.")
    assert paths == {
        (thought, ("tool", "find_for_x"), ("tool", "price_for_x"), ("tool", "stock_for_x"), ("tool", FINISH)),
        (thought, ("tool", "find_for_x"), ("tool", "stock_for_x")),
    }


# --- pass rate on the twelve, through the command line ---------------------------------

def scripted_labels(raws):
    """Per query, three rounds of labels: 9, then 6, then 3 of the twelve Solved."""
    queries = [raw["answer_generation"]["query"] for _, raw in sorted(raws.items())]
    return {q: ["Solved" if i < 9 else "Unsolved", "Solved" if i % 2 == 0 else "Unsolved",
                "Solved" if i < 3 else "Unsolved"] for i, q in enumerate(queries)}


