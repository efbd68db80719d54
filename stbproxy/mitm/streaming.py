"""Answers whose body is still arriving (a server's event stream), written to the client
event by event as the server sends them.

The engine hands such an answer over with its head in the response and its body as a
BodyStream (models.py); the addon puts that stream in the flow's metadata under STREAM.
The fast lanes write the head and then each piece as an HTTP/1.1 chunk, as it comes
(``carry``). A flow mitmproxy serves itself cannot take a body from an addon piece by piece,
so the addon sends it to a relay of its own on loopback (relay.py) and mitmproxy streams
what the relay writes.

The stream ends when the server ends it (the last chunk is written), when it breaks off
(the client's connection is closed without one, so the client sees a broken stream and may
resume it with Last-Event-ID), or when the client leaves or sends anything more on the
connection (the server's stream is closed then).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Awaitable, Callable, Protocol

from mitmproxy import http
from mitmproxy.net.http import http1

from stbproxy.errors import UpstreamError
from stbproxy.models import BodyStream

log = logging.getLogger("stbproxy")

STREAM = "stb_stream"  # flow.metadata: the BodyStream of a response that carries only its head


class ClientWriter(Protocol):
    def write(self, data: bytes) -> None: ...

    async def drain(self) -> None: ...


def chunked_head(response: http.Response) -> bytes:
    """The head of a response whose body follows in chunks of unknown number."""
    response.headers.pop("content-length", None)
    response.headers["transfer-encoding"] = "chunked"
    return http1.assemble_response_head(response)


async def carry(stream: BodyStream, head: bytes, writer: ClientWriter,
                client_says: Callable[[], Awaitable[bytes]]) -> bool:
    """Write ``head``, then the stream's bytes as they arrive; whether the connection may
    serve another request (only when the server ended the stream and the client is still
    there). ``client_says`` reads what the client sends meanwhile (b"" when it has left)."""
    listening = asyncio.ensure_future(client_says())
    try:
        writer.write(head)
        await writer.drain()
        pieces = stream.chunks().__aiter__()
        while True:
            piece = asyncio.ensure_future(pieces.__anext__())
            await asyncio.wait((piece, listening), return_when=asyncio.FIRST_COMPLETED)
            if not piece.done():  # the client left, or spoke while its stream was open
                piece.cancel()
                return False
            try:
                data = piece.result()
            except StopAsyncIteration:
                break
            if data:
                writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                await writer.drain()
        # Stop listening before the last chunk: what the client sends once it has read it is its
        # next request (a call's answer is followed by the next call), the lane's to read.
        spoke = listening.done()
        if not spoke:
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listening  # its read is over: the lane may read again
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return not spoke
    except UpstreamError as exc:
        log.info("stbproxy: %s; the client's connection is closed so that it sees the break", exc)
        return False
    except ConnectionError:
        return False
    finally:
        listening.cancel()
        await stream.aclose()
