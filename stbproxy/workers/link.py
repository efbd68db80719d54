"""The link between the workers of ``serve --workers``: reader workers hand the primary what
only the store's one writer may do, over a Unix socket in a private folder.

Messages are length-prefixed JSON (bodies in base64): ``hello`` (a reader listens),
``call`` (a routed call to answer by the calling rules: a miss, a refresh, a fault),
``request`` (a whole proxied request: passthrough hosts, record mode), each answered with
the engine's Answer, and ``sessions`` (session records of hits answered by a reader,
batched, unanswered). Requests travel with their secrets (a miss must reach the real API
with them), so the socket lives in a folder only its owner can enter, and nothing here
logs a request.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import struct
from pathlib import Path
from typing import Any, Callable

from stbproxy.engine import Answer, Engine
from stbproxy.errors import StbError, StoreError
from stbproxy.models import ApiRef, Request, Response, Source
from stbproxy.redact import failure_text
from stbproxy.store.write_failures import WriteFailures
from stbproxy.traffic.seam import Call

log = logging.getLogger("stbproxy")

_LENGTH = struct.Struct(">I")
MAX_FRAME = 1 << 30
SESSION_FLUSH_SECONDS = 0.02  # a reader sends its hits' session records at least this often
SESSION_BATCH = 256


class LinkLost(StbError):
    """The primary worker is gone (it stopped or crashed)."""


# -- the wire form of the engine's data ---------------------------------------------------


def request_to_wire(request: Request) -> dict:
    return {"method": request.method, "url": request.url, "headers": [list(h) for h in request.headers],
            "body": base64.b64encode(request.body).decode("ascii"), "to_proxy": request.to_proxy,
            "lane": request.lane}


def request_from_wire(data: dict) -> Request:
    return Request(data["method"], data["url"], tuple((k, v) for k, v in data["headers"]),
                   base64.b64decode(data["body"]), to_proxy=data.get("to_proxy", False), lane=data.get("lane", ""))


def call_to_wire(call: Call) -> dict:
    return {"key": call.key, "request": request_to_wire(call.request),
            "upstream": request_to_wire(call.upstream) if call.upstream is not None else None,
            "api": [call.api.category, call.api.tool, call.api.api] if call.api else None,
            "args": dict(call.args), "host": call.host, "reply_format": call.reply_format,
            "no_upstream": call.no_upstream, "kind": call.kind, "keep": call.keep, "streams": call.streams,
            "faultable": call.faultable, "may_simulate": call.may_simulate, "private": call.private,
            "facts": dict(call.facts)}  # not ``live``: the link carries an answer whole, never its events as they come


def call_from_wire(data: dict) -> Call:
    request = request_from_wire(data["request"])
    upstream = data["upstream"]
    # The engine tells a call sent upstream as-is by identity (its secrets are the client's).
    upstream = request if upstream is not None and upstream == data["request"] else (
        request_from_wire(upstream) if upstream is not None else None)
    return Call(data["key"], request, upstream, ApiRef(*data["api"]) if data["api"] else None, data["args"],
                host=data["host"], reply_format=data["reply_format"], no_upstream=data["no_upstream"],
                kind=data["kind"], keep=data["keep"], streams=data["streams"],
                faultable=data["faultable"], may_simulate=data["may_simulate"], private=data["private"],
                facts=data["facts"])


def answer_to_wire(answer: Answer) -> dict:
    response = answer.response
    return {"status": response.status, "reason": response.reason, "headers": [list(h) for h in response.headers],
            "body": base64.b64encode(response.body).decode("ascii"), "source": answer.source.value,
            "key": answer.key, "meta": dict(answer.meta), "record_key": answer.record_key,
            "stored_source": answer.stored_source.value if answer.stored_source else None,
            "write_failed": answer.write_failed}


def answer_from_wire(data: dict) -> Answer:
    response = Response(data["status"], tuple((k, v) for k, v in data["headers"]), base64.b64decode(data["body"]),
                        data["reason"])
    return Answer(response, Source(data["source"]), data["key"], data["meta"], data["record_key"],
                  Source(data["stored_source"]) if data["stored_source"] else None, data["write_failed"])


async def read_message(reader: asyncio.StreamReader) -> dict:
    (length,) = _LENGTH.unpack(await reader.readexactly(_LENGTH.size))
    if length > MAX_FRAME:
        raise ValueError(f"a link message of {length} bytes")
    return json.loads(await reader.readexactly(length))


def write_message(writer: asyncio.StreamWriter, message: dict) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    writer.write(_LENGTH.pack(len(data)) + data)


# -- the primary's side -------------------------------------------------------------------


class LinkServer:
    """Answers the readers with the primary's engine, and appends their session records."""

    def __init__(self, engine: Engine, store, write_failures: WriteFailures, path: Path) -> None:
        self.engine = engine
        self.store = store
        self.write_failures = write_failures
        self.path = path
        self._server: asyncio.AbstractServer | None = None
        self._hellos: dict[int, asyncio.Event] = {}
        self._tasks: set[asyncio.Task] = set()
        self._readers: set[asyncio.Task] = set()  # one per connected reader

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._serve, str(self.path))

    def expect(self, pid: int) -> asyncio.Event:
        """An event set when the reader with this pid says it listens."""
        return self._hellos.setdefault(pid, asyncio.Event())

    async def close(self, timeout: float = 5.0) -> None:
        """Stop listening, read what stopped readers sent last (their final session
        records), then drop what is left."""
        if self._server is not None:
            self._server.close()
            self._server = None
        if self._readers:
            await asyncio.wait(list(self._readers), timeout=timeout)
        for task in [*self._tasks, *self._readers]:
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        assert me is not None  # (a connection is served in a task of its own)
        self._readers.add(me)
        try:
            while True:
                message = await read_message(reader)
                kind = message.get("t")
                if kind == "sessions":
                    self._append_sessions(message["records"])
                elif kind in ("call", "request"):
                    task = asyncio.ensure_future(self._answer(message, writer))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
                elif kind == "hello":
                    self.expect(int(message["pid"])).set()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the reader stopped (or crashed): the supervisor sees to it
        except ValueError as exc:
            log.error("stbproxy: a worker sent an unreadable message (%s); dropping its link", exc)
        finally:
            self._readers.discard(me)
            writer.close()

    async def _answer(self, message: dict, writer: asyncio.StreamWriter) -> None:
        session = message.get("session")
        request: Request | None = None
        try:
            if message["t"] == "call":
                call = call_from_wire(message["call"])
                request = call.request
                answer = await self.engine.answer(call, session)
            else:
                request = request_from_wire(message["request"])
                answer = await self.engine.handle(request, session)
            reply = {"id": message["id"], "answer": answer_to_wire(answer)}
        except Exception as exc:  # one bad call must not take the link down
            if request is None:
                log.error("stbproxy: a worker's call could not be read: %s", type(exc).__name__)
            else:
                log.error("stbproxy failed on %s", failure_text(request, exc, self.engine.config.rules))
            reply = {"id": message["id"], "error": "the primary worker failed on this call (see its log)"}
        if not writer.is_closing():
            write_message(writer, reply)

    def _append_sessions(self, records: list) -> None:
        try:
            self.store.append_sessions([(name, record) for name, record in records])
        except StoreError as exc:
            names = sorted({name for name, _ in records})
            self.write_failures.record(f"the log of session {', '.join(names)}", str(exc))


