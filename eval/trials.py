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
Pure: the verdicts come from the pass-rate evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb
from typing import Iterable, Mapping

from .errors import InputError


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


def trial_scores(passes: Mapping[str, list[bool | None]]) -> TrialScores:
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
