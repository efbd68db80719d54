"""HTTP/2 clients kept to their share of the proxy (rapid reset, CVE-2023-44487, and its kin).

An HTTP/2 client opens streams on one connection, and may reset each at once: the client's
cost is a few bytes, the proxy's a parsed frame, a flow and an upstream call. Left alone,
1,000 request-then-reset pairs (0.1 s to send) put 1,000 calls in the upstream pool and
delayed another client's request by 48.6 s. So, per connection (mitmproxy's HTTP/2 server
layer, patched by internals.guard_http2):

- a stream the client resets has its answer cancelled, upstream call included
  (``cancelled_on_reset`` wraps the addon's request hook; ``cancel`` is called on the reset),
  and so have all of a connection's streams when the connection closes;
- at most MAX_STREAMS streams are answered at once, reset ones still running included; a
  stream past that is refused (RST_STREAM REFUSED_STREAM, which a client may retry);
- resets (and refused streams) spend a budget of RESET_BURST, refilled at RESETS_PER_SECOND:
  a client that runs out is sent GOAWAY with ENHANCE_YOUR_CALM and its connection closed;
- at most FRAMES_PER_TURN frames, and STREAMS_PER_TURN new streams, of one connection are read
  per turn of the event loop (the rest waits for the next turn), so that one connection's burst
  never holds the others for more than a few milliseconds; a stream whose reset is already
  among the frames waiting is not opened at all; a client whose unread frames pass MAX_UNREAD
  bytes is sent GOAWAY with ENHANCE_YOUR_CALM too.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time

log = logging.getLogger("stbproxy")

MAX_STREAMS = 100  # HTTP/2's advertised SETTINGS_MAX_CONCURRENT_STREAMS (h2's default), and Go's handler bound
RESET_BURST = 100  # resets one connection may send at once ...
RESETS_PER_SECOND = 10.0  # ... and then per second (Netty closes past 200 per 30 s)
FRAMES_PER_TURN = 64  # frames of one connection read per turn of the event loop (~2 ms of h2 parsing) ...
STREAMS_PER_TURN = 4  # ... and new streams (HEADERS frames: each a flow, hooks and maybe an upstream call)
MAX_UNREAD = 1 << 20  # bytes of frames waiting for their turn before the client is told to calm down
LOOK_AHEAD = 256  # frames after a turn searched for resets of the streams it opens
HEADERS, RST_STREAM = 0x1, 0x3
PREFACE = 24  # bytes of the client connection preface (RFC 9113, 3.4), which frames follow
MULTIPLEXED = frozenset({b"HTTP/2.0", b"HTTP/3"})  # http_version of requests that are streams of a connection
CALMED_LOG_EVERY = 60.0  # seconds between two log lines about connections told to calm down

_running: dict[str, asyncio.Task] = {}  # flow id -> its answer, for the streams of multiplexed connections
CANCELLED = "stb_cancelled"  # flow.metadata: the stream was reset (or its connection closed) before its answer began


def cancelled_on_reset(hook):
    """The request hook of an addon, as a task that ``cancel(flow)`` stops (the client reset
    the stream), for HTTP/2 and HTTP/3 requests; others run as they are (nothing added to a
    plain HTTP/1 hit: the hook returns its own coroutine)."""

    @functools.wraps(hook)
    def request(self, flow):
        answering = hook(self, flow)
        if flow.request.data.http_version in MULTIPLEXED:
            return _unless_cancelled(flow, answering)
        return answering

    return request


async def _unless_cancelled(flow, answering) -> None:
    if flow.metadata.get(CANCELLED):  # reset between the hook's start and now: nothing to begin
        answering.close()
        if flow.killable:
            flow.kill()
        return
    task = asyncio.ensure_future(answering)
    _running[flow.id] = task
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()  # the hook's own task (it is awaited in one)
        if not task.cancelled() or (current is not None and current.cancelling()):
            raise  # the proxy is stopping: the hook itself goes
        if flow.killable:  # the client reset the stream: nothing is answered, mitmproxy says nothing
            flow.kill()
    finally:
        if _running.get(flow.id) is task:
            del _running[flow.id]


def cancel(flow) -> bool:
    """Stop the answer to ``flow`` if it is being made, and never begin it if it is not yet;
    whether one was being made."""
    flow.metadata[CANCELLED] = True
    task = _running.pop(flow.id, None)
    if task is None or task.done():
        return False
    task.cancel()
    return True


def answering() -> int:
    """Answers to streams being made now (what a test or a report counts)."""
    return len(_running)


class _Calmed:
    """Connections told to calm down, logged once and then once a minute at most (a client
    may come back as often as it likes)."""

    def __init__(self) -> None:
        self.count = 0
        self.logged_at: float | None = None

    def note(self, peer, why: str) -> None:
        self.count += 1
        now = time.monotonic()
        if self.logged_at is None or now - self.logged_at >= CALMED_LOG_EVERY:
            log.warning("stbproxy: an HTTP/2 client at %s %s; its connection was closed (GOAWAY ENHANCE_YOUR_CALM, "
                        "%d such connection%s since the last such line)", _address(peer), why, self.count,
                        "" if self.count == 1 else "s")
            self.logged_at, self.count = now, 0


_calmed = _Calmed()


def note_calmed(peer, why: str) -> None:
    _calmed.note(peer, why)


def _address(peer) -> str:
    return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)


class ResetBudget:
    """A token bucket of resets: RESET_BURST at once, RESETS_PER_SECOND after that."""

    __slots__ = ("tokens", "updated", "burst", "rate")

    def __init__(self, burst: float = RESET_BURST, rate: float = RESETS_PER_SECOND, now: float | None = None) -> None:
        self.burst, self.rate = burst, rate
        self.tokens = burst
        self.updated = time.monotonic() if now is None else now

    def spend(self, now: float | None = None) -> bool:
        """One reset; False when the budget is gone (the connection is to be closed)."""
        now = time.monotonic() if now is None else now
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now
        if self.tokens < 1:
            return False
        self.tokens -= 1
        return True


class Frames:
    """Where HTTP/2 frames end in what a client sends (after its connection preface), so that
    the bytes are handed to h2 a few whole frames at a time."""

    __slots__ = ("preface", "header", "payload")

    def __init__(self) -> None:
        self.preface = PREFACE  # bytes of the preface still to come
        self.header = b""  # the first bytes of a frame header whose rest is still to come
        self.payload = 0  # bytes of the current frame's payload still to come

    def cut(self, data: bytes | bytearray, frames: int = FRAMES_PER_TURN, streams: int = STREAMS_PER_TURN) -> int:
        """How many bytes of ``data`` hold its next ``frames`` whole frames, or fewer that open
        ``streams`` streams (all of it when fewer end in it); the bytes up to there count as read."""
        size, at = len(data), 0
        if self.preface:
            at = min(self.preface, size)
            self.preface -= at
        while at < size:
            if self.payload:
                step = min(self.payload, size - at)
                self.payload -= step
                at += step
            else:
                step = min(9 - len(self.header), size - at)
                self.header += bytes(data[at:at + step])
                at += step
                if len(self.header) < 9:
                    break
                if self.header[3] == HEADERS:
                    streams -= 1
                self.payload, self.header = int.from_bytes(self.header[:3], "big"), b""
            if not self.payload and not self.header:
                frames -= 1
                if not frames or not streams:
                    return at
        return size


def resets_ahead(data: bytes | bytearray, frames: int = LOOK_AHEAD) -> set[int]:
    """The streams reset (RST_STREAM) in the first ``frames`` whole frames of ``data``, which
    starts at a frame: a stream whose reset is already here is answered by nobody."""
    found, at, size = set(), 0, len(data)
    while frames and at + 9 <= size:
        if data[at + 3] == RST_STREAM:
            found.add(int.from_bytes(data[at + 5:at + 9], "big") & 0x7FFFFFFF)
        at += 9 + int.from_bytes(data[at:at + 3], "big")
        frames -= 1
    return found


class ConnectionGuard:
    """What one HTTP/2 connection has spent, and the frames waiting for their turn."""

    __slots__ = ("resets", "frames", "unread", "wakeup", "http_layer", "doomed")

    def __init__(self) -> None:
        self.resets = ResetBudget()
        self.frames = Frames()
        self.unread = bytearray()
        self.wakeup = None  # the RequestWakeup asked for the next turn, if any
        self.http_layer = None  # mitmproxy's HTTP layer over this connection, found once
        self.doomed: set[int] = set()  # streams whose reset waits among the frames still unread

    def next_frames(self) -> bytes:
        """The frames of the next turn, taken out of what waits (and the resets just after them
        noted in ``doomed``: a batch of requests followed by their resets opens nothing)."""
        cut = self.frames.cut(self.unread)
        data = bytes(self.unread[:cut])
        del self.unread[:cut]
        if self.unread and not self.frames.header and not self.frames.payload:
            self.doomed |= resets_ahead(self.unread)
        return data
