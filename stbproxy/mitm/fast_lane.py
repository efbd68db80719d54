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
whose HTTPS requests of the plain kind the lane answers too. Nothing is fired before the
whole request has arrived, so a hand-over repeats no hook (but for a tunnel whose first
bytes are not TLS: mitmproxy reads its CONNECT again).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

from mitmproxy import connection, flow as mitm_flow, http
from mitmproxy.proxy.layers.http import HttpErrorHook, HttpRequestHeadersHook, HttpRequestHook, HttpResponseHook

from stbproxy.mitm.internals import make_error_response

from stbproxy.mitm.plain_http import MAX_BODY, MAX_HEAD, METHOD_START, Replayed, closes, connect_request, head_end, \
    plain_request, response_bytes
from stbproxy.mitm.tunnel_lane import Tunnel

log = logging.getLogger("stbproxy")

READ_SIZE = 65536
__all__ = ["FastLane", "MAX_BODY"]

HandOver = Callable[[Replayed, asyncio.StreamWriter], Awaitable[None]]


class FastLane:
    """Serves one listening socket's connections (``serve``), for the master's addons."""

    def __init__(self, addons, options, mode, hand_over: HandOver) -> None:
        self.addons = addons  # the master's addon manager: the hooks fire through it
        self.options = options
        self.mode = mode  # the listening instance's proxy mode (regular)
        self.hand_over = hand_over

    def enabled(self) -> bool:
        """Options that change how mitmproxy reads a request body send everything its way."""
        return self.options.body_size_limit is None and self.options.stream_large_bodies is None

    def tunnels_enabled(self) -> bool:
        """Options under which mitmproxy would connect upstream or pass a tunnel through
        untouched send CONNECTs its way (tunnel_lane.py opens no server connections)."""
        options = self.options
        return (options.connection_strategy == "lazy" and not options.ignore_hosts and not options.allow_hosts
                and not options.tcp_hosts and not options.add_upstream_certs_to_client_chain)

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buffer = b""
        client = None
        # mitmproxy copies an option's value on every read: read once per connection
        enabled, tunnels = self.enabled(), self.tunnels_enabled()
        validate_headers = self.options.validate_inbound_headers
        try:
            while True:
                end = head_end(buffer)
                while end is None:
                    if len(buffer) > MAX_HEAD or (buffer and buffer[0] not in METHOD_START) or not enabled:
                        return await self.hand_over(Replayed(buffer, reader), writer)  # TLS, odd input, options
                    data = await reader.read(READ_SIZE)
                    if not data:
                        if buffer:  # a head cut short: mitmproxy says so in its log, as usual
                            return await self.hand_over(Replayed(buffer, reader), writer)
                        writer.close()
                        return
                    buffer += data
                    end = head_end(buffer)
                if client is None:
                    client = connection.Client(
                        peername=writer.get_extra_info("peername"), sockname=writer.get_extra_info("sockname"),
                        timestamp_start=time.time(), proxy_mode=self.mode, state=connection.ConnectionState.OPEN)
                    server = connection.Server(address=None)
                if tunnels and buffer.startswith(b"CONNECT "):
                    connect = connect_request(buffer[:end], validate_headers)
                    if connect is None:
                        return await self.hand_over(Replayed(buffer, reader), writer)
                    tunnel = Tunnel(self, client, reader, writer, validate_headers)
                    refused = await tunnel.run(connect, buffer[:end], buffer[end:])
                    if refused is None:
                        return  # the tunnel has been served to its end
                    if refused:
                        writer.close()
                        return
                    buffer = buffer[end:]  # a refused CONNECT (407, 403): the connection goes on
                    await writer.drain()
                    continue
                plain = plain_request(buffer[:end], validate_headers)
                if plain is None:
                    return await self.hand_over(Replayed(buffer, reader), writer)
                request, size, request_closes = plain
                while len(buffer) < end + size:
                    data = await reader.read(READ_SIZE)
                    if not data:  # the client left mid-body
                        return await self.hand_over(Replayed(buffer, reader), writer)
                    buffer += data
                body, buffer = buffer[end:end + size], buffer[end + size:]
                keep_open = await self.answer(request, body, client, server, writer)
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

    async def answer(self, request: http.Request, body: bytes, client, server, writer) -> bool:
        """Fire the hooks for one request and write its response; False: close the connection."""
        flow = http.HTTPFlow(client, server, live=True)
        flow.request = request
        await self.addons.handle_lifecycle(HttpRequestHeadersHook(flow))
        if await self.killed(flow):
            return False
        request.data.content = body
        request.timestamp_end = time.time()
        await self.addons.handle_lifecycle(HttpRequestHook(flow))
        if await self.killed(flow):
            return False
        response = flow.response
        if response is None:  # mitmproxy would go upstream; every stbproxy request is answered by its addon
            log.error("stbproxy: no answer for %s %s", request.method, request.pretty_url)
            writer.write(make_error_response(502, "stbproxy gave no answer"))
            return False
        response.timestamp_end = time.time()
        await self.addons.handle_lifecycle(HttpResponseHook(flow))
        if await self.killed(flow):
            return False
        flow.live = False
        names = {name.lower() for name, _ in flow.response.headers.fields}
        writer.write(response_bytes(flow.response, names))
        return not closes(request, flow.response, names)

    async def killed(self, flow: http.HTTPFlow) -> bool:
        """An addon killed the flow: mitmproxy then fires the error hook and closes silently."""
        if flow.error is not None and flow.error.msg == mitm_flow.Error.KILLED_MESSAGE:
            await self.addons.handle_lifecycle(HttpErrorHook(flow))
            return True
        return False
