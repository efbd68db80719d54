"""The well-behaved client of the HTTP/2 rapid-reset run (h2_flood.py) and its latencies.

``OtherClient`` asks through the proxy over one keep-alive HTTP/1.1 connection, a cache hit
then a miss each round, and ``Latencies`` holds what each took and what failed.
"""

from __future__ import annotations

import re
import socket
import time
from dataclasses import dataclass, field

from scripts.common import HOST, percentile


@dataclass
class Latencies:
    hits: list[float] = field(default_factory=list)
    misses: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def summary(self, kind: str) -> str:
        values = sorted(getattr(self, kind))
        if not values:
            return "none"
        return (f"p50 {percentile(values, 50) * 1e3:.1f}, p99 {percentile(values, 99) * 1e3:.1f}, "
                f"max {values[-1] * 1e3:.1f} ms ({len(values)})")

    def p99(self, kind: str) -> float:
        return percentile(sorted(getattr(self, kind)), 99)


class OtherClient:
    """One keep-alive HTTP/1.1 connection through the proxy: a hit, then a miss, each round."""

    def __init__(self, proxy_port: int, upstream_port: int, timeout: float) -> None:
        self.proxy_port = proxy_port
        self.authority = f"{HOST}:{upstream_port}"
        self.timeout = timeout
        self.sock: socket.socket | None = None
        self.misses = 0

    def measure(self, seconds: float, pause: float = 0.01) -> Latencies:
        found = Latencies()
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for kind, path in (("hits", "/hit?n=0"), ("misses", f"/miss?n={self._next_miss()}")):
                started = time.perf_counter()
                try:
                    status = self.ask(path)
                except OSError as exc:
                    found.failures.append(f"{path}: {type(exc).__name__}: {exc}")
                    self.close()
                    continue
                getattr(found, kind).append(time.perf_counter() - started)
                if status != 200:
                    found.failures.append(f"{path}: status {status}")
            time.sleep(pause)
        return found

    def _next_miss(self) -> int:
        self.misses += 1
        return self.misses

    def ask(self, path: str) -> int:
        if self.sock is None:
            self.sock = socket.create_connection((HOST, self.proxy_port), timeout=self.timeout)
        self.sock.sendall(f"GET http://{self.authority}{path} HTTP/1.1\r\nHost: {self.authority}\r\n\r\n".encode())
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by the proxy")
            answer += chunk
        head, _, body = answer.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)\r\ncontent-length: *(\d+)", head).group(1))
        while len(body) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed by the proxy mid-answer")
            body += chunk
        return int(head[9:12])

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
