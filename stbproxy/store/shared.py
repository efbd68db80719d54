"""The shared store tier on Redis / Valkey (the only importer of redis).

Many proxies share one cache here: entries sit under the local store's keys with the
local store's bytes, session records are appended to one list per session, and a miss
that every proxy would pay for is leased (SET NX with a TTL) to one of them.

``SharedTier`` is the proxy's side, on its asyncio event loop: every call returns
promptly whether the server is up, slow or gone. When it goes away the tier logs one
line, keeps writes in a bounded queue, reconnects with backoff, logs one line when it is
back and pushes what it kept. ``SharedBulk`` is the commands' side (import, sync, stats,
export): a plain client with pipelined batches.

URLs: ``redis://[user:pass@]host:port/db``, ``rediss://`` for TLS (``?ssl_ca_certs=FILE``
to trust a private CA), and ``redis+cluster://[user:pass@]host:port[,host:port...]``
(``rediss+cluster://`` with TLS) for Redis Cluster. Credentials come only from the URL,
which is never printed whole: ``redact_shared_url`` masks the password everywhere.
"""

from __future__ import annotations

import asyncio
import logging
import os
import queue
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Iterable, Iterator
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import AuthenticationError, RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeout
from redis.retry import Retry

from stbproxy.errors import ConfigError, StoreError

log = logging.getLogger("stbproxy")

# Only these attach a shared tier without --shared (STBPROXY_SHARED_URL is the older spelling).
# REDIS_URL is never read: it is often set for other programs, and a proxy must not join a
# fleet's cache by accident.
ENV_VARS = ("STBPROXY_SHARED", "STBPROXY_SHARED_URL")
SCHEMES = {"redis": (False, False), "rediss": (True, False),
           "redis+cluster": (False, True), "rediss+cluster": (True, True)}  # scheme -> (tls, cluster)
LEASE_PREFIX = "stbproxy:lease:"  # a miss being answered by one proxy of the fleet
STATS_KEY = "stbproxy:stats"  # fleet-wide counters (a hash)
SESSIONS_KEY = "stbproxy:sessions"  # the set of session names
CATALOG_KEY = "stbproxy:catalog"  # the catalog document that 'import tools --shared' publishes
SESSION_PREFIX = "session/"  # session/<name>: a list of JSON records, in arrival order

OP_TIMEOUT = 1.0  # seconds one command may take before the tier counts as away
START_CHECK_TIMEOUT = 5.0  # seconds 'serve' gives the shared tier to answer at start (a slow DNS included)
LEASE_TTL = 10.0  # a dead holder's lease lets the next proxy go after this long
QUEUE_LIMIT = 100_000  # writes kept while the tier is away ...
QUEUE_BYTES = 256 * 1024 * 1024  # ... and their bytes; beyond either, writes are dropped (counted)
BATCH = 256  # writes per pipelined round trip
READ_BATCH = 256  # reads per MGET
COUNTS_EVERY = 1.0  # seconds between additions to the fleet's counters when nothing is written
PUT_NEW_SCRIPT = ("local n = 0 for i = 1, #KEYS do "
                  "if redis.call('SET', KEYS[i], ARGV[i], 'NX') then n = n + 1 end end return n")
BACKOFF = ExponentialBackoff(cap=1.0, base=0.05)  # reconnect delays: 0.1, 0.2, 0.4, 0.8, 1, 1, ... s


# -- URLs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SharedUrl:
    url: str = field(repr=False)  # may hold a password: use .redacted for anything shown
    tls: bool
    cluster: bool
    nodes: tuple[tuple[str, int], ...]
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    db: int = 0
    query: str = ""

    @property
    def redacted(self) -> str:
        return redact_shared_url(self.url)

    def scrub(self, text: str) -> str:
        """An error text with the password (raw or percent-encoded) masked."""
        for secret in {self.password, quote(self.password or "", safe="")} - {None, ""}:
            text = text.replace(secret, "***")
        return text


