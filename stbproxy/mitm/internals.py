"""Every use of a name of mitmproxy's that is not its public API, in one place.

The embedded master and the fast lanes reach below mitmproxy's public API for speed: the
code that does (the lean master's hook cache, the skipped field checks, the replaced
``listen``, the tunnel lane's stand-in layer) lives here, and the other modules of this
package use only mitmproxy's public names and this module. The private names, all checked
by ``changed()`` (and so by tests/proxy/test_mitm_internals.py), tested with mitmproxy ``TESTED``:

lean master (a hook cache in place of mitmproxy's addon manager, field checks skipped):
  addonmanager.AddonManager._iter_hooks      the handlers an addon has for an event
  addonmanager.AddonManager._configure_all   what Master connects to options.changed
  http.MessageData.__post_init__             replaced: type checks that are a debug aid
fast lanes (fast_lane.py, plain_http.py, tunnel_lane.py):
  layers.http._http1.make_error_response     error answers written as mitmproxy writes them
  layer.Layer._handle_event, ._paused, ._paused_event_queue
                                             what a layer needs to stand in for the HTTP layer
  layer.NextLayer.layer, context.Context.layers
                                             where the layer mitmproxy chose is found
  layers.tls.TLSLayer.tls, .event_to_child   the client's TLS connection, and events below it
listening (always needed; mitmproxy's listen is replaced):
  mode_servers.RegularInstance.listen, mode_servers.ServerInstance.handle_stream
the HTTP/1 server layer (both lanes hand chunked and odd requests to it):
  layers.http._http1.Http1Server.read_headers, .read_body, .buf, .body_reader, .request,
  .stream_id, .done, layers.http._base.ReceiveHttp
                                             empty lines before a request skipped, a head
                                             with bytes mitmproxy's reader drops silently
                                             answered 400, a transfer coding the proxy does
                                             not apply 501, chunks read strictly (framing.py),
                                             a trailer dropped, broken framing answered 400
  layers.http._http1.make_error_response     mitmproxy's own error answers, labelled as the
                                             proxy's (X-Stb-Source: error)
the HTTP/2 server layer (h2_guard.py: rapid reset and its kin):
  layers.http._http2.Http2Server._handle_event, .handle_h2_event, .h2_conn, .streams,
  .is_closed, .close_connection, .done, StreamState
                                             frames read a few at a time, streams bounded,
                                             resets spent from a budget (and never lost), GOAWAY
  layers.http.HttpLayer.streams, HttpStream.flow
                                             the flows of a connection's streams
the tunnel lane's own TLS (client_tls.py):
  addons.tlsconfig._DEFAULT_CIPHERS, TlsConfig.get_cert
                                             the cipher list and the certificate tlsconfig
                                             gives a client

When a lean-master or fast-lane name is missing (another mitmproxy version), ``serve``
runs as with ``--no-fast-lane`` on mitmproxy's own master, with one warning; a missing
listening name stops it with one line; a missing HTTP/1 or HTTP/2 server name leaves
mitmproxy's own reading of requests in place, with one warning; a missing own-TLS name
leaves every tunnel's TLS to pyOpenSSL, with one warning.
"""

from __future__ import annotations

import collections
import importlib
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Callable

from mitmproxy import addonmanager, exceptions, hooks, http, options
from mitmproxy import flow as mitm_flow
from mitmproxy.master import Master
from mitmproxy.proxy import commands, events, layer
from mitmproxy.proxy.mode_servers import RegularInstance
from mitmproxy.version import VERSION

TESTED = "11.0.2"  # the version pinned in pyproject.toml, which the tests run


@dataclass(frozen=True)
class Internal:
    """One private name: where it lives, and whether it is a class attribute or one that
    the class's ``__init__`` sets on each instance."""

    module: str
    owner: str | None  # a class of that module, or None for a module-level name
    name: str
    per_instance: bool = False
    set_in: str = "__init__"  # the method that sets a per-instance name

    def __str__(self) -> str:
        return f"{self.module}.{self.owner + '.' if self.owner else ''}{self.name}"

    def present(self) -> bool:
        try:
            holder: Any = importlib.import_module(self.module)
        except ImportError:
            return False
        if self.owner is not None:
            holder = getattr(holder, self.owner, None)
            if holder is None:
                return False
        if self.per_instance:  # set in a method (__init__): an attribute store names it in the code
            setter = inspect.unwrap(getattr(holder, self.set_in, None))  # below mitmproxy's @expect
            return self.name in getattr(getattr(setter, "__code__", None), "co_names", ())
        return hasattr(holder, self.name)


