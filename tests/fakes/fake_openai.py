"""A scriptable OpenAI-compatible chat-completions server on loopback, for tests.

Start it with a handler, point any OpenAI client at ``server.base_url``, and script each
reply from the request the handler receives::

    def handler(request: dict):
        if "weather" in request["messages"][-1]["content"]:
            return ToolCall("get_weather", {"city": "Paris"})
        return "plain text reply"

    with FakeOpenAI(handler, latency=0.05) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test")
        ...
        assert server.calls == 1

A handler returns one of: a string (assistant content); a :class:`ToolCall` or a list of
them (a forced or parallel tool call); :class:`HttpError` (that status with an
OpenAI-style error body); :class:`RawBody` (bytes sent as they are, e.g. broken JSON);
a dict (sent as the whole JSON body); or None (empty content). Every reply carries a
``usage`` block with deterministic token counts (about 4 characters per token).
``stream: true`` requests get the same reply as server-sent events.

The server runs on 127.0.0.1 on a free port in its own thread; leaving the ``with`` block
(or ``stop()``) closes open connections and joins the thread. ``fake_openai`` is a
pytest fixture wrapping it; set ``fake_openai.handler`` in the test.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable
from urllib.parse import urlsplit

CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
MODELS_PATHS = ("/v1/models", "/models")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str | None = None


@dataclass(frozen=True)
class HttpError:
    status: int
    message: str = "fake error"
    body: Any = None  # overrides the OpenAI-style error object when given


@dataclass(frozen=True)
class RawBody:
    body: bytes | str
    status: int = 200
    content_type: str = "application/json"


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any
    at: float


Handler = Callable[[dict[str, Any]], Any]


def tokens(text: str) -> int:
    """The fake's token count: deterministic, about four characters per token."""
    return max(1, (len(text) + 3) // 4) if text else 0


class FakeOpenAI:
    """An OpenAI-compatible fake; see the module docstring."""

    def __init__(self, handler: Handler | None = None, *, latency: float | Callable[[dict[str, Any]], float] = 0.0,
                 model: str = "fake-model") -> None:
        self.handler: Handler = handler or (lambda _request: "ok")
        self.latency = latency
        self.model = model
        self.requests: list[RecordedRequest] = []
        self.errors: list[str] = []  # tracebacks of handlers that raised
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._serial = 0

    # -- lifecycle -------------------------------------------------------------------

    def start(self) -> FakeOpenAI:
        if self._server is not None:
            return self
        server = _Server(("127.0.0.1", 0), _RequestHandler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, thread = self._server, self._thread
        if server is None:
            return
        server.shutdown()
        server.close_connections()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- what tests read -------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("fake OpenAI server is not running")
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def calls(self) -> int:
        """Chat-completion requests received."""
        with self._lock:
            return sum(1 for r in self.requests if r.path in CHAT_PATHS)

    def chat_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.json for r in self.requests if r.path in CHAT_PATHS]

    def env(self, api_key: str = "test-key") -> dict[str, str]:
        """Environment variables that point an OpenAI client here."""
        return {"OPENAI_BASE_URL": self.base_url, "OPENAI_API_KEY": api_key}

    def reset(self) -> None:
        with self._lock:
            self.requests.clear()
            self.errors.clear()

    # -- serving ---------------------------------------------------------------------

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def _next_id(self) -> int:
        with self._lock:
            self._serial += 1
            return self._serial

    def _reply(self, request: dict[str, Any]) -> tuple[int, bytes, str]:
        delay = self.latency(request) if callable(self.latency) else self.latency
        if delay:
            time.sleep(delay)
        try:
            reply = self.handler(request)
        except Exception:
            with self._lock:
                self.errors.append(traceback.format_exc())
            return _error(500, "fake handler raised")
        if isinstance(reply, HttpError):
            body = reply.body if reply.body is not None else {
                "error": {"message": reply.message, "type": "fake_error", "code": reply.status}}
            return reply.status, _dumps(body), "application/json"
        if isinstance(reply, RawBody):
            raw = reply.body.encode() if isinstance(reply.body, str) else reply.body
            return reply.status, raw, reply.content_type
        if isinstance(reply, dict):
            return 200, _dumps(reply), "application/json"
        message = self._message(reply)
        completion = self._completion(request, message)
        if request.get("stream"):
            return 200, _as_stream(completion), "text/event-stream"
        return 200, _dumps(completion), "application/json"

    def _message(self, reply: Any) -> dict[str, Any]:
        if reply is None or isinstance(reply, str):
            return {"role": "assistant", "content": reply or ""}
        calls = [reply] if isinstance(reply, ToolCall) else list(reply)
        if not all(isinstance(c, ToolCall) for c in calls):
            raise TypeError(f"handler returned {type(reply).__name__}; see the module docstring")
        return {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": c.id or f"call_{self._next_id()}",
                    "type": "function",
                    "function": {"name": c.name,
                                 "arguments": c.arguments if isinstance(c.arguments, str) else json.dumps(c.arguments)},
                }
                for c in calls
            ],
        }

    def _completion(self, request: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
        prompt = tokens(json.dumps(request.get("messages", []))) + tokens(json.dumps(request.get("tools", [])))
        produced = tokens((message.get("content") or "") + json.dumps(message.get("tool_calls") or []))
        return {
            "id": f"chatcmpl-fake-{self._next_id()}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model") or self.model,
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": produced, "total_tokens": prompt + produced},
        }


