#!/usr/bin/env python3
"""Do simulations in flight slow down cache hits? p99 of hits with and without 64 LLM calls.

In one run, on 127.0.0.1 only:

1. start a real upstream (a thread here) and a fake OpenAI-compatible LLM that takes 1 s
   per call (tests/fakes/fake_openai.py), and keep one port bound but not listening, so
   that calls to it are refused at once: the "API that is gone";
2. record the cache: every distinct hit request once through `stbproxy serve --mode record`;
3. start `stbproxy serve` (virtual mode, `--simulator llm --sim-concurrency 64`, the fake
   LLM through OPENAI_BASE_URL/OPENAI_API_KEY) on that store;
4. after one unmeasured round with simulations (one-time costs: imports, first
   connections), measure, alternating and repeated, the latency of cache hits (2,000
   requests at concurrency 8 on keep-alive connections) (a) alone and (b) while 64
   clients keep one distinct miss each to the refused API in flight, so 64 simulations
   run all the time, started spread over one LLM call's time so they arrive steadily;
5. print the median p99 of both, their ratio (target <= 2), how many simulations the
   fake LLM saw in flight at once, and the proxy's CPU time per hit and per simulated miss.

The load generator is this file run as `_load` in its own process, so that it shares no
interpreter with the proxy or the fake LLM. Every hit is checked (status 200, the
upstream's body, `X-Stb-Source: cache`), every miss must come back `simulated`. Exit
status 1 means requests failed; missing the target is reported but is not an error.

Baseline (measured in the same run, alternating with the measured case): the p99 of the
same hits with no simulation in flight.

Usage: python scripts/bench/bench_simulator.py [--quick] [--requests N] [--misses M] [--repeats R]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import zlib
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a file: scripts.* and tests.fakes.fake_openai from the repository root

from scripts.common import HOST, child_env, console_script, cpu_seconds, percentile, run_in_workdir  # noqa: E402

SCRIPT = Path(__file__).resolve()
READY_RE = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
START_TIMEOUT = 60.0
STOP_TIMEOUT = 15.0
LLM_SECONDS = 1.0
SIM_ANSWER = json.dumps({"error": "", "response": {"results": [{"title": "simulated", "score": 0.5}]}})


# -- what the real upstream serves (the load generator checks bodies against this) ---------------


def hit_targets(distinct: int) -> list[str]:
    return [f"/v1/catalog/items/{i}?lang=en&page={i % 7}" for i in range(distinct)]


def body_for(target: str) -> bytes:
    doc = {"target": target, "id": zlib.crc32(target.encode()),
           "items": [{"rank": r, "name": f"item-{r}"} for r in range(6)]}
    return json.dumps(doc, separators=(",", ":")).encode()


class _UpstreamHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = body_for(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


# -- role: load generator ------------------------------------------------------------------------


class _Conn:
    """One keep-alive connection to the proxy, sending absolute-form requests."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader = self.writer = None

    async def roundtrip(self, wire: bytes) -> tuple[bytes, bytes]:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(HOST, self.port)
        try:
            self.writer.write(wire)
            head = await self.reader.readuntil(b"\r\n\r\n")
            match = re.search(rb"\r\ncontent-length: *(\d+)", head.lower())
            if match is None:
                raise ValueError("response without Content-Length")
            return head, await self.reader.readexactly(int(match.group(1)))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


def _wire(port: int, target: str) -> bytes:
    return (f"GET http://{HOST}:{port}{target} HTTP/1.1\r\nHost: {HOST}:{port}\r\n"
            f"Accept: application/json\r\nUser-Agent: stbproxy-bench\r\n\r\n").encode()


async def _hits(conns: list[_Conn], count: int, targets: list[str], upstream_port: int, expect: str,
                latencies: list[float], failures: list[str]) -> None:
    wires = [_wire(upstream_port, t) for t in targets]
    bodies = [body_for(t) for t in targets]
    header = f"\r\nx-stb-source: {expect}\r\n".encode()

    async def drive(k: int) -> None:
        for j in range(k, count, len(conns)):
            i = j % len(targets)
            t0 = time.perf_counter()
            try:
                head, body = await conns[k].roundtrip(wires[i])
            except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
                failures.append(f"hit {targets[i]}: {type(exc).__name__}: {exc}")
                continue
            latencies.append(time.perf_counter() - t0)
            if head[9:12] != b"200" or header not in head.lower() or body != bodies[i]:
                status = head.split(b"\r\n", 1)[0].decode()
                failures.append(f"hit {targets[i]}: {status}, not the upstream's body from the {expect}")

    await asyncio.gather(*(drive(k) for k in range(len(conns))))