def redact_shared_url(url: str) -> str:
    """The URL with its password replaced by ***; the user name stays (it names the ACL user)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, hosts = netloc.rsplit("@", 1)
        user, has_password, _ = userinfo.partition(":")
        # redis://NAME@host: a lone name may well be a password typed in the wrong place
        netloc = f"{user}:***@{hosts}" if has_password else f"***@{hosts}"
    query = "&".join(f"{pair.split('=', 1)[0]}=***" if pair.lower().startswith("password=") else pair
                     for pair in parts.query.split("&")) if parts.query else ""
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def shared_url_from_env() -> str | None:
    for name in ENV_VARS:
        if os.environ.get(name):
            return os.environ[name]
    return None


def parse_shared_url(url: str) -> SharedUrl:
    """Check a --shared URL; a ConfigError names what is wrong (never the password)."""
    shown = redact_shared_url(url)
    try:
        parts = urlsplit(url.strip())
    except ValueError as exc:
        raise ConfigError(f"shared tier URL {shown} is not a URL: {exc}", setting="shared") from None
    if parts.scheme not in SCHEMES:
        raise ConfigError(f"shared tier URL {shown}: scheme {parts.scheme!r} is not one of "
                          f"{', '.join(s + '://' for s in SCHEMES)}", setting="shared")
    tls, cluster = SCHEMES[parts.scheme]
    userinfo, _, hosts = parts.netloc.rpartition("@")
    username, password = None, None
    if userinfo:
        user, has_password, secret = userinfo.partition(":")
        username = unquote(user) or None  # as redis-py reads it: a lone name is a user name
        password = unquote(secret) if has_password else None
    nodes = []
    for host in hosts.split(",") if hosts else ():
        node = urlsplit(f"//{host}")
        try:
            port = node.port or 6379
        except ValueError:
            raise ConfigError(f"shared tier URL {shown}: bad port in {host!r}", setting="shared") from None
        if not node.hostname:
            raise ConfigError(f"shared tier URL {shown}: a host is missing", setting="shared")
        nodes.append((node.hostname, port))
    if not nodes:
        raise ConfigError(f"shared tier URL {shown}: no host", setting="shared")
    if len(nodes) > 1 and not cluster:
        raise ConfigError(f"shared tier URL {shown}: several hosts need redis+cluster:// "
                          "(or rediss+cluster://)", setting="shared")
    path = parts.path.strip("/")
    try:
        db = int(path) if path else 0
    except ValueError:
        raise ConfigError(f"shared tier URL {shown}: database {path!r} is not a number", setting="shared") from None
    if cluster and db:
        raise ConfigError(f"shared tier URL {shown}: Redis Cluster has database 0 only", setting="shared")
    return SharedUrl(url, tls, cluster, tuple(nodes), username, password, db, parts.query)


def _client_options(url: SharedUrl) -> dict:
    """Keyword arguments both clients take: credentials, TLS and short timeouts. Retries
    are ours (the tier counts as away and reconnects with backoff), not the library's."""
    options = dict(username=url.username, password=url.password, socket_timeout=OP_TIMEOUT,
                   socket_connect_timeout=OP_TIMEOUT)
    if url.tls:
        options["ssl"] = True
    for name, value in (pair.split("=", 1) for pair in url.query.split("&") if "=" in pair):
        if name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs"):
            options[name] = unquote(value)
        elif name == "ssl_check_hostname":
            options[name] = value.lower() in ("1", "true", "yes")
    return options


def make_async_client(url: SharedUrl):
    options = _client_options(url)
    if url.cluster:
        nodes = [redis.asyncio.cluster.ClusterNode(host, port) for host, port in url.nodes]
        return redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, retry=Retry(NoBackoff(), 0), **options)
    host, port = url.nodes[0]
    return redis.asyncio.Redis(host=host, port=port, db=url.db, retry=Retry(NoBackoff(), 0), **options)


