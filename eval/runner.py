"""Running judge work concurrently, round by round, with progress.

Judge calls wait on the network, so threads are enough; the openai client is shared
between them. Rounds run one after another (all queries of round 0, then round 1, ...):
a query's round r judgment is then always made after its round r-1 judgment, which
keeps logs readable and lets a scripted judge reason about rounds.
"""

from __future__ import annotations

from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from typing import Callable, Sequence, TypeVar

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_CONCURRENCY = 16


class Progress:
    """Progress of a run; the CLI draws it, library callers may ignore it."""

    def start(self, total: int) -> None:
        """Announce the number of steps of the whole run."""

    def step(self, n: int = 1) -> None:
        """Count ``n`` finished steps."""


def run_rounds(tasks: Sequence[T], rounds: int, work: Callable[[T, int], R], *,
               concurrency: int = DEFAULT_CONCURRENCY, progress: Progress | None = None) -> list[list[R]]:
    """``work(task, r)`` for every task and round; results indexed ``[round][task]``.

    A failing ``work`` call stops the run: pending calls are cancelled and the error is
    raised (what was judged so far is already in the log).
    """
    progress = progress or Progress()
    results: list[list[R]] = []
    if not tasks or rounds <= 0:
        return [[] for _ in range(max(rounds, 0))]

    def counted(task: T, r: int) -> R:
        # Counted inside the job, not in a done-callback: callbacks may run after wait()
        # returns, and the bar would move after the run had finished.
        try:
            return work(task, r)
        finally:
            progress.step()

    pool = ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="stbeval-judge")
    try:
        for r in range(rounds):
            futures: list[Future[R]] = [pool.submit(counted, task, r) for task in tasks]
            done, _ = wait(futures, return_when=FIRST_EXCEPTION)
            error = next((e for f in done if (e := f.exception()) is not None), None)
            if error is not None:
                raise error
            results.append([f.result() for f in futures])
    finally:
        # On an error or Ctrl-C, drop what has not started; running calls finish alone.
        pool.shutdown(wait=False, cancel_futures=True)
    return results
