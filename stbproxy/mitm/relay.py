"""A loopback server that writes streamed answers for flows mitmproxy serves itself.

mitmproxy sends a response an addon sets in one piece; only a response it reads from a
server can go to the client as it arrives. So for a flow no fast lane serves (``serve
--no-fast-lane``, ``mitmdump -s``), the addon hands the answer's head and BodyStream to this
relay under a one-time random path, points the flow at it, and asks mitmproxy to stream
the response (addon.py). The relay listens on 127.0.0.1 only; a path it does not hold, or
one not fetched within PICKUP_SECONDS, gets nothing from it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets

from stbproxy.mitm.streaming import carry
from stbproxy.models import BodyStream

log = logging.getLogger("stbproxy")

PICKUP_SECONDS = 30.0  # how long a handed stream waits for mitmproxy's request
MAX_HEAD = 16 * 1024


class Relay:
    def __init__(self) -> None:
        self._server: asyncio.base_events.Server | None = None
        self._waiting: dict[str, tuple[bytes, BodyStream]] = {}
        self._starting = asyncio.Lock()

    async def hand(self, head: bytes, stream: BodyStream) -> tuple[str, int, str]:
        """Keep ``stream`` for one fetch; the host, port and path that fetch it."""
        async with self._starting:
            if self._server is None:
                self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        token = secrets.token_urlsafe(24)
        self._waiting[token] = (head, stream)
        asyncio.get_running_loop().call_later(PICKUP_SECONDS, self._expire, token)
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port, "/" + token

    def _expire(self, token: str) -> None:
        held = self._waiting.pop(token, None)
        if held is not None:
            asyncio.ensure_future(held[1].aclose())

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), PICKUP_SECONDS)
            parts = head[:MAX_HEAD].split(b" ", 2)
            held = self._waiting.pop(parts[1].decode("latin-1").lstrip("/"), None) if len(parts) == 3 else None
            if held is None:
                writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                return
            await carry(held[1], held[0], writer, lambda: reader.read(65536))
        except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for _head, stream in self._waiting.values():
            await stream.aclose()
        self._waiting.clear()