def make_client(url: SharedUrl):
    options = dict(_client_options(url), retry=Retry(NoBackoff(), 0))  # a command fails with its first error
    if url.cluster:
        nodes = [redis.cluster.ClusterNode(host, port) for host, port in url.nodes]
        return redis.cluster.RedisCluster(startup_nodes=nodes, **options)
    host, port = url.nodes[0]
    return redis.Redis(host=host, port=port, db=url.db, **options)


def is_outage(exc: BaseException) -> bool:
    """The server is away (unreachable, slow, refusing auth), as opposed to refusing one command."""
    if isinstance(exc, ResponseError):
        return type(exc).__name__ in ("ClusterDownError", "MasterDownError", "TryAgainError")
    return isinstance(exc, (RedisError, OSError, asyncio.TimeoutError))


FAILURES = (RedisError, OSError, asyncio.TimeoutError)


def failure_reason(url: SharedUrl, exc: BaseException) -> str:
    """Why the server could not be used, in words a user can act on (the password masked)."""
    text = url.scrub(str(exc)) or type(exc).__name__
    lowered = text.lower()
    nodes = ", ".join(f"{host}:{port}" for host, port in url.nodes)
    refused = ("wrongpass", "noauth", "invalid username")
    if isinstance(exc, AuthenticationError) or any(word in lowered for word in refused):
        if url.password is None:
            return "the server wants a password and the URL gives none (redis://[user]:PASSWORD@host:port/db)"
        return "the server refused the user name or password in the URL"
    if "db index is out of range" in lowered:
        return f"the server has no database {url.db} (its 'databases' setting allows fewer)"
    if any(words in lowered for words in ("name or service not known", "nodename nor servname",
                                          "temporary failure in name resolution", "no address associated")):
        return f"unknown host {', '.join(sorted({host for host, _ in url.nodes}))}"
    if "connection refused" in lowered:
        return f"nothing listens at {nodes} (connection refused)"
    if isinstance(exc, (RedisTimeout, TimeoutError, asyncio.TimeoutError)):
        return f"no answer from {nodes} within {OP_TIMEOUT:g} s ({text})"
    return text


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


# -- the proxy's side -------------------------------------------------------------------------


class Lease:
    """This proxy holds the fleet's lease on one miss: renewed while the work runs, released after."""

    def __init__(self, tier: SharedTier, lock) -> None:
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
        self._client = None
        self._queue: deque[tuple[int, tuple]] = deque()  # (bytes, command)
        self._queued_bytes = 0
        self._enqueued = 0  # writes accepted so far ...
        self._settled = 0  # ... and how many of them were written (or refused by the server)
        self._kept_while_away = 0
        self._away_since: float | None = None
        self._reported: set[str] = set()  # problems already logged once
        self._started = False
        self._closing = False
        self._tasks: list[asyncio.Task] = []
        self._wake: asyncio.Event | None = None
        self._reads: list[tuple[str, asyncio.Future]] = []  # reads waiting for the next MGET
        self._reader: asyncio.Task | None = None
        self._progress: asyncio.Event | None = None
        self._first_try: asyncio.Event | None = None

    # start and stop -----------------------------------------------------------------------
    def start(self) -> None:
        """Begin connecting (in the background) once the event loop runs; safe to call again."""
        if self._started:
            return
        asyncio.get_running_loop()  # only from the proxy's loop
        self._started = True
        self._wake, self._progress, self._first_try = asyncio.Event(), asyncio.Event(), asyncio.Event()
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
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        await asyncio.gather(*self._tasks, return_exceptions=True)
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
        answer = asyncio.get_running_loop().create_future()
        self._reads.append((key, answer))
        if self._reader is None or self._reader.done():
            self._reader = asyncio.ensure_future(self._read_loop())
        return await answer

    async def _read_loop(self) -> None:
        while self._reads:
            batch, self._reads = self._reads[:READ_BATCH], self._reads[READ_BATCH:]
            keys = [key for key, _ in batch]
            try:
                if not self.up:
                    raise ConnectionError("the shared tier is away")
                async with asyncio.timeout(OP_TIMEOUT):
                    if len(keys) == 1:
                        values = [await self._client.get(keys[0])]
                    elif self.url.cluster:
                        values = await self._client.mget_nonatomic(keys)
                    else:
                        values = await self._client.mget(keys)
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

    def _enqueue(self, size: int, command: tuple) -> None:
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

    async def _execute(self, batch: list[tuple], counters: Counter) -> list:
        pipe = self._client.pipeline(transaction=False)
        for command, *args in batch:
            getattr(pipe, command)(*args)
        for name, n in counters.items():
            pipe.hincrby(STATS_KEY, name, n)
        results = await asyncio.wait_for(pipe.execute(raise_on_error=False), OP_TIMEOUT * 5)
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
        lock = self._client.lock(LEASE_PREFIX + key, timeout=LEASE_TTL, blocking=False, thread_local=False,
                                 raise_on_release_error=False)
        try:
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

    async def _drop_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await _close_quietly(client)

    def _describe(self, exc: BaseException) -> str:
        text = self.url.scrub(str(exc)) or type(exc).__name__
        return f"{type(exc).__name__}: {text}" if type(exc).__name__ not in text else text

    def _report(self, what: str, message: str, *args) -> None:
        if what not in self._reported and len(self._reported) < 100:
            self._reported.add(what)
            log.warning(message, *args)


