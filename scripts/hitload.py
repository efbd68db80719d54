#!/usr/bin/env python3
"""The load generator the hit benchmarks and the profiler share: one process, asyncio, raw
HTTP/1.1 on keep-alive connections, every answer checked.

A plan (JSON, written by the orchestrating script) names the path and holds the requests:

    {"kind": "plain" | "https" | "virtual", "tunnel": "host:443" (https only),
     "expect": "x-stb-source: cache", "items": [[request bytes as latin-1 text, expected], ...]}

``plain``: absolute-form requests to the proxy, as HTTP_PROXY clients send them; the body
must equal ``expected``. ``https``: each connection opens one CONNECT tunnel, trusts the
proxy's CA (``--ca``), and sends origin-form requests through it (keep-alive); the body must
equal ``expected``. ``virtual``: ``POST /virtual`` to the server itself; the answer must be
``{"error": "", "response": expected}``. ``@HOSTPORT@`` in a request is replaced by the
server's address. Every answer must be 200 and carry the ``expect`` header line.

Prints one JSON line: requests, failures (with samples), req/s, p50/p99 in ms, and this
process's own CPU seconds during the measured phase (its share of the machine matters on a
2-core box).

Usage: python scripts/hitload.py --port P --plan FILE --requests N --concurrency C [--warmup W] [--ca FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import ssl
import sys
import time

HOST = "127.0.0.1"


def percentile(ordered: list[float], pct: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, round(pct / 100 * (len(ordered) - 1)))]


class _Answers(asyncio.Protocol):
    """One keep-alive connection's answers, as they arrive: a protocol, not streams, so that
    the load generator's own CPU per request stays small beside the server's."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.waiter: asyncio.Future | None = None
        self.head_only = False
        self.lost: Exception | None = None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.waiter is not None and not self.waiter.done():
            try:
                answer = self._answer()
            except ValueError as exc:
                self.waiter.set_exception(exc)
                return
            if answer is not None:
                self.waiter.set_result(answer)

    def connection_lost(self, exc) -> None:
        self.lost = ConnectionError(f"the server closed the connection ({exc})")
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(self.lost)

    def next(self, head_only: bool = False) -> asyncio.Future:
        """The next answer: (head, body); ``head_only`` for an answer without a body (CONNECT)."""
        self.head_only = head_only
        self.waiter = asyncio.get_running_loop().create_future()
        answer = self._answer()
        if answer is not None:
            self.waiter.set_result(answer)
        elif self.lost is not None:
            self.waiter.set_exception(self.lost)
        return self.waiter

    def _answer(self) -> tuple[bytes, bytes] | None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            return None
        end += 4
        head = bytes(self.buffer[:end])
        length = 0
        if not self.head_only:
            lower = head.lower()
            pos = lower.find(b"\r\ncontent-length:")
            if pos < 0:
                raise ValueError("an answer without Content-Length")
            length = int(lower[pos + 17: lower.index(b"\r\n", pos + 2)])
        if len(self.buffer) < end + length:
            return None
        body = bytes(self.buffer[end:end + length])
        del self.buffer[:end + length]
        return head, body


class Load:
    def __init__(self, plan: dict, port: int, ca: str | None) -> None:
        self.kind = plan["kind"]
        self.port = port
        hostport = f"{HOST}:{port}"
        self.items = [(request.replace("@HOSTPORT@", hostport).encode("latin-1"), expected)
                      for request, expected in plan["items"]]
        if self.kind == "virtual":  # the exact bytes stbproxy writes; anything else is parsed
            self.expected = [json.dumps({"error": "", "response": e}, ensure_ascii=False).encode()
                             for _, e in self.items]
        else:
            self.expected = [e.encode("latin-1") for _, e in self.items]
        self.expect = ("\r\n" + plan["expect"].lower() + "\r\n").encode() if plan["expect"] else b""
        self.tunnel = plan.get("tunnel")
        self.tls = None
        if self.kind == "https":
            self.tls = ssl.create_default_context(cafile=ca)
        self.next = 0
        self.total = 0
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.measure = False

    async def connect(self) -> "_Answers":
        loop = asyncio.get_running_loop()
        transport, answers = await loop.create_connection(_Answers, HOST, self.port)
        if self.tunnel:
            transport.write(f"CONNECT {self.tunnel} HTTP/1.1\r\nHost: {self.tunnel}\r\n\r\n".encode())
            head, _ = await answers.next(head_only=True)
            if head[9:12] != b"200":
                raise ValueError(f"CONNECT refused: {head[:80]!r}")
            answers.transport = await loop.start_tls(transport, answers, self.tls,
                                                     server_hostname=self.tunnel.rsplit(":", 1)[0])
        return answers

    async def worker(self) -> None:
        answers = None
        perf = time.perf_counter
        while self.next < self.total:
            index = self.next % len(self.items)
            self.next += 1
            try:
                if answers is None:
                    answers = await self.connect()
                started = perf()
                answers.transport.write(self.items[index][0])
                head, body = await answers.next()
                elapsed = perf() - started
            except (OSError, ValueError) as exc:
                self.failures.append(f"{type(exc).__name__}: {exc}")
                if answers is not None:
                    answers.transport.close()
                answers = None
                continue
            problem = self.problem(index, head, head.lower(), body)
            if problem:
                self.failures.append(problem)
            elif self.measure:
                self.latencies.append(elapsed)
        if answers is not None:
            answers.transport.close()

    def problem(self, index: int, head: bytes, lower: bytes, body: bytes) -> str | None:
        if head[9:12] != b"200":
            status = head.split(b"\r\n", 1)[0].decode(errors="replace")
            return f"{status}: {body[:160]!r}"
        if self.expect and self.expect not in lower:
            return f"no {self.expect.strip().decode()!r} header: {head[:300]!r}"
        if body == self.expected[index]:
            return None
        if self.kind == "virtual":
            try:
                document = json.loads(body)
            except ValueError:
                return f"not JSON: {body[:160]!r}"
            if document == {"error": "", "response": self.items[index][1]}:
                return None
        return f"another body than expected: {body[:160]!r}"

    async def phase(self, requests: int, concurrency: int, measure: bool) -> float:
        self.next, self.total, self.measure = 0, requests, measure
        started = time.perf_counter()
        await asyncio.gather(*(self.worker() for _ in range(concurrency)))
        return time.perf_counter() - started


async def run(args) -> dict:
    with open(args.plan, encoding="utf-8") as handle:
        load = Load(json.load(handle), args.port, args.ca)
    if args.warmup:
        await load.phase(args.warmup, args.concurrency, False)
    cpu = time.process_time()
    seconds = await load.phase(args.requests, args.concurrency, True)
    cpu = time.process_time() - cpu
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
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args(argv)
    gc.disable()  # nothing here makes cycles; a collection pass would show up as client p99
    print(json.dumps(asyncio.run(asyncio.wait_for(run(args), args.timeout))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
