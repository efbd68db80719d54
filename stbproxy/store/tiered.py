"""Two tiers behind one store interface: the embedded store first, a shared server second.

``TieredStore`` is what the engine gets when ``serve --shared URL`` is set: reads go to
the local tier (synchronous, as fast as without a shared tier); on a local miss the
engine awaits ``fetch``, which asks the shared tier and fills the local one with the
same bytes; a miss is run through ``single_flight``, so identical misses on different
proxies make one real call (the others wait, bounded, and serve its answer). Writes go
to both tiers with identical bytes under identical keys.

``TieredReader`` is the commands' view (stats, sessions, export): the local store, then
the shared tier for what the local one lacks.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any, Awaitable, Callable, Iterator, TypeVar

from stbproxy.errors import StoreError
from stbproxy.models import Exchange
from stbproxy.sessions import expand_record
from stbproxy.store.contract import OneTier
from stbproxy.store.embedded import Store
from stbproxy.store.key_layout import ENTRY_PREFIXES
from stbproxy.store.record_format import decode_exchange, encode_exchange
from stbproxy.store.shared_bulk import SharedBulk
from stbproxy.store.shared_tier import NO_LEASE, SharedTier

log = logging.getLogger("stbproxy")

T = TypeVar("T")
POLL_FIRST, POLL_MAX = 0.005, 0.05  # seconds between looks while another proxy holds the lease
REPORTED_DAMAGE = 20  # damaged shared values logged one by one; the rest only counted


class TieredStore(OneTier):
    """The local store plus a shared tier, for one proxy's engine (fetch and single_flight
    reach the tier; the rest of EngineStore is OneTier's)."""

    def __init__(self, local: Store, shared: SharedTier, *, wait_limit: float = 30.0) -> None:
        self.local = local
        self.shared = shared
        self.wait_limit = wait_limit  # longest wait on another proxy's lease (the upstream timeout)

    @property
    def path(self) -> Path:
        return self.local.path

    @property
    def readonly(self) -> bool:
        return self.local.readonly

    # reads ---------------------------------------------------------------------------------------
    def get(self, key: str) -> Exchange | None:
        return self.local.get(key)

    def __contains__(self, key: str) -> bool:
        return key in self.local

    def scan(self, prefix: str) -> Iterator[Exchange]:
        return self.local.scan(prefix)  # examples and closest matches: what this machine has seen

    async def fetch(self, key: str) -> Exchange | None:
        """After a local miss: the shared tier's entry (copied into the local tier), or None."""
        value = await self.shared.get(key)
        if value is None:
            return None
        exchange = self._take(key, value)
        if exchange is not None:
            self.shared.count("shared_hits")
        return exchange

    async def single_flight(self, key: str, work: Callable[[], Awaitable[T]]) -> T | Exchange:
        """``work()``'s result, made by this proxy, or the Exchange another proxy stored
        for this key while this one waited on its lease."""
        deadline = time.monotonic() + self.wait_limit
        delay = POLL_FIRST
        while True:
            lease = await self.shared.take_lease(key)
            if lease is not None:
                try:
                    if lease is not NO_LEASE:  # answered by the proxy whose lease this was before?
                        found = await self._found(key)
                        if found is not None:
                            self.shared.count("calls_saved")
                            return found
                    result = await work()
                    await self.shared.flushed()  # the answer is shared before the lease goes
                    return result
                finally:
                    await lease.release()
            found = await self._found(key)
            if found is not None:
                self.shared.count("calls_saved")
                return found
            if time.monotonic() >= deadline:
                self.shared.count("lease_waits_timed_out")
                log.info("waited %.0f s on another proxy for %s: making the call here", self.wait_limit, key)
                return await work()
            await asyncio.sleep(delay)
            delay = min(delay * 2, POLL_MAX)

    async def _found(self, key: str) -> Exchange | None:
        value = await self.shared.get(key)
        return None if value is None else self._take(key, value)

    def _take(self, key: str, value: bytes) -> Exchange | None:
        """Decode a shared value and keep it locally; a damaged one is a miss, reported."""
        try:
            exchange = decode_exchange(key, value)
        except StoreError as exc:
            self.shared.count("undecodable")
            if self.shared.counters["undecodable"] <= REPORTED_DAMAGE:
                log.warning("shared tier %s: %s; treated as a miss", self.shared.url.redacted, exc)
            return None
        try:
            self.local.put_encoded_many([(key, value)])  # the same bytes in both tiers
        except StoreError as exc:
            log.error("could not copy %s into the local store: %s", key, exc)
        return exchange

    # writes go to both tiers -------------------------------------------------------------------
    def put(self, exchange: Exchange) -> None:
        self.local.put(exchange)
        if not exchange.meta.get("private"):  # a caller's own answer stays on this machine
            self.shared.set(exchange.key, encode_exchange(exchange))

    def delete(self, key: str) -> None:
        self.local.delete(key)
        self.shared.delete(key)

    def session_records(self, name: str) -> Iterator[dict[str, Any]]:
        """A session's records as this proxy wrote them (a fork or ordered replay reads them)."""
        return self.local.session_records(name)

    def append_session(self, name: str, record: dict[str, Any]) -> int:
        seq = self.local.append_session(name, record)
        self.shared.append_session(name, json.dumps({**record, "seq": seq}).encode())
        return seq

    # closing -----------------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the local tier now; the shared connection closes in the background."""
        self.local.close()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: nothing was started
        asyncio.ensure_future(self.shared.aclose())

    async def aclose(self) -> None:
        try:
            await self.shared.aclose()
            if self.shared.counters:
                log.info("shared tier %s: %s", self.shared.url.redacted,
                         ", ".join(f"{k} {v}" for k, v in sorted(self.shared.counters.items())))
        finally:
            self.local.close()