LEAN_MASTER = (
    Internal("mitmproxy.addonmanager", "AddonManager", "_iter_hooks"),
    Internal("mitmproxy.addonmanager", "AddonManager", "_configure_all"),
    Internal("mitmproxy.http", "MessageData", "__post_init__"),
)
FAST_LANE = (
    Internal("mitmproxy.proxy.layers.http._http1", None, "make_error_response"),
    Internal("mitmproxy.proxy.layer", "Layer", "_handle_event"),
    Internal("mitmproxy.proxy.layer", "Layer", "_paused", per_instance=True),
    Internal("mitmproxy.proxy.layer", "Layer", "_paused_event_queue", per_instance=True),
    Internal("mitmproxy.proxy.layer", "NextLayer", "layer", per_instance=True),
    Internal("mitmproxy.proxy.context", "Context", "layers", per_instance=True),
    Internal("mitmproxy.proxy.layers.tls", "TLSLayer", "tls", per_instance=True),
    Internal("mitmproxy.proxy.layers.tls", "TLSLayer", "event_to_child"),
)
LISTENING = (
    Internal("mitmproxy.proxy.mode_servers", "RegularInstance", "listen"),
    Internal("mitmproxy.proxy.mode_servers", "ServerInstance", "handle_stream"),
)
HTTP1_SERVER = (
    Internal("mitmproxy.proxy.layers.http._http1", "Http1Server", "read_headers"),
    Internal("mitmproxy.proxy.layers.http._http1", "Http1Server", "read_body"),
    Internal("mitmproxy.proxy.layers.http._http1", "Http1Connection", "buf", per_instance=True),
    Internal("mitmproxy.proxy.layers.http._http1", "Http1Connection", "request"),
    Internal("mitmproxy.proxy.layers.http._http1", "Http1Connection", "stream_id"),
    Internal("mitmproxy.proxy.layers.http._http1", "Http1Server", "done"),
    Internal("mitmproxy.proxy.layers.http._base", None, "ReceiveHttp"),
    Internal("mitmproxy.proxy.layers.http._http1", "Http1Server", "mark_done"),
    Internal("mitmproxy.proxy.layers.http._http1", None, "make_body_reader"),
    Internal("mitmproxy.proxy.layers.http._http1", None, "make_error_response"),
)
HTTP2_SERVER = (
    Internal("mitmproxy.proxy.layers.http._http2", "Http2Server", "_handle_event"),
    Internal("mitmproxy.proxy.layers.http._http2", "Http2Server", "handle_h2_event"),
    Internal("mitmproxy.proxy.layers.http._http2", "Http2Connection", "h2_conn", per_instance=True),
    Internal("mitmproxy.proxy.layers.http._http2", "Http2Connection", "streams", per_instance=True),
    Internal("mitmproxy.proxy.layers.http._http2", "Http2Connection", "is_closed"),
    Internal("mitmproxy.proxy.layers.http._http2", "StreamState", "HEADERS_RECEIVED"),
    Internal("mitmproxy.proxy.layers.http._http2", "Http2Connection", "close_connection"),
    Internal("mitmproxy.proxy.layers.http._http2", "Http2Connection", "done"),
    Internal("mitmproxy.proxy.layers.http", "HttpLayer", "streams", per_instance=True),
    Internal("mitmproxy.proxy.layers.http", "HttpStream", "flow", per_instance=True,
             set_in="state_wait_for_request_headers"),
)
OWN_TLS = (
    Internal("mitmproxy.addons.tlsconfig", None, "_DEFAULT_CIPHERS"),
    Internal("mitmproxy.addons.tlsconfig", "TlsConfig", "get_cert"),
)
EVERY = LEAN_MASTER + FAST_LANE + LISTENING + HTTP1_SERVER + HTTP2_SERVER + OWN_TLS


