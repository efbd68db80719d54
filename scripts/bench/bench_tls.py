#!/usr/bin/env python3
"""What a new HTTPS connection costs the proxy: the TLS handshake inside a CONNECT tunnel,
full and resumed, stbproxy against mitmdump answering from a dict.

Keep-alive HTTPS hits are bench_proxy.py's; this is the other half of an HTTPS client's
cost, paid once per connection: a client that opens a connection per request (many agent
HTTP libraries without a session object) pays it on every call.

In one run, on 127.0.0.1 only, in a temporary folder that is removed afterwards:

1. fill a store with answers of an HTTPS API (``stbproxy import cassette``, the proxy's
   own keys) and start ``stbproxy serve --mode replay`` on it, and ``mitmdump`` (all its
   default addons, lazy upstream connections) with a script answering the same requests
   from a dict: the baseline;
2. from this process, one connection at a time: open a TCP connection, ``CONNECT
   api.bench.test:443``, a TLS handshake trusting the proxy's CA, one GET, the answer
   read and checked, close. Three ways, interleaved and repeated:
   - ``full``: a new TLS session every time;
   - ``resumed``: the client offers the session ticket of its previous connection (as
     Python's ``ssl``, OpenSSL, curl and browsers do when they keep a session), and the
     connection counts as resumed only when the server took it (``session_reused``);
   - ``keep-alive``: the same GET on one open connection, for scale; its tunnel opened with
     ``CONNECT host:443 HTTP/1.0``, as Python's http.client (requests, urllib3) opens one
     (bench_proxy.py's load generator sends HTTP/1.1);
   - ``plain keep-alive``: the same GET in plain HTTP on one open connection to the proxy
     (absolute form, as HTTP_PROXY clients send it), from the same Python client: what an
     HTTPS keep-alive request costs over a plain one with a Python client (target <= 1.5x);
3. print per way and server: connections/s, p50 and p99 of a connection's wall time, the
   server's CPU per connection (from its process times), the share of connections that
   were resumed, and the ratios stbproxy / mitmdump and full / resumed.

Every answer is checked (status 200 and the stored body). Exit status 1 means an answer
failed its check, or a server resumed none of the sessions offered to it.

Baseline (measured in the same run, interleaved): mitmdump with a dict addon, on the same
handshakes.

Usage: python scripts/bench/bench_tls.py [--connections N] [--repeats R] [--quick]
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import ssl
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.bench import hitstores  # noqa: E402
from scripts.bench.hitbench import Subject, mitmdump_subject, stbproxy_subject  # noqa: E402
from scripts.common import HOST, free_port, percentile, run_in_workdir  # noqa: E402

WAYS = ("full", "resumed", "keep-alive", "plain keep-alive")
HTTPS_TARGET = 1.5  # an HTTPS keep-alive request's CPU over a plain one's
# A keep-alive request costs a tenth of a handshake or less: the keep-alive ways make this
# many times the requests, so that the server's CPU clock (10 ms ticks) sees them.
KEEP_ALIVE_FACTOR = 10
TUNNEL = f"{hitstores.API_HOST}:443"


class Client:
    """Sequential HTTPS requests through one proxy's CONNECT tunnels."""

    def __init__(self, subject: Subject, targets: list[str]) -> None:
        self.subject = subject
        self.targets = targets
        self.context = ssl.create_default_context(cafile=subject.ca)
        self.session: ssl.SSLSession | None = None
        self.resumed = 0
        self.kept: ssl.SSLSocket | None = None
        self.plain: socket.socket | None = None

    def connect(self, offer_session: bool, version: str = "HTTP/1.1") -> ssl.SSLSocket:
        raw = socket.create_connection((HOST, self.subject.port))
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        raw.sendall(f"CONNECT {TUNNEL} {version}\r\nHost: {TUNNEL}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = raw.recv(4096)
            if not chunk:
                raise RuntimeError(f"{self.subject.name} closed the CONNECT")
            head += chunk
        if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
            raise RuntimeError(f"{self.subject.name} refused the CONNECT: {head[:80]!r}")
        tls = self.context.wrap_socket(raw, server_hostname=hitstores.API_HOST,
                                       session=self.session if offer_session else None)
        return tls

    def get(self, tls: ssl.SSLSocket | socket.socket, target: str, prefix: str = "") -> None:
        tls.sendall(f"GET {prefix}{target} HTTP/1.1\r\nHost: {hitstores.API_HOST}\r\nAccept: application/json\r\n"
                    f"User-Agent: stbproxy-bench\r\n\r\n".encode())
        data = b""
        while b"\r\n\r\n" not in data:
            data += self._recv(tls)
        head, _, body = data.partition(b"\r\n\r\n")
        length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:"))
        while len(body) < length:
            body += self._recv(tls)
        if not head.startswith(b"HTTP/1.1 200") or body != hitstores.http_body(target):
            raise RuntimeError(f"{self.subject.name}: a wrong answer for {target}: {head[:80]!r}")

    def _recv(self, tls: ssl.SSLSocket | socket.socket) -> bytes:
        chunk = tls.recv(65536)
        if not chunk:
            raise RuntimeError(f"{self.subject.name} closed the connection mid-answer")
        return chunk

    def one(self, way: str, target: str) -> None:
        if way == "plain keep-alive":
            if self.plain is None:
                self.plain = socket.create_connection((HOST, self.subject.port))
                self.plain.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.get(self.plain, target, f"http://{hitstores.API_HOST}")
            return
        if way == "keep-alive":
            if self.kept is None:
                self.kept = self.connect(offer_session=False, version="HTTP/1.0")
            self.get(self.kept, target)
            return
        tls = self.connect(offer_session=way == "resumed")
        try:
            self.get(tls, target)  # TLS 1.3 sends its ticket after the handshake: read with the answer
            if way == "resumed":
                self.resumed += tls.session_reused
            self.session = tls.session
        finally:
            tls.close()

    def close(self) -> None:
        if self.kept is not None:
            self.kept.close()
        if self.plain is not None:
            self.plain.close()


def measure(client: Client, way: str, connections: int) -> dict:
    client.resumed = 0
    if way == "resumed" and client.session is None:
        client.one("full", client.targets[0])  # a session to offer
    times = []
    cpu = client.subject.cpu()
    started = time.perf_counter()
    for n in range(connections):
        begun = time.perf_counter()
        client.one(way, client.targets[n % len(client.targets)])
        times.append(time.perf_counter() - begun)
    wall = time.perf_counter() - started
    cpu = client.subject.cpu() - cpu
    times.sort()
    return {"per_s": connections / wall, "p50_ms": percentile(times, 50) * 1000, "p99_ms": percentile(times, 99) * 1000,
            "cpu_ms": cpu / connections * 1000, "resumed": client.resumed / connections}


def run(args, workdir: Path, stack) -> int:
    targets = hitstores.http_targets(200)
    store = workdir / "store"
    bases = [f"https://{hitstores.API_HOST}", f"http://{hitstores.API_HOST}"]
    hitstores.fill_http_store(store, workdir, bases, targets)
    confdir = workdir / "certs"
    subjects = [stbproxy_subject("stbproxy", store, confdir=confdir)]
    stack.callback(subjects[-1].stop)
    addon = hitstores.dict_addon(workdir, bases, targets, None)
    subjects.append(mitmdump_subject(addon, free_port(), confdir))
    stack.callback(subjects[-1].stop)
    clients = {s.name: Client(s, targets) for s in subjects}
    for client in clients.values():
        stack.callback(client.close)

    print(f"TLS benchmark: {args.connections} connections per way ({KEEP_ALIVE_FACTOR}x as many requests for "
          f"the keep-alive ways), {args.repeats} repeats interleaved, medians; "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, {ssl.OPENSSL_VERSION}; "
          f"load average at start {os.getloadavg()[0]:.2f}")
    results: dict[tuple[str, str], list[dict]] = {}
    for client in clients.values():  # warm up: certificates made, code paths loaded
        for way in WAYS:
            measure(client, way, 20)
    for _ in range(args.repeats):
        for way in WAYS:
            count = args.connections * (KEEP_ALIVE_FACTOR if "keep-alive" in way else 1)
            for name, client in clients.items():
                results.setdefault((name, way), []).append(measure(client, way, count))

    def med(name: str, way: str, field: str) -> float:
        return statistics.median(r[field] for r in results[(name, way)])

    print(f"\n{'server':<16} {'way':<11} {'conn/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'CPU ms':>7} {'resumed':>8}")
    for name in clients:
        for way in WAYS:
            print(f"{name:<16} {way:<11} {med(name, way, 'per_s'):>7.0f} {med(name, way, 'p50_ms'):>7.2f} "
                  f"{med(name, way, 'p99_ms'):>7.2f} {med(name, way, 'cpu_ms'):>7.3f} "
                  f"{med(name, way, 'resumed') * 100 if way == 'resumed' else float('nan'):>7.0f}%")
    baseline = subjects[1].name
    print()
    for way in WAYS:
        print(f"{way}: stbproxy CPU per connection {med('stbproxy', way, 'cpu_ms'):.3f} ms, "
              f"{med('stbproxy', way, 'cpu_ms') / med(baseline, way, 'cpu_ms'):.2f} of {baseline}'s")
    for name in clients:
        print(f"{name}: a full handshake costs {med(name, 'full', 'cpu_ms') / med(name, 'resumed', 'cpu_ms'):.2f}x "
              f"a resumed one, {med(name, 'full', 'cpu_ms') / med(name, 'keep-alive', 'cpu_ms'):.1f}x "
              "a keep-alive request")
    for name in clients:
        pairs = list(zip(results[(name, "keep-alive")], results[(name, "plain keep-alive")]))
        cpu = statistics.median(https["cpu_ms"] / plain["cpu_ms"] for https, plain in pairs)
        wall = statistics.median(https["p50_ms"] / plain["p50_ms"] for https, plain in pairs)
        verdict = "met" if cpu <= HTTPS_TARGET else "MISSED"
        print(f"{name}: with a Python client, an HTTPS keep-alive request costs {cpu:.2f}x a plain keep-alive one in "
              f"server CPU (median of the repeats' ratios; target <= {HTTPS_TARGET}: {verdict}), and takes {wall:.2f}x "
              "its p50 wall time (the client's own TLS work included)")
    unresumed = [name for name in clients if med(name, "resumed", "resumed") == 0]
    if unresumed:
        print(f"no session offered was resumed by: {', '.join(unresumed)}")
        return 1
    print("failed requests: 0")
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=None, help="connections per way and repeat [1,000]")
    parser.add_argument("--repeats", type=int, default=None, help="interleaved repeats [5]")
    parser.add_argument("--quick", action="store_true", help="60 connections, 1 repeat (a smoke run)")
    args = parser.parse_args(argv)
    args.connections = args.connections or (60 if args.quick else 1000)
    args.repeats = args.repeats or (1 if args.quick else 5)
    return run_in_workdir("bench_tls", "stb-bench-tls-", lambda workdir, stack: run(args, workdir, stack))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
