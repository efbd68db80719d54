"""Loading answers: converted files, raw ToolBench answers (seeded conversion), ids, bad input."""

from __future__ import annotations

import pytest

from stbeval.answers import load_answers, load_ids
from stbeval.errors import InputError
from stbeval.model import Answer, Problem, main_path
from stbeval.passrate import precheck
from stbeval.toolbench import convert_raw
from tests.eval.helpers import converted_entry, node, write_json

GROUPS = ("G1_instruction", "G1_category", "G1_tool", "G2_instruction", "G2_category", "G3_instruction")


def test_ids_forms_and_errors(tmp_path):
    write_json(tmp_path / "a" / "G1_tool.json", {"3": 0, "1": 0})
    write_json(tmp_path / "a" / "G2_category.json", ["7", 8])
    write_json(tmp_path / "a" / "G3_instruction.json", [{"query_id": 9, "query": "q"}])
    assert load_ids(tmp_path / "a") == {"G1_tool": ["3", "1"], "G2_category": ["7", "8"], "G3_instruction": ["9"]}
    with pytest.raises(InputError, match="no such ids"):
        load_ids(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{oops")
    with pytest.raises(InputError, match=r"bad\.json: not valid JSON"):
        load_ids(tmp_path / "bad.json")


def test_bad_converted_entries_become_problems_naming_the_query(tmp_path):
    good = converted_entry("fine")
    no_answer = {"query": "q"}
    no_details = {"query": "q", "answer": {"final_answer": ""}}
    bad_role = converted_entry("q")
    bad_role["answer"]["answer_details"][0]["next"][0]["role"] = "robot"
    bad_next = converted_entry("q")
    bad_next["answer"]["answer_details"][0]["next"] = "oops"
    empty_tree = converted_entry("q")
    empty_tree["answer"]["answer_details"] = []
    path = write_json(tmp_path / "G1_tool.json", {"1": good, "2": no_answer, "3": no_details, "4": bad_role,
                                                  "5": bad_next, "6": empty_tree, "7": "text"})
    items = load_answers(path).by_group["G1_tool"]
    assert isinstance(items["1"], Answer)
    reasons = {q: str(p) for q, p in items.items() if isinstance(p, Problem)}
    assert reasons["2"].startswith("query 2: missing field(s) answer")
    assert "missing field(s) answer_details" in reasons["3"]
    assert "unknown role 'robot'" in reasons["4"]
    assert "next is not a list" in reasons["5"]
    assert "non-empty list" in reasons["6"]
    assert "not an object" in reasons["7"]
    assert all("G1_tool.json" in r for r in reasons.values())


def test_unreadable_files_are_reported_and_others_still_load(tmp_path):
    folder = tmp_path / "G1_tool"
    write_json(folder / "1_CoT@1.json", {"answer_generation": {"valid_data": True, "query": "q", "function": [],
                                                                "final_answer": "", "train_messages": [[]]}})
    (folder / "2_CoT@1.json").write_text("{not json")
    write_json(folder / "3_CoT@1.json", {"answer_generation": {"valid_data": False}})
    loaded = load_answers(folder)
    items = loaded.by_group["G1_tool"]
    assert isinstance(items["1"], Answer)
    assert isinstance(items["2"], Problem) and "not valid JSON" in items["2"].reason
    assert isinstance(items["3"], Problem) and "has no 'query'" in items["3"].reason
    with pytest.raises(InputError, match="no such answers"):
        load_answers(tmp_path / "nowhere")


def _dfs_raw(valid: bool):
    def act(name, args, children=()):
        return {"node_type": "Action", "description": name, "children": [
            {"node_type": "Action Input", "description": args, "observation": f"result of {name}",
             "children": list(children)}]}

    def thought(text, children=()):
        return {"node_type": "Thought", "description": text, "children": list(children)}

    tree = {"node_type": "Action Input", "description": "", "children": [
        thought("plan A", [act("a1", "{}", [act("Finish", '{"return_type": "give_up_and_restart"}')])]),
        thought("plan B", [act("b1", "{}", [thought("b-think"), act("b2", "{}")])]),
        act("c1", "{}"),
    ]}
    return {"answer_generation": {"valid_data": valid, "query": "find x", "function": [{"name": "a1"}],
                                  "final_answer": "", "train_messages": []},
            "tree": {"size": 9, "max_length": 4, "tree": tree}}


def test_invalid_dfs_answers_walk_a_seeded_path():
    paths = {}
    for seed in range(40):
        answer = convert_raw(_dfs_raw(False), qid="42", method="DFS_woFilter_w2", seed=seed)
        assert isinstance(answer, Answer)
        again = convert_raw(_dfs_raw(False), qid="42", method="DFS_woFilter_w2", seed=seed)
        assert again.answer_details == answer.answer_details  # same seed, same path
        steps = main_path(answer.answer_details)[2:]
        assert steps[-1]["role"] in ("tool", "assistant")
        paths[seed] = tuple(s["message"]["name"] if s["role"] == "tool" else s["message"] for s in steps)
    assert len(set(paths.values())) > 1  # the seed matters
    # Every path runs from the root to a leaf; all four leaves are reached.
    assert set(paths.values()) == {("plan A", "a1", "Finish"), ("plan B", "b1", "b-think"), ("plan B", "b1", "b2"),
                                   ("c1",)}
    finish_path = next(s for s in paths.values() if s[-1] == "Finish")
    assert finish_path  # Action + Action Input merge into one tool node
    answer = next(convert_raw(_dfs_raw(False), qid="42", method="DFS", seed=s)
                  for s in paths if paths[s] == finish_path)
    # The path gave up, and the answer field is empty: Unsolved without a judge either way.
    assert precheck(answer) == "empty final answer"


def test_invalid_cot_answers_pick_a_seeded_try():
    def try_(name):
        return {"chain": [{"node_type": "Thought", "description": f"think {name}"},
                          {"node_type": "Action", "description": name},
                          {"node_type": "Action Input", "description": "{}", "observation": "obs"}]}

    raw = {"answer_generation": {"valid_data": False, "query": "q", "function": [], "final_answer": ""},
           "trys": [try_("t1"), try_("t2"), try_("t3")]}
    chosen = {main_path(convert_raw(raw, qid="1", method="CoT@1", seed=s).answer_details)[3]["message"]["name"]
              for s in range(20)}
    assert chosen == {"t1", "t2", "t3"}
    bad = dict(raw, trys=[{"chain": [{"node_type": "Mystery"}]}])
    problem = convert_raw(bad, qid="9", method="CoT@1", where="9_CoT@1.json")
    assert isinstance(problem, Problem) and "unknown node_type 'Mystery'" in str(problem) and "query 9" in str(problem)


def test_group_folders_and_ungrouped_answers(tmp_path):
    write_json(tmp_path / "run" / "G1_tool.json", {"1": converted_entry("a")})
    write_json(tmp_path / "run" / "G2_category.json", {"1": converted_entry("b")})
    loaded = load_answers(tmp_path / "run")
    # The same id in two groups stays apart.
    assert loaded.for_group("G1_tool", only_group=False)["1"].query == "a"
    assert loaded.for_group("G2_category", only_group=False)["1"].query == "b"
    assert loaded.for_group("G3_instruction", only_group=False) == {}
    single = load_answers(write_json(tmp_path / "mine.json", {"5": converted_entry("c")}))
    assert single.for_group("G1_tool", only_group=True)["5"].query == "c"
    assert node("user", "")["next"] == []
