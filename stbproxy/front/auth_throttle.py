"""Slowing down repeated wrong proxy credentials, per client address.

A proxy that listens beyond loopback is protected by one password (--proxy-auth). After a
few wrong attempts from one address, every answer to that address's credentialed requests
is held back, one at a time, for a delay that doubles with each further failure: guesses
sent in parallel then queue behind each other, so an address can test only a handful of
passwords a minute. A correct attempt waits its turn once and clears the record; failures
are forgotten after a quiet period. No I/O; the caller only awaits ``hold``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Callable

FREE_FAILURES = 3  # typing mistakes cost nothing
FIRST_DELAY = 0.25  # seconds, doubling per further failure
MAX_DELAY = 8.0
FORGET_AFTER = 600.0  # seconds without a failure
MAX_ADDRESSES = 10_000


@dataclass
class _Record:
    failures: int = 0
    last: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class AuthThrottle:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._records: dict[str, _Record] = {}

    def delay(self, failures: int) -> float:
        """How long an answer is held after ``failures`` wrong attempts."""
        if failures <= FREE_FAILURES:
            return 0.0
        return min(MAX_DELAY, FIRST_DELAY * 2 ** (failures - FREE_FAILURES - 1))

    async def hold(self, address: str, failed: bool) -> float:
        """Record an attempt from ``address``; wait as long as its record asks. Returns the wait."""
        now = self.clock()
        record = self._records.get(address)
        if record is not None and now - record.last > FORGET_AFTER:
            record.failures = 0
        if record is None:
            if not failed:
                return 0.0  # the common case: a good client, never seen failing
            self._forget_old(now)
            record = self._records[address] = _Record()
        if failed:
            record.failures += 1
            record.last = now
        wait = self.delay(record.failures)
        if wait:
            async with record.lock:  # one held answer at a time per address
                await asyncio.sleep(wait)
        if not failed:
            self._records.pop(address, None)
        return wait

    def _forget_old(self, now: float) -> None:
        if len(self._records) < MAX_ADDRESSES:
            return
        for address in [a for a, r in self._records.items() if now - r.last > FORGET_AFTER]:
            del self._records[address]
        if len(self._records) >= MAX_ADDRESSES:  # still full: drop the oldest half
            for address in sorted(self._records, key=lambda a: self._records[a].last)[: MAX_ADDRESSES // 2]:
                del self._records[address]
