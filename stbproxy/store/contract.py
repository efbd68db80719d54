"""What the engine asks of a store (EngineStore), written down once.

The embedded store (embedded.Store), the tiered store (tiered.TieredStore: local plus a
shared tier), a reader worker's view (workers/reader_engine.ReaderStore) and a cassette
played in memory (cassettes/store.CassetteStore) all answer it. ``OneTier`` gives the
parts a store with nothing behind it answers the same way. A type checker holds each of
them to it (tests/store/test_store_contract.py runs mypy on each as an EngineStore).
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable, Iterator, Protocol, TypeVar

from stbproxy.models import Exchange

T = TypeVar("T")


class EngineStore(Protocol):
    """The store an Engine answers from and writes to."""

    # Whether the engine may answer a key again from the hits it keeps in memory: False when
    # every read counts (a cassette played in order reports what was played).
    reads_cacheable: bool

    def get(self, key: str) -> Exchange | None:
        """The entry under ``key`` in this process's store, or None."""

    def put(self, exchange: Exchange) -> None:
        """Keep ``exchange`` under its key (raises StoreError when the write is refused)."""

    def scan(self, prefix: str) -> Iterator[Exchange]:
        """The entries whose keys start with ``prefix``, in key order (a miss's closest
        request, a simulator's examples)."""

    async def fetch(self, key: str) -> Exchange | None:
        """After a local miss: the entry from a tier behind this one, or None."""

    async def single_flight(self, key: str, work: Callable[[], Awaitable[T]]) -> T | Exchange:
        """``work``'s answer to a miss, or the entry another proxy sharing the tier stored for
        ``key`` meanwhile: one real call per key across a fleet."""

    def append_session(self, name: str, record: dict[str, Any]) -> int:
        """Add ``record`` to session ``name``'s log; its sequence number (0 when another
        process numbers it)."""

    def session_records(self, name: str) -> Iterator[dict[str, Any]]:
        """Session ``name``'s records in order (a fork or an ordered replay reads them)."""

    def miss_note(self, key: str) -> str | None:
        """What the store can say of a miss on ``key`` (a cassette: every recorded answer was
        played already), or None."""


class OneTier:
    """The parts of EngineStore a store with nothing behind it answers alike: nothing more to
    fetch after a local miss, a miss is this process's own to answer, every read may be
    remembered, and a miss has nothing more to say."""

    reads_cacheable = True

    async def fetch(self, key: str) -> Exchange | None:
        return None

    async def single_flight(self, key: str, work: Callable[[], Awaitable[T]]) -> T | Exchange:
        return await work()

    def miss_note(self, key: str) -> str | None:
        return None