def changed(internals: tuple[Internal, ...] = EVERY) -> list[Internal]:
    """The names of ``internals`` that this mitmproxy does not have."""
    return [internal for internal in internals if not internal.present()]


def changed_message(missing: list[Internal], consequence: str) -> str:
    names = ", ".join(str(internal) for internal in missing)
    return f"mitmproxy {VERSION} changed {names}: stbproxy's fast lane is tested with mitmproxy {TESTED}; {consequence}"


def default_client_ciphers() -> tuple[str, ...]:
    """The cipher list mitmproxy's tlsconfig gives client connections at its default
    minimum TLS version (1.2)."""
    from mitmproxy.addons import tlsconfig

    return tuple(tlsconfig._DEFAULT_CIPHERS)


def make_error_response(*args: Any, **kwargs: Any):
    """mitmproxy's HTTP/1 error answer (the fast lane answers malformed requests with it)."""
    from mitmproxy.proxy.layers.http._http1 import make_error_response as made_by_mitmproxy

    return made_by_mitmproxy(*args, **kwargs)


# -- the lean master ----------------------------------------------------------------------


_addon_errors = logging.getLogger("mitmproxy.addonmanager")


class _HookCache(addonmanager.AddonManager):
    """mitmproxy's addon manager with each event's handlers looked up once.

    mitmproxy walks every addon for every event of every flow (and triggers an "update"
    event after each, which no addon of the lean master handles); the handlers of an event
    only change when addons are added or removed, so they are listed once per event name.
    An addon's exception is logged as mitmproxy logs it, and AddonHalt stops the event.
    """

    def __init__(self, master) -> None:
        super().__init__(master)
        self._handlers: dict[str, tuple] = {}

    def register(self, addon):
        self._handlers.clear()
        return super().register(addon)

    def add(self, *addons) -> None:
        super().add(*addons)
        self._handlers.clear()  # again: an addon joins the chain only after it registered

    def remove(self, addon) -> None:
        self._handlers.clear()
        super().remove(addon)
        self._handlers.clear()

    def clear(self) -> None:
        super().clear()
        self._handlers.clear()

    def _handlers_of(self, event) -> tuple:
        handlers = self._handlers.get(event.name)
        if handlers is None:
            handlers = tuple(func for addon in self.chain for _, func in self._iter_hooks(addon, event))
            self._handlers[event.name] = handlers
        return handlers

    async def handle_lifecycle(self, event) -> None:
        await self.trigger_event(event)
        if self._handlers_of(_UPDATE):  # only then build the "update" event that follows a flow's events
            message = event.args()[0]
            if isinstance(message, mitm_flow.Flow):
                await self.trigger_event(hooks.UpdateHook([message]))

    async def trigger_event(self, event) -> None:
        handlers = self._handlers_of(event)
        if not handlers:
            return
        args = event.args()
        for func in handlers:
            try:
                result = func(*args)
                if result is not None and inspect.isawaitable(result):
                    await result
            except exceptions.AddonHalt:
                return
            except exceptions.OptionsError:
                raise
            except Exception as exc:
                _addon_errors.error(f"Addon error: {exc}", exc_info=True)


    async def fire_flow(self, event_type, flow) -> None:
        """``handle_lifecycle(event_type(flow))`` for a hook whose one argument is the flow
        (the HTTP request, response and error hooks), without making the event each time once
        its handlers are known: the fast lane fires three of them on every request."""
        handlers = self._handlers.get(event_type.name)
        if handlers is None:
            return await self.handle_lifecycle(event_type(flow))
        for func in handlers:
            try:
                result = func(flow)
                if result is not None and inspect.isawaitable(result):
                    await result
            except exceptions.AddonHalt:
                break
            except exceptions.OptionsError:
                raise
            except Exception as exc:
                _addon_errors.error(f"Addon error: {exc}", exc_info=True)
        if self._handlers_of(_UPDATE):
            await self.trigger_event(hooks.UpdateHook([flow]))


