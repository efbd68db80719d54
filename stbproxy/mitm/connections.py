"""Every open client connection, watched, so that no client can hold the proxy's sockets:
a request head that trickles in is cut off after the head timeout, a connection that waits
too long for its next request (or stalls in the middle of a body) after the idle timeout,
and past the connection limit a new connection is answered 503 and closed.

A connection reports what it is doing through its Watched record: bytes read (``read``),
a request head complete (``head_done``), its body complete (``body_done``), its answer
given (``answered``). The fast lane reports for the connections it serves; mitmproxy's
layers report through the addon's hooks (addon.py), for connections handed to them. A
request being answered has no timeout here: --upstream-timeout and the simulator's bound it.
One task (``run``) closes what is overdue, a few times per timeout.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

log = logging.getLogger("stbproxy")

FULL_WARNING_EVERY = 60.0  # seconds between two log lines saying the limit is reached


class Watched:
    """One client connection: what it is doing, and since when."""

    __slots__ = ("writer", "peer", "last_read", "head_since", "bodies", "answers", "by_lane", "handed_over")

    def __init__(self, writer: asyncio.StreamWriter, peer, now: float) -> None:
        self.writer = writer
        self.peer = peer
        self.last_read = now  # the last bytes from the client (or the last answer to it)
        self.head_since: float | None = None  # the first byte of a request whose head is not complete
        self.bodies = 0  # requests whose head is complete and whose body is not
        self.answers = 0  # requests being answered
        self.by_lane = False  # the fast lane reports for it (mitmproxy's hooks do not)
        self.handed_over = ""  # why mitmproxy's layers serve it (lanes.py), once they do

    def read(self, now: float) -> None:
        self.last_read = now
        if self.head_since is None and not self.bodies and not self.answers:
            self.head_since = now

    def head_done(self) -> None:
        self.head_since = None
        self.bodies += 1

    def body_done(self) -> None:
        self.bodies = max(0, self.bodies - 1)
        self.answers += 1

    def answered(self, now: float) -> None:
        self.answers = max(0, self.answers - 1)
        self.last_read = now
        self.head_since = None

    def failed(self, now: float) -> None:
        """A request came to nothing (the client left, its stream was reset)."""
        if self.bodies:
            self.bodies -= 1
        else:
            self.answers = max(0, self.answers - 1)
        self.last_read = now

    def between_requests(self) -> None:
        """What was read held no request (a TLS handshake, empty lines)."""
        if not self.bodies and not self.answers:
            self.head_since = None

    def overdue(self, now: float, limits: "ConnectionLimits") -> str | None:
        """Why this connection is to be closed now, or None."""
        if self.answers:
            return None
        if self.bodies:
            return "stalled body" if now - self.last_read > limits.idle_timeout else None
        if self.head_since is not None:
            return "slow head" if now - self.head_since > limits.head_timeout else None
        return "idle" if now - self.last_read > limits.idle_timeout else None


@dataclass(frozen=True)
class ConnectionLimits:
    head_timeout: float
    idle_timeout: float
    max_connections: int


_REASONS = {
    "slow head": "whose request head did not arrive within {head:g} s (--head-timeout)",
    "stalled body": "whose request body stalled for {idle:g} s (--idle-timeout)",
    "idle": "idle for {idle:g} s (--idle-timeout)",
}


class ConnectionWatch:
    def __init__(self, limits: ConnectionLimits, clock=time.monotonic) -> None:
        self.limits = limits
        self.clock = clock
        self.open: dict[object, Watched] = {}  # by the client's address
        self._full_warned_at: float | None = None

    def admit(self, writer: asyncio.StreamWriter) -> Watched | None:
        """The new connection's record, or None when the limit is reached (the caller
        answers 503 and closes it)."""
        now = self.clock()
        if len(self.open) >= self.limits.max_connections:
            if self._full_warned_at is None or now - self._full_warned_at >= FULL_WARNING_EVERY:
                self._full_warned_at = now
                log.warning("stbproxy: %d client connections are open, the most --max-connections allows; new "
                            "ones are answered 503 and closed until some close", len(self.open))
            return None
        peer = writer.get_extra_info("peername")
        watched = Watched(writer, peer, now)
        self.open[peer] = watched
        return watched

    def leave(self, watched: Watched) -> None:
        if self.open.get(watched.peer) is watched:
            del self.open[watched.peer]

    def of(self, peer) -> Watched | None:
        """The record of a connection mitmproxy's layers serve (None for the fast lane's)."""
        watched = self.open.get(peer)
        return None if watched is None or watched.by_lane else watched

    def close_overdue(self) -> dict[str, int]:
        """Close every overdue connection; how many, by reason."""
        now = self.clock()
        closed: dict[str, int] = {}
        for watched in list(self.open.values()):
            reason = watched.overdue(now, self.limits)
            if reason is None:
                continue
            closed[reason] = closed.get(reason, 0) + 1
            self.leave(watched)  # gone from the count at once, whatever its handler still does
            transport = watched.writer.transport
            if transport is not None and not transport.is_closing():
                transport.close()
        return closed

    def tick(self) -> float:
        """Seconds between two rounds: a fraction of the shorter timeout."""
        return min(1.0, max(0.05, min(self.limits.head_timeout, self.limits.idle_timeout) / 4))

    async def run(self) -> None:
        """Close overdue connections until cancelled, logging a line for each round that did."""
        limits = self.limits
        while True:
            await asyncio.sleep(self.tick())
            for reason, count in self.close_overdue().items():
                level = logging.DEBUG if reason == "idle" else logging.INFO
                why = _REASONS[reason].format(head=limits.head_timeout, idle=limits.idle_timeout)
                log.log(level, "stbproxy: closed %d client connection%s %s", count, "" if count == 1 else "s", why)


class WatchedReader:
    """A client's reader that tells its record when bytes arrive (for connections that
    mitmproxy's layers read)."""

    def __init__(self, reader, watched: Watched, clock=time.monotonic) -> None:
        self._reader = reader
        self._watched = watched
        self._clock = clock

    async def read(self, n: int = -1) -> bytes:
        data = await self._reader.read(n)
        if data:
            self._watched.read(self._clock())
        return data

    def __getattr__(self, name: str):
        return getattr(self._reader, name)
