"""A call's answer carried live: an MCP server that answers a POST with events (progress,
its own requests to the client, log messages) sends them while it works, and a client
waits for them (a timeout reset by progress, a question it must answer before the server
goes on). The engine runs the call as any other (engine._live): this channel sends the
call's request with the upstream's ``open_stream``, hands the client each event as it
arrives, and returns the whole answer to the engine, which judges it and keeps it (or, in
virtual mode, has it simulated) as it would a whole one. The event that carries the
answer itself is held back until then: the client gets the answer the engine settled on
(the server's, or a simulated one in its place), with its own id."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import AsyncIterator, Awaitable, Callable

from stbproxy.errors import UpstreamError
from stbproxy.mcp import jsonrpc, sse
from stbproxy.models import Request, Response, StreamedResponse

Send = Callable[..., Awaitable[tuple[Response, float]]]
NO_ANSWER = -32011  # traffic.NO_ANSWER: the proxy's own "no answer" error


class LiveAnswer:
    """The channel of one call (``body``: its request's body, which tells its sending from
    the session's own requests, such as an ``initialize`` that opens a server session)."""

    def __init__(self, body: bytes, message_id, send: Send, open_stream: Send,
                 shape: Callable[[Response], Response]) -> None:
        self._body = body
        self._id = message_id
        self._send = send
        self._open = open_stream
        self._shape = shape  # the head as this client gets it (its session id)
        self._head: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        self._events: asyncio.Queue[bytes | None] = asyncio.Queue()

    # the engine's side ---------------------------------------------------------------------
    async def send(self, request: Request) -> tuple[Response, float]:
        """The server's whole answer; the events it is made of reach the client meanwhile."""
        if request.body != self._body or self._head.done():
            return await self._send(request)
        response, seconds = await self._open(request, answer=True)
        if not isinstance(response, StreamedResponse) or response.stream is None:
            return response, seconds
        started = time.perf_counter()
        self._head.set_result(response)
        body = bytearray()
        pending = b""
        try:
            async for chunk in response.stream.chunks():
                body += chunk
                blocks, pending = sse.split_blocks(pending + chunk)
                self._pass(blocks)
            self._pass([pending] if pending.strip() else [])
        finally:
            self._events.put_nowait(None)
            await response.stream.aclose()
        whole = Response(response.status, response.headers, bytes(body), response.reason)
        return whole, seconds + time.perf_counter() - started

    def _pass(self, blocks: list[bytes]) -> None:
        for block in blocks:
            if not sse.is_answer_block(block):  # the answer waits for the engine's verdict
                self._events.put_nowait(block)

    async def started(self, task: asyncio.Future) -> Response | None:
        """The head of the server's stream once it arrives, or None when the call was answered
        whole first (a hit, a fault, an answer that is no stream)."""
        try:
            await asyncio.wait((self._head, task), return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            task.cancel()
            raise
        return self._shape(self._head.result()) if self._head.done() else None

    def rest(self, task: asyncio.Future) -> "_Rest":
        return _Rest(self, task)

    # the client's side ---------------------------------------------------------------------
    async def events(self, task: asyncio.Future) -> AsyncIterator[bytes]:
        async for block in self._passed(task):
            yield block
        answer = await task
        yield final_events(answer.response, self._id)

    async def passed_on(self, sending: Callable[[], Awaitable[tuple[Response, float]]]) -> AsyncIterator[bytes]:
        """The server's events and answer for this call, sent by ``sending`` (with this channel's
        ``send``), passed on as they come and never judged or kept (mcp/questions.py: a replay
        whose client answered a question otherwise, in virtual mode)."""
        task = asyncio.ensure_future(sending())
        try:
            async for block in self._passed(task):
                yield block
            response, _ = await task
        except UpstreamError as exc:
            response = Response(502, (), str(exc).encode())
        finally:
            task.cancel()
        yield final_events(response, self._id)

    async def _passed(self, task: asyncio.Future) -> AsyncIterator[bytes]:
        while True:
            getting = asyncio.ensure_future(self._events.get())
            await asyncio.wait((getting, task), return_when=asyncio.FIRST_COMPLETED)
            if not getting.done():  # the call ended without its stream's end (it failed)
                getting.cancel()
                break
            block = getting.result()
            if block is None:
                break
            yield block


class _Rest:
    """The stream the client reads after the head (a BodyStream): the events as they come,
    then the answer the engine settled on. Closing it early (the client left) cancels the
    call, which closes the server's stream."""

    def __init__(self, live: LiveAnswer, task: asyncio.Future) -> None:
        self._live = live
        self._task = task

    def chunks(self) -> AsyncIterator[bytes]:
        return self._live.events(self._task)

    async def aclose(self) -> None:
        if not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


def final_events(response: Response, message_id) -> bytes:
    """The answer's own event(s): those of an event stream that carry the answer, or a JSON
    answer as one event (an error of the proxy's own when it holds no JSON-RPC answer)."""
    if sse.is_event_stream(response.header("content-type")):
        blocks = [block + (separator or b"\n\n") for block, separator in sse.blocks_with_separators(response.body)
                  if sse.is_answer_block(block)]
        if blocks:
            return b"".join(blocks)
    body = response.body.strip()
    if jsonrpc.answer_of(body) is None:
        text = body.decode("utf-8", "replace")[:500] or f"HTTP {response.status}"
        body = jsonrpc.error_body(message_id, NO_ANSWER, f"stbproxy: no answer: {text}")
    return sse.encode([sse.Event(jsonrpc.one_line(body))])