# -- a reader's side ----------------------------------------------------------------------


class LinkClient:
    """A reader's connection to the primary: forwarded calls, and its hits' session records."""

    def __init__(self) -> None:
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._waiting: dict[int, asyncio.Future] = {}
        self._next_id = 0
        self._records: list[list] = []
        self._flush_handle: asyncio.TimerHandle | None = None
        self.lost = asyncio.Event()
        self._on_lost: list[Callable[[], Any]] = []
        self.path: Path | None = None  # the link's socket, in the primary's private folder

    async def connect(self, path: str) -> None:
        self.path = Path(path)
        reader, self._writer = await asyncio.open_unix_connection(path)
        self._reader = reader
        asyncio.ensure_future(self._read_replies(reader))

    def on_lost(self, callback: Callable[[], Any]) -> None:
        self._on_lost.append(callback)

    async def hello(self, pid: int) -> None:
        self._send({"t": "hello", "pid": pid})

    async def answer(self, call: Call, session: str | None) -> Answer:
        return await self._ask({"t": "call", "session": session, "call": call_to_wire(call)})

    async def handle(self, request: Request, session: str | None) -> Answer:
        return await self._ask({"t": "request", "session": session, "request": request_to_wire(request)})

    def session_record(self, name: str, record: dict) -> None:
        """Queue a session record; records leave in batches, soon (SESSION_FLUSH_SECONDS)."""
        self._records.append([name, record])
        if len(self._records) >= SESSION_BATCH:
            self.flush()
        elif self._flush_handle is None:
            self._flush_handle = asyncio.get_running_loop().call_later(SESSION_FLUSH_SECONDS, self.flush)

    def flush(self) -> None:
        if self._flush_handle is not None:
            self._flush_handle.cancel()
            self._flush_handle = None
        if self._records and not self.lost.is_set():
            records, self._records = self._records, []
            self._send({"t": "sessions", "records": records})

    async def close(self) -> None:
        """Send what is queued, then close."""
        self.flush()
        if self._writer is not None and not self._writer.is_closing():
            try:
                await self._writer.drain()
            except ConnectionError:
                pass
            self._writer.close()

    async def _ask(self, message: dict) -> Answer:
        if self.lost.is_set():
            raise LinkLost("the primary worker is gone")
        self._next_id += 1
        message["id"] = self._next_id
        future = asyncio.get_running_loop().create_future()
        self._waiting[self._next_id] = future
        self._send(message)
        reply = await future
        if "error" in reply:
            raise StbError(reply["error"])
        return answer_from_wire(reply["answer"])

    def _send(self, message: dict) -> None:
        if self._writer is None or self._writer.is_closing():
            raise LinkLost("the primary worker is gone")
        write_message(self._writer, message)

    async def _read_replies(self, reader: asyncio.StreamReader) -> None:
        try:
            while True:
                reply = await read_message(reader)
                number = reply.get("id")  # (every id the link sends is an int)
                future = self._waiting.pop(number, None) if isinstance(number, int) else None
                if future is not None and not future.done():
                    future.set_result(reply)
        except (asyncio.IncompleteReadError, ConnectionError, ValueError):
            pass
        finally:
            self.lost.set()
            for future in self._waiting.values():
                if not future.done():
                    future.set_exception(LinkLost("the primary worker is gone"))
            self._waiting.clear()
            for callback in self._on_lost:
                callback()
