"""A loopback API whose answers change between runs, as real ones do: a weather reading
the test can change (with the time it was observed and a fresh request id on every
call), a job that is polled until it is done, and a counter. Plain HTTP, in a thread.
"""

from __future__ import annotations

import json
import threading
import uuid
from collections import Counter
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

JOB_STATES = ("queued", "running", "done")


class World:
    """Start with ``with World() as world:``; ``world.temps`` and ``world.calls`` are live."""

    def __init__(self) -> None:
        self.temps: dict[str, float] = {"Paris": 21.0, "Oslo": 4.0}
        self.calls: Counter[str] = Counter()  # path -> requests answered
        self.seen_headers: list[dict[str, str]] = []
        self._jobs: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def answer(self, path: str, query: dict[str, str], headers: dict[str, str]) -> tuple[int, dict]:
        with self._lock:
            self.calls[path] += 1
            self.seen_headers.append(headers)
            if path == "/weather":
                city = query.get("city", "")
                if city not in self.temps:
                    return 404, {"error": f"no city {city}"}
                return 200, {"city": city, "temp": self.temps[city], "unit": "C",
                             "observed_at": datetime.now(timezone.utc).isoformat(),
                             "request_id": str(uuid.uuid4())}
            if path.startswith("/job/"):
                job = path.removeprefix("/job/")
                n = self._jobs[job]
                self._jobs[job] += 1
                return 200, {"job": job, "state": JOB_STATES[min(n, len(JOB_STATES) - 1)], "polled": n + 1}
            if path == "/counter":
                return 200, {"count": self.calls[path]}
            return 404, {"error": f"no route {path}"}

    def __enter__(self) -> World:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)


def _handler_for(world: World):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            query = {k: v[0] for k, v in parse_qs(parts.query).items()}
            status, document = world.answer(parts.path, query, {k.lower(): v for k, v in self.headers.items()})
            body = json.dumps(document).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    return Handler