_UPDATE = hooks.UpdateHook([])


def lean_master(opts: options.Options) -> Master:
    """A master whose addon manager lists each event's handlers once (_HookCache)."""
    master = Master(opts)
    opts.changed.disconnect(master.addons._configure_all)
    master.addons = _HookCache(master)
    return master


def skip_message_checks() -> None:
    """mitmproxy type-checks every field of every message it builds, but only as a debug aid
    (under ``if __debug__``, so ``python -O`` drops it); the embedded master skips it too."""
    http.MessageData.__post_init__ = _no_checks


def _no_checks(self) -> None:
    return None


# -- listening ----------------------------------------------------------------------------

MITMPROXY_LISTEN = RegularInstance.listen  # mitmproxy's own, for what the replacement leaves to it


def replace_listen(listen) -> None:
    """How regular-mode servers listen from now on (serve's fast lane, coalesced writes,
    SO_REUSEPORT); ``listen(self, host, port)`` may hand a connection to ``self.handle_stream``."""
    RegularInstance.listen = listen


# -- a layer that stands in for mitmproxy's HTTP layer (the tunnel lane) --------------------


class StandIn(layer.Layer):
    """Where mitmproxy's HTTP layer for an HTTP/1 client would be: keeps the decrypted bytes
    for the lane until the lane hands the connection to that layer (``delegated``)."""

    def __init__(self, http_layer: layer.Layer) -> None:
        # Like mitmproxy's NextLayer, a stand-in is not one of the context's layers; it sets
        # what Layer.__init__ would, as mitmproxy's layers read it.
        self.context = http_layer.context
        self._paused = None
        self._paused_event_queue = collections.deque()
        self.http_layer = http_layer
        self.buffer = bytearray()
        self.delegated = False

    def handle_event(self, event: events.Event) -> layer.CommandGenerator[None]:
        if self.delegated:
            yield from self.http_layer.handle_event(event)
        elif isinstance(event, events.DataReceived):
            self.buffer += event.data

    _handle_event = handle_event


# -- mitmproxy's HTTP/1 server layer, mended --------------------------------------------------


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

    _http1.Http1Server.read_headers = read_headers
    _http1.Http1Server.read_body = _read_request_body
    _http1.make_error_response = error_response


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


# -- mitmproxy's HTTP/2 server layer, guarded (h2_guard.py) ------------------------------------


def guard_http2() -> None:
    """mitmproxy's HTTP/2 server layer with the bounds of h2_guard.py: frames read a few at a
    time (the rest on the next turn of the event loop), a reset stream's answer cancelled,
    streams past MAX_STREAMS refused, and GOAWAY ENHANCE_YOUR_CALM for a client that resets
    streams past its budget or sends frames faster than they can be read."""
    from mitmproxy.proxy.layers.http import _http2

    if getattr(_http2.Http2Server, "_stb_guarded", False):
        return  # once per process (serve may run more than once in one)
    handling = _http2.Http2Server._handle_event
    handling_h2 = _http2.Http2Server.handle_h2_event

    def _handle_event(self, event):
        guard = _h2_guard_of(self)
        if isinstance(event, events.DataReceived):
            guard.unread += event.data
            if guard.wakeup is None:
                yield from _h2_read_turn(self, guard, handling)
        elif isinstance(event, events.Wakeup):
            if event.command is guard.wakeup:  # the next turn of frames waiting
                guard.wakeup = None
                yield from _h2_read_turn(self, guard, handling)
        else:
            if isinstance(event, events.ConnectionClosed):  # nobody is left to answer
                guard.unread.clear()
                _h2_cancel_all(guard)
            yield from handling(self, event)

    def handle_h2_event(self, event):
        import h2.errors
        import h2.events

        from stbproxy.mitm import h2_guard

        if isinstance(event, h2.events.RequestReceived):
            guard = _h2_guard_of(self)
            if self.is_closed(event.stream_id) or event.stream_id in guard.doomed:
                return False  # reset in the same frames, or its reset is waiting: nobody wants the answer
            if _h2_answering(guard) >= h2_guard.MAX_STREAMS:
                self.h2_conn.reset_stream(event.stream_id, h2.errors.ErrorCodes.REFUSED_STREAM)
                if guard.resets.spend():
                    return False
                yield from _h2_calm_down(self, guard, f"opened more than {h2_guard.MAX_STREAMS} streams at once")
                return True
        elif isinstance(event, h2.events.StreamReset) and event.remote_reset:
            guard = _h2_guard_of(self)
            guard.doomed.discard(event.stream_id)
            stream = guard.http_layer.streams.get(event.stream_id) if guard.http_layer is not None else None
            if stream is not None and getattr(stream, "flow", None) is not None:
                h2_guard.cancel(stream.flow)
                if stream.flow.live and event.stream_id not in self.streams:
                    # mitmproxy forgets a stream whose request ended in the frames that also
                    # reset it, and so never tells it of the reset: it would be answered in full
                    self.streams[event.stream_id] = _http2.StreamState.HEADERS_RECEIVED
            if not guard.resets.spend():
                yield from handling_h2(self, event)  # its stream ends as any reset one does
                yield from _h2_calm_down(self, guard, f"reset more than {h2_guard.RESET_BURST} streams at once or "
                                                      f"{h2_guard.RESETS_PER_SECOND:g} a second")
                return True
        return (yield from handling_h2(self, event))

    _http2.Http2Server._handle_event = _handle_event
    _http2.Http2Server.handle_h2_event = handle_h2_event
    _http2.Http2Server._stb_guarded = True


