"""Every use of a name of mitmproxy's that is not its public API, in one place.

The embedded master and the fast lanes reach below mitmproxy's public API for speed: the
code that does (the lean master's hook cache, the skipped field checks, the replaced
``listen``, the tunnel lane's stand-in layer) lives in this package, and the other modules
of stbproxy.mitm use only mitmproxy's public names and this package. Its modules, by job:
master.py (the lean master), listening.py (the replaced ``listen``), stand_in.py (the tunnel
lane's stand-in layer), http1.py (the mended HTTP/1 server layer) and http2.py (the guarded
HTTP/2 server layer); this one lists the private names. The private names, all checked
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

import importlib
import inspect
from dataclasses import dataclass
from typing import Any

from mitmproxy.version import VERSION

from stbproxy.mitm.internals.http1 import mend_http1_server
from stbproxy.mitm.internals.http2 import guard_http2
from stbproxy.mitm.internals.listening import MITMPROXY_LISTEN, replace_listen
from stbproxy.mitm.internals.master import lean_master, skip_message_checks
from stbproxy.mitm.internals.stand_in import StandIn

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
            setter: Any = getattr(holder, self.set_in, None)
            setter = inspect.unwrap(setter)  # below mitmproxy's @expect
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


__all__ = ["EVERY", "FAST_LANE", "HTTP1_SERVER", "HTTP2_SERVER", "LEAN_MASTER", "LISTENING", "MITMPROXY_LISTEN",
           "OWN_TLS", "TESTED", "Internal", "StandIn", "changed", "changed_message", "default_client_ciphers",
           "guard_http2", "lean_master", "make_error_response", "mend_http1_server", "replace_listen",
           "skip_message_checks"]
