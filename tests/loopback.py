"""A small HTTP server on 127.0.0.1 for tests that need one of their own: a
ThreadingHTTPServer in a thread, its handler reaching the owning object as
``self.server.owner``, stopped (connections and thread) when the ``with`` block ends."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LoopbackServer:
    """Subclasses name their ``handler`` class and keep what their handler records."""

    handler: type[BaseHTTPRequestHandler]

    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler)
        self._server.daemon_threads = True
        self._server.owner = self  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


class QuietHandler(BaseHTTPRequestHandler):
    """HTTP/1.1 with keep-alive, no log lines, and the two things every test server does."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    @property
    def owner(self) -> Any:
        return self.server.owner  # type: ignore[attr-defined]

    def read_json(self) -> Any:
        return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

    def answer(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
