"""Scoring execution answers: ToolBench (SambaNova)'s comparison, and the sums per task.

An answer is compared by its top-level items: a list becomes a dict keyed by index
(``"0"``, ``"1"``, ...), a scalar is one item, and the profile's dropped fields are left
out. Two items are equal when their JSON is (``1`` and ``1.0`` differ, as do ``true`` and
``1``). Over the items equal in the prediction's answer and a label's:
precision = equal / prediction's items, recall = equal / label's items, F1 their harmonic
mean (two empty answers are equal: 1, 1, 1). The label with the best F1 counts (the first
on a tie), and an item succeeds when that F1 is 1.

Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable

# An item's status, in the order tables list them.
SUCCESS, DIFFERS, CRASHED, NOT_EXECUTABLE, MISSED, UNSCORED = (
    "success", "differs", "crashed", "not_executable", "missed", "unscored")
STATUSES = (SUCCESS, DIFFERS, CRASHED, NOT_EXECUTABLE, MISSED, UNSCORED)
NO_ANSWER = (CRASHED, NOT_EXECUTABLE, MISSED)  # the prediction gave nothing to compare: counted as crashed
SCALAR = "(value)"  # the one item of an answer that is neither an object nor a list


def items_of(answer: Any, dropped: frozenset[str] = frozenset()) -> dict[str, Any]:
    """The top-level items an answer is compared by."""
    if isinstance(answer, list):
        items = {str(i): value for i, value in enumerate(answer)}
    elif isinstance(answer, dict):
        items = {str(k): v for k, v in answer.items()}
    else:
        items = {SCALAR: answer}
    return {k: v for k, v in items.items() if k not in dropped}


def _text(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True)
class Comparison:
    precision: float
    recall: float
    f1: float
    equal: int
    differing: tuple[str, ...]  # items not equal: in one answer only, or with another value


def compare(prediction: dict[str, Any], label: dict[str, Any]) -> Comparison:
    if not prediction and not label:
        return Comparison(1.0, 1.0, 1.0, 0, ())
    equal = [k for k in prediction if k in label and _text(prediction[k]) == _text(label[k])]
    differing = tuple([k for k in prediction if k not in equal] + [k for k in label if k not in prediction])
    precision = len(equal) / len(prediction) if prediction else 0.0
    recall = len(equal) / len(label) if label else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return Comparison(precision, recall, f1, len(equal), differing)


def best(prediction: dict[str, Any], labels: Iterable[dict[str, Any] | None]) -> tuple[int | None, Comparison | None]:
    """The index of the label compared best (its F1 highest, the first on a tie), skipping
    labels without an answer (None), and that comparison; (None, None) when none has one."""
    found: tuple[int | None, Comparison | None] = (None, None)
    for index, label in enumerate(labels):
        if label is None:
            continue
        comparison = compare(prediction, label)
        if found[1] is None or comparison.f1 > found[1].f1:
            found = (index, comparison)
    return found


@dataclass
class Tally:
    """The sums of one task (or of all): counts by status, and the scores' sums over the
    scored items (those with a label answer)."""

    name: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    precision: float = 0.0
    recall: float = 0.0
    f1: float = 0.0

    def add(self, status: str, precision: float = 0.0, recall: float = 0.0, f1: float = 0.0) -> None:
        self.counts[status] += 1
        if status != UNSCORED:
            self.precision += precision
            self.recall += recall
            self.f1 += f1

    @property
    def items(self) -> int:
        return sum(self.counts.values())

    @property
    def scored(self) -> int:
        return self.items - self.counts[UNSCORED]

    def rate(self, value: float) -> float | None:
        return 100 * value / self.scored if self.scored else None

    def as_dict(self) -> dict[str, Any]:
        crashed = sum(self.counts[s] for s in NO_ANSWER)
        return {"task": self.name, "items": self.items, "scored": self.scored, **self.counts,
                "success_rate": self.rate(self.counts[SUCCESS]), "crash_rate": self.rate(crashed),
                "precision": self.rate(self.precision), "recall": self.rate(self.recall), "f1": self.rate(self.f1)}
