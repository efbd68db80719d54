"""The shared tier on the commands' side (import, sync, stats, export): ``SharedBulk``, a
plain blocking client with pipelined batches, ``BulkWriter``, which overlaps its writes
with the caller's work, and ``check_at_start``, which refuses at start a tier that
cannot be used now (a wrong URL is a mistake to fix, not an outage to wait out).
"""

from __future__ import annotations

import queue
import threading
from types import TracebackType
from typing import Any, Callable, Iterable, Iterator

import redis.cluster
from redis.commands.core import Script
from redis.exceptions import RedisClusterException

from stbproxy.errors import ConfigError, StoreError
from stbproxy.store.shared_client import (
    FAILURES,
    SESSION_PREFIX,
    SESSIONS_KEY,
    STATS_KEY,
    Client,
    failure_reason,
    make_client,
)
from stbproxy.store.shared_url import SharedUrl

START_CHECK_TIMEOUT = 5.0  # seconds 'serve' gives the shared tier to answer at start (a slow DNS included)
PUT_NEW_SCRIPT = ("local n = 0 for i = 1, #KEYS do "
                  "if redis.call('SET', KEYS[i], ARGV[i], 'NX') then n = n + 1 end end return n")


def check_at_start(url: SharedUrl, timeout: float = START_CHECK_TIMEOUT) -> None:
    """Refuse, within ``timeout`` seconds, a shared tier that cannot be used now: a wrong URL
    (host, port, password, database) is a mistake to fix, not an outage to wait out. Only at
    start: a tier that goes away later is retried (SharedTier). ConfigError names the URL
    (password masked) and the reason. On a thread: a host name can take long to resolve."""
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            SharedBulk(url).close()
            outcome.append(None)
        except StoreError as exc:
            outcome.append(exc)

    checker = threading.Thread(target=attempt, name="stbproxy-shared-check", daemon=True)
    checker.start()
    checker.join(timeout)
    if not outcome:
        problem = f"shared tier {url.redacted}: no answer within {timeout:g} s"
    elif outcome[0] is not None:
        problem = str(outcome[0])
    else:
        return
    raise ConfigError(f"{problem}; fix --shared or $STBPROXY_SHARED", setting="shared")


