"""The parts of stbproxy/mitm/h2_guard.py that need no proxy: where frames end, the resets
waiting among them, the reset budget, a reset stream's answer cancelled (and the call it
shares with nobody else), and the stop watch that bounds SIGTERM. The proxy under a real
HTTP/2 client is tests/proxy/test_h2_flood.py."""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import h2.config
import h2.connection
import h2.errors
import pytest

from stbproxy.mitm import h2_guard
from stbproxy.mitm.embedded import StopWatch


def client_frames(pairs: int, reset: bool = True) -> bytes:
    """What an HTTP/2 client sends: its preface and settings, then request-then-reset pairs."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    for n in range(pairs):
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, [(":method", "GET"), (":scheme", "https"), (":authority", "a.test"),
                                   (":path", f"/flood?n={n}")], end_stream=True)
        if reset:
            conn.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)
    return conn.data_to_send()


def frames_of(data: bytes, start: int = h2_guard.PREFACE) -> list[tuple[int, int]]:
    """(type, stream id) of each frame from ``start`` on, read the plain way."""
    found, at = [], start
    while at < len(data):
        found.append((data[at + 3], int.from_bytes(data[at + 5:at + 9], "big") & 0x7FFFFFFF))
        at += 9 + int.from_bytes(data[at:at + 3], "big")
    return found


def test_turns_end_on_frame_boundaries_however_the_bytes_arrive():
    data = client_frames(40)
    for piece in (1, 7, 9, 10, 64, 4096):
        frames, unread, taken = h2_guard.Frames(), bytearray(), b""
        for start in range(0, len(data), piece):
            unread += data[start:start + piece]
            while unread:
                cut = frames.cut(unread)
                taken += bytes(unread[:cut])
                del unread[:cut]
        assert taken == data, piece
    frames, unread, turns = h2_guard.Frames(), bytearray(data), []
    while unread:  # all at once: each turn ends on a frame, with a bounded number of frames and streams
        cut = frames.cut(unread)
        turns.append(bytes(unread[:cut]))
        del unread[:cut]
    for n, turn in enumerate(turns):
        kinds = [kind for kind, _ in frames_of(turn, h2_guard.PREFACE if n == 0 else 0)]
        assert len(kinds) <= h2_guard.FRAMES_PER_TURN and kinds.count(h2_guard.HEADERS) <= h2_guard.STREAMS_PER_TURN
    assert len(turns) >= 40 // h2_guard.STREAMS_PER_TURN


def test_a_batch_of_requests_followed_by_their_resets_is_doomed_before_it_is_opened():
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    streams = []
    for n in range(30):
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, [(":method", "GET"), (":scheme", "https"), (":authority", "a.test"),
                                   (":path", f"/{n}")], end_stream=True)
        streams.append(stream)
    for stream in streams:
        conn.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)
    guard = h2_guard.ConnectionGuard()
    guard.unread += conn.data_to_send()
    first = guard.next_frames()  # the preface, settings and the first STREAMS_PER_TURN requests
    assert (h2_guard.HEADERS, streams[0]) in frames_of(first)
    assert set(streams) <= guard.doomed  # every reset is already there: nothing of the batch is opened


def test_the_reset_budget_allows_a_burst_then_a_rate():
    budget = h2_guard.ResetBudget(burst=100, rate=10, now=0.0)
    assert all(budget.spend(now=0.0) for _ in range(100))
    assert not budget.spend(now=0.0)  # the 101st at once
    assert budget.spend(now=0.1) and not budget.spend(now=0.1)  # one more after a tenth of a second
    assert sum(budget.spend(now=10.0) for _ in range(200)) == 99  # refilled (not past the burst) after 10 s


class FakeRequest:
    def __init__(self, version: bytes) -> None:
        self.data = type("Data", (), {"http_version": version})()


class FakeFlow:
    def __init__(self, version: bytes = b"HTTP/2.0") -> None:
        self.id = f"flow-{id(self)}"
        self.request = FakeRequest(version)
        self.live = True
        self.killed = False
        self.metadata = {}

    @property
    def killable(self) -> bool:
        return self.live and not self.killed

    def kill(self) -> None:
        self.killed, self.live = True, False


class Addon:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.finished = False

    @h2_guard.cancelled_on_reset
    async def request(self, flow) -> None:
        self.started.set()
        await asyncio.sleep(5)
        self.finished = True


def test_a_reset_streams_request_hook_is_cancelled_and_its_flow_killed():
    async def scenario():
        addon, flow = Addon(), FakeFlow()
        hook = asyncio.ensure_future(addon.request(flow))
        await addon.started.wait()
        assert h2_guard.answering() == 1
        assert h2_guard.cancel(flow)
        await asyncio.wait_for(hook, 1)  # the hook returns (mitmproxy then ends the stream)
        return addon, flow, hook

    addon, flow, hook = asyncio.run(scenario())
    assert flow.killed and not addon.finished and hook.exception() is None and h2_guard.answering() == 0


def test_a_stream_reset_before_its_request_hook_began_never_begins_it():
    async def scenario():
        addon, flow = Addon(), FakeFlow()
        assert not h2_guard.cancel(flow)  # nothing was running yet
        await asyncio.wait_for(addon.request(flow), 1)
        return addon, flow

    addon, flow = asyncio.run(scenario())
    assert flow.killed and not addon.started.is_set()


def test_an_http1_request_hook_is_left_as_it_is():
    async def scenario():
        addon, flow = Addon(), FakeFlow(b"HTTP/1.1")
        work = addon.request(flow)
        assert asyncio.iscoroutine(work) and work.cr_code is Addon.request.__wrapped__.__code__
        work.close()
        return h2_guard.cancel(flow)

    assert asyncio.run(scenario()) is False


def test_a_stopping_proxy_cancels_the_hook_itself():
    async def scenario():
        addon, flow = Addon(), FakeFlow()
        hook = asyncio.ensure_future(addon.request(flow))
        await addon.started.wait()
        hook.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hook
        return flow

    assert not asyncio.run(scenario()).killed


def test_a_shared_upstream_call_goes_when_its_last_caller_goes(tmp_path):
    """engine._shared: two streams asking the same call share it; one reset leaves it running
    for the other, the last one's reset cancels it (an upstream call nobody waits for)."""
    from stbproxy.engine import Engine

    calls = {"started": 0, "cancelled": 0}

    async def scenario():
        engine = Engine.__new__(Engine)  # only _shared's own state is needed
        engine._inflight, engine._waiting = {}, {}
        release = asyncio.Event()

        async def work():
            calls["started"] += 1
            try:
                await release.wait()
                return "answer"
            except asyncio.CancelledError:
                calls["cancelled"] += 1
                raise

        first = asyncio.ensure_future(engine._shared("k", work))
        second = asyncio.ensure_future(engine._shared("k", work))
        await asyncio.sleep(0.01)
        first.cancel()
        await asyncio.sleep(0.01)
        assert calls == {"started": 1, "cancelled": 0}
        release.set()
        assert await second == "answer"
        release.clear()
        third = asyncio.ensure_future(engine._shared("k", work))
        await asyncio.sleep(0.01)
        third.cancel()
        await asyncio.sleep(0.01)
        assert calls == {"started": 2, "cancelled": 1} and engine._inflight == {} and engine._waiting == {}
        fourth = asyncio.ensure_future(engine._shared("k", work))  # a new caller gets a new call
        await asyncio.sleep(0.01)
        release.set()
        assert await fourth == "answer" and calls["started"] == 3

    asyncio.run(scenario())


