"""Listening: mitmproxy's ``RegularInstance.listen``, kept and replaced (and
``ServerInstance.handle_stream``, which the replacement may call)."""

from __future__ import annotations

from mitmproxy.proxy.mode_servers import RegularInstance

MITMPROXY_LISTEN = RegularInstance.listen  # mitmproxy's own, for what the replacement leaves to it


def replace_listen(listen) -> None:
    """How regular-mode servers listen from now on (serve's fast lane, coalesced writes,
    SO_REUSEPORT); ``listen(self, host, port)`` may hand a connection to ``self.handle_stream``."""
    RegularInstance.listen = listen  # type: ignore[method-assign]  # patched on purpose: replacing it is what this module is for
