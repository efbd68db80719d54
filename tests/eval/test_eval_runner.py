"""Rounds run in order, concurrently within a round, with exact progress and failures that stop."""

from __future__ import annotations

import threading
import time

import pytest

from stbeval.runner import Progress, run_rounds


class Count(Progress):
    def __init__(self):
        self.total = None
        self.steps = 0
        self.lock = threading.Lock()

    def start(self, total):
        self.total = total

    def step(self, n=1):
        with self.lock:
            self.steps += n


def test_results_by_round_and_exact_progress():
    seen = []
    lock = threading.Lock()

    def work(task, r):
        time.sleep(0.01 * (task % 3))
        with lock:
            seen.append(r)
        return task * 10 + r

    progress = Count()
    results = run_rounds(list(range(12)), 3, work, concurrency=4, progress=progress)
    assert results == [[t * 10 + r for t in range(12)] for r in range(3)]
    assert progress.steps == 36  # every step counted before run_rounds returns
    assert seen == sorted(seen)  # a round starts only when the previous one is done


def test_a_failing_task_stops_the_run():
    started = []

    def work(task, r):
        started.append((task, r))
        if task == 2:
            raise RuntimeError("boom")
        return task

    with pytest.raises(RuntimeError, match="boom"):
        run_rounds(list(range(5)), 3, work, concurrency=2)
    assert all(r == 0 for _, r in started)  # later rounds never began


def test_nothing_to_do():
    assert run_rounds([], 3, lambda t, r: t) == [[], [], []]
