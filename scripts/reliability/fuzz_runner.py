"""The asyncio client that sends fuzz cases to a proxy and reads what comes back.

``run_case`` sends one case on its own connection (through a CONNECT tunnel with TLS for a
tunnel case), then leaves, half-closes or waits as the case expects, reads one answer within
the case's timeout and has fuzz_judge.py judge it; a timeout is a hang, a close without a word
after a whole request is a failure. ``run_cases`` runs many, a few at a time, and lets a case
that waits too long give its place to the next so that hanging cases do not starve the run.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
import struct
import time
from typing import Iterator

from scripts.reliability.fuzz_judge import CLOSED, GARBLED, GONE, HANG, NO_ANSWER, REFUSED, TUNNEL, Result, judge
from scripts.reliability.fuzz_upstream import FuzzUpstream
from scripts.reliability.fuzzkit import ANY, LEFT, Case

LEAVING_AFTER = (0, 0.01, 0.05, 0.2)  # seconds a leaving client waits before it goes


async def _read_answer(reader: asyncio.StreamReader, method: bytes) -> tuple[bytes, str]:
    """One answer (interim 1xx answers skipped) and how it ended: "answer", "closed" (nothing
    came) or "partial" (bytes but no whole head). A body is read up to 64 KiB."""
    buffer = b""
    while True:
        while b"\r\n\r\n" not in buffer:
            try:
                chunk = await reader.read(65536)
            except (ConnectionError, ssl.SSLError):
                chunk = b""
            if not chunk:
                return buffer, "closed" if not buffer else "partial"
            buffer += chunk
        head, _, rest = buffer.partition(b"\r\n\r\n")
        if not re.match(rb"HTTP/1\.[01] 1\d\d", head):
            break
        buffer = rest
    status = re.match(rb"HTTP/1\.[01] (\d{3})", head)
    length = re.search(rb"(?im)^content-length: *(\d+)", head)
    if method == b"HEAD" or (status and status.group(1) in (b"204", b"304")):
        want = 0
    elif length:
        want = int(length.group(1))
    else:  # chunked or until the close: what comes, up to the cap
        want = 1 << 16 if re.search(rb"(?im)^transfer-encoding:.*chunked", head) else -1
    while (want < 0 or len(rest) < want) and len(rest) < 1 << 16:
        try:
            chunk = await reader.read(65536)
        except (ConnectionError, ssl.SSLError):
            chunk = b""
        if not chunk or (want == 1 << 16 and rest.endswith(b"0\r\n\r\n")):
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest[:1 << 16], "answer"


async def _connect(port: int, case: Case, client_tls: ssl.SSLContext | None, progress: list[bytes]):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if case.kind != "tunnel":
        return reader, writer, None
    writer.write(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (case.tunnel, case.tunnel))
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = await reader.read(1)
        if not chunk:
            break
        head += chunk
    if not head.startswith(b"HTTP/1.1 200") or client_tls is None:
        writer.close()
        return None, None, f"CONNECT answered {head[:80]!r}"
    progress.append(b"[connected]")
    try:
        await writer.start_tls(client_tls, server_hostname=case.tunnel.rsplit(b":", 1)[0].decode())
    except (ssl.SSLError, ConnectionError) as exc:
        writer.close()
        return None, None, f"TLS handshake with the proxy failed: {exc}"
    return reader, writer, None


async def run_case(case: Case, port: int, upstream: FuzzUpstream, *, timeout: float,
                   client_tls: ssl.SSLContext | None = None) -> Result:
    """One case on its own connection: send it, leave or half-close as the case says, read the
    answer (within ``timeout`` seconds from the connect), judge it."""
    started = time.monotonic()
    progress: list[bytes] = []  # what came back so far, for a case that times out
    writer = None

    async def converse() -> Result:
        nonlocal writer
        try:
            reader, writer, refused = await _connect(port, case, client_tls, progress)
        except OSError as exc:
            return Result(case, REFUSED, detail=f"{type(exc).__name__}: {exc}")
        if refused:
            return Result(case, TUNNEL, detail=refused)
        send_error = ""
        try:
            writer.write(case.raw)
            await writer.drain()
        except (ConnectionError, ssl.SSLError) as exc:
            send_error = f"the proxy closed while the case was sent ({type(exc).__name__})"
        if case.expect == LEFT:
            await asyncio.sleep(LEAVING_AFTER[(case.number or 0) % len(LEAVING_AFTER)])
            if case.leave == "reset" and (sock := writer.get_extra_info("socket")) is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort() if case.leave == "reset" else writer.close()
            return Result(case, GONE)
        if case.expect == ANY and not send_error and writer.can_write_eof():
            writer.write_eof()
        answer, how = await _read_answer(reader, case.raw.lstrip(b"\r\n").split(b" ", 1)[0])
        progress.append(answer)
        if how == "closed":
            return Result(case, CLOSED if case.expect == ANY else NO_ANSWER, detail=send_error)
        if how == "partial":
            return Result(case, GARBLED, answer=answer, detail="the connection closed inside an answer's head")
        status = re.match(rb"HTTP/1\.[01] (\d{3})", answer)
        status = int(status.group(1)) if status else None
        outcome, detail = judge(case, status, answer, upstream)
        return Result(case, outcome, status, answer, detail=detail)

    try:
        result = await asyncio.wait_for(converse(), timeout)
    except asyncio.TimeoutError:
        got = b"".join(progress)
        result = Result(case, HANG, answer=got, detail=f"no answer and no close within {timeout:g}s"
                        + (" (the head came, the body did not end)" if b"HTTP/" in got else ""))
    finally:
        if writer is not None:
            writer.transport.abort()
    result.seconds = time.monotonic() - started
    return result


async def run_cases(port: int, generated: Iterator[Case], upstream: FuzzUpstream, *, seconds: float,
                    max_cases: int, concurrency: int = 8, timeout: float = 8.0,
                    client_tls: ssl.SSLContext | None = None, park_after: float = 0.5,
                    max_open: int = 400, timing: dict | None = None) -> list[Result]:
    """Cases from ``generated`` for up to ``seconds`` (or ``max_cases``), ``concurrency`` at a
    time; each then gets its full ``timeout``. A case still waiting after ``park_after``
    seconds gives its place to the next (at most ``max_open`` connections open), so that cases
    that hang do not starve the run."""
    loop = asyncio.get_running_loop()
    places = asyncio.Semaphore(concurrency)
    results: list[Result] = []
    running: set[asyncio.Task] = set()
    deadline = loop.time() + seconds

    async def one(case: Case) -> None:
        freed = False

        def free() -> None:
            nonlocal freed
            if not freed:
                freed = True
                places.release()

        parked = loop.call_later(park_after, free)
        try:
            results.append(await run_case(case, port, upstream, timeout=timeout, client_tls=client_tls))
        finally:
            parked.cancel()
            free()

    started = 0
    while started < max_cases and loop.time() < deadline:
        await places.acquire()
        while len(running) >= max_open:
            await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        if loop.time() >= deadline:
            places.release()
            break
        task = loop.create_task(one(next(generated)))
        running.add(task)
        task.add_done_callback(running.discard)
        started += 1
    if timing is not None:
        timing["sending"] = seconds - max(0.0, deadline - loop.time())
    if running:
        await asyncio.gather(*running)
    return results