class TieredReader:
    """The local store, then the shared tier, for commands that read (stats, sessions, export)."""

    def __init__(self, local: Store, shared: SharedBulk) -> None:
        self.local = local
        self.shared = shared
        self.path = local.path
        self.damaged: list[str] = []  # shared values that did not decode (left out)

    def get(self, key: str) -> Exchange | None:
        found = self.local.get(key)
        if found is not None:
            return found
        value = self.shared.get(key)
        return None if value is None else decode_exchange(key, value)

    def entries(self) -> Iterator[Exchange]:
        """Every entry of both tiers, once (the local copy where both have it)."""
        yield from self.local.entries()
        batch: list[str] = []
        for key in self.shared.keys(ENTRY_PREFIXES):
            batch.append(key)
            if len(batch) >= 500:
                yield from self._shared_only(batch)
                batch = []
        yield from self._shared_only(batch)

    def _shared_only(self, keys: list[str]) -> Iterator[Exchange]:
        here = self.local.existing(keys)
        missing = [k for k in keys if k not in here]
        for key, value in zip(missing, self.shared.get_many(missing)):
            if value is None:
                continue  # deleted meanwhile
            try:
                yield decode_exchange(key, value)
            except StoreError as exc:
                self.damaged.append(str(exc))

    def session_names(self) -> list[str]:
        return sorted(set(self.local.session_names()) | set(self.shared.session_names()))

    def session_records(self, name: str) -> Iterator[dict[str, Any]]:
        """The shared log of a session when the fleet has one (it holds every proxy's records),
        else the local one."""
        shared = self.shared.session_records(name)
        if not shared:
            yield from self.local.session_records(name)
            return
        for raw in shared:
            try:
                record = json.loads(raw)
            except ValueError:
                self.damaged.append(f"session {name}: a record is not JSON")
                continue
            yield expand_record(record, record.get("seq", 0))

    def __enter__(self) -> TieredReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shared.close()
        self.local.close()
