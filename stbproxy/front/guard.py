"""The checks a proxied request passes before the engine sees it, in plain terms (the
mitmproxy front end turns a Refusal into an answer).

On the request head, before any body is read: answers to wrong proxy credentials are held
back per client address (auth_throttle.py), a head over the limits is refused 431 and one
HTTP forbids 400 (limits.py), a CONNECT to a refused destination 403 (destinations.py). On the whole
request: a refused destination 403, a JSON body nested too deep 422. A request to the
proxy's own address is never forwarded: loop_message explains the 508 for one that names
it in an unusual spelling (only a request relayed to itself does that). Each refusal
names its reason, and none stores anything.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Iterable

from stbproxy.front import limits
from stbproxy.front.auth_throttle import AuthThrottle
from stbproxy.front.destinations import DestinationRules, Resolver, host_name, own_address, parse_ip
from stbproxy.recent import Recent
from stbproxy.settings import Settings

HEADS_REMEMBERED = 512
HEAD_MEMO_MAX = 4096  # bytes of a target, and of header fields, that a remembered head may hold

@dataclass(frozen=True)
class Refusal:
    status: int
    message: str
    closes: bool = False  # the connection is closed after the answer (its framing cannot be trusted)


def loop_message(method: str, host: str, port: int) -> str:
    return (f"stbproxy: {method} to {host}:{port} is addressed to this proxy itself ({host_name(host)}:{port}); "
            "forwarding it would loop back here, so nothing was sent or stored. Use this address as HTTP_PROXY / "
            "HTTPS_PROXY, or POST StableToolBench calls to /virtual")


def is_loopback_bind(listen_host: str) -> bool:
    """Whether a listening address reaches this machine only ("" is every interface)."""
    if listen_host.strip().lower() == "localhost":
        return True
    address = parse_ip(listen_host) if listen_host else None
    return address is not None and address.is_loopback


class Guard:
    def __init__(self) -> None:
        self.header_limits = limits.HeaderLimits()
        self.rules = DestinationRules()
        self.throttle: AuthThrottle | None = None
        self.resolver = Resolver()
        self._heads: Recent[tuple] = Recent(HEADS_REMEMBERED)  # heads that passed head_refusal

    def configure(self, settings: Settings, listen_host: str, proxy_auth: bool) -> None:
        self.header_limits = limits.HeaderLimits(settings.max_headers, settings.max_header_bytes)
        self._heads = Recent(HEADS_REMEMBERED)  # judged under the limits before
        # Internal destinations are refused by default where others can reach the proxy: a
        # password-protected proxy listening beyond loopback (what `serve --host` requires).
        self.rules = DestinationRules(tuple(h.lower() for h in settings.allow_hosts),
                                      tuple(h.lower() for h in settings.deny_hosts),
                                      deny_internal=proxy_auth and not is_loopback_bind(listen_host))
        if proxy_auth and self.throttle is None:
            self.throttle = AuthThrottle()
        elif not proxy_auth:
            self.throttle = None

    async def check_head(self, *, method: bytes, target: bytes, host: str, port: int,
                         fields: Iterable[tuple[bytes, bytes]], client: tuple | None, local: tuple | None,
                         credentials: bool, auth_failed: bool) -> Refusal | None:
        """The checks on a request head (``method`` and ``target``: as the client sent them).
        ``credentials``: it carried proxy credentials; ``auth_failed``: the proxy's
        authentication refused them."""
        if self.throttle is not None and credentials and client:
            await self.throttle.hold(str(client[0]), auth_failed)
        if auth_failed:
            return None  # already answered 407
        refusal = self.head_refusal(method, target, tuple(fields))
        if refusal is not None:
            return refusal
        if method == b"CONNECT" and own_address(host, port, local) is None:
            return await self.check_destination(host)
        return None

    def waits_on_head(self, method: bytes, credentials: bool, client: tuple | None) -> bool:
        """Whether check_head may wait (credentials held back, a CONNECT's destination looked
        up); when not, head_refusal says all it would."""
        return (self.throttle is not None and credentials and bool(client)) or method == b"CONNECT"

    def head_refusal(self, method: bytes, target: bytes, fields: tuple[tuple[bytes, bytes], ...]) -> Refusal | None:
        """The refusal of a head over the limits (431) or one HTTP forbids (400), or None.
        The same fields object (a head the fast lane read before: plain_http.py) is judged
        once while it is remembered here; the memo holds the object, so its id is its own."""
        known = self._heads.get(id(fields))
        if known is not None and known[0] is fields and known[1] == method and known[2] == target:
            return None
        problem = self.header_limits.problem(fields)
        if problem is not None:
            return Refusal(431, f"stbproxy: {problem}")
        problem = limits.head_problem(method, target, fields)
        if problem is not None:
            return Refusal(400, f"stbproxy: {problem}; nothing was forwarded or stored", closes=True)
        if len(target) <= HEAD_MEMO_MAX and sum(len(name) + len(value) for name, value in fields) <= HEAD_MEMO_MAX:
            self._heads.put(id(fields), (fields, method, target))  # (only heads that passed: small ones)
        return None

    async def check_request(self, host: str, body: bytes, content_type: str | None) -> Refusal | None:
        """The checks on a whole request bound elsewhere than the proxy itself (without
        destination rules, ``rules.active`` false, body_refusal is all of them)."""
        refused = await self.check_destination(host)
        if refused is not None:
            return refused
        return self.body_refusal(body, content_type)

    def body_refusal(self, body: bytes, content_type: str | None) -> Refusal | None:
        problem = limits.body_problem(body, content_type)
        return Refusal(422, f"stbproxy: {problem}") if problem is not None else None

    async def check_destination(self, host: str) -> Refusal | None:
        if not self.rules.active:
            return None
        addresses: tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...] = ()
        if self.rules.needs_addresses(host):
            addresses = tuple(await self.resolver.addresses(host))
        reason = self.rules.verdict(host, addresses)
        return Refusal(403, f"stbproxy: {reason}") if reason is not None else None
