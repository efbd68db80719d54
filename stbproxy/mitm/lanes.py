"""Which door a request comes in by, chosen in one place, and what the two lanes share.

A client's request is answered through the addon's hooks by one of three doors:

- ``fast``: the fast lane (fast_lane.py) reads a plain HTTP/1.1 request and fires the
  hooks itself;
- ``tunnel``: the tunnel lane (tunnel_lane.py) serves a CONNECT and, inside its TLS, answers
  the plain HTTP/1.1 requests the same way;
- ``mitmproxy``: mitmproxy's own protocol layers (HTTP/2, input of another kind, options
  under which the lanes step aside, ``serve --no-fast-lane``); the lanes hand the
  connection over, with the bytes already read, and nothing comes back from there.

``Doors`` chooses, for one connection, from what has been read of it and the options
(read once, when the connection opens). Its answer is a ``Door``: the lane's name, and
for mitmproxy's door the reason. The lanes ask it and do what it says; choosing a lane's
door allocates nothing, so the hit path pays a call or two.

Every flow carries its door in ``flow.metadata[LANE]``: a lane puts its name there before
the first hook; the addon puts ``mitmproxy`` on a flow without one, and the reason its
connection was handed over under HANDED_OVER (from the connection's watch, connections.py).
The addon passes the door on to the engine with the request (``Request.lane``), and the
session record names it.

Both lanes are a ``Lane``: a name, and ``answer``, which fires the hooks for one request
read whole and writes its response.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable, Protocol

from mitmproxy import http
from mitmproxy.net.tls import starts_like_tls_record
from mitmproxy.proxy.layers.http import HttpLayer, HTTPMode
from mitmproxy.utils import human

from stbproxy.mitm.plain_http import MAX_BODY, MAX_HEAD, METHOD_START, connect_request, plain_request
from stbproxy.mitm.streaming import ClientWriter

FAST = "fast"
TUNNEL = "tunnel"
MITMPROXY = "mitmproxy"
LANES = (FAST, TUNNEL, MITMPROXY)

LANE = "stb_lane"  # flow.metadata: the door the flow came in by (FAST, TUNNEL or MITMPROXY)
HANDED_OVER = "stb_handed_over"  # flow.metadata: why its connection went to mitmproxy, when it did


@dataclass(frozen=True, slots=True)
class Door:
    lane: str  # FAST, TUNNEL or MITMPROXY
    reason: str = ""  # why mitmproxy's layers serve the connection from here on


FAST_DOOR = Door(FAST)
TUNNEL_DOOR = Door(TUNNEL)
# mitmproxy's door, by reason (each made once)
NO_FAST_LANE = Door(MITMPROXY, "serve --no-fast-lane (or a mitmproxy without the names the lanes use)")
STREAMING = Door(MITMPROXY, "option stream_large_bodies: mitmproxy reads every body")
NOT_HTTP1 = Door(MITMPROXY, "not an HTTP/1 request line (TLS without CONNECT, other input)")
HEAD_TOO_LARGE = Door(MITMPROXY, f"a request head over {MAX_HEAD} bytes")
HEAD_CUT_SHORT = Door(MITMPROXY, "a request head cut short")
NOT_PLAIN = Door(MITMPROXY, "a request not of the plain kind (plain_http.py)")
CONNECT_NOT_SERVED = Door(MITMPROXY, "a CONNECT the tunnel lane does not serve (its head or the options)")
NOT_TLS = Door(MITMPROXY, "a tunnel that carries no TLS")
NOT_HTTP1_IN_TLS = Door(MITMPROXY, "TLS that carries no HTTP/1 (HTTP/2, other ALPN)")


class Lane(Protocol):
    """What the fast lane and the tunnel lane share."""

    name: str  # FAST or TUNNEL: the door of the flows it answers

    async def answer(self, request: http.Request, body: bytes, client, server, writer: ClientWriter,
                     client_says: Callable[[int], Awaitable[bytes]]) -> bool:
        """Fire the addon's hooks (requestheaders, request, response) for ``request`` and its
        whole ``body`` on a flow marked with the lane's name, and write the response with
        ``writer``; False: the connection is to be closed. ``client_says`` reads the client
        while a streamed answer is written (streaming.py)."""
        ...


class Doors:
    """The one place that chooses a door, for one connection's lifetime."""

    __slots__ = ("enabled", "tunnels", "max_body", "validate_headers")

    def __init__(self, options) -> None:
        # mitmproxy copies an option's value on every read: read once per connection
        self.enabled = options.stream_large_bodies is None
        self.tunnels = tunnels_enabled(options)
        limit = human.parse_size(options.body_size_limit)
        self.max_body = MAX_BODY if limit is None else min(MAX_BODY, limit)  # larger: mitmproxy reads or refuses
        self.validate_headers = options.validate_inbound_headers

    def waiting(self, buffer: bytes | bytearray) -> Door | None:
        """A request head not complete yet: mitmproxy's door now, or None (read on)."""
        if not self.enabled:
            return STREAMING
        if len(buffer) > MAX_HEAD:
            return HEAD_TOO_LARGE
        if buffer and buffer[0] not in METHOD_START:
            return NOT_HTTP1
        return None

    def is_connect(self, head: bytes) -> bool:
        """A CONNECT the tunnel lane is to look at (``connect``)."""
        return self.tunnels and head.startswith(b"CONNECT ")

    def connect(self, head: bytes) -> tuple[Door, http.Request | None]:
        """The door of a CONNECT (``is_connect``), with the request when the tunnel lane serves it."""
        request = connect_request(head, self.validate_headers)
        return (CONNECT_NOT_SERVED, None) if request is None else (TUNNEL_DOOR, request)

    def plain(self, head: bytes, destination: tuple[str, int] | None = None):
        """A complete request head: its request, body size and whether it closes the
        connection when a lane answers it (plain_http.plain_request), else None:
        mitmproxy's door (``not_plain``). ``destination``: a tunnel's."""
        return plain_request(head, self.validate_headers, destination, self.max_body)

    def not_plain(self, head: bytes | bytearray) -> Door:
        """Why a complete head ``plain`` refused goes to mitmproxy."""
        return CONNECT_NOT_SERVED if head.startswith(b"CONNECT ") else NOT_PLAIN

    @staticmethod
    def in_tunnel(data: bytes) -> Door:
        """The first bytes through an answered CONNECT: TLS (or nothing yet) the tunnel lane
        serves; anything else mitmproxy carries."""
        return TUNNEL_DOOR if not data or starts_like_tls_record(data) else NOT_TLS

    @staticmethod
    def in_tls(chosen, client) -> Door | None:
        """The layer mitmproxy chose inside a tunnel's TLS: the tunnel lane stands in for an
        HTTP layer of an HTTP/1 client (``TUNNEL_DOOR``); another HTTP layer is mitmproxy's;
        None: not an HTTP layer (yet)."""
        if not (isinstance(chosen, HttpLayer) and chosen.mode is HTTPMode.transparent):
            return None
        if client.tls_established and client.alpn in (None, b"", b"http/1.1"):
            return TUNNEL_DOOR
        return NOT_HTTP1_IN_TLS


def tunnels_enabled(options) -> bool:
    """Options under which mitmproxy would connect upstream or pass a tunnel through
    untouched send CONNECTs its way (tunnel_lane.py opens no server connections)."""
    return (options.connection_strategy == "lazy" and not options.ignore_hosts and not options.allow_hosts
            and not options.tcp_hosts and not options.add_upstream_certs_to_client_chain)
