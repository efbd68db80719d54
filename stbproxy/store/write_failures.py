"""Writes the store refused: counted, logged without flooding, and kept where ``stats`` finds them.

A full disk makes RocksDB refuse every write until it is reopened, so the count of failed
writes cannot go into the store itself. It goes to a small status file in the store's
folder, allocated when the proxy starts and afterwards overwritten in place (which needs
no new disk blocks), where ``stbproxy stats`` reads it. The log gets the first failure at
once, then at most one line per LOG_INTERVAL seconds with the count of the ones between.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any, Callable

log = logging.getLogger("stbproxy")

STATUS_FILE = "stbproxy-write-failures.json"
STATUS_SIZE = 4096  # one block, allocated up front
LOG_INTERVAL = 10.0
_MAX_ERROR_CHARS = 1000


def status_path(store: str | os.PathLike[str]) -> Path:
    return Path(store) / STATUS_FILE


def read_status(store: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The failed-writes record of a store, or None when no write ever failed or it cannot be read."""
    try:
        status = json.loads(status_path(store).read_bytes())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) and status.get("failed_writes") else None


class WriteFailures:
    """Counts the failed writes of one running proxy (and of the store, across runs)."""

    def __init__(self, status_file: Path | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.count = 0  # this run
        self.total = 0  # this store, every run
        self.last_error = ""
        self.last_at: float | None = None
        self._unlogged = 0
        self._quiet_until = float("-inf")
        self._fd: int | None = None
        if status_file is not None:
            self._open(status_file)

    def record(self, what: str, error: str) -> None:
        """One write that failed: ``what`` was being stored (a redacted request line)."""
        self.count += 1
        self.total += 1
        self.last_error = f"{what}: {error}"[:_MAX_ERROR_CHARS]
        self.last_at = time.time()
        now = self.clock()
        if now < self._quiet_until:
            self._unlogged += 1
        else:
            self._log_pending()
            log.error("could not store %s: %s (further failures are logged every %g s with their count)",
                      what, error, LOG_INTERVAL)
            self._quiet_until = now + LOG_INTERVAL
        self._persist()

    def _log_pending(self) -> None:
        if self._unlogged:
            log.error("%d more writes failed since the line above; the last: %s", self._unlogged, self.last_error)
            self._unlogged = 0

    def close(self) -> None:
        """Log what is still unlogged, and the run's total, and release the status file."""
        self._log_pending()
        if self.count:
            log.error("%d writes failed during this run: the store is missing those answers "
                      "('stbproxy stats' shows the count)", self.count)
        if self._fd is not None:
            self._persist()
            os.close(self._fd)
            self._fd = None

    # the status file ----------------------------------------------------------------------
    def _open(self, path: Path) -> None:
        previous = read_status(path.parent) or {}
        self.total = int(previous.get("failed_writes") or 0)
        self.last_error = str(previous.get("last_error") or "")
        self.last_at = previous.get("last_failure_at")
        try:
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            self._persist()
            os.fsync(self._fd)  # the block is allocated now, while there is room
        except OSError as exc:
            log.warning("cannot keep the failed-writes count in %s: %s", path, exc)
            if self._fd is not None:
                os.close(self._fd)
            self._fd = None

    def _persist(self) -> None:
        if self._fd is None:
            return
        document = {"failed_writes": self.total, "failed_this_run": self.count,
                    "last_failure_at": self.last_at, "last_error": self.last_error}
        data = json.dumps(document).encode()
        if len(data) > STATUS_SIZE:
            document["last_error"] = self.last_error[:200]
            data = json.dumps(document).encode()
        try:
            os.pwrite(self._fd, data.ljust(STATUS_SIZE), 0)  # JSON followed by blanks: still JSON
        except OSError:
            pass  # the count stays in memory, in the log and in the shutdown summary
