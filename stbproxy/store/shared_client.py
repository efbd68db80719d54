"""What the shared tier's two sides (shared_tier.py, shared_bulk.py) have in common: where
the fleet's data sits in Redis, the clients a SharedUrl makes (credentials, TLS, short
timeouts, no retries of the library's own), and telling a server that is away from one
that refused a command, in words a user can act on.
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeAlias
from urllib.parse import unquote

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.cluster
from redis.backoff import NoBackoff
from redis.exceptions import AuthenticationError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeout
from redis.retry import Retry

from stbproxy.store.shared_url import SharedUrl

LEASE_PREFIX = "stbproxy:lease:"  # a miss being answered by one proxy of the fleet
STATS_KEY = "stbproxy:stats"  # fleet-wide counters (a hash)
SESSIONS_KEY = "stbproxy:sessions"  # the set of session names
CATALOG_KEY = "stbproxy:catalog"  # the catalog document that 'import tools --shared' publishes
SESSION_PREFIX = "session/"  # session/<name>: a list of JSON records, in arrival order

OP_TIMEOUT = 1.0  # seconds one command may take before the tier counts as away

AsyncClient: TypeAlias = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster  # the proxy's (shared_tier.py)
Client: TypeAlias = redis.Redis | redis.cluster.RedisCluster  # the commands' (shared_bulk.py)


def _client_options(url: SharedUrl) -> dict[str, Any]:
    """Keyword arguments both clients take: credentials, TLS and short timeouts. Retries
    are ours (the tier counts as away and reconnects with backoff), not the library's."""
    options: dict[str, Any] = dict(username=url.username, password=url.password, socket_timeout=OP_TIMEOUT,
                                   socket_connect_timeout=OP_TIMEOUT)
    if url.tls:
        options["ssl"] = True
    for name, value in (pair.split("=", 1) for pair in url.query.split("&") if "=" in pair):
        if name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs"):
            options[name] = unquote(value)
        elif name == "ssl_check_hostname":
            options[name] = value.lower() in ("1", "true", "yes")
    return options


def make_async_client(url: SharedUrl) -> AsyncClient:
    options = _client_options(url)
    no_retries = redis.asyncio.retry.Retry(NoBackoff(), 0)  # a command fails with its first error
    if url.cluster:
        nodes = [redis.asyncio.cluster.ClusterNode(host, port) for host, port in url.nodes]
        return redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, retry=no_retries, **options)
    host, port = url.nodes[0]
    return redis.asyncio.Redis(host=host, port=port, db=url.db, retry=no_retries, **options)


def make_client(url: SharedUrl) -> Client:
    options = dict(_client_options(url), retry=Retry(NoBackoff(), 0))  # a command fails with its first error
    if url.cluster:
        nodes = [redis.cluster.ClusterNode(host, port)  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
                 for host, port in url.nodes]
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