def test_the_stop_watch_ends_a_process_that_does_not_stop_in_time():
    exits = []
    watch = StopWatch(grace=0.2, exit=exits.append)
    watch.arm()
    time.sleep(0.5)
    assert exits == [1]  # the store was not closed: as after kill -9
    exits.clear()
    watch = StopWatch(grace=0.2, exit=exits.append)
    watch.closed = True
    watch.arm()
    time.sleep(0.5)
    assert exits == [0]
    exits.clear()
    watch = StopWatch(grace=0.3, exit=exits.append)
    watch.arm()
    watch.disarm()  # stopped in time
    time.sleep(0.5)
    assert exits == []


def test_the_stop_watch_is_armed_by_the_signal_whatever_the_loop_does():
    exits = []
    watch = StopWatch(grace=0.2, exit=exits.append)
    before = signal.getsignal(signal.SIGUSR1)
    seen = []
    signal.signal(signal.SIGUSR1, lambda *_: seen.append(True))
    try:
        watch.arm_on(signal.SIGUSR1)
        signal.raise_signal(signal.SIGUSR1)
        busy_until = time.monotonic() + 0.5  # a loop that never yields
        while time.monotonic() < busy_until:
            pass
        assert seen == [True]  # the handler that was there still runs
    finally:
        signal.signal(signal.SIGUSR1, before)
    time.sleep(0.1)
    assert exits == [1] and threading.active_count() >= 1


