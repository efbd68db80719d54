"""What ``stbproxy stats`` counts in the embedded store: entries by source and host, logged
exchanges by kind, failed answers, chosen meta facts, damaged records and the size on disk
(``StoreStats``, counted by ``count_records``)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable
from urllib.parse import urlsplit

from stbproxy.store.folder import directory_size
from stbproxy.store.key_layout import ENTRY_PREFIXES, LOG_PREFIX
from stbproxy.store.record_format import decode_head


@dataclass
class StoreStats:
    entries: int = 0
    damaged: int = 0
    size_bytes: int = 0
    by_source: Counter[str] = field(default_factory=Counter)
    by_host: Counter[str] = field(default_factory=Counter)
    logged: Counter[str] = field(default_factory=Counter)  # log/<kind>/...: kept, never served
    meta: dict[str, Counter[str]] = field(default_factory=dict)  # value counts of chosen meta keys
    failed_by_source: Counter[str] = field(default_factory=Counter)  # entries that are failed answers, by origin
    imported_failures: Counter[str] = field(default_factory=Counter)  # imported failed answers, by failure kind
    sums: Counter[str] = field(default_factory=Counter)  # totals of chosen numeric meta keys

    def to_dict(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "damaged": self.damaged,
            "size_bytes": self.size_bytes,
            "by_source": dict(self.by_source.most_common()),
            "by_host": dict(self.by_host.most_common()),
            "logged": dict(self.logged.most_common()),
            "failed_by_source": dict(self.failed_by_source.most_common()),
            "imported_failures": dict(self.imported_failures.most_common()),
            **{name: dict(counter.most_common()) for name, counter in self.meta.items()},
            **dict(self.sums),
        }


def count_records(path: Path, records: Callable[[str], Iterable[tuple[str, bytes]]], *,
                  meta_fields: tuple[str, ...] = (), sum_fields: tuple[str, ...] = ()) -> StoreStats:
    """The stats of the store at ``path`` whose (key, stored bytes) under a prefix are
    ``records(prefix)``: counts by source and host, logged records by kind, and chosen meta
    facts (``meta_fields``: counts of their values; ``sum_fields``: their totals), over both
    cache entries and logged records; imported entries' facts apart (failed answers by
    kind), since they are not this proxy's calls."""
    result = StoreStats(size_bytes=directory_size(path))
    result.meta = {name: Counter[str]() for name in meta_fields}
    result.sums = Counter({name: 0 for name in sum_fields})
    for prefix in (*ENTRY_PREFIXES, LOG_PREFIX):
        for key, value in records(prefix):
            try:
                head, _ = decode_head(value)
            except ValueError:
                result.damaged += 1
                continue
            if prefix == LOG_PREFIX:
                result.logged[key.split("/", 2)[1]] += 1
            else:
                result.entries += 1
                result.by_source[head.get("source", "?")] += 1
                result.by_host[_host_of(head["request"]["url"])] += 1
            meta = head.get("meta") or {}
            if prefix != LOG_PREFIX and meta.get("failure", "success") != "success":
                result.failed_by_source[head.get("source", "?")] += 1
            if head.get("source") == "imported":
                # Another system's answers (StableToolBench's cache): not this proxy's
                # calls, so counted apart from its facts.
                if "failure" in meta:
                    result.imported_failures[str(meta["failure"])] += 1
                continue
            for name in meta_fields:
                if name in meta:
                    result.meta[name][str(meta[name])] += 1
            for name in sum_fields:
                if isinstance(meta.get(name), (int, float)):
                    result.sums[name] += meta[name]
    return result


def _host_of(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "?").lower()
    except ValueError:
        return "?"
