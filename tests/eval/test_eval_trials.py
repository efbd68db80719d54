"""pass@k and pass^k over repeated trials, against values worked out by hand."""

from __future__ import annotations

import pytest

from stbeval.errors import InputError
from stbeval.trials import pass_at_k, pass_hat_k, trial_passed, trial_scores

# Four queries, four trials each, passing 4, 3, 2 and 0 times.
TABLE = {"q1": [True] * 4, "q2": [True, True, False, True], "q3": [False, True, True, False], "q4": [False] * 4}


def test_pass_hat_k_matches_the_hand_computed_table():
    scores = trial_scores(TABLE)
    assert (scores.trials, scores.queries) == (4, 4)
    assert scores.pass_hat[1] == pytest.approx((1 + 0.75 + 0.5 + 0) / 4)
    assert scores.pass_hat[2] == pytest.approx((1 + 0.5 + 1 / 6 + 0) / 4)  # C(3,2)/C(4,2), C(2,2)/C(4,2)
    assert scores.pass_hat[3] == pytest.approx((1 + 0.25 + 0 + 0) / 4)
    assert scores.pass_hat[4] == pytest.approx(1 / 4)


def test_pass_at_k_matches_the_hand_computed_table():
    scores = trial_scores(TABLE)
    assert scores.pass_at[1] == pytest.approx(scores.pass_hat[1])  # one trial: both are the pass rate
    assert scores.pass_at[2] == pytest.approx((1 + 1 + (1 - 1 / 6) + 0) / 4)  # 1 - C(2,2)/C(4,2) for q3
    assert scores.pass_at[4] == pytest.approx(3 / 4)
    assert scores.to_dict()["pass^k"]["2"] == pytest.approx(scores.pass_hat[2])


@pytest.mark.parametrize("n,c,k,at,hat", [(5, 0, 1, 0.0, 0.0), (5, 5, 3, 1.0, 1.0), (3, 1, 2, 2 / 3, 0.0),
                                          (10, 7, 1, 0.7, 0.7)])
def test_the_formulas(n, c, k, at, hat):
    assert pass_at_k(n, c, k) == pytest.approx(at) and pass_hat_k(n, c, k) == pytest.approx(hat)


@pytest.mark.parametrize("labels,passed", [
    (["Solved"], True), (["Unsolved"], False), (["Unsure"], False),
    (["Solved", "Solved", "Unsolved"], True), (["Solved", "Unsure", "Unsolved"], False),
    (["Solved", None, None], True), (["Solved", "Unsolved"], False), ([None, None], None), ([], None),
])
def test_a_trial_passes_by_the_majority_of_its_scored_rounds(labels, passed):
    assert trial_passed(labels) is passed


def test_unscored_trials_are_left_out_and_uneven_trials_are_refused():
    assert trial_scores({"a": [True, None, False], "b": [None, True, True]}).trials == 2
    with pytest.raises(InputError, match="different numbers of scored trials"):
        trial_scores({"a": [True, False], "b": [True]})
    with pytest.raises(InputError, match="no query has a scored trial"):
        trial_scores({"a": [None]})
    with pytest.raises(InputError, match="1 <= k <= n"):
        pass_hat_k(3, 1, 4)