class _Server(ThreadingHTTPServer):
    request_queue_size = 128  # bursts of new connections must not wait for a SYN retry
    daemon_threads = True
    owner: FakeOpenAI

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(*args, **kwargs)

    def track(self, conn: socket.socket, alive: bool) -> None:
        with self._open_lock:
            (self._open.add if alive else self._open.discard)(conn)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up (a timeout, a killed process) is normal here, not news.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)

    def close_connections(self) -> None:
        # Keep-alive connections park a handler thread in recv(); closing the sockets
        # ends those threads instead of leaving them behind the test.
        with self._open_lock:
            conns, self._open = list(self._open), set()
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real endpoints do
    # Headers and body go out in separate writes; with Nagle's algorithm on, each reply
    # would wait for a delayed ACK (tens of milliseconds) and latency tests would lie.
    disable_nagle_algorithm = True
    server: _Server
    timeout = 30

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def log_message(self, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        self._store(path, b"", None)
        if path in MODELS_PATHS:
            model = self.server.owner.model
            self._send(200, _dumps({"object": "list", "data": [{"id": model, "object": "model", "owned_by": "fake"}]}))
        else:
            self._send(*_error(404, f"no route {path}"))

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            document = json.loads(body or b"null")
        except ValueError:
            document = None
        self._store(path, body, document)
        if path not in CHAT_PATHS:
            self._send(*_error(404, f"no route {path}"))
        elif not isinstance(document, dict):
            self._send(*_error(400, "request body is not a JSON object"))
        else:
            self._send(*self.server.owner._reply(document))

    def _store(self, path: str, body: bytes, document: Any) -> None:
        self.server.owner._record(RecordedRequest(self.command, path, dict(self.headers), body, document, time.time()))

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass  # the client gave up (timeout) before the reply


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode("utf-8")


def _error(status: int, message: str) -> tuple[int, bytes, str]:
    return status, _dumps({"error": {"message": message, "type": "fake_error", "code": status}}), "application/json"


def _as_stream(completion: dict[str, Any]) -> bytes:
    choice = completion["choices"][0]
    message = choice["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        delta["tool_calls"] = [dict(call, index=i) for i, call in enumerate(message["tool_calls"])]
    base = {k: completion[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks = [
        base | {"choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        base | {"choices": [{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}],
                "usage": completion["usage"]},
    ]
    return b"".join(b"data: " + _dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


try:  # the fixture needs pytest; scripts import this module without it
    import pytest
except ImportError:  # pragma: no cover
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture
    def fake_openai():
        """A running :class:`FakeOpenAI`; assign ``.handler`` (and ``.latency``) in the test."""
        with FakeOpenAI() as server:
            yield server
