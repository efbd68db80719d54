"""Bulk copies between the local store and the shared tier (``stbproxy sync``, imports).

Both directions copy the stored bytes as they are, under the same keys, and leave what
the other side already holds alone, so running them twice copies nothing. Values that
do not decode are counted and never copied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, TypeVar

from stbproxy.errors import StoreError
from stbproxy.store.embedded import Store
from stbproxy.store.key_layout import ENTRY_PREFIXES, LOG_PREFIX
from stbproxy.store.record_format import decode_exchange
from stbproxy.store.shared_bulk import SharedBulk
from stbproxy.store.shared_client import CATALOG_KEY

COPIED_PREFIXES = (*ENTRY_PREFIXES, LOG_PREFIX)  # cache entries and logged records; sessions stay put
BATCH = 1000
T = TypeVar("T")


@dataclass
class SyncSummary:
    seen: int = 0  # keys looked at on the source side
    copied: int = 0
    already: int = 0  # the other side had them
    damaged: list[str] = field(default_factory=list)
    private: int = 0  # answers kept to their caller: never pushed

    def line(self, direction: str) -> str:
        private = f", {self.private} private (kept local)" if self.private else ""
        return (f"{direction}: {self.seen} records looked at, {self.copied} copied, {self.already} already there, "
                f"{len(self.damaged)} damaged (not copied){private}")


def batches(items: Iterable[T], size: int = BATCH) -> Iterator[list[T]]:
    batch: list[T] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def local_count(local: Store) -> int:
    return sum(1 for prefix in COPIED_PREFIXES for _ in local.keys(prefix))


def push(local: Store, shared: SharedBulk, progress: Callable[[int], None] = lambda n: None) -> SyncSummary:
    """Copy every local record the shared tier lacks into it (pipelined, SET NX); answers
    kept private to their caller (an MCP call's with credentials) stay local."""
    summary = SyncSummary()
    offered = 0
    with shared.writer() as writer:  # reading and checking here overlaps the writes' round trips
        for prefix in COPIED_PREFIXES:
            for batch in batches(local.records(prefix)):
                good = _decodable(batch, summary.damaged, summary)
                writer.put(good)
                offered += len(good)
                summary.seen += len(batch)
                progress(len(batch))
    summary.copied = writer.added
    summary.already = offered - writer.added
    return summary


def pull(local: Store, shared: SharedBulk, progress: Callable[[int], None] = lambda n: None) -> SyncSummary:
    """Copy every shared record the local store lacks into it (one atomic batch per 1,000)."""
    summary = SyncSummary()
    for batch in batches(shared.keys(COPIED_PREFIXES)):
        here = local.existing(batch)
        missing = [key for key in batch if key not in here]
        found = [(key, value) for key, value in zip(missing, shared.get_many(missing))
                 if value is not None]  # None: deleted since the scan
        fresh = _decodable(found, summary.damaged)
        local.put_encoded_many(fresh)
        summary.seen += len(batch)
        summary.copied += len(fresh)
        summary.already += len(here)
        progress(len(batch))
    return summary


def push_catalog(shared: SharedBulk, document: bytes) -> None:
    shared.put_document(CATALOG_KEY, document)


def shared_catalog(shared: SharedBulk) -> bytes | None:
    return shared.get_document(CATALOG_KEY)


def _decodable(records: list[tuple[str, bytes]], damaged: list[str],
               pushing: SyncSummary | None = None) -> list[tuple[str, bytes]]:
    """The records that decode as stored exchanges; each one that does not is noted in
    ``damaged``. When ``pushing``, private records are left out and counted there."""
    good = []
    for key, value in records:
        try:
            exchange = decode_exchange(key, value)
        except StoreError as exc:
            damaged.append(str(exc))
            continue
        if pushing is not None and exchange.meta.get("private"):
            pushing.private += 1
            continue
        good.append((key, value))
    return good
