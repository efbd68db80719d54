"""Which stored answers ``stbproxy forget`` removes: a selection over entries. Pure.

Every criterion that is given must hold (source AND host AND ...); the values of one
criterion are alternatives (``--host a --host b``: either host). An empty selection is
refused by the command, never read as "everything".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fnmatch import fnmatchcase

from stbproxy.errors import ConfigError
from stbproxy.models import Exchange

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|d|w)?\s*$", re.IGNORECASE)
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_GLOB = re.compile(r"[*?\[]")


def parse_age(text: str) -> float:
    """Seconds in ``30s``, ``15m``, ``2h``, ``7d``, ``1w`` (a bare number is seconds)."""
    match = _DURATION.match(text)
    if not match:
        raise ConfigError(f"{text!r} is not an age such as 30m, 12h or 7d")
    return float(match.group(1)) * _UNIT_SECONDS[(match.group(2) or "s").lower()]


def _prefix_or_glob(value: str, pattern: str) -> bool:
    if _GLOB.search(pattern):
        return fnmatchcase(value, pattern)
    return value.startswith(pattern)


@dataclass(frozen=True)
class Selection:
    sources: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()  # globs, matched against the lower-cased host
    apis: tuple[str, ...] = ()  # "Category", "Category/tool", "Category/tool/api" prefixes, or globs
    keys: tuple[str, ...] = ()  # store-key prefixes or globs
    faulted: bool = False  # only answers made up because a fault was injected
    older_than: float | None = None  # seconds
    newer_than: float | None = None
    session_keys: frozenset[str] | None = None  # the entries one session's log points at

    def is_empty(self) -> bool:
        return not (self.sources or self.hosts or self.apis or self.keys or self.faulted
                    or self.older_than is not None or self.newer_than is not None or self.session_keys is not None)

    def matches(self, exchange: Exchange, now: float) -> bool:
        if self.sources and exchange.source.value not in self.sources:
            return False
        if self.faulted and not exchange.meta.get("fault"):
            return False
        if self.hosts and not any(fnmatchcase(exchange.request.host, h.lower()) for h in self.hosts):
            return False
        if self.apis and (exchange.api is None or not any(_prefix_or_glob(str(exchange.api), a) for a in self.apis)):
            return False
        if self.keys and not any(_prefix_or_glob(exchange.key, k) for k in self.keys):
            return False
        age = now - exchange.stored_at
        if self.older_than is not None and age < self.older_than:
            return False
        if self.newer_than is not None and age > self.newer_than:
            return False
        if self.session_keys is not None and exchange.key not in self.session_keys:
            return False
        return True
