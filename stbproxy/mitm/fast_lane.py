"""The fast lane: plain HTTP/1.1 requests answered without mitmproxy's protocol layers.

mitmproxy runs every request through a sans-IO machine of layers, events and hook tasks,
which on its own costs more CPU than everything stbproxy does for a cache hit. So each
client connection of the embedded master starts here. A request head is parsed with
mitmproxy's own HTTP/1 reader; a request of the plain kind is answered by firing the same
addon hooks mitmproxy fires for it (requestheaders, request, response) on a flow built as
mitmproxy builds it, and the response goes out as mitmproxy's HTTP/1 writer writes it. The
first request of any other kind, and everything after it on that connection, is handed to
mitmproxy with the bytes already read put back in front.

The plain kind: HTTP/1.1, origin-form or ``http://`` absolute-form, no CONNECT (so no
HTTPS) or HEAD, no Expect or Upgrade, no body or a Content-Length one of at most
MAX_BODY bytes, and a head mitmproxy itself accepts. Nothing is fired before the whole
request has arrived, so a hand-over never repeats a hook.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import Awaitable, Callable

from mitmproxy import connection, flow as mitm_flow, http
from mitmproxy.net.http import http1
from mitmproxy.proxy.layers.http import HTTPMode, HttpErrorHook, HttpRequestHeadersHook, HttpRequestHook, \
    HttpResponseHook, validate_request
from mitmproxy.proxy.layers.http._http1 import make_error_response
from mitmproxy.net.http.url import parse_authority
from mitmproxy.net.http.validate import parse_content_length

from stbproxy.recent import Recent

log = logging.getLogger("stbproxy")

MAX_BODY = 1 << 20  # larger bodies take mitmproxy's path (which may stream them)
MAX_HEAD = 64 << 10  # a head not complete within this many bytes is mitmproxy's to judge
READ_SIZE = 65536
_BLANK_LINE = re.compile(rb"\n\r?\n")  # the end of a head, as mitmproxy's HTTP/1 reader finds it
_METHOD_START = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_AUTHORITIES: Recent[tuple] = Recent(256)
_INVALID = ("", None)

HandOver = Callable[["_Replayed", asyncio.StreamWriter], Awaitable[None]]


class _Replayed:
    """The client's reader with bytes already read put back in front: what mitmproxy reads
    first when a connection is handed over."""

    def __init__(self, prefix: bytes, reader: asyncio.StreamReader) -> None:
        self._prefix = prefix
        self._reader = reader

    async def read(self, n: int = -1) -> bytes:
        if self._prefix:
            if n < 0:
                n = len(self._prefix)
            data, self._prefix = self._prefix[:n], self._prefix[n:]
            return data
        return await self._reader.read(n)

    def __getattr__(self, name: str):
        return getattr(self._reader, name)


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

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        buffer = b""
        client = None
        # mitmproxy copies an option's value on every read: read once per connection
        enabled, validate_headers = self.enabled(), self.options.validate_inbound_headers
        try:
            while True:
                head_end = _head_end(buffer)
                while head_end is None:
                    if len(buffer) > MAX_HEAD or (buffer and buffer[0] not in _METHOD_START) or not enabled:
                        return await self.hand_over(_Replayed(buffer, reader), writer)  # TLS, odd input, options
                    data = await reader.read(READ_SIZE)
                    if not data:
                        if buffer:  # a head cut short: mitmproxy says so in its log, as usual
                            return await self.hand_over(_Replayed(buffer, reader), writer)
                        writer.close()
                        return
                    buffer += data
                    head_end = _head_end(buffer)
                plain = _plain_request(buffer[:head_end], validate_headers)
                if plain is None:
                    return await self.hand_over(_Replayed(buffer, reader), writer)
                request, size, request_closes = plain
                while len(buffer) < head_end + size:
                    data = await reader.read(READ_SIZE)
                    if not data:  # the client left mid-body
                        return await self.hand_over(_Replayed(buffer, reader), writer)
                    buffer += data
                body, buffer = buffer[head_end:head_end + size], buffer[head_end + size:]
                if client is None:
                    client = connection.Client(
                        peername=writer.get_extra_info("peername"), sockname=writer.get_extra_info("sockname"),
                        timestamp_start=time.time(), proxy_mode=self.mode, state=connection.ConnectionState.OPEN)
                    server = connection.Server(address=None)
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
        if await self._killed(flow):
            return False
        request.data.content = body
        request.timestamp_end = time.time()
        await self.addons.handle_lifecycle(HttpRequestHook(flow))
        if await self._killed(flow):
            return False
        response = flow.response
        if response is None:  # mitmproxy would go upstream; every stbproxy request is answered by its addon
            log.error("stbproxy: no answer for %s %s", request.method, request.pretty_url)
            writer.write(make_error_response(502, "stbproxy gave no answer"))
            return False
        response.timestamp_end = time.time()
        await self.addons.handle_lifecycle(HttpResponseHook(flow))
        if await self._killed(flow):
            return False
        flow.live = False
        names = {name.lower() for name, _ in flow.response.headers.fields}
        writer.write(_response_bytes(flow.response, names))
        return not _closes(request, flow.response, names)

    async def _killed(self, flow: http.HTTPFlow) -> bool:
        """An addon killed the flow: mitmproxy then fires the error hook and closes silently."""
        if flow.error is not None and flow.error.msg == mitm_flow.Error.KILLED_MESSAGE:
            await self.addons.handle_lifecycle(HttpErrorHook(flow))
            return True
        return False


def _head_end(buffer: bytes) -> int | None:
    """Where the first request head in ``buffer`` ends (after its blank line), if it does."""
    found = _BLANK_LINE.search(buffer)
    return found.end() if found is not None else None


def _plain_request(head: bytes, validate_headers: bool) -> tuple[http.Request, int, bool] | None:
    """The request mitmproxy would read from ``head``, its body's length and whether it asks
    to close the connection, when it is of the plain kind.

    mitmproxy's header lookups walk every field each time, so the checks below look at the
    lower-cased field names once, and ask mitmproxy's own functions where the answer is not
    plain (several Content-Length or Host fields, a Connection field)."""
    lines = [line[:-1] if line.endswith(b"\r") else line for line in head.split(b"\n")[:-2]]
    if not lines or not lines[0]:
        return None  # a leading blank line: mitmproxy skips it in its own way
    try:
        request = http1.read_request_head(lines)
    except ValueError:
        return None  # mitmproxy answers 400 and says why
    fields = request.headers.fields
    names = [name.lower() for name, _ in fields]
    if (request.http_version != "HTTP/1.1" or request.method.upper() in ("CONNECT", "HEAD") or request.path == "*"
            or request.scheme not in ("", "http") or b"expect" in names or b"upgrade" in names
            or b"transfer-encoding" in names):
        return None
    if validate_request(HTTPMode.regular, request, validate_headers) is not None:
        return None
    lengths = [value for name, (_, value) in zip(names, fields) if name == b"content-length"]
    if not lengths:
        size = 0  # a request without Content-Length or Transfer-Encoding has no body
    elif len(lengths) == 1:
        try:
            size = parse_content_length(lengths[0])
        except ValueError:
            return None
        if size > MAX_BODY:
            return None
    else:
        return None
    if not request.host:  # origin-form: the Host header names the destination
        hosts = [value for name, (_, value) in zip(names, fields) if name == b"host"]
        if len(hosts) != 1:
            return None
        authority = _authority(hosts[0])
        if authority is None:
            return None
        host, port = authority
        request.data.host = host
        request.data.port = port or 80
        request.scheme = "http"
    request.authority = ""  # origin-form towards servers, as mitmproxy sends HTTP/1 requests on
    closes = False
    if b"connection" in names:
        values = [value for name, (_, value) in zip(names, fields) if name == b"connection"]
        closes = values != [b"keep-alive"] and http1.connection_close(request.http_version, request.headers)
    return request, size, closes


def _authority(value: bytes) -> tuple[str, int | None] | None:
    """A Host header's host and port as mitmproxy reads them (remembered: they repeat)."""
    known = _AUTHORITIES.get(value)
    if known is None:
        try:
            known = parse_authority(value.decode("utf-8", "surrogateescape"), check=True)
        except ValueError:
            known = _INVALID
        _AUTHORITIES.put(value, known)
    return None if known is _INVALID else known


def _response_bytes(response: http.Response, names: set[bytes]) -> bytes:
    """The response as mitmproxy's HTTP/1 server writes it (``names``: its lower-cased field names)."""
    head = http1.assemble_response_head(response)
    content = response.raw_content or b""
    if b"transfer-encoding" not in names or "chunked" not in response.headers.get("transfer-encoding", "").lower():
        return head + content
    return head + (b"%x\r\n%s\r\n" % (len(content), content) if content else b"") + b"0\r\n\r\n"


def _closes(request: http.Request, response: http.Response, names: set[bytes]) -> bool:
    """Whether mitmproxy would close the connection after this response to a request that
    does not ask for that itself."""
    if response.status_code == 101:
        return True  # mitmproxy would turn the connection into a pipe; there is nothing to pipe to
    if (response.http_version == "HTTP/1.1" and b"content-length" in names and b"connection" not in names
            and b"transfer-encoding" not in names):
        return False  # a known length (or none expected), nothing asking to close: mitmproxy's answer
    try:
        until_eof = http1.expected_http_body_size(request, response) == -1
    except ValueError:
        until_eof = False
    return until_eof or http1.connection_close(response.http_version, response.headers)
