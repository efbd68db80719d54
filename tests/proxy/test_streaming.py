"""How a body that is still arriving is written to the client (stbproxy/mitm/streaming.py):
chunk by chunk as it comes, with a last chunk only when the server ended the stream, and
the server's stream closed in every case."""

from __future__ import annotations

import asyncio

from mitmproxy import http

from stbproxy.errors import UpstreamError
from stbproxy.mitm.streaming import carry, chunked_head


class Pieces:
    def __init__(self, *pieces, breaks: bool = False, then_waits: bool = False) -> None:
        self.pieces, self.breaks, self.then_waits = pieces, breaks, then_waits
        self.closed = False

    async def chunks(self):
        for piece in self.pieces:
            yield piece
        if self.breaks:
            raise UpstreamError("the event stream of http://127.0.0.1/mcp broke off", failure="protocol")
        if self.then_waits:
            await asyncio.Event().wait()

    async def aclose(self) -> None:
        self.closed = True


class Writer:
    def __init__(self) -> None:
        self.data = b""

    def write(self, data: bytes) -> None:
        self.data += data

    async def drain(self) -> None:
        pass


async def silent_client() -> bytes:
    await asyncio.Event().wait()
    return b""


def run(stream, client_says=silent_client) -> tuple[bool, bytes]:
    writer = Writer()
    keep_open = asyncio.run(carry(stream, b"HEAD\r\n\r\n", writer, client_says))
    return keep_open, writer.data


def test_a_stream_the_server_ends_is_written_in_chunks_with_a_last_one():
    stream = Pieces(b"data: 1\n\n", b"", b"data: two\n\n")
    assert run(stream) == (True, b"HEAD\r\n\r\n9\r\ndata: 1\n\n\r\nb\r\ndata: two\n\n\r\n0\r\n\r\n")
    assert stream.closed


def test_a_stream_that_breaks_off_leaves_the_client_without_a_last_chunk():
    stream = Pieces(b"data: 1\n\n", breaks=True)
    keep_open, written = run(stream)
    assert not keep_open and written == b"HEAD\r\n\r\n9\r\ndata: 1\n\n\r\n"  # the client sees a broken stream
    assert stream.closed


def test_a_client_that_leaves_ends_the_servers_stream():
    async def leaves() -> bytes:
        await asyncio.sleep(0.05)
        return b""

    stream = Pieces(b"data: 1\n\n", then_waits=True)
    keep_open, written = run(stream, leaves)
    assert not keep_open and written.endswith(b"data: 1\n\n\r\n") and stream.closed


def test_the_head_of_a_streamed_answer_has_no_length_and_says_chunked():
    response = http.Response.make(200, b"", {"content-type": "text/event-stream"})
    head = chunked_head(response)
    assert b"transfer-encoding: chunked\r\n" in head.lower() and b"content-length" not in head.lower()