async def _close_quietly(client) -> None:
    try:
        await client.aclose()
    except FAILURES:
        pass


# -- the commands' side -------------------------------------------------------------------------


class SharedBulk:
    """A plain (blocking) client for commands: imports, sync, stats, export. Errors become
    StoreError naming the server (password masked)."""

    def __init__(self, url: SharedUrl) -> None:
        self.url = url
        self._put_new = None  # the registered PUT_NEW_SCRIPT
        self._client = None
        try:
            self._client = make_client(url)  # a cluster client connects here
            self._client.ping()
        except (*FAILURES, RedisClusterException) as exc:
            self.close()
            raise StoreError(f"shared tier {url.redacted}: {failure_reason(url, exc)}") from exc

    def close(self) -> None:
        if self._client is None:
            return
        try:
            self._client.close()
        except FAILURES:
            pass

    def __enter__(self) -> SharedBulk:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except FAILURES as exc:
            raise StoreError(f"shared tier {self.url.redacted}: {self.url.scrub(str(exc)) or type(exc).__name__}") from exc

    # entries -----------------------------------------------------------------------------------
    def get(self, key: str) -> bytes | None:
        return self._call(self._client.get, key)

    def get_many(self, keys: list[str]) -> list[bytes | None]:
        if not keys:
            return []
        if self.url.cluster:
            return self._call(self._client.mget_nonatomic, keys)
        return self._call(self._client.mget, keys)

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

    def _everywhere(self) -> dict:
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
        return self._call(self._client.lrange, SESSION_PREFIX + name, 0, -1)

    def counters(self) -> dict[str, int]:
        raw = self._call(self._client.hgetall, STATS_KEY)
        return {k.decode(): int(v) for k, v in sorted(raw.items())}

    def count(self, name: str, n: int) -> None:
        if n:
            self._call(self._client.hincrby, STATS_KEY, name, n)

    def get_document(self, key: str) -> bytes | None:
        return self._call(self._client.get, key)

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
        self._batches: queue.Queue = queue.Queue(maxsize=depth)
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

    def __exit__(self, exc_type, *exc_info) -> None:
        if exc_type is None:
            self.close()
        else:  # the caller failed: stop the thread, keep the caller's error
            self._error = self._error or exc_type
            self._batches.put(None)
            self._thread.join()


def _glob_escape(text: str) -> str:
    """A key prefix as a SCAN MATCH pattern (glob characters taken literally)."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
