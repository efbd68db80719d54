"""The loopback upstream of the HTTP/2 rapid-reset run (h2_flood.py) and what it counts.

``Upstream`` serves plain HTTP and HTTPS on 127.0.0.1 and announces its ports on one line
(``READY`` parses it); a /flood URL takes ``SLOW`` seconds, so a flood stream the proxy
forwards holds an upstream call, and the upstream counts the flood requests that reached it
and those whose answer the proxy still waited for. ``upstream_stats`` asks it for the counts.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import socket
import ssl
from pathlib import Path

from scripts.common import HOST
from scripts.reliability.h2_hostile import keep_to_cores

SLOW = 0.3  # seconds the upstream takes for each flood URL: a flood stream that reaches it holds a connection
READY = re.compile(r"listening on (\d+) (\d+)")  # the line Upstream.serve prints once it listens


class Upstream:
    """Plain HTTP and HTTPS on 127.0.0.1: /flood waits SLOW seconds (or ``wait=S``), /stats counts
    what came; any other path is answered at once."""

    def __init__(self) -> None:
        self.flood = 0  # flood requests that reached it
        self.waited = 0  # ... and whose answer the proxy still waited for after SLOW seconds
        self.other = 0

    async def serve(self, folder: Path, hostile: bool) -> None:
        from scripts.reliability.fuzz_upstream import make_tls

        keep_to_cores(hostile)
        ca_file, context = make_tls(folder)
        plain = await asyncio.start_server(self._connection, HOST, 0, backlog=1024)
        tls = await asyncio.start_server(self._connection, HOST, 0, ssl=context, backlog=1024)
        print(f"listening on {plain.sockets[0].getsockname()[1]} {tls.sockets[0].getsockname()[1]} {ca_file}",
              flush=True)
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            asyncio.get_running_loop().add_signal_handler(sig, stop.set)
        async with plain, tls:
            await stop.wait()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1]
                path = re.sub(rb"^https?://[^/]*", b"", target).split(b"?")[0]
                if path == b"/flood":
                    self.flood += 1
                    wait = re.search(rb"[?&]wait=([\d.]+)", target)
                    await asyncio.sleep(float(wait.group(1)) if wait else SLOW)
                    if writer.is_closing() or reader.at_eof() or reader.exception() is not None:
                        return  # the proxy gave up the call
                    self.waited += 1
                elif path != b"/stats":
                    self.other += 1
                body = json.dumps({"flood": self.flood, "waited": self.waited, "other": self.other}
                                  if path == b"/stats" else {"path": target.decode("latin-1")}).encode()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                             % (len(body), body))
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, ssl.SSLError, IndexError,
                asyncio.CancelledError):
            pass
        finally:
            writer.close()


def upstream_stats(port: int) -> dict:
    with socket.create_connection((HOST, port), timeout=10) as sock:
        sock.sendall(b"GET /stats HTTP/1.1\r\nHost: x\r\n\r\n")
        answer = b""
        while not answer.endswith(b"}"):
            chunk = sock.recv(4096)
            if not chunk:
                break
            answer += chunk
    return json.loads(answer.partition(b"\r\n\r\n")[2])
