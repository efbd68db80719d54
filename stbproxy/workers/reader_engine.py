"""A reader worker's calling rules (``serve --workers``): hits from its own read-only view of
the store, everything else from the primary worker, which owns the store's writes.

A reader answers a cache hit itself, exactly as one proxy would, and sends the hit's
session record to the primary (batched, link.py). Whatever may write or call out
goes to the primary as the routed call (or, for passthrough hosts and record mode, the
whole request), where the engine runs it as for its own traffic: so identical misses on
any worker share one real call, and fault decisions, refreshes of simulated answers and
replay misses are the primary's. After a forwarded call the reader catches up with the
store soon, so what the primary stored is served locally from then on. An answer comes back
in the shape its client reads (a /virtual answer object: TrafficKind.client_reply), made by
whichever process ran the calling rules.
"""

from __future__ import annotations

import asyncio
import logging

from stbproxy.engine import Answer, Engine, made
from stbproxy.errors import StoreError
from stbproxy.models import Mode, Request
from stbproxy.store.contract import OneTier
from stbproxy.store.embedded import Store
from stbproxy.traffic.seam import Call
from stbproxy.workers.link import LinkClient

log = logging.getLogger("stbproxy")

CATCH_UP_SECONDS = 1.0  # a reader follows the primary's writes at least this often
CATCH_UP_AFTER_FORWARD = 0.05  # and this soon after a call it forwarded


class ReaderStore(OneTier):
    """The store as a reader sees it: reads from a RocksDB secondary, session records to the
    primary, no other writes (the reader engine forwards every call that writes)."""

    def __init__(self, store: Store, link: LinkClient) -> None:
        self.store = store
        self.link = link
        self._soon: asyncio.TimerHandle | None = None
        self._wake = asyncio.Event()

    def get(self, key: str):
        return self.store.get(key)

    def scan(self, prefix: str):
        return self.store.scan(prefix)

    def session_records(self, name: str):
        return self.store.session_records(name)

    def append_session(self, name: str, record: dict) -> int:
        self.link.session_record(name, record)
        return 0

    def put(self, exchange) -> None:
        raise StoreError("a reader worker does not write to the store")

    def changed(self) -> None:
        """The primary may have stored something: catch up soon."""
        if self._soon is None:
            self._soon = asyncio.get_running_loop().call_later(CATCH_UP_AFTER_FORWARD, self._wake.set)

    async def follow(self) -> None:
        """Catch up with the primary's writes, periodically and when told (on a worker thread:
        RocksDB replays the primary's log)."""
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), CATCH_UP_SECONDS)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            self._soon = None
            try:
                await asyncio.to_thread(self.store.catch_up)
            except StoreError as exc:
                log.warning("stbproxy: this worker could not catch up with the store: %s", exc)

    def close(self) -> None:
        self.store.close()


class ReaderEngine(Engine):
    """Engine for a reader worker: local hits, the rest answered by the primary (``link``)."""

    store: ReaderStore

    def __init__(self, store: ReaderStore, upstream, config, *, link: LinkClient, **parts) -> None:
        super().__init__(store, upstream, config, **parts)
        self.link = link
        # Record and verify modes ask the real API every time, and faults decide before the
        # store: the primary decides all.
        self.local_hits = config.mode in (Mode.VIRTUAL, Mode.REPLAY) and not self.faults

    async def pass_through(self, request: Request, session: str | None) -> Answer:
        return await self._forwarded(self.link.handle(request, session))

    async def answer(self, call: Call, session: str | None = None) -> Answer:
        ref = self.session_of(session)
        call = self.scoped(call, ref)
        if call.streams:  # a server's event stream cannot cross the link: carried from here, never stored
            return await self._run(call, ref, self._passed_on)
        # A session answered from a recording (a fork, ordered replay) keeps its place in one
        # process: the primary's.
        if self.local_hits and not self.playback.involves(ref):
            hit = self.local_hit(call.key)
            if hit is not None and not self.refreshes(hit):
                return await self._run(call, ref, lambda _call: made(hit))
        return await self._forwarded(self.link.answer(call, session))

    async def _forwarded(self, asked) -> Answer:
        answer = await asked
        self.store.changed()
        return answer
