"""Solvable win rate (SoWR) of a candidate against a reference.

Per query and round: both answers get their pass-rate label for that round. When the
labels differ, the better one wins the round with no judge call (Solved over Unsure
over Unsolved, as the original orders them). When they are equal and the two answers
would look the same to the judge, the round is a tie, again with no call. Otherwise
the judge picks the better answer, the two shown in an order drawn from a generator
seeded by (seed, group, query, round), each without its method name and with its
final answer cut to 1,000 characters, as in the original. The candidate wins a query
when it wins more rounds than the reference, loses when it wins fewer, and ties
otherwise. Win rate = wins / queries; ties and losses are reported beside it.

A query one side has no usable answer for is lost by that side (``missing="unsolved"``)
or left out (``missing="skip"``); with both answers missing it is a tie.
"""

from __future__ import annotations

import json
import random
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from .judge import Judge
from .model import AnswerSet
from .passrate import AVERAGE, Notes, Outcome, check_options, collect, plan
from .runner import DEFAULT_CONCURRENCY, Progress, run_rounds

CANDIDATE, REFERENCE = "candidate", "reference"


@dataclass
class Duel:
    """One query's contest over the rounds."""

    group: str
    qid: str
    candidate: Outcome
    reference: Outcome
    rounds: list[str]  # per round: "candidate", "reference" or "none" (no winner)
    how: list[str]  # per round: "shortcut", "identical", "judge", "missing", "unscored"
    reasons: list[str]

    @property
    def votes(self) -> tuple[int, int]:
        return self.rounds.count(CANDIDATE), self.rounds.count(REFERENCE)

    @property
    def result(self) -> str:
        """win, loss or tie by the votes; "unscored" when every round's judgment failed,
        which is never counted as a tie (or anything else)."""
        won, lost = self.votes
        if not won and not lost and self.how and all(h == "unscored" for h in self.how):
            return "unscored"
        return "win" if won > lost else "loss" if lost > won else "tie"


@dataclass
class GroupWins:
    group: str
    wins: int
    ties: int
    losses: int
    judge_calls_saved: int = 0  # rounds decided without a comparison (shortcut or identical answers)

    @property
    def queries(self) -> int:
        return self.wins + self.ties + self.losses

    @property
    def rate(self) -> float | None:
        return 100 * self.wins / self.queries if self.queries else None

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "win_rate": self.rate, "wins": self.wins, "ties": self.ties,
                "losses": self.losses, "queries": self.queries, "shortcut_rounds": self.judge_calls_saved}


@dataclass
class WinRate:
    candidate: str
    reference: str
    rounds: int
    missing: str
    seed: int
    groups: list[GroupWins]
    average: GroupWins | None
    average_rate: float | None  # mean of the group rates
    duels: dict[str, list[Duel]]
    problems: list[str] = field(default_factory=list)


#: How the labels rank answers when they differ.
RANK = {"Solved": 2, "Unsure": 1, "Unsolved": 0}


def shortcut(candidate: str, reference: str) -> str | None:
    """The round's winner when the labels settle it without a judge: two different labels."""
    if candidate not in RANK or reference not in RANK or candidate == reference:
        return None
    return CANDIDATE if RANK[candidate] > RANK[reference] else REFERENCE


def swapped(seed: int, group: str, qid: str, r: int) -> bool:
    """Whether the reference is shown first in this round (seeded, order independent)."""
    return random.Random(f"{seed}:{group}:{qid}:{r}").random() < 0.5


def win_rate(candidates: AnswerSet, references: AnswerSet, ids: dict[str, list[str]], judge: Judge, *,
             candidate_name: str, reference_name: str, rounds: int = 3, missing: str = "unsolved", seed: int = 0,
             warn: Callable[[str], None] = lambda _m: None, concurrency: int = DEFAULT_CONCURRENCY,
             progress: Progress | None = None) -> WinRate:
    check_options(rounds, missing)
    note = Notes(warn)
    progress = progress or Progress()
    # One bar for the whole run: label both sides, then one step per query and round.
    quiet: list[str] = []
    planned = sum(1 for side in (candidates, references)
                  for rows in plan(side, ids, rounds=rounds, warn=quiet.append).values() for o in rows if o.judged)
    progress.start((planned + sum(len(q) for q in ids.values())) * rounds)
    mine = collect(candidates, ids, judge, rounds=rounds, warn=lambda m: note(f"candidate: {m}"),
                   concurrency=concurrency, progress=progress, progress_started=True)
    theirs = collect(references, ids, judge, rounds=rounds, warn=lambda m: note(f"reference: {m}"),
                     concurrency=concurrency, progress=progress, progress_started=True)

    duels: dict[str, list[Duel]] = {}
    for group in ids:
        rows = []
        for c, ref in zip(mine[group], theirs[group]):
            if missing == "skip" and (c.missing or ref.missing):
                progress.step(rounds)
                continue
            rows.append(Duel(group, c.qid, c, ref, ["none"] * rounds, [""] * rounds, [""] * rounds))
        duels[group] = rows
    every = [d for rows in duels.values() for d in rows]

    def work(duel: Duel, r: int) -> tuple[str, str, str]:
        c, ref = duel.candidate, duel.reference
        if c.missing or ref.missing:
            if c.missing and ref.missing:
                return "none", "missing", "neither side has an answer"
            return (REFERENCE if c.missing else CANDIDATE), "missing", c.missing or ref.missing
        c_label, r_label = c.status(r), ref.status(r)
        quick = shortcut(c_label, r_label)
        if quick:
            return quick, "shortcut", f"candidate {c_label}, reference {r_label}"
        assert c.answer is not None and ref.answer is not None
        mine, theirs = c.answer.select_view(), ref.answer.select_view()
        if mine == theirs:
            return "none", "identical", "the judge would see two identical answers"
        flip = swapped(seed, duel.group, duel.qid, r)
        first, second = (theirs, mine) if flip else (mine, theirs)
        verdict = judge.select_better_answer(c.answer.query, json.dumps(first), json.dumps(second),
                                             qid=duel.qid, round=r)
        if verdict.status != "ok":
            return "none", "unscored", verdict.reason
        picked_first = verdict.label == 0
        return (REFERENCE if picked_first == flip else CANDIDATE), "judge", verdict.reason

    results = run_rounds(every, rounds, work, concurrency=concurrency, progress=progress)
    for r, round_results in enumerate(results):
        for duel, (winner, how, reason) in zip(every, round_results):
            duel.rounds[r], duel.how[r], duel.reasons[r] = winner, how, reason
            if how == "unscored":
                note(f"query {duel.qid} ({duel.group}), round {r}: comparison unscored: {reason}")

    groups = []
    for group, rows in duels.items():
        results_ = [d.result for d in rows]
        saved = sum(d.how.count("shortcut") + d.how.count("identical") for d in rows)
        groups.append(GroupWins(group, results_.count("win"), results_.count("tie"), results_.count("loss"), saved))
    average = None
    average_rate = None
    if groups:
        average = GroupWins(AVERAGE, sum(g.wins for g in groups), sum(g.ties for g in groups),
                            sum(g.losses for g in groups), sum(g.judge_calls_saved for g in groups))
        rates = [g.rate for g in groups if g.rate is not None]
        average_rate = statistics.fmean(rates) if rates else None
    return WinRate(candidate_name, reference_name, rounds, missing, seed, groups, average, average_rate, duels,
                   note.messages)