async def _misses(k: int, port: int, refused_port: int, nonce: str, start_after: float, stop: asyncio.Event,
                  sources: Counter, failures: list[str], seconds: list[float]) -> None:
    """One client that keeps one distinct miss to the refused API in flight until ``stop``."""
    conn, n = _Conn(port), 0
    await asyncio.sleep(start_after)
    try:
        while not stop.is_set():
            n += 1
            t0 = time.perf_counter()
            try:
                head, _ = await conn.roundtrip(_wire(refused_port, f"/search?q=run{nonce}-c{k}-n{n}"))
            except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
                failures.append(f"miss: {type(exc).__name__}: {exc}")
                await asyncio.sleep(0.1)
                continue
            seconds.append(time.perf_counter() - t0)
            found = re.search(rb"\r\nx-stb-source: *([a-z-]+)", head.lower())
            sources[found.group(1).decode() if found else "none"] += 1
    finally:
        conn.close()


async def _run_load(a) -> dict:
    targets = hit_targets(a.distinct)
    conns = [_Conn(a.port) for _ in range(a.concurrency)]
    latencies: list[float] = []
    failures: list[str] = []
    sources: Counter = Counter()
    miss_seconds: list[float] = []
    stop = asyncio.Event()
    workers = []
    try:
        await _hits(conns, a.warmup, targets, a.upstream_port, a.expect, [], failures)
        if a.misses:
            nonce = f"{os.getpid()}-{time.time_ns()}"  # never a miss that an earlier run stored
            # Clients start spread over one LLM call's time, so that 64 calls are in flight
            # at every moment and arrive steadily (64 per second), not in lock-step waves.
            workers = [asyncio.create_task(_misses(k, a.port, a.refused_port, nonce, k * LLM_SECONDS / a.misses,
                                                   stop, sources, failures, miss_seconds))
                       for k in range(a.misses)]
            await asyncio.sleep(a.lead)  # until every client has a simulation in flight
        t0 = time.perf_counter()
        await _hits(conns, a.requests, targets, a.upstream_port, a.expect, latencies, failures)
        elapsed = time.perf_counter() - t0
        in_flight_misses = len(workers) - sum(w.done() for w in workers)
    finally:
        stop.set()
        await asyncio.gather(*workers, return_exceptions=True)  # each ends after its current miss
        for c in conns:
            c.close()
    for name, count in sources.items():
        if name != "simulated":
            failures.append(f"{count} misses answered with X-Stb-Source {name}")
    latencies.sort()
    return {
        "requests": a.requests, "seconds": elapsed, "failures": len(failures), "samples": failures[:5],
        "p50_ms": percentile(latencies, 50) * 1e3, "p99_ms": percentile(latencies, 99) * 1e3,
        "misses_done": sum(sources.values()), "miss_clients_active": in_flight_misses,
        "miss_p50_s": percentile(sorted(miss_seconds), 50),
    }


def _load_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="bench_simulator.py _load")
    for name in ("--port", "--upstream-port", "--refused-port", "--requests", "--warmup", "--concurrency",
                 "--distinct", "--misses"):
        p.add_argument(name, type=int, required=True)
    p.add_argument("--expect", default="cache", help="the X-Stb-Source every hit must carry")
    p.add_argument("--lead", type=float, default=LLM_SECONDS * 1.5)
    p.add_argument("--timeout", type=float, default=300.0)
    a = p.parse_args(argv)
    gc.disable()  # a collection pass in the client would show up as server p99
    print(json.dumps(asyncio.run(asyncio.wait_for(_run_load(a), a.timeout))), flush=True)


# -- the orchestrator ------------------------------------------------------------------------------


def _sim_env(**extra: str) -> dict[str, str]:
    # Not with the caller's OpenAI settings either: the fake LLM is the only backend here.
    return child_env(drop_prefixes=("STBPROXY_", "OPENAI_"), **extra)


