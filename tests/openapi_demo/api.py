"""The pet shop of specs.py on loopback: it answers as its spec says, or, made with
``drift=True``, as an API that changed since (a pet's name a number, a status the enum
does not know). It asks for the apiKey in the query, as its spec says."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from tests.openapi_demo.specs import PETS_KEY_PARAM

PETS = {
    1: {"id": 1, "name": "Bella", "tag": "calm", "status": "available", "owner": {"person": "Ana"},
        "vaccinations": [{"name": "rabies", "date": "2026-01-04"}]},
    2: {"id": 2, "name": "Milo", "tag": None, "status": "pending", "owner": {"shop": 3, "since": "2025-12-01"},
        "litter": [{"id": 5, "name": "Pip", "status": "available"}]},
    3: {"id": 3, "name": "Luna", "status": "sold"},
}


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, document, content_type: str = "application/json") -> None:
        body = json.dumps(document).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _request(self):
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        self.server.api.requests.append((self.command, self.path))
        return parts.path, query

    def do_GET(self) -> None:
        path, query = self._request()
        if query.get(PETS_KEY_PARAM) != self.server.api.key:
            return self._send(401, {"message": "a valid appid is needed"})
        drift = self.server.api.drift
        if path == "/v1/pets":
            pets = [p for p in PETS.values() if query.get("status") in (None, p["status"])]
            pets = pets[: int(query.get("limit", "5"))] or [PETS[1]]
            self.server.api.counter += 1
            return self._send(200, [dict(p, name=self.server.api.counter) if drift else p for p in pets])
        if path.startswith("/v1/pets/"):
            pet = PETS.get(int(path.rsplit("/", 1)[1])) if path.rsplit("/", 1)[1].isdigit() else None
            if pet is None:
                return self._send(404, {"message": "no such pet"})
            return self._send(200, dict(pet, status="lost") if drift else pet)
        self._send(404, {"message": "no such endpoint"})

    def do_POST(self) -> None:
        path, query = self._request()
        length = int(self.headers.get("Content-Length") or 0)
        sent = json.loads(self.rfile.read(length) or b"{}")
        if path == "/v1/pets" and query.get(PETS_KEY_PARAM) == self.server.api.key:
            return self._send(201, {"id": 40 + len(self.server.api.requests), "name": sent.get("name", "?"),
                                    "status": "available"})
        self._send(400, {"message": "bad request"})


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, api: "PetShop") -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.api = api


class PetShop:
    """The pet shop on 127.0.0.1 with an ephemeral port (``base``), started and stopped by tests."""

    def __init__(self, key: str, drift: bool = False) -> None:
        self.key = key
        self.drift = drift
        self.counter = 0
        self.requests: list[tuple[str, str]] = []
        self._server = _Server(self)
        self.base = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "PetShop":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
