"""The project's demo upstream: a small RapidAPI-style weather API on loopback.

Its answers are made from the request alone, so recordings are reproducible. It runs
only while cassettes are being recorded (``pytest --stb-record``); replays never reach
it. It listens on a fixed loopback port because the port is part of every recorded URL.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

PORT = 18765
BASE = f"http://127.0.0.1:{PORT}"


def _number(seed: str, low: int, high: int) -> int:
    return low + int(hashlib.sha256(seed.encode()).hexdigest()[:8], 16) % (high - low + 1)


def forecast(city: str, days: int) -> dict:
    return {"city": city, "unit": "C", "days": [
        {"day": d + 1, "high": _number(f"{city}:{d}:high", 12, 31), "low": _number(f"{city}:{d}:low", 2, 11)}
        for d in range(days)]}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, document: dict) -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if not self.headers.get("X-RapidAPI-Key"):
            return self._send(401, {"message": "missing X-RapidAPI-Key"})
        if parts.path == "/v1/forecast" and "city" in query:
            return self._send(200, forecast(query["city"], int(query.get("days", "1"))))
        self._send(404, {"message": f"no endpoint {parts.path}"})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        search = json.loads(self.rfile.read(length) or b"{}")
        if urlsplit(self.path).path == "/v1/cities/search":
            prefix = str(search.get("prefix", "")).lower()
            names = [c for c in ("Paris", "Porto", "Prague", "Oslo", "Lisbon") if c.lower().startswith(prefix)]
            return self._send(200, {"results": names[: int(search.get("limit", 3))]})
        self._send(404, {"message": "no such endpoint"})


class WeatherApi:
    def __init__(self) -> None:
        self._server = ThreadingHTTPServer(("127.0.0.1", PORT), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> WeatherApi:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