# -- mitmproxy's HTTP/2 layer with the guard, driven in-process (no sockets) ---------------------


class Layers:
    """mitmproxy's HTTP layer over one HTTP/2 client, guarded as serve guards it, fed what an
    h2 client sends; hooks are never answered, so every stream opened stays in work."""

    def __init__(self) -> None:
        from mitmproxy import connection
        from mitmproxy.addons import proxyserver
        from mitmproxy.proxy import context, events
        from mitmproxy.proxy.layers.http import HttpLayer, HTTPMode
        from mitmproxy.test import taddons

        from stbproxy.mitm import internals

        internals.guard_http2()
        self._addons = taddons.context(proxyserver.Proxyserver())
        client = connection.Client(peername=("127.0.0.1", 50000), sockname=("127.0.0.1", 8080), timestamp_start=0,
                                   alpn=b"h2", state=connection.ConnectionState.OPEN)
        ctx = context.Context(client, self._addons.options)
        ctx.server.address, ctx.server.tls = ("a.test", 443), True
        self.layer = HttpLayer(ctx, HTTPMode.transparent)
        self.client = client
        self.hooks: list[str] = []
        self.h2 = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        self.h2.initiate_connection()
        self.answers = self._drive(events.Start())

    def _drive(self, event) -> list:
        from mitmproxy.proxy import commands, events

        pending, received = [event], []
        while pending:
            for command in self.layer.handle_event(pending.pop(0)):
                if isinstance(command, commands.SendData):
                    received += self.h2.receive_data(command.data)
                elif isinstance(command, commands.RequestWakeup):
                    pending.append(events.Wakeup(command))  # the next turn's frames
                elif isinstance(command, commands.StartHook):
                    self.hooks.append(command.name)
        return received

    def send(self) -> list:
        from mitmproxy.proxy import events

        return self._drive(events.DataReceived(self.client, self.h2.data_to_send()))

    def open(self, count: int) -> list[int]:
        streams = []
        for n in range(count):
            stream = self.h2.get_next_available_stream_id()
            self.h2.send_headers(stream, [(":method", "GET"), (":scheme", "https"), (":authority", "a.test"),
                                          (":path", f"/{stream}")], end_stream=True)
            streams.append(stream)
        return streams

    def reset(self, streams: list[int]) -> None:
        for stream in streams:
            self.h2.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)


def test_streams_in_work_past_the_limit_are_refused_and_resets_past_the_budget_end_the_connection():
    import h2.events

    layers = Layers()
    opened = layers.open(h2_guard.MAX_STREAMS)
    layers.send()
    assert layers.hooks.count("requestheaders") == h2_guard.MAX_STREAMS
    layers.reset(opened[:60])  # closed for HTTP/2, but their answers (hooks) are still under way
    layers.send()
    extra = layers.open(1)
    answers = layers.send()
    refused = [a for a in answers if isinstance(a, h2.events.StreamReset)]
    assert [(a.stream_id, a.error_code) for a in refused] == [(extra[0], h2.errors.ErrorCodes.REFUSED_STREAM)]
    assert layers.hooks.count("requestheaders") == h2_guard.MAX_STREAMS  # nothing was begun for it
    layers.reset(opened[60:])  # 60 + 1 refused + 40 = 101 resets: past the budget
    answers = layers.send()
    ended = [a for a in answers if isinstance(a, h2.events.ConnectionTerminated)]
    assert len(ended) == 1 and ended[0].error_code == h2.errors.ErrorCodes.ENHANCE_YOUR_CALM


def test_a_request_reset_in_the_same_frames_or_already_waiting_is_never_opened():
    layers = Layers()
    for _ in range(10):  # ten request-then-reset pairs, each pair in one write
        layers.reset(layers.open(1))
    batch = layers.open(20)  # twenty requests, then their resets, in one write
    layers.reset(batch)
    layers.send()
    assert "requestheaders" not in layers.hooks
