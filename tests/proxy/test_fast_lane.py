"""The fast lane (stbproxy/mitm/fast_lane.py): which requests it answers itself and which it
hands to mitmproxy, byte for byte, on real loopback connections.

The lane runs here with a recording stand-in for the master's addon manager, so that each
test sees exactly which hooks fired and what was handed over; test_fast_lane_differential.py
compares whole proxies with and without it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import pytest
from mitmproxy import http
from mitmproxy.addons.proxyserver import Proxyserver
from mitmproxy.net.http import http1
from mitmproxy.proxy import mode_specs
from mitmproxy.proxy.layers.http import HttpErrorHook, HttpRequestHeadersHook, HttpRequestHook
from mitmproxy.test import taddons

from stbproxy.mitm.fast_lane import MAX_BODY, FastLane

ANSWER = b'{"ok": true}'


class Addons:
    """Answers every request hook as stbproxy's addon does (a response on the flow), and
    records the hooks fired."""

    def __init__(self, respond=None) -> None:
        self.fired: list[tuple[str, http.HTTPFlow]] = []
        self.respond = respond or (lambda flow: http.Response.make(200, ANSWER, {"Content-Type": "application/json"}))

    async def handle_lifecycle(self, event) -> None:
        flow = event.flow
        self.fired.append((type(event).__name__, flow))
        if isinstance(event, HttpRequestHook):
            flow.response = self.respond(flow)


class Lane:
    """A FastLane on a loopback port; ``handed`` collects what mitmproxy would have read."""

    def __init__(self, addons: Addons, **option_updates) -> None:
        self.addons = addons
        with taddons.context(Proxyserver()) as context:  # the options the proxy server addon defines
            context.options.update(**option_updates)
            self.options = context.options
        self.handed: list[bytes] = []
        self.handed_over = asyncio.Event()

    async def hand_over(self, reader, writer) -> None:
        received = b""
        while chunk := await reader.read(65535):  # what mitmproxy would read: the bytes put back first
            received += chunk
            if received.endswith(b"END"):
                break
        self.handed.append(received)
        self.handed_over.set()
        writer.close()

    async def __aenter__(self):
        lane = FastLane(self.addons, self.options, mode_specs.ProxyMode.parse("regular"), self.hand_over)
        self.server = await asyncio.start_server(lane.serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        await self.server.wait_closed()

    async def exchange(self, raw: bytes, responses: int = 1) -> tuple[bytes, bool]:
        """Send ``raw``; read ``responses`` answers; True when the lane then closed the connection."""
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        try:
            writer.write(raw)
            received = b""
            for _ in range(responses):
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
                length = int(http.Headers([tuple(line.split(b": ", 1)) for line in head.split(b"\r\n")[1:-2]])
                             .get("content-length", "0"))
                received += head + await reader.readexactly(length)
            closed = await _closed(reader)
            return received, closed
        finally:
            writer.close()


async def _closed(reader: asyncio.StreamReader) -> bool:
    with contextlib.suppress(asyncio.TimeoutError):
        return await asyncio.wait_for(reader.read(1), 0.3) == b""
    return False


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 20))


def handed_over(raw: bytes, addons: Addons, *, then_eof: bool = False, **option_updates) -> list[bytes]:
    """Send ``raw`` (then end the stream, if asked) and return what the lane handed to mitmproxy."""
    async def scenario():
        async with Lane(addons, **option_updates) as lane:
            reader, writer = await asyncio.open_connection("127.0.0.1", lane.port)
            writer.write(raw)
            await writer.drain()
            if then_eof:
                writer.write_eof()
            await asyncio.wait_for(lane.handed_over.wait(), 10)
            writer.close()
        return lane.handed

    return run(scenario())


GET = b"GET http://api.example.com/v1/items?q=1 HTTP/1.1\r\nHost: api.example.com\r\nAccept: */*\r\n\r\n"
POST_VIRTUAL = (b"POST /virtual HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Type: application/json\r\n"
                b"Content-Length: 11\r\n\r\n{\"a\": \"b\"}\n")


def test_a_plain_request_is_answered_by_the_hooks_mitmproxy_fires_in_its_order():
    async def scenario():
        addons = Addons()
        async with Lane(addons) as lane:
            received, closed = await lane.exchange(GET + POST_VIRTUAL, responses=2)
        return addons, lane, received, closed

    addons, lane, received, closed = run(scenario())
    expected = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\ncontent-length: 12\r\n\r\n" + ANSWER)
    assert received == expected * 2
    assert not closed and not lane.handed  # keep-alive, nothing for mitmproxy
    assert [name for name, _ in addons.fired] == ["HttpRequestHeadersHook", "HttpRequestHook", "HttpResponseHook"] * 2
    first, second = addons.fired[0][1], addons.fired[3][1]
    assert first.request.url == "http://api.example.com/v1/items?q=1" and first.request.content == b""
    assert first.request.authority == ""  # origin-form onwards, as mitmproxy sends HTTP/1 requests
    # origin-form: the destination is the Host header's, as mitmproxy reads it
    assert (second.request.host, second.request.port, second.request.path) == ("127.0.0.1", 8080, "/virtual")
    assert second.request.content == b'{"a": "b"}\n'
    assert first.client_conn is second.client_conn and first.client_conn.peername[0] == "127.0.0.1"
    assert first.id != second.id


@pytest.mark.parametrize("raw", [
    b"GET http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n",
    b"GET http://api.example.com/ HTTP/1.1\nHost: api.example.com\nConnection: close\n\n",  # bare LF, as mitmproxy
], ids=["crlf", "bare-lf"])
def test_connection_close_is_honoured(raw):
    async def scenario():
        async with Lane(Addons()) as lane:
            return await lane.exchange(raw)

    received, closed = run(scenario())
    assert received.startswith(b"HTTP/1.1 200 OK\r\n") and closed


@pytest.mark.parametrize("connection", [b"keep-alive", b"Keep-Alive", b"keep-alive, close", b"close", b"Close"])
def test_the_connection_header_decides_as_mitmproxy_does(connection):
    # mitmproxy compares the tokens as written: "Close" keeps the connection open there too
    closes = http1.connection_close("HTTP/1.1", http.Headers(connection=connection.decode()))
    raw = b"GET http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\nConnection: %s\r\n\r\n" % connection

    async def scenario():
        async with Lane(Addons()) as lane:
            return await lane.exchange(raw)

    received, closed = run(scenario())
    assert received.endswith(ANSWER) and closed is closes


def test_a_response_that_asks_to_close_closes_the_connection():
    addons = Addons(lambda flow: http.Response.make(200, b"x", {"Connection": "close"}))

    async def scenario():
        async with Lane(addons) as lane:
            return await lane.exchange(GET)

    received, closed = run(scenario())
    assert received.endswith(b"\r\n\r\nx") and closed


# Each of these goes to mitmproxy whole: the lane fires nothing for it.
HANDED_OVER = {
    "connect": b"CONNECT api.example.com:443 HTTP/1.1\r\nHost: api.example.com:443\r\n\r\n",
    "head": b"HEAD http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
    "head-odd-case": b"Head http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
    "http/1.0": b"GET http://api.example.com/ HTTP/1.0\r\nHost: api.example.com\r\n\r\n",
    "chunked": b"POST http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"3\r\nabc\r\n0\r\n\r\n",
    "expect": b"POST http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n"
              b"Expect: 100-continue\r\nContent-Length: 1\r\n\r\n",
    "upgrade": b"GET http://api.example.com/ws HTTP/1.1\r\nHost: api.example.com\r\n"
               b"Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    "https-absolute": b"GET https://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
    "no-host": b"GET / HTTP/1.1\r\nAccept: */*\r\n\r\n",
    "asterisk": b"OPTIONS * HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
    "bad-request-line": b"GET http://api.example.com/ HTTP/1.1 extra\r\nHost: api.example.com\r\n\r\n",
    "bad-header": b"GET http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\nNo colon here\r\n\r\n",
    "smuggling": b"POST http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n"
                 b"Content-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
    "two-lengths": b"POST http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\n"
                   b"Content-Length: 1\r\nContent-Length: 2\r\n\r\nab",
    "tls-client-hello": bytes.fromhex("160301020001000200fe03") + b"\x00" * 40,
    "http2-preface": b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
}


@pytest.mark.parametrize("name", sorted(HANDED_OVER))
def test_anything_but_the_plain_kind_is_handed_to_mitmproxy_byte_for_byte(name):
    raw = HANDED_OVER[name] + b"END"
    addons = Addons()
    assert handed_over(raw, addons) == [raw] and addons.fired == []


def test_after_plain_requests_the_rest_of_the_connection_goes_to_mitmproxy():
    addons = Addons()
    rest = HANDED_OVER["head"] + GET + b"END"  # pipelined: the plain GET after the HEAD is mitmproxy's too

    async def scenario():
        async with Lane(addons) as lane:
            reader, writer = await asyncio.open_connection("127.0.0.1", lane.port)
            writer.write(GET + rest)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            await asyncio.wait_for(lane.handed_over.wait(), 5)
            writer.close()
        return lane, head

    lane, head = run(scenario())
    assert head.startswith(b"HTTP/1.1 200 OK") and lane.handed == [rest]
    assert len(addons.fired) == 3  # the first GET's hooks only


def test_a_body_over_the_limit_is_handed_over_whole():
    body = b"x" * (MAX_BODY + 1)
    raw = (b"POST http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: %d\r\n\r\n" % len(body)
           + body + b"\r\n\r\nEND")
    addons = Addons()
    assert handed_over(raw, addons) == [raw] and addons.fired == []


def test_a_body_over_mitmproxys_limit_is_handed_to_it_to_refuse():
    # serve sets body_size_limit (--max-request-body); mitmproxy answers 413 before reading the body
    body = b"x" * 3000
    raw = (b"POST http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: %d\r\n\r\n" % len(body)
           + body + b"END")
    addons = Addons()
    assert handed_over(raw, addons, body_size_limit="2k") == [raw] and addons.fired == []


@pytest.mark.parametrize("raw, answers", [
    (b"\r\n\n" + GET, 1),
    (GET + b"\r\n" + GET, 2),  # an empty line between two requests, as some old clients send after a body
    (b"\r\n" + POST_VIRTUAL + b"\r\n\r\n" + GET, 2),
], ids=["before-the-first", "between", "after-a-body"])
def test_empty_lines_before_a_request_line_are_skipped(raw, answers):
    addons = Addons()

    async def scenario():
        async with Lane(addons) as lane:
            received, _ = await lane.exchange(raw, responses=answers)
        return lane, received

    lane, received = run(scenario())
    assert received.count(b"HTTP/1.1 200 OK") == answers and not lane.handed
    assert [name for name, _ in addons.fired].count("HttpRequestHook") == answers


def test_a_client_that_leaves_mid_body_is_let_go_with_one_quiet_line(caplog):
    partial = b"POST http://api.example.com/ HTTP/1.1\r\nHost: api.example.com\r\nContent-Length: 100\r\n\r\nabc"
    addons = Addons()

    async def scenario():
        async with Lane(addons) as lane:
            reader, writer = await asyncio.open_connection("127.0.0.1", lane.port)
            writer.write(partial)
            writer.write_eof()
            answer = await asyncio.wait_for(reader.read(), 5)
            writer.close()
        return lane, answer

    with caplog.at_level(logging.INFO, logger="stbproxy"):
        lane, answer = run(scenario())
    assert answer == b"" and not lane.handed and addons.fired == []
    lines = [r for r in caplog.records if r.name == "stbproxy"]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO
    assert "left in the middle of a request body (3 of 100 bytes)" in lines[0].getMessage()


def test_options_that_change_how_mitmproxy_reads_bodies_turn_the_lane_off():
    addons = Addons()
    raw = GET + b"END"
    assert handed_over(raw, addons, stream_large_bodies="1m") == [raw] and addons.fired == []


def test_a_killed_flow_fires_the_error_hook_and_closes_without_an_answer():
    class Killer(Addons):
        async def handle_lifecycle(self, event) -> None:
            await super().handle_lifecycle(event)
            if isinstance(event, HttpRequestHeadersHook):
                event.flow.kill()

    addons = Killer()

    async def scenario():
        async with Lane(addons) as lane:
            reader, writer = await asyncio.open_connection("127.0.0.1", lane.port)
            writer.write(GET)
            data = await asyncio.wait_for(reader.read(), 5)
            writer.close()
        return data

    assert run(scenario()) == b""
    assert [name for name, _ in addons.fired] == ["HttpRequestHeadersHook", HttpErrorHook.__name__]


def test_an_addon_failure_closes_that_connection_and_the_lane_serves_the_next(caplog):
    calls = []

    def respond(flow):
        calls.append(flow)
        if len(calls) == 1:
            return "not a response"  # the lane cannot write this
        return http.Response.make(200, ANSWER)

    async def scenario():
        async with Lane(Addons(respond)) as lane:
            reader, writer = await asyncio.open_connection("127.0.0.1", lane.port)
            writer.write(GET)
            first = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            second, _ = await lane.exchange(GET)
        return first, second

    first, second = run(scenario())
    assert first == b"" and second.endswith(ANSWER)
    assert "failed in the fast lane (AttributeError)" in caplog.text
