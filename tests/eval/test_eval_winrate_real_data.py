"""data_example's CoT against DFS, judged as the original evaluator recorded, gives its
preference_results.

These tests check exact facts of StableToolBench's real files (ids, counts, the original
evaluator's outputs); the formats themselves are also checked on small generated files in
test_eval_winrate.py. Without the real files this module is one skip (see tests/stb_samples.py).
"""

from __future__ import annotations

import json
import threading
from collections import Counter

import pytest

from stbeval.answers import load_answers
from stbeval.winrate import win_rate
from tests.eval.helpers import make_judge
from tests.fakes.fake_openai import ToolCall
from tests.stb_samples import real_stb_data, require_real_stb_data, skip_reason  # noqa: E402

if real_stb_data() is None:
    pytest.skip(skip_reason(), allow_module_level=True)


@pytest.fixture
def stb():
    return require_real_stb_data()


def test_real_samples_reproduce_original_preferences(stb, fake_openai, tmp_path):
    example = stb / "data_example"
    converted = example / "model_predictions_converted"
    cand = load_answers(converted / "virtual_chatgpt_dfs")
    ref = load_answers(converted / "virtual_chatgpt_cot")
    status = {m: json.loads((example / "pass_rate_results" / f"virtual_chatgpt_{m}" /
                             f"G1_instruction_virtual_chatgpt_{m}.json").read_text()) for m in ("cot", "dfs")}
    preferences = json.loads((example / "preference_results" /
                              "G1_instruction_virtual_chatgpt_cot_virtual_chatgpt_dfs.json").read_text())
    finals = {"dfs": {q: a.final_answer for q, a in cand.by_group["G1_instruction"].items()},
              "cot": {q: a.final_answer for q, a in ref.by_group["G1_instruction"].items()}}
    # Which side wins each judged round, matching the recorded vote counts.
    picks = {"608": ["dfs"] * 3, "1073": ["cot", "dfs", "dfs"]}
    seen = Counter()
    lock = threading.Lock()

    def handler(request):
        fn = request["tool_choice"]["function"]["name"]
        prompt = request["messages"][0]["content"]
        qid = next(q for q, v in status["cot"].items() if v["query"] in prompt)
        if fn == "select_better_answer":
            with lock:
                r = seen[(fn, qid)]
                seen[(fn, qid)] += 1
            dfs_first = prompt.index(json.dumps(finals["dfs"][qid])) < prompt.index(json.dumps(finals["cot"][qid]))
            return ToolCall(fn, {"reason": "x", "index": 0 if dfs_first == (picks[qid][r] == "dfs") else 1})
        side = "dfs" if finals["dfs"][qid] and finals["dfs"][qid] in prompt else "cot"
        with lock:
            r = seen[(fn, qid, side)]
            seen[(fn, qid, side)] += 1
        return ToolCall(fn, {"reason": "x", "answer_status": status[side][qid]["is_solved"][str(r)].split(".")[-1]})

    fake_openai.handler = handler
    ids = {"G1_instruction": list(preferences)}
    result = win_rate(cand, ref, ids, make_judge(fake_openai, tmp_path / "run"),
                      candidate_name="virtual_chatgpt_dfs", reference_name="virtual_chatgpt_cot")
    votes = {d.qid: {"virtual_chatgpt_dfs": d.votes[0], "virtual_chatgpt_cot": d.votes[1]}
             for d in result.duels["G1_instruction"]}
    assert votes == {q: {k: v for k, v in p.items() if not k.startswith("round")} for q, p in preferences.items()}
    # 588: the CoT answer never finished, the DFS one was Solved: decided without a comparison.
    assert seen[("select_better_answer", "588")] == 0
    assert result.groups[0].rate == pytest.approx(100.0)

