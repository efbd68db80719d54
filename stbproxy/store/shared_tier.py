"""The shared tier on the proxy's side (``SharedTier``), on its asyncio event loop.

Many proxies share one cache here: entries sit under the local store's keys with the
local store's bytes, session records are appended to one list per session, and a miss
that every proxy would pay for is leased (SET NX with a TTL) to one of them.

Every call returns promptly whether the server is up, slow or gone. When it goes away the
tier logs one line, keeps writes in a bounded queue, reconnects with backoff, logs one
line when it is back and pushes what it kept. Reads asked for together go in one MGET.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from typing import Any

import redis.asyncio.cluster
from redis.asyncio.lock import Lock
from redis.backoff import ExponentialBackoff
from redis.exceptions import ResponseError

from stbproxy.store.shared_client import (
    FAILURES,
    LEASE_PREFIX,
    OP_TIMEOUT,
    SESSION_PREFIX,
    SESSIONS_KEY,
    STATS_KEY,
    AsyncClient,
    is_outage,
    make_async_client,
)
from stbproxy.store.shared_url import SharedUrl

log = logging.getLogger("stbproxy")

LEASE_TTL = 10.0  # a dead holder's lease lets the next proxy go after this long
QUEUE_LIMIT = 100_000  # writes kept while the tier is away ...
QUEUE_BYTES = 256 * 1024 * 1024  # ... and their bytes; beyond either, writes are dropped (counted)
BATCH = 256  # writes per pipelined round trip
READ_BATCH = 256  # reads per MGET
COUNTS_EVERY = 1.0  # seconds between additions to the fleet's counters when nothing is written
BACKOFF = ExponentialBackoff(cap=1.0, base=0.05)  # reconnect delays: 0.1, 0.2, 0.4, 0.8, 1, 1, ... s

Command = tuple[Any, ...]  # a write as its client method's name and arguments: ("set", key, value)


class Lease:
    """This proxy holds the fleet's lease on one miss: renewed while the work runs, released after."""

    def __init__(self, tier: SharedTier, lock: Lock) -> None:
        self.tier = tier
        self.lock = lock
        self._renewal = asyncio.ensure_future(self._renew())

    async def _renew(self) -> None:
        while True:
            await asyncio.sleep(LEASE_TTL / 3)
            try:
                await asyncio.wait_for(self.lock.extend(LEASE_TTL, replace_ttl=True), OP_TIMEOUT)
            except FAILURES:
                return  # lost or away: the TTL ends it, and the next proxy goes

    async def release(self) -> None:
        self._renewal.cancel()
        try:
            await asyncio.wait_for(self.lock.release(), OP_TIMEOUT)
        except FAILURES:
            pass  # expired already, or the tier is away: the TTL ends it


class NoLease:
    """The tier is away: nobody can be asked, so this proxy makes the call itself."""

    async def release(self) -> None:
        return None


NO_LEASE = NoLease()


