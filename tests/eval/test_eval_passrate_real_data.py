"""data_example's answers, judged as the original evaluator's pass_rate_results record, give its
pass rates.

These tests check exact facts of StableToolBench's real files (ids, counts, the original
evaluator's outputs); the formats themselves are also checked on small generated files in
test_eval_passrate.py. Without the real files this module is one skip (see tests/stb_samples.py).
"""

from __future__ import annotations

import pytest

from stbeval.answers import load_answers, load_ids
from stbeval.passrate import pass_rate
from tests.eval.helpers import Script, make_judge
from tests.eval.test_eval_passrate import (  # noqa: F401  (helpers and fixtures)
    _original_labels,
    pstd,
)
from tests.stb_samples import real_stb_data, require_real_stb_data, skip_reason  # noqa: E402

if real_stb_data() is None:
    pytest.skip(skip_reason(), allow_module_level=True)


@pytest.fixture
def stb():
    return require_real_stb_data()


@pytest.mark.parametrize("method,answers_rel", [
    ("cot", "model_predictions_converted/virtual_chatgpt_cot/G1_instruction.json"),
    ("dfs", "model_predictions_converted/virtual_chatgpt_dfs/G1_instruction.json"),
    ("cot", "answer/virtual_chatgpt_cot"),  # raw answers, converted on the fly
    ("dfs", "answer/virtual_chatgpt_dfs"),
])
def test_real_samples_reproduce_the_original_pass_rate(stb, fake_openai, tmp_path, method, answers_rel):
    example = stb / "data_example"
    recorded, original = _original_labels(
        example / "pass_rate_results" / f"virtual_chatgpt_{method}" / f"G1_instruction_virtual_chatgpt_{method}.json")
    fake_openai.handler = Script({original[qid]["query"]: labels for qid, labels in recorded.items()})
    ids = load_ids(stb / "solvable_queries" / "test_query_ids" / "G1_instruction.json")
    judge = make_judge(fake_openai, tmp_path / "run")
    # The original leaves the 160 unanswered solvable ids out: that is --missing skip.
    result = pass_rate(load_answers(example / answers_rel), ids, judge, method=method, missing="skip")

    outcomes = {o.qid: o for o in result.outcomes["G1_instruction"] if not o.missing}
    assert {qid: o.labels for qid, o in outcomes.items()} == recorded
    runs = [sum({"Solved": 1, "Unsure": 0.5, "Unsolved": 0}[recorded[q][r]] for q in recorded) / len(recorded)
            for r in range(3)]
    group = result.groups[0]
    assert group.mean == pytest.approx(100 * sum(runs) / 3) and group.std == pytest.approx(100 * pstd(runs))
    # The CoT answer to 588 never called Finish: decided without the judge.
    judged = {qid for qid, o in outcomes.items() if o.judged}
    assert fake_openai.calls == 3 * len(judged)
    if method == "cot":
        assert judged == {"608", "1073"} and round(group.mean, 1) == 66.7
    else:
        assert judged == {"588", "608", "1073"} and group.mean == pytest.approx(100.0)
    # Counting the unanswered ids as Unsolved (the default) changes the denominator.
    default = pass_rate(load_answers(example / answers_rel), ids, judge, method=method)
    assert default.groups[0].mean == pytest.approx(group.mean * 3 / len(ids["G1_instruction"]))

