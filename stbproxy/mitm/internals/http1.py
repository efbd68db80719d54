"""mitmproxy's HTTP/1 server layer, mended (``layers.http._http1``: ``Http1Server.read_headers``,
``.read_body``, ``make_error_response`` and what they read)."""

from __future__ import annotations

from typing import Callable

from mitmproxy.proxy import commands, events


def mend_http1_server(error_response: Callable[[int, str], bytes]) -> None:
    """The answers mitmproxy 11's HTTP/1 server layer does not give, and its error answers
    in stbproxy's form (``error_response(status, message)``: the bytes of a whole answer):

    - empty lines before a request line are skipped (RFC 9112 2.2); mitmproxy waits for
      more bytes after them, and the client waits for an answer, forever;
    - a head with bytes mitmproxy's reader drops without a word (VT, FF or a bare CR at a
      header value's end, in the request line) is answered 400, a transfer coding besides
      chunked 501 (framing.py); mitmproxy reads them as if they were not there;
    - chunks are read strictly (framing.ChunkedReader: h11 0.14 takes any two bytes after a
      chunk's data for its CRLF);
    - a chunked body's trailer section is dropped (RFC 9110 6.5.1 allows it); mitmproxy
      raises, logs a crash and never answers;
    - a body whose framing is broken (a bad chunk size, a chunk without its CRLF) is answered
      400 before the connection closes; mitmproxy closes without a word."""
    from mitmproxy.proxy.layers.http import _http1

    reading_headers = _http1.Http1Server.read_headers

    def read_headers(self, event):
        if isinstance(event, events.DataReceived):
            _skip_empty_lines(self.buf)
            if len(self.buf):  # not only empty lines
                yield from _read_request_head(self, event)
            return
        yield from reading_headers(self, event)

    _http1.Http1Server.read_headers = read_headers  # type: ignore[method-assign]  # patched on purpose: replacing it is what this module is for
    _http1.Http1Server.read_body = _read_request_body  # type: ignore[method-assign]  # patched on purpose: replacing it is what this module is for
    # mitmproxy's has a default message, but _http1 always passes both arguments
    _http1.make_error_response = error_response  # type: ignore[assignment]


def _read_request_head(self, event: events.DataReceived):
    """Http1Server.read_headers for received bytes: mitmproxy's, but for framing.py's refusals
    (before mitmproxy's reader hides what they look at) and a strict chunked reader."""
    from mitmproxy.net.http import http1
    from mitmproxy.proxy.layers.http import RequestHeaders, RequestProtocolError, _http1
    from mitmproxy.proxy.layers.http._base import ReceiveHttp
    from mitmproxy.utils import human

    from stbproxy.mitm import framing

    head = self.buf.maybe_extract_lines()
    if not head:
        return  # the rest of the head is still to come
    lines = [bytes(line) for line in head]
    refusal = framing.head_refusal(lines)
    try:
        if refusal is not None:
            raise ValueError(refusal[1])
        self.request = http1.read_request_head(lines)
        expected_body_size = http1.expected_http_body_size(self.request)
    except ValueError as exc:
        status = refusal[0] if refusal is not None else 400
        yield commands.SendData(self.conn, _http1.make_error_response(status, str(exc)))
        yield commands.CloseConnection(self.conn)
        if self.request:  # as mitmproxy does: the flow shows what was refused
            yield ReceiveHttp(RequestHeaders(self.stream_id, self.request, False))
            yield ReceiveHttp(RequestProtocolError(self.stream_id, str(exc), status))
        else:
            yield commands.Log(f"{human.format_address(self.conn.peername)}: {exc}")
        self.state = self.done
        return
    yield ReceiveHttp(RequestHeaders(self.stream_id, self.request, expected_body_size == 0))
    self.body_reader = (framing.ChunkedReader() if expected_body_size is None
                        else _http1.make_body_reader(expected_body_size))
    self.state = self.read_body
    yield from self.state(event)


def _skip_empty_lines(buf) -> None:
    """Drop the CR and LF bytes at the start of h11's receive buffer (it cannot be sliced)."""
    data = bytes(buf) if len(buf) else b""
    empty = len(data) - len(data.lstrip(b"\r\n"))
    if empty:
        buf.maybe_extract_at_most(empty)


def _read_request_body(self, event: events.Event):
    """Http1Server.read_body: the body's parts as ReceiveHttp events, then the end of the
    request; what mitmproxy does, but for the trailer and the answer to broken framing."""
    import h11  # mitmproxy's HTTP/1 layer reads bodies with h11's readers
    from mitmproxy.proxy.layers.http import _http1
    from mitmproxy.proxy.layers.http._base import ReceiveHttp

    while True:
        try:
            if isinstance(event, events.DataReceived):
                part = self.body_reader(self.buf)
            elif isinstance(event, events.ConnectionClosed):
                part = self.body_reader.read_eof()
            else:
                raise AssertionError(f"unexpected event while reading a request body: {event}")
        except h11.ProtocolError as exc:
            message = f"stbproxy: the request body is not valid HTTP/1 ({exc}); nothing was forwarded or stored"
            if isinstance(event, events.DataReceived) and self.response is None:
                yield commands.SendData(self.conn, _http1.make_error_response(400, message))
            yield commands.CloseConnection(self.conn)
            yield ReceiveHttp(self.ReceiveProtocolError(self.stream_id, message))
            return
        if part is None:
            return
        if isinstance(part, h11.Data):
            if part.data:
                yield ReceiveHttp(self.ReceiveData(self.stream_id, bytes(part.data)))
        elif isinstance(part, h11.EndOfMessage):  # its trailer fields, if any, are not kept
            if self.request.data.method.upper() != b"CONNECT":
                yield ReceiveHttp(self.ReceiveEndOfMessage(self.stream_id))
            yield from self.mark_done(request=True)
            return
