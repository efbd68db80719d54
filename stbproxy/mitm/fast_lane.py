"""The fast lane: plain HTTP/1.1 requests answered without mitmproxy's protocol layers.

mitmproxy runs every request through a sans-IO machine of layers, events and hook tasks,
which on its own costs more CPU than everything stbproxy does for a cache hit. So each
client connection of the embedded master starts here. A request head is parsed with
mitmproxy's own HTTP/1 reader; a request of the plain kind is answered by firing the same
addon hooks mitmproxy fires for it (requestheaders, request, response) on a flow built as
mitmproxy builds it, and the response goes out as mitmproxy's HTTP/1 writer writes it. The
first request of any other kind, and everything after it on that connection, is handed to
mitmproxy with the bytes already read put back in front.

The plain kind is described in plain_http.py. A CONNECT starts a tunnel (tunnel_lane.py),
whose HTTPS requests of the plain kind the lane answers too. Which door a request takes
(this lane, the tunnel, mitmproxy) is chosen by lanes.Doors. Nothing is fired before the
whole request has arrived, so a hand-over repeats no hook (but for a tunnel whose first
bytes are not TLS: mitmproxy reads its CONNECT again).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

from mitmproxy import connection, http
from mitmproxy import flow as mitm_flow
from mitmproxy.proxy.layers.http import HttpErrorHook, HttpRequestHeadersHook, HttpRequestHook, HttpResponseHook
from mitmproxy.utils import human

from stbproxy.mitm.client_tls import ClientTls
from stbproxy.mitm.connections import Watched, WatchedReader
from stbproxy.mitm.internals import make_error_response
from stbproxy.mitm.lanes import FAST, HEAD_CUT_SHORT, LANE, Door, Doors
from stbproxy.mitm.plain_http import MAX_BODY, Replayed, closes, head_end, response_bytes, response_names
from stbproxy.mitm.streaming import STREAM, ClientWriter, carry, chunked_head
from stbproxy.mitm.tunnel_lane import Tunnel

log = logging.getLogger("stbproxy")

READ_SIZE = 65536
EMPTY_LINE_START = (b"\r", b"\n")
__all__ = ["FastLane", "MAX_BODY"]

HandOver = Callable[[Replayed, asyncio.StreamWriter], Awaitable[None]]


class FastLane:
    """Serves one listening socket's connections (``serve``), for the master's addons; a
    lanes.Lane."""

    name = FAST

    def __init__(self, addons, options, mode, hand_over: HandOver) -> None:
        self.addons = addons  # the master's addon manager: the hooks fire through it
        self.options = options
        self.mode = mode  # the listening instance's proxy mode (regular)
        self.hand_over = hand_over
        self.client_tls = ClientTls(addons, options)  # a tunnel's TLS on Python's ssl, where it can be
        # the lean master's addon manager fires a flow's hooks without making their events
        fire_flow = getattr(addons, "fire_flow", None)
        self.fire = fire_flow if fire_flow is not None else self._fire

    async def _fire(self, event_type, flow: http.HTTPFlow) -> None:
        await self.addons.handle_lifecycle(event_type(flow))

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    watched: Watched | None = None) -> None:
        """Serve one client connection; ``watched`` hears what it is doing (connections.py)."""
        if watched is None:  # a lane on its own: a record no watch reads
            watched = Watched(writer, writer.get_extra_info("peername"), time.monotonic())
        buffer = b""
        client = None
        doors = Doors(self.options)  # chooses the door of each request (lanes.py)
        watched.by_lane = True

        async def hand_over(door: Door, output=writer) -> None:
            watched.by_lane = False
            watched.handed_over = door.reason
            await self.hand_over(Replayed(buffer, WatchedReader(reader, watched)), output)

        try:
            while True:
                if buffer[:1] in EMPTY_LINE_START:
                    buffer = buffer.lstrip(b"\r\n")  # empty lines before a request line are ignored (RFC 9112)
                end = head_end(buffer)
                while end is None:
                    door = doors.waiting(buffer)
                    if door is not None:
                        return await hand_over(door)  # TLS, odd input, options
                    data = await reader.read(READ_SIZE)
                    if not data:
                        if buffer:  # a head cut short: mitmproxy says so in its log, as usual
                            return await hand_over(HEAD_CUT_SHORT)
                        writer.close()
                        return
                    watched.read(time.monotonic())
                    buffer = buffer + data if buffer else data.lstrip(b"\r\n")
                    end = head_end(buffer)
                if client is None:
                    client = connection.Client(
                        peername=writer.get_extra_info("peername"), sockname=writer.get_extra_info("sockname"),
                        timestamp_start=time.time(), proxy_mode=self.mode, state=connection.ConnectionState.OPEN)
                    server = connection.Server(address=None)
                if doors.is_connect(buffer):
                    door, connect = doors.connect(buffer[:end])
                    if connect is None:
                        return await hand_over(door)
                    tunnel = Tunnel(self, client, reader, writer, doors, watched)
                    refused = await tunnel.run(connect, buffer[:end], buffer[end:])
                    if refused is None:
                        return  # the tunnel has been served to its end
                    if refused:
                        writer.close()
                        return
                    buffer = buffer[end:]  # a refused CONNECT (407, 403): the connection goes on
                    await writer.drain()
                    continue
                plain = doors.plain(buffer[:end])
                if plain is None:
                    return await hand_over(doors.not_plain(buffer[:end]))
                request, size, request_closes = plain
                watched.head_done()
                while len(buffer) < end + size:
                    data = await reader.read(READ_SIZE)
                    if not data:
                        log.info("stbproxy: %s left in the middle of a request body (%d of %d bytes); nothing was "
                                 "forwarded or stored", human.format_address(client.peername), len(buffer) - end,
                                 size)
                        writer.close()
                        return
                    watched.read(time.monotonic())
                    buffer += data
                body, buffer = buffer[end:end + size], buffer[end + size:]
                watched.body_done()
                keep_open = await self.answer(request, body, client, server, writer, reader.read)
                watched.answered(time.monotonic())
                if not keep_open or request_closes:
                    writer.close()
                    return
                await writer.drain()
        except ConnectionError:
            writer.close()
        except Exception as exc:  # one bad request never takes the proxy down; its text may hold secrets
            log.error("stbproxy: a request from %s failed in the fast lane (%s); its connection was closed",
                      writer.get_extra_info("peername"), type(exc).__name__)
            writer.close()

    async def answer(self, request: http.Request, body: bytes, client, server, writer: ClientWriter,
                     client_says: Callable[[int], Awaitable[bytes]], lane: str = FAST) -> bool:
        """Fire the hooks for one request and write its response; False: close the connection.
        (``client_says`` reads the client while a streamed answer is written: streaming.py;
        ``lane``: the door the flow came in by, the tunnel's for its requests.)"""
        flow = http.HTTPFlow(client, server, live=True)
        flow.metadata[LANE] = lane  # the addon may hand over a body still arriving (streaming.py)
        flow.request = request
        await self.fire(HttpRequestHeadersHook, flow)
        if flow.error is not None and await self.killed(flow):  # (no coroutine for a live flow)
            return False
        request.data.content = body
        request.timestamp_end = time.time()
        await self.fire(HttpRequestHook, flow)
        if flow.error is not None and await self.killed(flow):  # (no coroutine for a live flow)
            return False
        response = flow.response
        if response is None:  # mitmproxy would go upstream; every stbproxy request is answered by its addon
            return _no_answer(request, writer)
        response.timestamp_end = time.time()
        await self.fire(HttpResponseHook, flow)
        if flow.error is not None and await self.killed(flow):  # (no coroutine for a live flow)
            return False
        response = flow.response  # the hook may have put another in its place
        if response is None:
            return _no_answer(request, writer)
        stream = flow.metadata.pop(STREAM, None)
        if stream is not None:
            head = chunked_head(response)
            keep_open = await carry(stream, head, writer, lambda: client_says(READ_SIZE))
            flow.live = False
            names = response_names(response)
            return keep_open and not closes(request, response, names)
        flow.live = False
        names = response_names(response)
        writer.write(response_bytes(response, names))
        return not closes(request, response, names)

    async def killed(self, flow: http.HTTPFlow) -> bool:
        """An addon killed the flow: mitmproxy then fires the error hook and closes silently
        (and a server's stream the answer would have carried is closed)."""
        if flow.error is not None and flow.error.msg == mitm_flow.Error.KILLED_MESSAGE:
            await self.fire(HttpErrorHook, flow)
            stream = flow.metadata.pop(STREAM, None)
            if stream is not None:
                await stream.aclose()
            return True
        return False


def _no_answer(request: http.Request, writer: ClientWriter) -> bool:
    """No response after the hooks: a 502, and the connection closes."""
    log.error("stbproxy: no answer for %s to %s", request.method, request.host)  # no path: it may hold a secret
    writer.write(make_error_response(502, "stbproxy gave no answer"))
    return False