def _h2_guard_of(server):
    """The h2_guard.ConnectionGuard of one Http2Server layer, made on first use."""
    guard = getattr(server, "_stb_guard", None)
    if guard is None:
        from mitmproxy.proxy.layers.http import HttpLayer

        from stbproxy.mitm.h2_guard import ConnectionGuard

        guard = server._stb_guard = ConnectionGuard()
        guard.http_layer = next((item for item in reversed(server.context.layers) if isinstance(item, HttpLayer)),
                                None)
    return guard


def _h2_read_turn(server, guard, handling):
    """Hand h2 the next few frames; ask to be woken for the rest on the next turn."""
    from stbproxy.mitm.h2_guard import MAX_UNREAD

    if len(guard.unread) > MAX_UNREAD:
        yield from _h2_calm_down(server, guard,
                                 f"sent frames faster than they can be read ({MAX_UNREAD} bytes waiting)")
        return
    yield from handling(server, events.DataReceived(server.conn, guard.next_frames()))
    if guard.unread and server._handle_event != server.done:  # still open, with frames waiting
        guard.wakeup = commands.RequestWakeup(0)
        yield guard.wakeup


def _h2_answering(guard) -> int:
    """The connection's streams being answered (reset ones included until their answer has
    stopped); streams mitmproxy has finished with but keeps (killed ones) are let go."""
    if guard.http_layer is None:
        return 0
    streams = guard.http_layer.streams
    live = 0
    for stream_id, stream in list(streams.items()):
        flow = getattr(stream, "flow", None)
        if flow is None or flow.live:
            live += 1
        else:
            del streams[stream_id]
    return live


def _h2_cancel_all(guard) -> None:
    from stbproxy.mitm.h2_guard import cancel

    if guard.http_layer is not None:
        for stream in list(guard.http_layer.streams.values()):
            if getattr(stream, "flow", None) is not None:
                cancel(stream.flow)


def _h2_calm_down(server, guard, why: str):
    """GOAWAY with ENHANCE_YOUR_CALM, every answer of the connection cancelled, and the
    connection closed (mitmproxy's own close: its streams end as closed ones do)."""
    import h2.errors

    from stbproxy.mitm.h2_guard import note_calmed

    guard.unread.clear()
    _h2_cancel_all(guard)
    note_calmed(server.conn.peername, why)
    server.h2_conn.close_connection(h2.errors.ErrorCodes.ENHANCE_YOUR_CALM, f"stbproxy: the client {why}".encode())
    yield commands.SendData(server.conn, server.h2_conn.data_to_send())
    yield from server.close_connection(f"HTTP/2 client {why}")
