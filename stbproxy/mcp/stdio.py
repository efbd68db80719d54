"""A stdio MCP server as the engine's real API (``stbproxy mcp-stdio``): the child process
is started on the first message the store cannot answer, never before, and spoken to in
MCP's stdio framing (one JSON-RPC message per line).

``send`` writes a client's message to the child and, for a request, waits for the child's
answer with the same id; every other line the child writes (its notifications, its own
requests to the client) goes to ``to_client`` as it comes, and is kept with the request it
belongs to: a progress notification with that request's token, anything else while that
request is the only one waiting. A request with such lines is answered with them as an
event stream (each line an event, the answer last), as a server over HTTP answers, so that
they are stored and replayed with it. A child started after the store
answered ``initialize`` is initialized first, with the client's own ``initialize``.
A child that cannot be started, dies or stays silent past the timeout is an unreachable
API (UpstreamError), which the engine's rules then handle as for any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
from typing import Awaitable, Callable

from stbproxy.errors import UpstreamError, UpstreamFailure
from stbproxy.mcp import jsonrpc, sse
from stbproxy.models import Request, Response

log = logging.getLogger("stbproxy")

JSON = (("Content-Type", "application/json"),)
EVENTS = (("Content-Type", sse.EVENT_STREAM),)
READ_LIMIT = 64 << 20  # one message per line: a line may be a large result
INIT_ID = "stbproxy-initialize"
STOP_WAIT = 2.0  # seconds a child gets to exit after its stdin closed, as MCP clients give it


class StdioServer:
    def __init__(self, argv: list[str], to_client: Callable[[bytes], Awaitable[None]], *,
                 timeout: float = 30.0, env: dict[str, str] | None = None) -> None:
        self.argv = argv
        self.to_client = to_client
        self.timeout = timeout
        self.env = env
        self.initialize: bytes | None = None  # the client's own, when the store answered it
        self._process: asyncio.subprocess.Process | None = None
        self._starting: asyncio.Lock | None = None
        self._waiting: dict[str, asyncio.Future[bytes]] = {}
        self._heard: dict[str, list[bytes]] = {}  # what the child said for each waiting request
        self._tokens: dict[str, str] = {}  # the progress token of each waiting request that has one
        self._reader: asyncio.Task | None = None
        self.returncode: int | None = None
        self.start_error: str | None = None  # why the server could not be started, when it could not

    @property
    def started(self) -> bool:
        return self._process is not None

    # the engine's upstream client -------------------------------------------------------
    async def send(self, request: Request) -> tuple[Response, float]:
        message = jsonrpc.read(request.body)
        if self._process is None and message.kind != jsonrpc.REQUEST:
            # What only concerns a session the store answered so far (its initialized
            # notification): the server, once started, is initialized as the client was.
            raise UpstreamError("the stdio MCP server starts with the first request that needs it",
                                failure=UpstreamFailure.DEFERRED)
        await self._running(message.method)
        started = asyncio.get_running_loop().time()
        if message.kind != jsonrpc.REQUEST:
            await self._write(request.body)
            return Response(202, JSON, b""), 0.0
        token = _progress_token(message.params)
        line, heard = await self._ask(request.body, message.id, token)
        seconds = asyncio.get_running_loop().time() - started
        if heard:
            return Response(200, EVENTS, sse.encode([sse.Event(item) for item in [*heard, line]])), seconds
        return Response(200, JSON, line), seconds

    async def open_stream(self, request: Request, answer: bool = False) -> tuple[Response, float]:
        """As ``send``: what the child says for a request reaches the client as it writes it
        (``to_client``), so its answer comes back whole (engine._live: no head, no stream)."""
        return await self.send(request)

    async def aclose(self) -> None:
        """Close the child's stdin and wait for it to exit (then terminate it, then kill it)."""
        process = self._process
        if process is None:
            return
        if process.stdin is not None and not process.stdin.is_closing():
            process.stdin.close()
        for stop in (None, process.terminate, process.kill):
            if stop is not None and process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    stop()
            try:
                self.returncode = await asyncio.wait_for(process.wait(), STOP_WAIT)
                break
            except asyncio.TimeoutError:
                continue
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    # the child ----------------------------------------------------------------------------
    async def _running(self, method: str) -> None:
        if self._process is not None:
            if self._process.returncode is not None:
                raise UpstreamError(f"the stdio MCP server {self._shown()} exited with status "
                                    f"{self._process.returncode}", failure=UpstreamFailure.UNREACHABLE)
            return
        self._starting = self._starting or asyncio.Lock()
        async with self._starting:
            if self._process is not None:
                return
            try:
                self._process = await asyncio.create_subprocess_exec(
                    *self.argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=None,
                    env=self.env, limit=READ_LIMIT)
            except OSError as exc:
                self.start_error = f"cannot start the stdio MCP server {self._shown()}: {exc}"
                raise UpstreamError(self.start_error, failure=UpstreamFailure.UNREACHABLE) from exc
            log.info("started the stdio MCP server %s (pid %d)", self._shown(), self._process.pid)
            self._reader = asyncio.ensure_future(self._read())
            if method != "initialize" and self.initialize is not None:
                await self._initialized(self.initialize)

    async def _initialized(self, initialize: bytes) -> None:
        """Initialize a child the store spoke for so far, as the client once did."""
        try:
            document = json.loads(initialize)
            document["id"] = INIT_ID
        except (ValueError, TypeError):
            return
        await self._ask(json.dumps(document).encode(), INIT_ID)  # what it says meanwhile is the session's
        await self._write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}).encode())

    async def _ask(self, body: bytes, message_id, token=None) -> tuple[bytes, list[bytes]]:
        """The child's answer line, and the lines it said for this request meanwhile."""
        key = json.dumps(message_id)
        waiter = asyncio.get_running_loop().create_future()
        self._waiting[key] = waiter
        self._heard[key] = []
        if token is not None:
            self._tokens[json.dumps(token)] = key
        try:
            await self._write(body)
            return await asyncio.wait_for(waiter, self.timeout), self._heard[key]
        except asyncio.TimeoutError:
            raise UpstreamError(f"the stdio MCP server {self._shown()} gave no answer within "
                                f"{self.timeout:g} s", failure=UpstreamFailure.TIMEOUT) from None
        finally:
            self._waiting.pop(key, None)
            self._heard.pop(key, None)
            if token is not None:
                self._tokens.pop(json.dumps(token), None)

    def _note(self, line: bytes) -> None:
        """Keep a line the child said by itself with the request it belongs to, if any."""
        try:
            message = json.loads(line)
        except ValueError:
            return
        params = message.get("params") if isinstance(message, dict) else None
        token = params.get("progressToken") if isinstance(params, dict) else None
        key = self._tokens.get(json.dumps(token)) if token is not None else None
        if key is None:
            waiting = [k for k in self._heard if k != json.dumps(INIT_ID)]
            key = waiting[0] if len(waiting) == 1 else None
        if key is not None and key in self._heard:
            self._heard[key].append(line)

    async def _write(self, body: bytes) -> None:
        stdin = self._process.stdin if self._process else None
        if stdin is None or stdin.is_closing():
            raise UpstreamError(f"the stdio MCP server {self._shown()} is not running",
                                failure=UpstreamFailure.UNREACHABLE)
        try:
            stdin.write(body.rstrip(b"\r\n") + b"\n")
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise UpstreamError(f"the stdio MCP server {self._shown()} closed its input: {exc}",
                                failure=UpstreamFailure.UNREACHABLE) from exc

    async def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        stdout = self._process.stdout
        while True:
            try:
                line = await stdout.readline()
            except (ValueError, asyncio.LimitOverrunError):  # a line past the limit: not MCP framing
                log.warning("the stdio MCP server %s wrote a line over %d bytes; stopped reading it",
                            self._shown(), READ_LIMIT)
                break
            if not line:
                break
            line = line.rstrip(b"\r\n")
            if not line:
                continue
            answered = self._answer_to(line)
            if answered is not None and not answered.done():
                answered.set_result(line)
            elif answered is None:
                self._note(line)
                await self.to_client(line)  # the server's own notification or request
        for waiter in self._waiting.values():  # the child is gone: nobody will answer these
            if not waiter.done():
                waiter.set_exception(UpstreamError(f"the stdio MCP server {self._shown()} exited",
                                                   failure=UpstreamFailure.UNREACHABLE))

    def _answer_to(self, line: bytes):
        answer = jsonrpc.answer_of(line)
        if answer is None:
            return None
        return self._waiting.get(json.dumps(answer.get("id")))

    def _shown(self) -> str:
        # the program alone: its arguments may hold secrets (a key given on the command line)
        extra = len(self.argv) - 1
        return os.path.basename(self.argv[0]) + (f" (and {extra} argument{'s' * (extra != 1)})" if extra else "")


def _progress_token(params):
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None