class SharedBulk:
    """A plain (blocking) client for commands: imports, sync, stats, export. Errors become
    StoreError naming the server (password masked)."""

    def __init__(self, url: SharedUrl) -> None:
        self.url = url
        self._put_new: Script | None = None  # the registered PUT_NEW_SCRIPT
        try:
            self._client: Client = make_client(url)  # a cluster client connects here
        except (*FAILURES, RedisClusterException) as exc:
            raise StoreError(f"shared tier {url.redacted}: {failure_reason(url, exc)}") from exc
        try:
            self._client.ping()
        except (*FAILURES, RedisClusterException) as exc:
            self.close()
            raise StoreError(f"shared tier {url.redacted}: {failure_reason(url, exc)}") from exc

    def close(self) -> None:
        try:
            self._client.close()
        except FAILURES:
            pass

    def __enter__(self) -> SharedBulk:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``fn``'s answer; its failure as StoreError. Typed Any: redis-py types every command's
        answer as "an awaitable, or anything", the same for its blocking and asyncio clients."""
        try:
            return fn(*args, **kwargs)
        except FAILURES as exc:
            raise StoreError(f"shared tier {self.url.redacted}: "
                             f"{self.url.scrub(str(exc)) or type(exc).__name__}") from exc

    # entries -----------------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        value: bytes | None = self._call(self._client.get, key)
        return value

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        if not keys:
            return []
        values: list[bytes | None]
        if isinstance(self._client, redis.cluster.RedisCluster):
            values = self._call(self._client.mget_nonatomic, keys)
        else:
            values = self._call(self._client.mget, keys)
        return values

    def put_many(self, records: list[tuple[str, bytes]]) -> int:
        """Write the records the shared tier does not hold yet (keys already there are left
        alone, and of a key given twice the first value counts, so running it twice writes
        nothing); how many were new. On one server, a batch of new keys (a bulk import into
        a new tier) is one MSETNX, which sets all or none at half the server's work of the
        SET NX loop; when some key is there already, a short Lua script does the loop (a
        third of the client's work of one pipelined command per record). A cluster spreads
        keys over nodes, so it gets the pipeline."""
        if not records:
            return 0
        if not self.url.cluster:
            first = dict(reversed(records))  # the first value of a key given twice
            if self._call(self._client.msetnx, first):
                return len(first)
            if self._put_new is None:
                self._put_new = self._client.register_script(PUT_NEW_SCRIPT)
            return int(self._call(self._put_new, keys=[k for k, _ in records], args=[v for _, v in records]))
        pipe = self._client.pipeline(transaction=False)
        for key, value in records:
            pipe.set(key, value, nx=True)
        return sum(1 for r in self._call(pipe.execute) if r)

    def writer(self) -> BulkWriter:
        """put_many on a thread of its own, so the caller's work overlaps the round trips."""
        return BulkWriter(self)

    def delete(self, keys: list[str]) -> int:
        pipe = self._client.pipeline(transaction=False)
        for key in keys:
            pipe.delete(key)
        return sum(self._call(pipe.execute)) if keys else 0

    def keys(self, prefixes: Iterable[str], batch: int = 1000) -> Iterator[str]:
        """Every key under the prefixes (SCAN: never blocks the server; every primary of a cluster)."""
        for prefix in prefixes:
            iterator = self._call(self._client.scan_iter, match=_glob_escape(prefix) + "*", count=batch)
            while True:
                try:
                    key = next(iterator)
                except StopIteration:
                    break
                except FAILURES as exc:
                    raise StoreError(f"shared tier {self.url.redacted}: {self.url.scrub(str(exc))}") from exc
                yield key.decode()

    def key_count(self) -> int:
        """Keys in the database (all of them; a cluster's summed over its primaries)."""
        result = self._call(self._client.dbsize, **self._everywhere())
        return sum(result.values()) if isinstance(result, dict) else int(result)

    def memory(self) -> int:
        """Bytes the server uses (a cluster's summed over its primaries)."""
        info = self._call(self._client.info, "memory", **self._everywhere())
        if self.url.cluster:
            return sum(int(node.get("used_memory", 0)) for node in info.values())
        return int(info.get("used_memory", 0))

    def _everywhere(self) -> dict[str, str]:
        return {"target_nodes": redis.cluster.RedisCluster.PRIMARIES} if self.url.cluster else {}

    # sessions, counters, catalog ------------------------------------------------------------------
    def append_sessions(self, records: Iterable[tuple[str, bytes]]) -> None:
        pipe = self._client.pipeline(transaction=False)
        for name, record in records:
            pipe.rpush(SESSION_PREFIX + name, record)
            pipe.sadd(SESSIONS_KEY, name)
        self._call(pipe.execute)

    def session_names(self) -> list[str]:
        return sorted(name.decode() for name in self._call(self._client.smembers, SESSIONS_KEY))

    def session_records(self, name: str) -> list[bytes]:
        records: list[bytes] = self._call(self._client.lrange, SESSION_PREFIX + name, 0, -1)
        return records

    def counters(self) -> dict[str, int]:
        raw = self._call(self._client.hgetall, STATS_KEY)
        return {k.decode(): int(v) for k, v in sorted(raw.items())}

    def count(self, name: str, n: int) -> None:
        if n:
            self._call(self._client.hincrby, STATS_KEY, name, n)

    def get_document(self, key: str) -> bytes | None:
        return self.get(key)

    def put_document(self, key: str, value: bytes) -> None:
        self._call(self._client.set, key, value)


class BulkWriter:
    """Gathers records into batches of ``batch`` and hands them to a thread that writes
    them with ``put_many`` (bounded: a caller faster than the server waits; a few hundred
    records a round trip, which keeps each command short for the fleet's other clients);
    ``added`` counts the new records once it is closed. The first error stops the
    writing and is raised to the caller."""

    def __init__(self, bulk: SharedBulk, depth: int = 8, batch: int = 500) -> None:
        self.bulk = bulk
        self.added = 0
        self._batch = batch
        self._gathered: list[tuple[str, bytes]] = []
        self._batches: queue.Queue[list[tuple[str, bytes]] | None] = queue.Queue(maxsize=depth)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="stbproxy-shared-writer", daemon=True)
        self._thread.start()

    def put(self, records: list[tuple[str, bytes]]) -> None:
        self._raise()
        self._gathered.extend(records)
        if len(self._gathered) >= self._batch:
            self._batches.put(self._gathered)
            self._gathered = []

    def _run(self) -> None:
        while (records := self._batches.get()) is not None:
            if self._error is None:
                try:
                    self.added += self.bulk.put_many(records)
                except BaseException as exc:  # handed to the caller's thread by _raise
                    self._error = exc

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error

    def close(self) -> int:
        if self._gathered and self._error is None:
            self._batches.put(self._gathered)
            self._gathered = []
        self._batches.put(None)
        self._thread.join()
        self._raise()
        return self.added

    def __enter__(self) -> BulkWriter:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if exc is None:
            self.close()
        else:  # the caller failed: stop the thread, keep the caller's error
            self._error = self._error or exc
            self._batches.put(None)
            self._thread.join()


def _glob_escape(text: str) -> str:
    """A key prefix as a SCAN MATCH pattern (glob characters taken literally)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