class SharedTier:
    """One Redis (or cluster) shared by many proxies, used from the proxy's event loop."""

    def __init__(self, url: SharedUrl, *, queue_limit: int = QUEUE_LIMIT, queue_bytes: int = QUEUE_BYTES) -> None:
        self.url = url
        self.queue_limit = queue_limit
        self.queue_bytes = queue_bytes
        self.up = False
        self.counters: Counter[str] = Counter()  # this proxy's, since it started
        self._unflushed: Counter[str] = Counter()  # added to the fleet's counters on the next write
        self._client: AsyncClient | None = None
        self._queue: deque[tuple[int, Command]] = deque()  # (bytes, command)
        self._queued_bytes = 0
        self._enqueued = 0  # writes accepted so far ...
        self._settled = 0  # ... and how many of them were written (or refused by the server)
        self._kept_while_away = 0
        self._away_since: float | None = None
        self._reported: set[str] = set()  # problems already logged once
        self._started = False
        self._closing = False
        self._tasks: list[asyncio.Task[None]] = []
        self._wake = asyncio.Event()  # a write is queued, or the tier is back
        self._reads: list[tuple[str, asyncio.Future[bytes | None]]] = []  # reads waiting for the next MGET
        self._reader: asyncio.Task[None] | None = None
        self._progress = asyncio.Event()  # writes were settled
        self._first_try = asyncio.Event()  # the first connection attempt has ended

    # start and stop -----------------------------------------------------------------------
    def start(self) -> None:
        """Begin connecting (in the background) once the event loop runs; safe to call again."""
        if self._started:
            return
        asyncio.get_running_loop()  # only from the proxy's loop
        self._started = True
        self._away_since = time.monotonic()
        self._tasks = [asyncio.ensure_future(self._connect_loop(first=True)), asyncio.ensure_future(self._write_loop())]

    async def connected(self, timeout: float = OP_TIMEOUT * 3) -> bool:
        """Start, and wait until the first connection attempt has ended (True: the tier is up)."""
        self.start()
        try:
            await asyncio.wait_for(self._first_try.wait(), timeout)
        except asyncio.TimeoutError:
            pass
        return self.up

    async def aclose(self, flush_seconds: float = 2.0) -> None:
        """Push what is queued (for a bounded time), then close the connection."""
        if self._started and self.up and (self._queue or self._unflushed):
            await self.flushed(timeout=flush_seconds)
            if self.up and self._unflushed:  # the last counts, with no write to carry them
                counters, self._unflushed = self._unflushed, Counter()
                try:
                    await self._execute([], counters)
                except FAILURES:
                    pass
        self._closing = True
        for task in self._tasks:
            task.cancel()
        # Bounded: a task stuck on a server that stopped answering never holds up shutdown.
        pending = [task for task in (self._reader, *self._tasks) if task is not None and not task.done()]
        if pending:
            await asyncio.wait(pending, timeout=OP_TIMEOUT * 3)
        if self._queue:
            log.warning("shared tier %s: %d writes not pushed at shutdown", self.url.redacted, len(self._queue))
        await self._drop_client()

    # reads ----------------------------------------------------------------------------------
    async def get(self, key: str) -> bytes | None:
        """The stored bytes, or None: not there, or the tier is away (a miss either way).

        Reads asked for while one is on the wire go together in one MGET: under load the
        round trip (a wake-up of the server on a busy machine) costs more than the read."""
        self.start()
        if not self.up:
            return None
        answer: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        self._reads.append((key, answer))
        if self._reader is None or self._reader.done():
            self._reader = asyncio.ensure_future(self._read_loop())
        return await answer

    async def _read_loop(self) -> None:
        while self._reads:
            batch, self._reads = self._reads[:READ_BATCH], self._reads[READ_BATCH:]
            keys = [key for key, _ in batch]
            # redis-py types an answer bytes | str: str only with decode_responses, never set here
            values: list[bytes | None]
            try:
                client = self._connected()
                async with asyncio.timeout(OP_TIMEOUT):
                    if len(keys) == 1:
                        values = [await client.get(keys[0])]  # type: ignore[list-item]  # bytes: see above
                    elif isinstance(client, redis.asyncio.cluster.RedisCluster):
                        values = await client.mget_nonatomic(keys)
                    else:
                        values = await client.mget(keys)  # type: ignore[assignment]  # bytes: see above
            except FAILURES as exc:
                if self.up:
                    self._failed(exc, "read")
                values = [None] * len(batch)
            for (_, answer), value in zip(batch, values):
                if not answer.done():
                    answer.set_result(value)

    # writes ---------------------------------------------------------------------------------
    def set(self, key: str, value: bytes) -> None:
        self._enqueue(len(key) + len(value), ("set", key, value))

    def delete(self, key: str) -> None:
        self._enqueue(len(key), ("delete", key))

    def append_session(self, name: str, record: bytes) -> None:
        self._enqueue(len(name) + len(record), ("rpush", SESSION_PREFIX + name, record))
        self._enqueue(len(name), ("sadd", SESSIONS_KEY, name))

    def count(self, name: str, n: int = 1) -> None:
        self.counters[name] += n
        self._unflushed[name] += n

    def _enqueue(self, size: int, command: Command) -> None:
        self.start()
        if len(self._queue) >= self.queue_limit or self._queued_bytes + size > self.queue_bytes:
            self.count("writes_dropped")
            if "queue full" not in self._reported:
                self._reported.add("queue full")
                log.error("shared tier %s: write queue full (%d writes, %d MiB): dropping writes until it drains",
                          self.url.redacted, len(self._queue), self._queued_bytes // 2**20)
            return
        self._queue.append((size, command))
        self._queued_bytes += size
        self._enqueued += 1
        if not self.up:
            self._kept_while_away += 1
        self._wake.set()

    async def flushed(self, timeout: float = OP_TIMEOUT) -> bool:
        """Wait until the writes made so far are in the shared tier (False: away, or too slow)."""
        target = self._enqueued
        deadline = time.monotonic() + timeout
        while self._settled < target:
            left = deadline - time.monotonic()
            if not self.up or left <= 0:
                return False
            self._progress.clear()
            try:
                await asyncio.wait_for(self._progress.wait(), left)
            except asyncio.TimeoutError:
                return False
        return True

    async def _write_loop(self) -> None:
        while True:
            try:  # counts go with the next write, or after a second
                await asyncio.wait_for(self._wake.wait(), COUNTS_EVERY)
            except asyncio.TimeoutError:
                pass
            self._wake.clear()
            while self.up and (self._queue or self._unflushed):
                batch = [self._queue[i][1] for i in range(min(BATCH, len(self._queue)))]
                counters, self._unflushed = self._unflushed, Counter()
                try:
                    results = await self._execute(batch, counters)
                except FAILURES as exc:
                    self._unflushed.update(counters)
                    self._failed(exc, "write")
                    break
                for result in results:
                    if isinstance(result, ResponseError):
                        self.count("writes_refused")
                        self._report(f"refused {result}", "shared tier %s refused a write: %s",
                                     self.url.redacted, self.url.scrub(str(result)))
                for _ in batch:
                    size, _command = self._queue.popleft()
                    self._queued_bytes -= size
                self._settled += len(batch)
                self._progress.set()
                if not self._queue and self._kept_while_away:
                    log.warning("shared tier %s: pushed %d writes kept while it was away", self.url.redacted,
                                self._kept_while_away)
                    self.count("writes_pushed_after_outage", self._kept_while_away)
                    self._kept_while_away = 0

    async def _execute(self, batch: list[Command], counters: Counter[str]) -> list[Any]:
        """The answers to ``batch`` (an error the server gave one command among them), after
        the counters were added; an outage raised."""
        pipe = self._connected().pipeline(transaction=False)
        for command, *args in batch:
            getattr(pipe, command)(*args)
        for name, n in counters.items():
            pipe.hincrby(STATS_KEY, name, n)
        results: list[Any] = await asyncio.wait_for(pipe.execute(raise_on_error=False), OP_TIMEOUT * 5)
        for result in results:
            if isinstance(result, BaseException) and is_outage(result):
                raise result
        return results[:len(batch)]

    # the fleet's single flight ----------------------------------------------------------------
    async def take_lease(self, key: str) -> Lease | NoLease | None:
        """This proxy's lease on a miss, None while another proxy holds it, NO_LEASE when away."""
        self.start()
        if not self.up:
            return NO_LEASE
        try:
            lock = self._connected().lock(LEASE_PREFIX + key, timeout=LEASE_TTL, blocking=False, thread_local=False,
                                          raise_on_release_error=False)
            taken = await asyncio.wait_for(lock.acquire(), OP_TIMEOUT)
        except FAILURES as exc:
            self._failed(exc, "lease")
            return NO_LEASE
        return Lease(self, lock) if taken else None

    # health ------------------------------------------------------------------------------------
    def _failed(self, exc: BaseException, what: str) -> None:
        if not is_outage(exc):
            self.count("errors")
            self._report(f"{what} {type(exc).__name__}", "shared tier %s: %s failed: %s", self.url.redacted, what,
                         self.url.scrub(str(exc)))
            return
        if not self.up:
            return
        self.up = False
        self._away_since = time.monotonic()
        self._kept_while_away = len(self._queue)  # pushed when the tier is back
        log.warning("shared tier %s is away (%s): answering from the local tier, keeping writes "
                    "(up to %d) and reconnecting", self.url.redacted, self._describe(exc), self.queue_limit)
        self.count("outages")
        if not self._closing:
            self._tasks.append(asyncio.ensure_future(self._connect_loop()))

    async def _connect_loop(self, first: bool = False) -> None:
        failures = 0
        while not self.up and not self._closing:
            if failures or not first:
                await asyncio.sleep(BACKOFF.compute(failures))
            await self._drop_client()
            client = make_async_client(self.url)
            try:
                if self.url.cluster:
                    await asyncio.wait_for(client.initialize(), OP_TIMEOUT * 3)
                await asyncio.wait_for(client.ping(), OP_TIMEOUT)
            except FAILURES as exc:
                await _close_quietly(client)
                self._first_try.set()
                if first and failures == 0:
                    log.warning("shared tier %s is not reachable (%s): answering from the local tier and "
                                "retrying", self.url.redacted, self._describe(exc))
                failures += 1
                continue
            self._client = client
            self.up = True
            self._first_try.set()
            away = time.monotonic() - (self._away_since or time.monotonic())
            if first and failures == 0:
                log.info("shared tier %s connected", self.url.redacted)
            else:
                log.warning("shared tier %s is back after %.1f s; pushing %d kept writes", self.url.redacted, away,
                            len(self._queue))
            self._reported.discard("queue full")
            self._wake.set()

    def _connected(self) -> AsyncClient:
        """The client, or ConnectionError (an outage like any other) while the tier is away or closed."""
        if not self.up or self._client is None:
            raise ConnectionError("the shared tier is away")
        return self._client

    async def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await _close_quietly(client)

    def _describe(self, exc: BaseException) -> str:
        text = self.url.scrub(str(exc)) or type(exc).__name__
        return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text

    def _report(self, what: str, message: str, *args: object) -> None:
        if what not in self._reported and len(self._reported) < 100:
            self._reported.add(what)
            log.warning(message, *args)


async def _close_quietly(client: AsyncClient) -> None:
    """Close a client, for at most OP_TIMEOUT: a connection to a server that stopped answering
    (paused, or its host gone) may wait forever on its goodbye."""
    try:
        await asyncio.wait_for(client.aclose(), OP_TIMEOUT)
    except FAILURES:  # a timeout among them
        pass
