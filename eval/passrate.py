"""Solvable pass rate (SoPR): per query labels over R rounds, per group mean and spread.

Rules (StableToolBench's, with its missing-answer quirk made optional):
- an answer whose last tool call is not ``Finish``, that gave up, or whose final
  answer is empty is Unsolved without asking the judge (see :func:`precheck`);
- otherwise the judge checks the final answer, and checks the whole trace when the
  first verdict is Unsure;
- Solved = 1, Unsure = 0.5, Unsolved = 0; a round's score is the mean over queries;
- reported: mean and population standard deviation of the round scores, x100, per group
  and for the average over groups;
- a query without a usable answer counts as Unsolved (``missing="unsolved"``) or is left
  out (``missing="skip"``, the original behaviour);
- a judgment without a valid label is *unscored*: left out of that round's mean and
  counted in its own column, never guessed.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import Any, Callable

from .errors import InputError
from .judge import Judge
from .model import FINISH, GIVE_UP, Answer, AnswerSet, Problem, last_step, last_tool_step, parse_finish, step_name
from .runner import DEFAULT_CONCURRENCY, Progress, run_rounds

SCORES = {"Solved": 1.0, "Unsure": 0.5, "Unsolved": 0.0}
MISSING_POLICIES = ("unsolved", "skip")
AVERAGE = "Average"


@dataclass
class Outcome:
    """What became of one query: its label in each round, and why."""

    group: str
    qid: str
    answer: Answer | None
    labels: list[str | None]  # per round; None = unscored (or missing)
    reasons: list[str]
    judged: bool = False  # False when a rule decided without the judge
    missing: str = ""  # why there is no usable answer ("" when there is one)

    def status(self, r: int) -> str:
        if self.missing:
            return "missing"
        return self.labels[r] or "unscored"

    def round_score(self, r: int) -> float | None:
        """Its score in round ``r``: 0 when missing, None when unscored."""
        if self.missing:
            return 0.0
        label = self.labels[r]
        return None if label is None else SCORES[label]


@dataclass
class GroupScore:
    group: str
    runs: list[float | None]  # per round, as fractions; None when nothing was scored
    queries: int  # queries counted (after the missing policy)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def mean(self) -> float | None:
        values = [v for v in self.runs if v is not None]
        return 100 * statistics.fmean(values) if values else None

    @property
    def std(self) -> float | None:
        values = [v for v in self.runs if v is not None]
        return 100 * statistics.pstdev(values) if values else None

    def as_dict(self) -> dict[str, Any]:
        return {"group": self.group, "mean": self.mean, "std": self.std, "runs": self.runs,
                "queries": self.queries, "counts": self.counts}


@dataclass
class PassRate:
    method: str
    rounds: int
    missing: str
    groups: list[GroupScore]
    average: GroupScore | None
    outcomes: dict[str, list[Outcome]]
    problems: list[str]


def precheck(answer: Answer) -> str | None:
    """Why ``answer`` is Unsolved without a judge, or None when the judge must decide.

    As in the original: the last tool call on the answer's path must be ``Finish``
    (assistant text after it changes nothing), and give-up and emptiness are read from
    the final answer, not from the tree. Two deliberate differences (docs/eval.md):
    when the final answer is the Finish call's JSON arguments, its ``return_type`` says
    whether the agent gave up (the phrase inside the answer's text does not), and an
    answer whose text is blank is Unsolved even when its JSON wrapper is not.
    """
    last = last_step(answer)
    if last is None:
        return "empty answer tree"
    final_call = last_tool_step(answer)
    if final_call is not None and step_name(final_call) == FINISH:
        return_type, text = parse_finish(answer.final_answer)
        if return_type == GIVE_UP:
            return "gave up (give_up_and_restart)"
        if not text.strip():
            return "empty final answer"
        return None
    if answer.finish_optional and last.get("role") == "assistant" and answer.final_answer.strip():
        return None  # an agent without Finish ends with its last message
    return "last step is not a Finish call"


def judge_answer(judge: Judge, answer: Answer, r: int) -> tuple[str | None, str]:
    """(label, reason) of one round: the final answer first, the whole trace if Unsure."""
    first = judge.check_answer_status(answer.query, answer.final_answer, qid=answer.query_id, round=r)
    if first.status != "ok":
        return None, first.reason
    if first.label != "Unsure":
        return first.label, first.reason
    second = judge.parse_answer_status(answer.query, json.dumps(answer.judge_view()), qid=answer.query_id, round=r)
    if second.status != "ok":
        return None, second.reason
    return second.label, second.reason


def collect(answers: AnswerSet, ids: dict[str, list[str]], judge: Judge, *, rounds: int,
            warn: Callable[[str], None], concurrency: int = DEFAULT_CONCURRENCY,
            progress: Progress | None = None, progress_started: bool = False,
            detail: Callable[[str], None] | None = None) -> dict[str, list[Outcome]]:
    """Every query's outcome per round, judging only where the rules leave it open."""
    outcomes = plan(answers, ids, rounds=rounds, warn=warn, detail=detail)
    todo = [o for group in outcomes.values() for o in group if o.judged]
    progress = progress or Progress()
    if not progress_started:
        progress.start(len(todo) * rounds)

    def work(outcome: Outcome, r: int) -> tuple[str | None, str]:
        assert outcome.answer is not None
        return judge_answer(judge, outcome.answer, r)

    results = run_rounds(todo, rounds, work, concurrency=concurrency, progress=progress)
    for r, round_results in enumerate(results):
        for outcome, (label, reason) in zip(todo, round_results):
            outcome.labels[r] = label
            outcome.reasons[r] = reason
            if label is None:
                warn(f"query {outcome.qid} ({outcome.group}), round {r}: unscored: {reason}")
    return outcomes


def plan(answers: AnswerSet, ids: dict[str, list[str]], *, rounds: int,
         warn: Callable[[str], None], detail: Callable[[str], None] | None = None) -> dict[str, list[Outcome]]:
    """Outcomes with the no-judge rules applied; ``judged`` marks those left to the judge.
    Per-id notes (an id without an answer) go to ``detail`` when given, else to ``warn``."""
    detail = detail or warn
    for message in answers.problems:
        warn(message)
    outcomes: dict[str, list[Outcome]] = {}
    only_group = len(ids) == 1
    # Answers no group asks for are reported once per answer source.
    pools: dict[int, tuple[dict[str, Answer | Problem], set[str], list[str]]] = {}
    for group, qids in ids.items():
        pool = answers.for_group(group, only_group=only_group)
        entry = pools.setdefault(id(pool), (pool, set(), []))
        entry[1].update(qids)
        entry[2].append(group)
    for pool, wanted, names in pools.values():
        for qid in pool:
            if qid not in wanted:
                warn(f"query {qid}: answer for an id not in the ids of {', '.join(names)}; ignored")
    for group, qids in ids.items():
        pool = answers.for_group(group, only_group=only_group)
        rows: list[Outcome] = []
        for qid in qids:
            item = pool.get(qid)
            if item is None:
                rows.append(Outcome(group, qid, None, [None] * rounds, ["no answer"] * rounds, missing="no answer"))
                detail(f"query {qid} ({group}): no answer")
            elif isinstance(item, Problem):
                rows.append(Outcome(group, qid, None, [None] * rounds, [item.reason] * rounds, missing=item.reason))
                detail(str(item) if item.where else f"query {qid} ({group}): {item.reason}")
            else:
                reason = precheck(item)
                if reason:
                    rows.append(Outcome(group, qid, item, ["Unsolved"] * rounds, [reason] * rounds))
                else:
                    rows.append(Outcome(group, qid, item, [None] * rounds, [""] * rounds, judged=True))
        outcomes[group] = rows
    return outcomes


def score(outcomes: dict[str, list[Outcome]], *, rounds: int,
          missing: str) -> tuple[list[GroupScore], GroupScore | None]:
    """Per group scores and their average (mean over groups, round by round)."""
    check_options(rounds, missing)
    groups: list[GroupScore] = []
    for group, rows in outcomes.items():
        counted = [o for o in rows if not (o.missing and missing == "skip")]
        runs: list[float | None] = []
        for r in range(rounds):
            values = [v for o in counted if (v := o.round_score(r)) is not None]
            runs.append(statistics.fmean(values) if values else None)
        counts = {k: 0 for k in ("Solved", "Unsure", "Unsolved", "unscored", "missing", "no_judge")}
        for o in rows:
            if o.missing:
                counts["missing"] += 1
                continue
            counts["no_judge"] += not o.judged
            for r in range(rounds):
                counts[o.labels[r] or "unscored"] += 1
        groups.append(GroupScore(group, runs, len(counted), counts))
    if not groups:
        return groups, None
    averaged: list[float | None] = []
    for r in range(rounds):
        known = [v for g in groups if (v := g.runs[r]) is not None]
        averaged.append(statistics.fmean(known) if len(known) == len(groups) else None)
    totals = {k: sum(g.counts[k] for g in groups) for k in groups[0].counts}
    return groups, GroupScore(AVERAGE, averaged, sum(g.queries for g in groups), totals)


def pass_rate(answers: AnswerSet, ids: dict[str, list[str]], judge: Judge, *, method: str, rounds: int = 3,
              missing: str = "unsolved", warn: Callable[[str], None] = lambda _m: None,
              concurrency: int = DEFAULT_CONCURRENCY, progress: Progress | None = None,
              progress_started: bool = False) -> PassRate:
    """SoPR of one method over the groups of ``ids``."""
    check_options(rounds, missing)
    notes = Notes(warn)
    outcomes = collect(answers, ids, judge, rounds=rounds, warn=notes, concurrency=concurrency, progress=progress,
                       progress_started=progress_started, detail=notes.record)
    outcomes = answered_groups(outcomes, missing, notes)
    groups, average = score(outcomes, rounds=rounds, missing=missing)
    return PassRate(method, rounds, missing, groups, average, outcomes, notes.messages)


def pass_rate_trials(trials: list[AnswerSet], ids: dict[str, list[str]], judge: Judge, *, method: str,
                     rounds: int = 3, missing: str = "unsolved", warn: Callable[[str], None] = lambda _m: None,
                     concurrency: int = DEFAULT_CONCURRENCY, progress: Progress | None = None) -> list[PassRate]:
    """One pass-rate run per trial (the same answers judged again the same way), in order.

    The judge and its log are shared: a judgment of an answer that is identical in two
    trials is made once. Warnings name their trial."""
    check_options(rounds, missing)
    progress = progress or Progress()
    def quiet(_message: str) -> None:
        pass

    progress.start(rounds * sum(o.judged for answers in trials
                                for rows in plan(answers, ids, rounds=rounds, warn=quiet).values() for o in rows))
    runs = []
    for i, answers in enumerate(trials, 1):
        def note(message: str, i: int = i) -> None:
            warn(f"trial {i}: {message}")
        try:
            runs.append(pass_rate(answers, ids, judge, method=method, rounds=rounds, missing=missing, warn=note,
                                  concurrency=concurrency, progress=progress, progress_started=True))
        except InputError as exc:
            raise InputError(f"trial {i}: {exc}") from exc
    return runs


def answered_groups(outcomes: dict[str, list[Outcome]], missing: str,
                    warn: Callable[[str], None]) -> dict[str, list[Outcome]]:
    """The groups that have at least one answer, with one line per group about the ids
    that have none (the ids themselves are in the summary); a group without any answer
    is not evaluated at all, rather than scored 0."""
    kept: dict[str, list[Outcome]] = {}
    for group, rows in outcomes.items():
        absent = sum(1 for o in rows if o.missing)
        if rows and absent == len(rows):
            warn(f"{group}: none of its {len(rows)} ids has an answer; group not evaluated")
            continue
        if absent:
            counted = "left out (--missing skip)" if missing == "skip" else "counted as Unsolved"
            warn(f"{group}: {absent} of {len(rows)} ids have no usable answer, {counted}")
        kept[group] = rows
    if outcomes and not kept:
        raise InputError(f"none of the ids of {', '.join(outcomes)} has an answer: nothing to evaluate "
                         "(check --answers against --ids)")
    return kept


def check_options(rounds: int, missing: str) -> None:
    if rounds < 1:
        raise ValueError("rounds must be at least 1")
    if missing not in MISSING_POLICIES:
        raise ValueError(f"missing must be one of {MISSING_POLICIES}, not {missing!r}")


class Notes:
    """A run's warnings: passed on as they come, and kept for its summary."""

    def __init__(self, forward: Callable[[str], None]) -> None:
        self.forward = forward
        self.messages: list[str] = []

    def __call__(self, message: str) -> None:
        self.messages.append(message)
        self.forward(message)

    def record(self, message: str) -> None:
        """Kept for the summary only, not passed on (per-id details)."""
        self.messages.append(message)
