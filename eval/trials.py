"""Repeated trials of the same queries: pass@k and pass^k.

An agent run N times on each query passes some of those trials. Two numbers say how good
and how reliable it is, for each k from 1 to N:

- ``pass@k``: the chance that at least one of k trials drawn from the N passes,
  ``1 - C(n-c, k) / C(n, k)`` for a query with c passes out of n trials;
- ``pass^k`` (tau-bench's reliability measure): the chance that all k of them pass,
  ``C(c, k) / C(n, k)``.

Both are averaged over queries. A trial passes when it is judged Solved, by the majority of
its rounds when the judge was asked several times (more than half; Unsure is not Solved);
a trial none of whose rounds could be scored is left out of its query, never guessed.
The formulas are pure; :func:`repeated` reads the verdicts off the pass-rate runs of the
trials (:func:`stbeval.passrate.pass_rate_trials`) and scores them per group.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from math import comb
from typing import Callable, Iterable, Mapping, Sequence

from .errors import InputError
from .passrate import AVERAGE, GroupScore, Outcome, PassRate

PASSED, FAILED, UNSCORED, MISSING = "passed", "failed", "unscored", "missing"
OVERALL = "Overall"  # pass@k and pass^k over the queries of every group


def trial_passed(labels: Iterable[str | None]) -> bool | None:
    """Whether a trial passed, from its rounds' labels; None when no round was scored."""
    scored = [label for label in labels if label is not None]
    if not scored:
        return None
    return sum(label == "Solved" for label in scored) * 2 > len(scored)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The chance that at least one of k trials of n passes, with c of the n passing."""
    _check(n, c, k)
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """The chance that all k trials of n pass, with c of the n passing."""
    _check(n, c, k)
    return comb(c, k) / comb(n, k)


def _check(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n or not 1 <= k <= n:
        raise InputError(f"pass@k needs 1 <= k <= n and 0 <= c <= n (got n={n}, c={c}, k={k})")


@dataclass(frozen=True)
class TrialScores:
    trials: int  # n: the trials every counted query has
    queries: int
    pass_at: dict[int, float]  # k -> mean pass@k over queries
    pass_hat: dict[int, float]  # k -> mean pass^k over queries

    def to_dict(self) -> dict:
        return {"trials": self.trials, "queries": self.queries,
                "pass@k": {str(k): v for k, v in self.pass_at.items()},
                "pass^k": {str(k): v for k, v in self.pass_hat.items()}}


def trial_scores(passes: Mapping[str, Sequence[bool | None]]) -> TrialScores:
    """pass@k and pass^k for k = 1..n, from each query's trial verdicts (None: not scored).

    Every query must have the same number of scored trials: k ranges over one n."""
    counted = {qid: [p for p in verdicts if p is not None] for qid, verdicts in passes.items()}
    counted = {qid: verdicts for qid, verdicts in counted.items() if verdicts}
    if not counted:
        raise InputError("no query has a scored trial")
    sizes = {len(verdicts) for verdicts in counted.values()}
    if len(sizes) > 1:
        short = sorted(qid for qid, verdicts in counted.items() if len(verdicts) == min(sizes))[:5]
        raise InputError(f"queries have different numbers of scored trials ({', '.join(map(str, sorted(sizes)))}); "
                         f"for example {', '.join(short)} has {min(sizes)}")
    n = sizes.pop()
    ks = range(1, n + 1)
    pass_at = {k: sum(pass_at_k(n, sum(v), k) for v in counted.values()) / len(counted) for k in ks}
    pass_hat = {k: sum(pass_hat_k(n, sum(v), k) for v in counted.values()) / len(counted) for k in ks}
    return TrialScores(n, len(counted), pass_at, pass_hat)


# --- trials of a pass-rate evaluation -------------------------------------------------

@dataclass
class Trials:
    """N pass-rate runs of the same queries, and what they add up to."""

    method: str
    rounds: int
    missing: str
    runs: list[PassRate]  # trial i is runs[i - 1]
    sources: list[str]
    verdicts: dict[str, dict[str, list[str]]]  # group -> qid -> verdict per trial
    scores: dict[str, TrialScores | None]  # per group and OVERALL; None when no query counts
    left_out: dict[str, dict[str, int]]  # per group and OVERALL: queries left out of pass@k, by reason
    groups: list[GroupScore]  # SoPR per group, mean and std over the trials' SoPR
    average: GroupScore | None
    problems: list[str]


def verdict(outcome: Outcome | None) -> str:
    if outcome is None or outcome.missing:
        return MISSING
    passed = trial_passed(outcome.labels)
    return UNSCORED if passed is None else PASSED if passed else FAILED


def trial_verdicts(runs: list[PassRate]) -> dict[str, dict[str, list[str]]]:
    """Each query's verdict in each trial; a group a trial did not evaluate (none of its
    ids answered there) is missing in that trial."""
    groups = list(dict.fromkeys(g for run in runs for g in run.outcomes))
    table: dict[str, dict[str, list[str]]] = {}
    for group in groups:
        by_trial = [{o.qid: o for o in run.outcomes.get(group, [])} for run in runs]
        qids = dict.fromkeys(qid for trial in by_trial for qid in trial)
        table[group] = {qid: [verdict(trial.get(qid)) for trial in by_trial] for qid in qids}
    return table


def countable(rows: Mapping[str, list[str]], missing: str) -> tuple[dict[str, list[bool]], dict[str, int]]:
    """The queries pass@k counts, as pass/fail per trial, and how many were left out why.

    A missing trial fails under ``missing="unsolved"``; under ``"skip"`` its query is left
    out. A query with an unscored trial is left out too: every counted query must have
    all N trials, so that k ranges over the same n for all."""
    kept: dict[str, list[bool]] = {}
    left_out = {MISSING: 0, UNSCORED: 0}
    for qid, row in rows.items():
        why = left_out_why(row, missing)
        if why:
            left_out[why] += 1
        else:
            kept[qid] = [v == PASSED for v in row]
    return kept, left_out


def left_out_why(row: list[str], missing: str) -> str | None:
    """Why pass@k leaves out a query with these verdicts (MISSING, UNSCORED), or None."""
    if missing == "skip" and MISSING in row:
        return MISSING
    if UNSCORED in row:
        return UNSCORED
    return None


def repeated(runs: list[PassRate], sources: list[str], *,
             warn: Callable[[str], None] = lambda _m: None) -> Trials:
    """pass@k and pass^k per group and over all queries, and SoPR across the trials."""
    first = runs[0]
    notes = [f"trial {i}: {m}" for i, run in enumerate(runs, 1) for m in run.problems]

    def note(message: str) -> None:
        notes.append(message)
        warn(message)

    verdicts = trial_verdicts(runs)
    scores: dict[str, TrialScores | None] = {}
    left_out: dict[str, dict[str, int]] = {}
    pooled: dict[str, list[bool]] = {}
    for group, rows in verdicts.items():
        kept, left_out[group] = countable(rows, first.missing)
        scores[group] = trial_scores(kept) if kept else None
        pooled.update({f"{qid} ({group})": passes for qid, passes in kept.items()})
    scores[OVERALL] = trial_scores(pooled) if pooled else None
    left_out[OVERALL] = {k: sum(v[k] for v in left_out.values()) for k in (MISSING, UNSCORED)}
    _warn_left_out(left_out[OVERALL], len(runs), pooled, note)
    groups = [_across_trials(group, [_group(run, group) for run in runs], _counted(runs, group))
              for group in verdicts]
    average = _across_trials(AVERAGE, [run.average for run in runs], sum(g.queries for g in groups)) if groups else None
    return Trials(first.method, first.rounds, first.missing, runs, sources, verdicts, scores, left_out,
                  groups, average, notes)


def _warn_left_out(left: dict[str, int], n: int, counted: Mapping[str, list[bool]],
                   warn: Callable[[str], None]) -> None:
    if left[MISSING]:
        warn(f"pass@k and pass^k: {left[MISSING]} queries without a usable answer in some trial left out "
             "(--missing skip)")
    if left[UNSCORED]:
        warn(f"pass@k and pass^k: {left[UNSCORED]} queries with an unscored trial left out "
             f"(each counted query needs all {n} trials scored)")
    if not counted:
        warn(f"pass@k and pass^k: no query has all {n} trials scored; not computed")


def _group(run: PassRate, name: str) -> GroupScore | None:
    return next((g for g in run.groups if g.group == name), None)


def _counted(runs: list[PassRate], group: str) -> int:
    """Queries the group's SoPR counts in at least one trial (after the missing policy)."""
    return len({o.qid for run in runs for o in run.outcomes.get(group, [])
                if not (o.missing and run.missing == "skip")})


def _across_trials(name: str, per_trial: list[GroupScore | None], queries: int) -> GroupScore:
    """A GroupScore whose runs are the trials: each trial's SoPR (its mean over rounds),
    so mean and std are over trials. Label counts add up over all trials."""
    runs: list[float | None] = []
    counts: dict[str, int] = {}
    for score in per_trial:
        values = [v for v in score.runs if v is not None] if score else []
        runs.append(statistics.fmean(values) if values else None)
        for key, count in (score.counts if score else {}).items():
            counts[key] = counts.get(key, 0) + count
    return GroupScore(name, runs, queries, counts)
