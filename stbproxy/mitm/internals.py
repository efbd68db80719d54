"""Every use of a name of mitmproxy's that is not its public API, in one place.

The embedded master and the fast lanes reach below mitmproxy's public API for speed: the
code that does (the lean master's hook cache, the skipped field checks, the replaced
``listen``, the tunnel lane's stand-in layer) lives here, and the other modules of this
package use only mitmproxy's public names and this module. The private names, all checked
by ``changed()`` (and so by tests/test_mitm_internals.py), tested with mitmproxy ``TESTED``:

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
  layers.http._http1.Http1Server.read_headers, .read_body, .buf, .body_reader
                                             empty lines before a request skipped, a
                                             trailer dropped, broken framing answered 400
  layers.http._http1.make_error_response     mitmproxy's own error answers, labelled as the
                                             proxy's (X-Stb-Source: error)

When a lean-master or fast-lane name is missing (another mitmproxy version), ``serve``
runs as with ``--no-fast-lane`` on mitmproxy's own master, with one warning; a missing
listening name stops it with one line; a missing HTTP/1 server name leaves mitmproxy's own
reading of requests in place, with one warning.
"""

from __future__ import annotations

import collections
import importlib
import inspect
import logging
from dataclasses import dataclass
from typing import Any, Callable

from mitmproxy import addonmanager, exceptions, flow as mitm_flow, hooks, http, options
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
        if self.per_instance:  # set in __init__: an attribute store names it in the code
            init = getattr(holder, "__init__", None)
            return self.name in getattr(getattr(init, "__code__", None), "co_names", ())
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
    Internal("mitmproxy.proxy.layers.http._http1", "Http1Server", "mark_done"),
    Internal("mitmproxy.proxy.layers.http._http1", None, "make_body_reader"),
    Internal("mitmproxy.proxy.layers.http._http1", None, "make_error_response"),
)
EVERY = LEAN_MASTER + FAST_LANE + LISTENING + HTTP1_SERVER


def changed(internals: tuple[Internal, ...] = EVERY) -> list[Internal]:
    """The names of ``internals`` that this mitmproxy does not have."""
    return [internal for internal in internals if not internal.present()]


def changed_message(missing: list[Internal], consequence: str) -> str:
    names = ", ".join(str(internal) for internal in missing)
    return f"mitmproxy {VERSION} changed {names}: stbproxy's fast lane is tested with mitmproxy {TESTED}; {consequence}"


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
    """Three answers mitmproxy 11's HTTP/1 server layer does not give, and its error answers
    in stbproxy's form (``error_response(status, message)``: the bytes of a whole answer):

    - empty lines before a request line are skipped (RFC 9112 2.2); mitmproxy waits for
      more bytes after them, and the client waits for an answer, forever;
    - a chunked body's trailer section is dropped (RFC 9110 6.5.1 allows it); mitmproxy
      raises, logs a crash and never answers;
    - a body whose framing is broken (a bad chunk size, a chunk without its CRLF) is answered
      400 before the connection closes; mitmproxy closes without a word."""
    from mitmproxy.proxy.layers.http import _http1

    reading_headers = _http1.Http1Server.read_headers

    def read_headers(self, event):
        if isinstance(event, events.DataReceived):
            _skip_empty_lines(self.buf)
            if not len(self.buf):
                return  # nothing but empty lines yet
        yield from reading_headers(self, event)

    _http1.Http1Server.read_headers = read_headers
    _http1.Http1Server.read_body = _read_request_body
    _http1.make_error_response = error_response


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