class Proc:
    """A server child: output to files (a full pipe must never stall it), SIGTERM to stop."""

    def __init__(self, name: str, argv: list[str], logdir: Path, env: dict[str, str]) -> None:
        self.name = name
        self.out, self.err = logdir / f"{name}.out", logdir / f"{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.popen = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                          start_new_session=True)

    def log_tail(self, lines: int = 15) -> str:
        text = self.err.read_text(errors="replace") + self.out.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def port(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and self.popen.poll() is None:
            if match := READY_RE.search(self.out.read_text(errors="replace")):
                return int(match.group(1))
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} did not get ready (exit {self.popen.poll()}):\n{self.log_tail()}")

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                print(f"bench_simulator: {self.name} ignored SIGTERM; killing it", file=sys.stderr)
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode





def peak_in_flight(arrivals: list[float], seconds: float) -> int:
    """Most LLM calls in flight at once, each taking ``seconds`` from its arrival."""
    events = sorted([(t, 1) for t in arrivals] + [(t + seconds, -1) for t in arrivals])
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


class Bench:
    def __init__(self, args, workdir: Path, stack: contextlib.ExitStack) -> None:
        self.a, self.workdir, self.stack = args, workdir, stack
        self.failed = 0
        self.failures: list[str] = []

    def start(self, name: str, argv: list[str], **env: str) -> Proc:
        proc = Proc(name, argv, self.workdir, _sim_env(**env))
        self.stack.callback(proc.stop)  # stopped on every way out, errors included
        return proc

    def serve_thread(self, server) -> None:
        thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        thread.start()
        self.stack.callback(server.server_close)
        self.stack.callback(server.shutdown)

    def load(self, port: int, *, requests: int, warmup: int, misses: int, label: str,
             expect: str = "cache") -> dict:
        a = self.a
        argv = [sys.executable, str(SCRIPT), "_load", "--port", str(port), "--upstream-port",
                str(self.upstream_port), "--refused-port", str(self.refused_port), "--requests", str(requests),
                "--warmup", str(warmup), "--concurrency", str(a.concurrency), "--distinct", str(a.distinct),
                "--misses", str(misses), "--expect", expect]
        done = subprocess.run(argv, capture_output=True, text=True, env=_sim_env(), timeout=360)
        if done.returncode != 0:
            raise RuntimeError(f"load generator failed for {label} (exit {done.returncode}):\n{done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        if result["failures"]:
            self.failed += result["failures"]
            self.failures += [f"{label}: {s}" for s in result["samples"]]
        return result

    def run(self) -> int:
        from tests.fakes.fake_openai import FakeOpenAI

        a = self.a
        stbproxy = console_script("stbproxy")
        store = self.workdir / "store"

        upstream = ThreadingHTTPServer((HOST, 0), _UpstreamHandler)
        upstream.daemon_threads = True
        self.serve_thread(upstream)
        self.upstream_port = upstream.server_address[1]
        # Bound and never listening: a connection to it is refused at once, and no other
        # program can take the port while the benchmark runs.
        refused = self.stack.enter_context(socket.socket())
        refused.bind((HOST, 0))
        self.refused_port = refused.getsockname()[1]
        llm = self.stack.enter_context(FakeOpenAI(lambda _request: SIM_ANSWER, latency=LLM_SECONDS))

        recorder = self.start("stbproxy-record", [stbproxy, "serve", "--mode", "record", "--port", "0",
                                                  "--store", str(store), "--simulator", "off"])
        # Every distinct request once ("warm-up" only, nothing measured), from the real upstream.
        self.load(recorder.port(), requests=0, warmup=a.distinct, misses=0, label="record", expect="upstream")
        if self.failed:
            raise RuntimeError("recording the cache failed: " + "; ".join(self.failures))
        if (rc := recorder.stop()) != 0:
            raise RuntimeError(f"stbproxy record exited {rc}:\n{recorder.log_tail()}")

        proxy = self.start("stbproxy-virtual", [
            stbproxy, "serve", "--mode", "virtual", "--port", "0", "--store", str(store),
            "--simulator", "llm", "--sim-model", "bench-sim", "--sim-concurrency", str(a.misses)],
            **llm.env("bench-key"))
        port = proxy.port()
        print(f"simulator benchmark: {a.requests} cache hits at concurrency {a.concurrency} over {a.distinct} "
              f"recorded requests, alone and beside {a.misses} simulated misses in flight "
              f"(fake LLM {LLM_SECONDS:g} s per call); {a.repeats} repeat(s), medians reported")
        print(f"machine: {os.cpu_count()} CPU core(s); proxy, load generator and fake LLM share them")
        # One unmeasured round with simulations first: the first misses pay one-time costs
        # (imports, the LLM client's first connections) that are not what is measured here.
        self.load(port, requests=a.warmup, warmup=0, misses=a.misses, label="warm-up")
        alone, beside = [], []
        for rep in range(1, a.repeats + 1):
            # Alternate, so that drift in the machine's load hits both alike.
            cpu0 = cpu_seconds(proxy.popen.pid)
            quiet = self.load(port, requests=a.requests, warmup=a.warmup, misses=0, label=f"alone #{rep}")
            cpu1 = cpu_seconds(proxy.popen.pid)
            llm.reset()
            busy = self.load(port, requests=a.requests, warmup=a.warmup, misses=a.misses, label=f"busy #{rep}")
            cpu2 = cpu_seconds(proxy.popen.pid)
            # The proxy's CPU per hit, and per simulated miss once the hits' share is taken out.
            per_hit = (cpu1 - cpu0) / (a.requests + a.warmup)
            per_miss = (cpu2 - cpu1 - per_hit * (a.requests + a.warmup)) / max(1, busy["misses_done"])
            peak = peak_in_flight([r.at for r in llm.requests if r.path.endswith("/chat/completions")],
                                  LLM_SECONDS)
            alone.append(quiet)
            beside.append(busy | {"llm_peak": peak})
            print(f"  #{rep} alone   p50 {quiet['p50_ms']:6.2f} ms  p99 {quiet['p99_ms']:6.2f} ms"
                  f"  ({quiet['requests'] / quiet['seconds']:.0f} req/s)", flush=True)
            print(f"  #{rep} beside  p50 {busy['p50_ms']:6.2f} ms  p99 {busy['p99_ms']:6.2f} ms"
                  f"  ({busy['requests'] / busy['seconds']:.0f} req/s); {busy['misses_done']} simulations answered "
                  f"(p50 {busy['miss_p50_s']:.2f} s), LLM peak in flight {peak}", flush=True)
            print(f"     proxy CPU: {per_hit * 1e3:.2f} ms per hit, {per_miss * 1e3:.2f} ms per simulated miss",
                  flush=True)

        p99_alone = statistics.median(r["p99_ms"] for r in alone)
        p99_beside = statistics.median(r["p99_ms"] for r in beside)
        ratio = p99_beside / p99_alone if p99_alone else float("nan")
        print()
        print(f"p99 of cache hits alone:                        {p99_alone:7.2f} ms")
        print(f"p99 of cache hits with {a.misses} simulations in flight: {p99_beside:7.2f} ms")
        print(f"ratio: {ratio:.2f} (target <= 2: {'met' if ratio <= 2 else 'MISSED'}); fake LLM peak in flight: "
              f"{max(r['llm_peak'] for r in beside)}")
        if self.failed:
            print(f"\n!!! {self.failed} FAILED REQUESTS: these figures are not valid !!!")
            for line in self.failures[:20]:
                print(f"  {line}")
            return 1
        print("failed requests: 0")
        return 0


def _options(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--requests", type=int, help="measured cache hits per phase [2000]")
    p.add_argument("--concurrency", type=int, default=8, help="keep-alive connections for hits [8]")
    p.add_argument("--misses", type=int, default=64, help="simulated misses kept in flight [64]")
    p.add_argument("--distinct", type=int, default=200, help="distinct recorded requests [200]")
    p.add_argument("--repeats", type=int, help="alternating measurements; medians reported [3]")
    p.add_argument("--quick", action="store_true", help="a small run for smoke tests")
    a = p.parse_args(argv)
    a.requests = a.requests or (500 if a.quick else 2000)
    a.repeats = a.repeats or (1 if a.quick else 3)
    if min(a.requests, a.concurrency, a.misses, a.distinct, a.repeats) < 1:
        p.error("counts must be 1 or more")
    a.warmup = min(1000, max(a.concurrency * 20, a.requests // 5))
    return a


def main(argv: list[str]) -> int:
    if argv[:1] == ["_load"]:
        _load_main(argv[1:])
        return 0
    args = _options(argv)
    return run_in_workdir("bench_simulator", "stb-bench-sim-", lambda workdir, stack: Bench(args, workdir, stack).run())


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
