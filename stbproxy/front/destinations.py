"""Where a proxied request is going, judged before anything is sent.

Two questions: is the destination the proxy itself (in any spelling of its address), and
may this proxy go there at all. A proxy that listens beyond loopback must not be an open
door to the host's other services, so there private, loopback and link-local
destinations are refused unless allowed by name; ``--allow-host`` / ``--deny-host`` globs
refine that on any proxy.

Pure, except Resolver, which asks the system resolver without blocking the event loop.
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import ipaddress
import socket
import time
from dataclasses import dataclass
from typing import Iterable, Literal, Sequence

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
_IPV4_CHARS = frozenset("0123456789abcdefx.")


def host_name(host: str) -> str:
    """The host as rules compare it: lower-case, no brackets or trailing dot, and an IP
    literal in its usual form (so ``2130706433`` and ``127.1`` both read ``127.0.0.1``)."""
    address = parse_ip(host)
    if address is not None:
        return str(address)
    return host.strip().strip("[]").rstrip(".").lower()


def parse_ip(host: str) -> Address | None:
    """The address an IP literal stands for, in every spelling resolvers accept: dotted
    quads and their short forms (``127.1``), one number (``2130706433``), octal and hex
    parts (``0177.0.0.1``, ``0x7f.1``), IPv6 with or without brackets or a zone, and
    IPv4-mapped IPv6 (read as the IPv4 address). None for a name."""
    text = host.strip().rstrip(".").lower()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    if ":" in text:
        try:
            address = ipaddress.IPv6Address(text.split("%", 1)[0])
        except ValueError:
            return None
        return address.ipv4_mapped or address
    if not text or not set(text) <= _IPV4_CHARS:
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(text))  # the C library's own parser
    except OSError:
        return None


def is_loopback_name(host: str) -> bool:
    name = host.strip().rstrip(".").lower()
    return name == "localhost" or name.endswith(".localhost")  # RFC 6761: always loopback


@functools.lru_cache(maxsize=1024)  # pure, and asked on every request with the same few addresses
def own_address(host: str, port: int | None, listening: tuple[str, int] | None) -> str | None:
    """How a request to ``host:port`` names this proxy, which the client reached at
    ``listening`` (the connection's local address): "plain" for the name a direct client
    uses (that very address, or localhost), "other" for any other spelling that reaches the
    proxy (127.1, 2130706433, 0.0.0.0, [::1], [::ffff:127.0.0.1], another 127.x address),
    which only a request relayed through the proxy to itself would use; None when it is
    not the proxy at all."""
    if not listening or port != listening[1]:
        return None
    text = host.strip().lower()
    if text == "localhost":
        return "plain"
    if is_loopback_name(host):
        return "other"
    address, local = parse_ip(host), parse_ip(str(listening[0]))
    if address is None:
        return None
    if address == local:  # written as usual (not 127.1 for 127.0.0.1): what a direct client sends
        return "plain" if str(address) == text.strip("[]") else "other"
    if address.is_loopback or address.is_unspecified:
        return "other"
    return None


def is_own_address(host: str, port: int | None, listening: tuple[str, int] | None) -> bool:
    """True when ``host:port`` reaches this proxy (see own_address)."""
    return own_address(host, port, listening) is not None


def is_internal(address: Address) -> bool:
    """Not a public internet address: private, loopback, link-local, shared, reserved..."""
    return not address.is_global


@dataclass(frozen=True)
class DestinationRules:
    """Which destinations a proxy may reach. An --allow-host glob wins over a --deny-host
    glob, which wins over the default for internal addresses (refused when
    ``deny_internal``, i.e. when the proxy listens beyond loopback)."""

    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()
    deny_internal: bool = False

    @property
    def active(self) -> bool:
        return bool(self.deny or self.deny_internal)

    def _by_name(self, host: str) -> Literal[True] | str | None:
        """What the globs alone say: True (allowed), a reason (refused), or None (undecided)."""
        name = host_name(host)
        if any(fnmatch.fnmatchcase(name, glob) for glob in self.allow):
            return True
        if any(fnmatch.fnmatchcase(name, glob) for glob in self.deny):
            return f"destination {name} is refused by --deny-host"
        return None

    def needs_addresses(self, host: str) -> bool:
        """Whether the verdict on ``host`` depends on what the name resolves to."""
        return (self.deny_internal and parse_ip(host) is None and not is_loopback_name(host)
                and self._by_name(host) is None)

    def verdict(self, host: str, addresses: Iterable[Address] = ()) -> str | None:
        """Why a destination is refused, or None when the proxy may go there."""
        decided = self._by_name(host)
        if decided is True:
            return None
        if decided is not None:
            return decided
        if not self.deny_internal:
            return None
        name = host_name(host)
        literal = parse_ip(host)
        refused = "a private or loopback address, refused on a proxy that listens beyond loopback " \
                  "(allow it with --allow-host)"
        if is_loopback_name(host) or (literal is not None and is_internal(literal)):
            return f"destination {name} is {refused}"
        for address in addresses:
            if is_internal(address):
                return f"destination {name} resolves to {address}, {refused}"
        return None


class Resolver:
    """Addresses of a host name, from the system resolver on a worker thread, cached briefly."""

    def __init__(self, ttl: float = 60.0, max_entries: int = 4096, timeout: float = 5.0) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self.timeout = timeout
        self._cache: dict[str, tuple[float, tuple[Address, ...]]] = {}

    async def addresses(self, host: str) -> Sequence[Address]:
        name = host_name(host)
        now = time.monotonic()
        cached = self._cache.get(name)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            infos = await asyncio.wait_for(
                asyncio.get_running_loop().getaddrinfo(name, None, type=socket.SOCK_STREAM), self.timeout)
        except (OSError, UnicodeError, asyncio.TimeoutError):
            found: tuple[Address, ...] = ()  # unresolvable: the call itself will fail
        else:
            found = tuple(a for a in (parse_ip(str(info[4][0])) for info in infos) if a is not None)
        if len(self._cache) >= self.max_entries:
            self._cache.clear()
        self._cache[name] = (now + self.ttl, found)
        return found
