#!/usr/bin/env python3
"""The load generator the hit benchmarks and the profiler share: one process, one thread, a
epoll loop over non-blocking sockets, raw HTTP/1.1 on keep-alive connections, every
answer checked.

Why not asyncio: on a 2-core machine the load generator shares the cores with the server it
measures, so its own CPU per request bounds what two server processes can show. asyncio's
TLS transport decrypts through memory buffers in Python; a non-blocking ``ssl.SSLSocket``
read when epoll says so does the same work in one C call, which keeps the client's share of
the machine small on HTTPS as well as on plain HTTP.

A plan (JSON, written by the orchestrating script) names the path and holds the requests:

    {"kind": "plain" | "https" | "virtual", "tunnel": "host:443" (https only),
     "expect": "x-stb-source: cache", "items": [[request bytes as latin-1 text, expected], ...]}

``plain``: absolute-form requests to the proxy, as HTTP_PROXY clients send them; the body
must equal ``expected``. ``https``: each connection opens one CONNECT tunnel, trusts the
proxy's CA (``--ca``), and sends origin-form requests through it (keep-alive); the body must
equal ``expected``. ``virtual``: ``POST /virtual`` to the server itself; the answer must be
``{"error": "", "response": expected}``. ``@HOSTPORT@`` in a request is replaced by the
server's address. Every answer must be 200 and carry the ``expect`` header line.

Connections (and their CONNECT and TLS handshake) are opened before a phase's clock starts
and kept for the next phase, so the figures are those of keep-alive requests; a connection
that fails is counted as a failure and reopened inside the phase.

Prints one JSON line: requests, failures (with samples), req/s, p50/p99 in ms, and this
process's own CPU seconds during the measured phase (its share of the machine matters on a
2-core box).

Usage: python scripts/bench/hitload.py --port P --plan FILE --requests N --concurrency C [--warmup W] [--ca FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import select
import socket
import ssl
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.common import percentile  # noqa: E402

HOST = "127.0.0.1"
CONNECT_TIMEOUT = 30.0  # seconds for a connection's CONNECT and TLS handshake
IDLE_TIMEOUT = 60.0  # seconds without any answer before a phase gives up


class Connection:
    """One keep-alive connection with at most one request in flight."""

    __slots__ = ("sock", "buffer", "index", "started")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = bytearray()
        self.index = -1  # the item in flight, -1 when idle
        self.started = 0.0

    def receive(self) -> bool:
        """Read what has arrived; False when the server closed the connection."""
        sock = self.sock
        while True:
            try:
                data = sock.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError):
                return True
            if not data:
                return False
            self.buffer += data
            # A TLS socket may hold decrypted bytes epoll cannot see; a plain one has
            # nothing more after a short read.
            if not isinstance(sock, ssl.SSLSocket) or not sock.pending():
                return True

    def answer(self, head_only: bool = False) -> tuple[bytes, bytes] | None:
        """The complete answer at the front of the buffer (head, body), or None."""
        buffer = self.buffer
        end = buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        end += 4
        head = bytes(buffer[:end])
        length = 0
        if not head_only:
            lower = head.lower()
            pos = lower.find(b"\r\ncontent-length:")
            if pos < 0:
                raise ValueError("an answer without Content-Length")
            length = int(lower[pos + 17: lower.index(b"\r\n", pos + 2)])
        if len(buffer) < end + length:
            return None
        body = bytes(buffer[end:end + length])
        del buffer[:end + length]
        return head, body

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def plan_bytes(plan: dict, hostport: str) -> list[tuple[bytes, bytes]]:
    """Each planned request's bytes, and the body its answer must have."""
    items = []
    for request, expected in plan["items"]:
        if plan["kind"] == "virtual":  # the exact bytes stbproxy writes; anything else is parsed
            body = json.dumps({"error": "", "response": expected}, ensure_ascii=False).encode()
        else:
            body = expected.encode("latin-1")
        items.append((request.replace("@HOSTPORT@", hostport).encode("latin-1"), body))
    return items


