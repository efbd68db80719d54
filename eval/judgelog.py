"""The run's judge log: one JSON line per judge call, re-used by later runs.

Every judgment is appended (and flushed) as soon as it is made, so an interrupted run
keeps what it paid for and the next run on the same folder resumes from there. A
logged judgment is found again by its key, a digest of everything that determines the
call (function, model, temperature, prompt, schema, round), so a changed prompt or
model never re-uses a stale label. Transport errors are logged for the record but
never re-used: the next run asks again.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Iterable

LOG_NAME = "judgments.jsonl"
REUSABLE = frozenset({"ok", "unscored"})


class JudgeLog:
    def __init__(self, path: str | Path, *, reuse: Iterable[str | Path] = ()) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._known: dict[str, dict[str, Any]] = {}
        self._fh: Any = None
        self.skipped_lines = 0
        for other in reuse:
            self._load(Path(other))
        self._load(self.path)  # last, so this run's own judgments win

    def _load(self, path: Path) -> None:
        if not path.exists():
            return
        with path.open("r", encoding="utf-8") as fh:
            for line in fh:
                try:
                    record = json.loads(line)
                except ValueError:
                    self.skipped_lines += 1  # a line cut short by an interrupted run
                    continue
                if isinstance(record, dict) and record.get("status") in REUSABLE and "key" in record:
                    self._known[record["key"]] = record

    def get(self, key: str) -> dict[str, Any] | None:
        return self._known.get(key)

    def __len__(self) -> int:
        return len(self._known)

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False) + "\n"
        with self._lock:
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                needs_newline = (self.path.exists() and self.path.stat().st_size > 0
                                 and not _ends_with_newline(self.path))
                self._fh = self.path.open("a", encoding="utf-8")
                if needs_newline:
                    self._fh.write("\n")  # seal a line an interrupted run left open
            self._fh.write(line)
            self._fh.flush()
            if record.get("status") in REUSABLE:
                self._known[record["key"]] = record

    def close(self) -> None:
        with self._lock:
            if self._fh is not None:
                self._fh.close()
                self._fh = None

    def __enter__(self) -> JudgeLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as fh:
        fh.seek(-1, 2)
        return fh.read(1) == b"\n"


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Every well-formed record of a log, in order (for reports and tests)."""
    out: list[dict[str, Any]] = []
    path = Path(path)
    if not path.exists():
        return out
    with path.open("r", encoding="utf-8") as fh:
        for line in fh:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
