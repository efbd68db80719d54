"""The shared tier's URL: its forms, its parts, and never showing its password.

URLs: ``redis://[user:pass@]host:port/db``, ``rediss://`` for TLS (``?ssl_ca_certs=FILE``
to trust a private CA), and ``redis+cluster://[user:pass@]host:port[,host:port...]``
(``rediss+cluster://`` with TLS) for Redis Cluster. Credentials come only from the URL,
which is never printed whole: ``redact_shared_url`` masks the password everywhere.

Plain text work, with no client library: settings and the front end read a URL without
loading redis (shared_client.py makes the clients).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from stbproxy.errors import ConfigError

# Only these attach a shared tier without --shared (STBPROXY_SHARED_URL is the older spelling).
# REDIS_URL is never read: it is often set for other programs, and a proxy must not join a
# fleet's cache by accident.
ENV_VARS = ("STBPROXY_SHARED", "STBPROXY_SHARED_URL")
SCHEMES = {"redis": (False, False), "rediss": (True, False),
           "redis+cluster": (False, True), "rediss+cluster": (True, True)}  # scheme -> (tls, cluster)


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
        for secret in {self.password or "", quote(self.password or "", safe="")} - {""}:
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