def write_flat(plan: dict, hostport: str, path: Path) -> None:
    """The plan as hitload.c reads it: a few text lines, then each request's bytes and the
    exact body its answer must have (hitload.c compares bytes and parses no JSON)."""
    items = plan_bytes(plan, hostport)
    with open(path, "wb") as out:
        out.write(b"hitload-flat-1\n%s\n%s\n%s\n%d\n" % (
            plan["kind"].encode(), (plan.get("tunnel") or "-").encode(), (plan["expect"] or "-").encode(),
            len(items)))
        for request, body in items:
            out.write(b"%d %d\n%s%s" % (len(request), len(body), request, body))


class Load:
    def __init__(self, plan: dict, port: int, ca: str | None) -> None:
        self.kind = plan["kind"]
        self.port = port
        self.items = plan_bytes(plan, f"{HOST}:{port}")
        self.expected = [body for _, body in self.items]
        self.expect = ("\r\n" + plan["expect"].lower() + "\r\n").encode() if plan["expect"] else b""
        self.tunnel = plan.get("tunnel")
        self.tls = ssl.create_default_context(cafile=ca) if self.kind == "https" else None
        self.poller = select.epoll()  # Linux, as the benchmarks' /proc readings
        self.by_fd: dict[int, Connection] = {}
        self.connections: list[Connection] = []
        self.next = 0
        self.total = 0
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.measure = False

    def open(self) -> Connection:
        """A new connection, tunnelled and TLS-wrapped for https, then made non-blocking."""
        sock = socket.create_connection((HOST, self.port), timeout=CONNECT_TIMEOUT)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tunnel:
                sock.sendall(f"CONNECT {self.tunnel} HTTP/1.1\r\nHost: {self.tunnel}\r\n\r\n".encode())
                reply = b""
                while b"\r\n\r\n" not in reply:
                    chunk = sock.recv(4096)
                    if not chunk:
                        raise ConnectionError("the server closed the connection after CONNECT")
                    reply += chunk
                if reply[9:12] != b"200":
                    raise ValueError(f"CONNECT refused: {reply[:80]!r}")
                sock = self.tls.wrap_socket(sock, server_hostname=self.tunnel.rsplit(":", 1)[0])
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
        connection = Connection(sock)
        self.poller.register(sock.fileno(), select.EPOLLIN)
        self.by_fd[sock.fileno()] = connection
        return connection

    def drop(self, connection: Connection) -> None:
        fd = connection.sock.fileno()
        self.poller.unregister(fd)
        del self.by_fd[fd]
        connection.close()
        self.connections.remove(connection)

    def send_next(self, connection: Connection) -> bool:
        """Send the next request on this connection; False when the phase has none left."""
        if self.next >= self.total:
            connection.index = -1
            return False
        index = self.next % len(self.items)
        self.next += 1
        connection.index = index
        connection.started = time.perf_counter()
        data = self.items[index][0]
        sent = 0
        while sent < len(data):  # requests are small: this loops only under back-pressure
            try:
                sent += connection.sock.send(data[sent:])
            except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
                select.select([], [connection.sock], [], IDLE_TIMEOUT)
            except OSError:
                break  # the connection is gone: epoll reports it readable, and reading fails
        return True

    def fail(self, connection: Connection, problem: str) -> bool:
        """Count the request in flight as failed and put a new connection in its place; True
        when the replacement has a request in flight."""
        self.failures.append(problem)
        self.drop(connection)
        if self.next >= self.total:
            return False
        replacement = self.connect_or_count()
        return replacement is not None and self.send_next(replacement)

    def connect_or_count(self) -> Connection | None:
        """A new connection added to the pool, or None with the reason counted as a failure."""
        try:
            connection = self.open()
        except (OSError, ValueError) as exc:
            self.failures.append(f"connecting: {type(exc).__name__}: {exc}")
            return None
        self.connections.append(connection)
        return connection

    def phase(self, requests: int, concurrency: int, measure: bool, deadline: float) -> float:
        self.fill(concurrency)
        self.next, self.total, self.measure = 0, requests, measure
        perf = time.perf_counter
        started = perf()
        in_flight = sum(self.send_next(c) for c in self.connections[:concurrency])
        poll, by_fd = self.poller.poll, self.by_fd
        while in_flight:
            events = poll(min(IDLE_TIMEOUT, max(0.0, deadline - perf())))
            if not events:
                for connection in [c for c in self.connections if c.index >= 0]:
                    self.failures.append("no answer in time")
                    self.drop(connection)
                break
            for fd, _ in events:
                connection = by_fd.get(fd)
                if connection is None:  # closed earlier in this batch
                    continue
                if connection.index < 0:  # nothing asked on it: only a close can arrive
                    self.drop(connection)
                    continue
                try:
                    alive = connection.receive()
                    answer = connection.answer()
                except (OSError, ValueError) as exc:
                    in_flight += self.fail(connection, f"{type(exc).__name__}: {exc}") - 1
                    continue
                if answer is None:
                    if not alive:
                        in_flight += self.fail(connection, "the server closed the connection") - 1
                    continue
                elapsed = perf() - connection.started
                head, body = answer
                problem = self.problem(connection.index, head, body)
                if problem:
                    self.failures.append(problem)
                elif measure:
                    self.latencies.append(elapsed)
                if not alive:
                    in_flight += self.fail(connection, "the server closed a keep-alive connection") - 1
                elif not self.send_next(connection):
                    in_flight -= 1
        return perf() - started

    def fill(self, concurrency: int) -> None:
        """Open connections until there are ``concurrency`` (or opening fails)."""
        while len(self.connections) < concurrency:
            if self.connect_or_count() is None:
                return

    def problem(self, index: int, head: bytes, body: bytes) -> str | None:
        if head[9:12] != b"200":
            status = head.split(b"\r\n", 1)[0].decode(errors="replace")
            return f"{status}: {body[:160]!r}"
        if self.expect and self.expect not in head.lower():
            return f"no {self.expect.strip().decode()!r} header: {head[:300]!r}"
        if body == self.expected[index]:
            return None
        if self.kind == "virtual":
            try:
                document = json.loads(body)
            except ValueError:
                return f"not JSON: {body[:160]!r}"
            if document == json.loads(self.expected[index]):
                return None
        return f"another body than expected: {body[:160]!r}"

    def close(self) -> None:
        for connection in list(self.connections):
            self.drop(connection)
        self.poller.close()


def run(args) -> dict:
    with open(args.plan, encoding="utf-8") as handle:
        load = Load(json.load(handle), args.port, args.ca)
    deadline = time.perf_counter() + args.timeout
    try:
        if args.warmup:
            load.phase(args.warmup, args.concurrency, False, deadline)
        load.fill(args.concurrency)  # handshakes stay out of the measurement
        cpu = time.process_time()
        seconds = load.phase(args.requests, args.concurrency, True, deadline)
        cpu = time.process_time() - cpu
    finally:
        load.close()
    load.latencies.sort()
    return {"requests": args.requests, "ok": len(load.latencies), "failures": len(load.failures),
            "samples": load.failures[:5], "seconds": seconds,
            "rps": len(load.latencies) / seconds if seconds else 0.0,
            "p50_ms": percentile(load.latencies, 50) * 1e3, "p99_ms": percentile(load.latencies, 99) * 1e3,
            "client_cpu_s": cpu}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="hitload.py")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--plan", required=True)
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--ca", default=None, help="the proxy's CA certificate (https)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for the whole run")
    args = p.parse_args(argv)
    gc.disable()  # nothing here makes cycles; a collection pass would show up as client p99
    print(json.dumps(run(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
