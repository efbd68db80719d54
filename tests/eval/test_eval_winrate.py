"""SoWR: the shortcut, seeded order, votes over rounds, wins/ties/losses, missing answers."""

from __future__ import annotations

import pytest

from stbeval.answers import load_answers, load_ids
from stbeval.winrate import shortcut, swapped, win_rate
from tests.eval.helpers import Script, converted_entry, make_judge, write_json
from tests.fakes.fake_openai import HttpError

QUERIES = ["W-1", "W-2", "W-3", "W-4", "W-5"]


@pytest.fixture
def duel_files(tmp_path):
    cand = write_json(tmp_path / "cand" / "G1_instruction.json",
                      {str(i): converted_entry(q, marker="@cand") for i, q in enumerate(QUERIES[:4], 1)})
    ref = write_json(tmp_path / "ref" / "G1_instruction.json",
                     {str(i): converted_entry(q, marker="@ref") for i, q in enumerate(QUERIES, 1)})
    ids = write_json(tmp_path / "ids" / "G1_instruction.json", {str(i): 0 for i in range(1, 6)})
    return cand, ref, ids


def script():
    return Script(
        labels={"W-1": ["Solved"] * 3, "W-2": ["Unsolved"] * 3, "W-3": ["Solved"] * 3, "W-4": ["Solved"] * 3},
        ref_labels={"W-1": ["Unsolved"] * 3, "W-2": ["Solved"] * 3, "W-3": ["Solved"] * 3,
                    "W-4": ["Solved"] * 3, "W-5": ["Solved"] * 3},
        picks={"W-3": ["cand", "ref", "cand"], "W-4": ["cand", "ref", HttpError(400)]},
    )


def run(files, judge, **kw):
    cand, ref, ids = files
    return win_rate(load_answers(cand), load_answers(ref), load_ids(ids), judge,
                    candidate_name="mine", reference_name="theirs", **kw)


def compare_prompts(fake):
    return [r["messages"][0]["content"] for r in fake.chat_requests()
            if r["tool_choice"]["function"]["name"] == "select_better_answer"]


def test_votes_wins_ties_losses_by_hand(fake_openai, duel_files, tmp_path):
    fake_openai.handler = script()
    result = run(duel_files, make_judge(fake_openai, tmp_path / "run"))
    duels = {d.qid: d for d in result.duels["G1_instruction"]}
    assert duels["1"].votes == (3, 0) and duels["1"].how == ["shortcut"] * 3  # Solved vs Unsolved
    assert duels["2"].votes == (0, 3) and duels["2"].how == ["shortcut"] * 3  # Unsolved vs Solved
    assert duels["3"].votes == (2, 1) and duels["3"].result == "win"
    assert duels["4"].votes == (1, 1) and duels["4"].result == "tie"  # third round failed: unscored
    assert duels["4"].how[2] == "unscored"
    assert duels["5"].votes == (0, 3) and duels["5"].how == ["missing"] * 3  # no candidate answer
    g = result.groups[0]
    assert (g.wins, g.ties, g.losses) == (2, 1, 2)
    assert g.rate == pytest.approx(100 * 2 / 5)
    assert result.average_rate == pytest.approx(40.0)
    assert any("query 4" in p and "round 2" in p for p in result.problems)


def test_shortcut_makes_no_judge_call(fake_openai, duel_files, tmp_path):
    fake_openai.handler = script()
    run(duel_files, make_judge(fake_openai, tmp_path / "run"))
    prompts = compare_prompts(fake_openai)
    assert len(prompts) == 6  # W-3 and W-4, three rounds each
    assert not [p for p in prompts if "W-1" in p or "W-2" in p or "W-5" in p]
    # Labels: 4 candidate answers and 5 reference answers, three rounds each.
    assert fake_openai.calls == 6 + 3 * (4 + 5)


def test_shortcut_rules():
    # Different labels decide the round: Solved over Unsure over Unsolved.
    assert shortcut("Solved", "Unsolved") == "candidate"
    assert shortcut("Unsolved", "Solved") == "reference"
    assert shortcut("Solved", "Unsure") == "candidate"
    assert shortcut("Unsure", "Solved") == "reference"
    assert shortcut("Unsure", "Unsolved") == "candidate"
    assert shortcut("Unsolved", "Unsure") == "reference"
    # Equal labels, or a side without a label, leave it to the judge.
    for pair in [("Solved", "Solved"), ("Unsure", "Unsure"), ("Unsolved", "Unsolved"), ("unscored", "Solved"),
                 ("Unsolved", "unscored"), ("missing", "Unsolved")]:
        assert shortcut(*pair) is None


def test_order_is_seeded_and_mixed():
    draws = [swapped(7, "G1_tool", str(q), r) for q in range(100) for r in range(3)]
    assert draws == [swapped(7, "G1_tool", str(q), r) for q in range(100) for r in range(3)]
    assert 100 < sum(draws) < 200
    assert draws != [swapped(8, "G1_tool", str(q), r) for q in range(100) for r in range(3)]


def test_result_does_not_depend_on_order_or_seed(fake_openai, duel_files, tmp_path):
    outcomes = []
    orders = []
    for seed in (0, 1, 2, 3):
        fake_openai.reset()
        fake_openai.handler = script()
        result = run(duel_files, make_judge(fake_openai, tmp_path / f"run{seed}"), seed=seed)
        outcomes.append([(d.qid, d.votes) for d in result.duels["G1_instruction"]])
        orders.append(tuple(p.index("@cand") < p.index("@ref") for p in compare_prompts(fake_openai)))
    assert all(o == outcomes[0] for o in outcomes)
    assert len(set(orders)) > 1  # the seed really changes which answer is shown first
    assert {True, False} <= set(sum(orders, ()))


def test_skip_policy_and_rerun(fake_openai, duel_files, tmp_path):
    fake_openai.handler = script()
    first = run(duel_files, make_judge(fake_openai, tmp_path / "run"), missing="skip")
    g = first.groups[0]
    assert g.queries == 4 and g.rate == pytest.approx(50.0)
    calls = fake_openai.calls
    judge = make_judge(fake_openai, tmp_path / "run")
    again = run(duel_files, judge, missing="skip")
    # Round 2 of W-4 failed (HTTP 400): failures are asked again, nothing else is.
    assert fake_openai.calls == calls + 1
    assert judge.stats.reused == calls - 1
    assert ([d.rounds[:2] for d in again.duels["G1_instruction"]]
            == [d.rounds[:2] for d in first.duels["G1_instruction"]])


def test_a_duel_whose_every_judgment_failed_counts_as_nothing_not_a_tie():
    from stbeval.winrate import Duel

    failed = Duel("G1_instruction", "9", None, None, ["none"] * 3, ["unscored"] * 3, ["judge call failed"] * 3)
    assert failed.result == "unscored"
    neither = Duel("G1_instruction", "8", None, None, ["none"] * 3, ["missing"] * 3, [""] * 3)
    assert neither.result == "tie"  # neither side answered: a tie, as the original counts it
