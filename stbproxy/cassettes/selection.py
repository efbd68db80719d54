"""Which stored exchanges an export writes besides a session's (store.session_exchanges):
those ``--all GLOB`` picks by host, host and port, category/tool/api or key, and which of
them ``--exclude-simulated`` leaves out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from fnmatch import fnmatchcase
from urllib.parse import urlsplit

from stbproxy.models import Exchange

# Answers the proxy made up because no real one was had: --exclude-simulated leaves them out.
MADE_UP = frozenset({"simulated", "simulated-error", "unavailable"})

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


def matches(exchange: Exchange, pattern: str) -> bool:
    """Whether ``--all GLOB`` picks an exchange: by its host, its host and port as a user
    writes them (``example.com:443`` for https too), its category/tool/api or its key; a
    pattern equal to one of them picks it even where it reads as a glob (``[::1]:8443``)."""
    hosts = host_names(exchange.request.url)
    names = [exchange.key, *([str(exchange.api)] if exchange.api is not None else [])]
    lowered = pattern.lower()  # host names are case-insensitive
    return (any(name == pattern or fnmatchcase(name, pattern) for name in names)
            or any(host == lowered or fnmatchcase(host, lowered) for host in hosts))


def host_names(url: str) -> list[str]:
    """A URL's host as a user writes it: alone, and with its port (the scheme's default
    port when the URL names none); an IPv6 address bare and in brackets."""
    try:
        parts = urlsplit(url)
        host, port = (parts.hostname or "").lower(), parts.port
    except ValueError:
        return []
    if not host:
        return []
    port = port if port is not None else _DEFAULT_PORTS.get(parts.scheme.lower())
    shown = f"[{host}]" if ":" in host else host
    names = [host] if shown == host else [host, shown]
    return names + ([f"{shown}:{port}"] if port is not None else [])


def stored_hosts(exchanges: Iterable[Exchange]) -> Counter[str]:
    """How many exchanges each host (with its port) has."""
    hosts: Counter[str] = Counter()
    for exchange in exchanges:
        names = host_names(exchange.request.url)
        if names:
            hosts[names[-1]] += 1
    return hosts
