#!/usr/bin/env python3
"""Cache-hit benchmark: `stbproxy serve --mode replay` against plain mitmdump.

In one run, on 127.0.0.1 only, with bounded request counts:

1. start a fast upstream HTTP server (its own process) answering a few hundred bytes of
   JSON per path/query;
2. record every distinct request once through `stbproxy serve --mode record`;
3. measure, interleaved and repeated, the throughput and latency of
   (a) direct calls to the upstream,
   (b) `stbproxy serve --mode replay` on that store,
   (c) plain `mitmdump` with a trivial addon answering the same bodies from a dict,
   each at concurrency N (keep-alive connections) and at concurrency 1;
4. print the medians, the stbproxy/mitmdump req/s ratio (target >= 1.5) and the p50
   that stbproxy adds over a direct call at concurrency 1 (target <= 2 ms).

The load generator is a separate process (this file, run as `_load`) so that it never
shares an interpreter with a server. Every response is checked: status 200, the body
the upstream serves, and the header saying it was a hit. Exit status 1 means requests
failed; missing a target is reported but is not an error.

Usage: python scripts/bench_proxy.py [--quick] [--requests N] [--concurrency C] ...
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from benchkit import child_env, console_script, percentile

HOST = "127.0.0.1"
SCRIPT = Path(__file__).resolve()
READY_RE = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
START_TIMEOUT = 60.0  # mitmproxy imports are slow on a busy machine
STOP_TIMEOUT = 15.0

# Header lines (lower-cased) that prove a response was a hit and not forwarded.
STB_HIT = b"\r\nx-stb-source: cache\r\n"
STB_RECORDED = b"\r\nx-stb-source: upstream\r\n"
DICT_HIT = b"\r\nx-bench-source: dict\r\n"


# -- what the upstream serves (shared by every role, so bodies can be checked) ----------


def request_targets(distinct: int) -> list[str]:
    """Origin-form targets: distinct paths and queries, as a tool-calling agent sends."""
    return [f"/v1/tools/t{i % 13}/search?q=item{i}&page={i % 5}&lang=en" for i in range(distinct)]


def body_for(target: str) -> bytes:
    doc = {
        "target": target,
        "id": zlib.crc32(target.encode()),
        "items": [{"rank": r, "name": f"item-{r}", "score": r * 0.25} for r in range(8)],
        "note": "benchmark answer",
    }
    return json.dumps(doc, separators=(",", ":")).encode()


# -- role: upstream ---------------------------------------------------------------------


def _content_length(head: bytes) -> int:
    lower = head.lower()
    pos = lower.find(b"\r\ncontent-length:")
    if pos < 0:
        return 0
    return int(lower[pos + 17 : lower.index(b"\r\n", pos + 2)])


async def _upstream_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    answers: dict[bytes, bytes] = {}
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            target = head[: head.index(b"\r\n")].split(b" ")[1]
            if length := _content_length(head):
                await reader.readexactly(length)
            if target.startswith(b"http://"):  # absolute form: keep path and query only
                target = b"/" + target.split(b"/", 3)[3]
            answer = answers.get(target)
            if answer is None:
                body = body_for(target.decode())
                answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
                    len(body), body)
                answers[target] = answer
            writer.write(answer)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _run_upstream() -> None:
    server = await asyncio.start_server(_upstream_conn, HOST, 0, backlog=512)
    print(f"listening on http://{HOST}:{server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


# -- role: load generator ---------------------------------------------------------------


class _Conn:
    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection(HOST, self.port)

    def drop(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def _drive(conn, jobs, wire, bodies, targets, expect, latencies, failures) -> None:
    """Send jobs one after another on one keep-alive connection, checking each answer."""
    perf = time.perf_counter
    for i in jobs:
        try:
            if conn.writer is None:
                await conn.open()
            t0 = perf()
            conn.writer.write(wire[i])
            head = await conn.reader.readuntil(b"\r\n\r\n")
            lower = head.lower()
            pos = lower.find(b"\r\ncontent-length:")
            if pos < 0:
                raise ValueError("response without Content-Length")
            body = await conn.reader.readexactly(int(lower[pos + 17 : lower.index(b"\r\n", pos + 2)]))
            latencies.append(perf() - t0)
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            failures.append(f"{targets[i]}: {type(exc).__name__}: {exc}")
            conn.drop()
            continue
        if head[9:12] != b"200":
            status_line = head.split(b"\r\n", 1)[0].decode(errors="replace")
            failures.append(f"{targets[i]}: {status_line}")
        elif expect and expect not in lower:
            failures.append(f"{targets[i]}: no {expect.strip().decode()!r} header")
        elif body != bodies[i]:
            failures.append(f"{targets[i]}: body differs from the upstream's")


async def _phase(conns, count, wire, bodies, targets, expect) -> dict:
    latencies: list[float] = []
    failures: list[str] = []
    n_conns, distinct = len(conns), len(targets)
    # Request j goes to connection j % n_conns and asks for target j % distinct, so the
    # connections never ask for the same thing in lock-step.
    jobs = [[j % distinct for j in range(k, count, n_conns)] for k in range(n_conns)]
    t0 = time.perf_counter()
    await asyncio.gather(*(
        _drive(c, js, wire, bodies, targets, expect, latencies, failures) for c, js in zip(conns, jobs)
    ))
    elapsed = time.perf_counter() - t0
    latencies.sort()
    return {
        "requests": count,
        "failures": len(failures),
        "samples": failures[:5],
        "rps": count / elapsed if elapsed else 0.0,
        "p50_ms": percentile(latencies, 50) * 1e3,
        "p99_ms": percentile(latencies, 99) * 1e3,
    }


async def _run_load(args) -> dict:
    targets = request_targets(args.distinct)
    bodies = [body_for(t) for t in targets]
    host = f"{HOST}:{args.upstream_port}"
    # Proxies get absolute-form requests (what HTTP_PROXY clients send); the upstream
    # itself gets origin-form, as a direct client would send.
    prefix = f"http://{host}" if args.proxy else ""
    wire = [f"GET {prefix}{t} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n"
            f"User-Agent: stbproxy-bench\r\n\r\n".encode() for t in targets]
    expect = args.expect.encode().lower() if args.expect else b""
    if expect:
        expect = b"\r\n" + expect + b"\r\n"
    conns = [_Conn(args.port) for _ in range(args.concurrency)]
    try:
        await asyncio.gather(*(c.open() for c in conns))
        warm = await _phase(conns, args.warmup, wire, bodies, targets, expect) if args.warmup else None
        result = await _phase(conns, args.requests, wire, bodies, targets, expect)
    finally:
        for c in conns:
            c.drop()
    if warm is not None:
        result["failures"] += warm["failures"]
        result["samples"] = (warm["samples"] + result["samples"])[:5]
    return result


def _load_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="bench_proxy.py _load")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--upstream-port", type=int, required=True)
    p.add_argument("--proxy", action="store_true", help="send absolute-form proxy requests")
    p.add_argument("--expect", default="", help="a 'name: value' header every answer must carry")
    p.add_argument("--requests", type=int, required=True)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--concurrency", type=int, required=True)
    p.add_argument("--distinct", type=int, required=True)
    p.add_argument("--timeout", type=float, default=300.0)
    args = p.parse_args(argv)
    gc.disable()  # nothing here makes cycles; a collection pass would show up as client p99
    result = asyncio.run(asyncio.wait_for(_run_load(args), args.timeout))
    print(json.dumps(result), flush=True)


# -- the orchestrator -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class Proc:
    """A server child: output to files (a full pipe must never stall it), SIGTERM to stop."""

    def __init__(self, name: str, argv: list[str], logdir: Path) -> None:
        self.name = name
        self.out = logdir / f"{name}.out"
        self.err = logdir / f"{name}.err"
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            # Own session: a Ctrl-C at the terminal reaches only us; we stop the children.
            self.popen = subprocess.Popen(argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                          env=child_env(), start_new_session=True)

    def log_tail(self, lines: int = 15) -> str:
        text = self.err.read_text(errors="replace") + self.out.read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def wait_line(self, pattern: re.Pattern, timeout: float = START_TIMEOUT) -> re.Match:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if match := pattern.search(self.out.read_text(errors="replace")):
                return match
            if self.popen.poll() is not None:
                break
            time.sleep(0.02)
        raise RuntimeError(f"{self.name} did not get ready (exit {self.popen.poll()}):\n{self.log_tail()}")

    def wait_port(self, port: int, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.popen.poll() is not None:
                break
            with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=0.5):
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} is not accepting on port {port} (exit {self.popen.poll()}):\n"
                           f"{self.log_tail()}")

    def stop(self) -> int:
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                print(f"bench_proxy: {self.name} ignored SIGTERM for {STOP_TIMEOUT:.0f}s; killing it",
                      file=sys.stderr)
                self.popen.kill()
                self.popen.wait()
        return self.popen.returncode


MITM_ADDON = '''\
"""Benchmark baseline: answer from an in-memory dict, nothing else."""
import json
from mitmproxy import http

with open({answers!r}) as f:
    ANSWERS = {{url: body.encode() for url, body in json.load(f).items()}}
HEADERS = {{"Content-Type": "application/json", "X-Bench-Source": "dict"}}


class DictAnswers:
    def request(self, flow: http.HTTPFlow) -> None:
        body = ANSWERS.get(flow.request.url)
        if body is not None:
            flow.response = http.Response.make(200, body, HEADERS)


addons = [DictAnswers()]
'''


class Bench:
    def __init__(self, args, workdir: Path, stack: contextlib.ExitStack) -> None:
        self.args = args
        self.workdir = workdir
        self.stack = stack
        self.failures: list[str] = []
        self.failed = 0

    def start(self, name: str, argv: list[str]) -> Proc:
        proc = Proc(name, argv, self.workdir)
        self.stack.callback(proc.stop)  # stopped on every way out, errors included
        return proc

    def load(self, port: int, *, proxy: bool, expect: str, requests: int, concurrency: int,
             warmup: int, label: str) -> dict:
        argv = [sys.executable, str(SCRIPT), "_load", "--port", str(port),
                "--upstream-port", str(self.upstream_port), "--expect", expect,
                "--requests", str(requests), "--warmup", str(warmup),
                "--concurrency", str(concurrency), "--distinct", str(self.args.distinct),
                "--timeout", str(self.args.load_timeout)]
        if proxy:
            argv.append("--proxy")
        # subprocess.run kills the child on timeout; the inner timeout should fire first.
        done = subprocess.run(argv, capture_output=True, text=True, env=child_env(),
                              timeout=self.args.load_timeout + 30)
        if done.returncode != 0:
            raise RuntimeError(f"load generator failed for {label} (exit {done.returncode}):\n"
                               f"{done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        if result["failures"]:
            self.failed += result["failures"]
            self.failures += [f"{label}: {s}" for s in result["samples"]]
        return result

    def run(self) -> int:
        a = self.args
        stbproxy, mitmdump = console_script("stbproxy"), console_script("mitmdump")
        store = self.workdir / "store"
        targets = request_targets(a.distinct)

        upstream = self.start("upstream", [sys.executable, str(SCRIPT), "_upstream"])
        self.upstream_port = int(upstream.wait_line(READY_RE).group(1))
        base = f"http://{HOST}:{self.upstream_port}"

        # mitmdump boots while the store is being recorded: its startup is slow.
        answers = self.workdir / "answers.json"
        answers.write_text(json.dumps({base + t: body_for(t).decode() for t in targets}))
        addon = self.workdir / "dict_addon.py"
        addon.write_text(MITM_ADDON.format(answers=str(answers)))
        mitm_port = _free_port()
        mitm = self.start("mitmdump", [
            mitmdump, "-q", "--listen-host", HOST, "--listen-port", str(mitm_port), "-s", str(addon),
            # only so that its CA goes to our temp dir instead of the user's home
            "--set", f"confdir={self.workdir / 'mitm-conf'}"])

        recorder = self.start("stbproxy-record", [
            stbproxy, "serve", "--mode", "record", "--port", "0", "--store", str(store)])
        rec_port = int(recorder.wait_line(READY_RE).group(1))
        rec = self.load(rec_port, proxy=True, expect="X-Stb-Source: upstream", requests=a.distinct,
                        concurrency=min(8, a.distinct), warmup=0, label="record")
        if rec["failures"]:
            raise RuntimeError("recording the store failed: " + "; ".join(rec["samples"]))
        if (rc := recorder.stop()) != 0:
            raise RuntimeError(f"stbproxy record exited {rc}:\n{recorder.log_tail()}")

        replay = self.start("stbproxy-replay", [
            stbproxy, "serve", "--mode", "replay", "--port", "0", "--store", str(store)])
        replay_port = int(replay.wait_line(READY_RE).group(1))
        mitm.wait_port(mitm_port)

        subjects = [
            ("direct", dict(port=self.upstream_port, proxy=False, expect="")),
            ("stbproxy replay", dict(port=replay_port, proxy=True, expect="X-Stb-Source: cache")),
            ("mitmdump + dict", dict(port=mitm_port, proxy=True, expect="X-Bench-Source: dict")),
        ]
        print(f"stbproxy benchmark: {a.requests} requests at concurrency {a.concurrency} and "
              f"{a.conc1_requests} at concurrency 1, {a.distinct} distinct requests, "
              f"{a.repeats} repeat(s), medians reported")
        print(f"machine: {os.cpu_count()} CPU core(s), Python {platform.python_version()}; the load "
              "generator is a separate process but shares these cores with the server under test; "
              f"load average at start {os.getloadavg()[0]:.2f} (other work on the machine skews figures)")
        runs: dict[str, list[tuple[dict, dict]]] = {name: [] for name, _ in subjects}
        # Interleave subjects within each repeat so that drift in machine load hits all alike.
        for rep in range(1, a.repeats + 1):
            for name, how in subjects:
                many = self.load(**how, requests=a.requests, concurrency=a.concurrency,
                                 warmup=a.warmup, label=f"{name} c{a.concurrency} #{rep}")
                one = self.load(**how, requests=a.conc1_requests, concurrency=1,
                                warmup=a.warmup1, label=f"{name} c1 #{rep}")
                runs[name].append((many, one))
                print(f"  #{rep} {name:<16} {many['rps']:8.0f} req/s  p50 {many['p50_ms']:6.2f} ms  "
                      f"p99 {many['p99_ms']:6.2f} ms  | c1 p50 {one['p50_ms']:.3f} ms"
                      + (f"  FAILURES {many['failures'] + one['failures']}"
                         if many["failures"] or one["failures"] else ""), flush=True)

        med = {name: {
            "rps": statistics.median(m["rps"] for m, _ in rs),
            "p50": statistics.median(m["p50_ms"] for m, _ in rs),
            "p99": statistics.median(m["p99_ms"] for m, _ in rs),
            "c1": statistics.median(o["p50_ms"] for _, o in rs),
        } for name, rs in runs.items()}
        print(f"\nload average at end {os.getloadavg()[0]:.2f}")
        print(f"{'target':<18}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'c1 p50 ms':>11}")
        for name, m in med.items():
            print(f"{name:<18}{m['rps']:>9.0f}{m['p50']:>9.2f}{m['p99']:>9.2f}{m['c1']:>11.3f}")
        stb, mitm_m, direct = med["stbproxy replay"], med["mitmdump + dict"], med["direct"]
        ratio = stb["rps"] / mitm_m["rps"] if mitm_m["rps"] else float("nan")
        added = stb["c1"] - direct["c1"]
        print()
        print(f"ratio stbproxy/mitmdump req/s: {ratio:.2f} (target >= 1.5: "
              f"{'met' if ratio >= 1.5 else 'MISSED'})")
        print(f"p50 added at concurrency 1 by stbproxy over direct: {added:.3f} ms (target <= 2 ms: "
              f"{'met' if added <= 2.0 else 'MISSED'}); by mitmdump: {mitm_m['c1'] - direct['c1']:.3f} ms")

        if self.failed:
            print(f"\n!!! {self.failed} FAILED REQUESTS: these figures are not valid !!!")
            for line in self.failures[:20]:
                print(f"  {line}")
            return 1
        print("failed requests: 0")
        return 0


def _options(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, help="measured requests at --concurrency [20000]")
    p.add_argument("--concurrency", type=int, default=32, help="keep-alive connections [32]")
    p.add_argument("--conc1-requests", type=int, help="measured requests at concurrency 1 [2000]")
    p.add_argument("--repeats", type=int, help="measurements per target; medians are reported [3]")
    p.add_argument("--distinct", type=int, help="distinct requests recorded and replayed [200]")
    p.add_argument("--quick", action="store_true", help="a small run for smoke tests (seconds)")
    p.add_argument("--load-timeout", type=float, default=600.0, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    small = dict(requests=1000, conc1_requests=200, repeats=1, distinct=40)
    full = dict(requests=20000, conc1_requests=2000, repeats=3, distinct=200)
    for key, value in (small if a.quick else full).items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    if min(a.requests, a.concurrency, a.conc1_requests, a.repeats, a.distinct) < 1:
        p.error("counts must be 1 or more")
    # Warm-up: enough to open every connection and fill the server's caches, bounded.
    a.warmup = min(2000, max(a.concurrency * 10, a.requests // 10))
    a.warmup1 = min(200, max(20, a.conc1_requests // 10))
    return a


def main(argv: list[str]) -> int:
    if argv[:1] == ["_upstream"]:
        asyncio.run(_run_upstream())
        return 0
    if argv[:1] == ["_load"]:
        _load_main(argv[1:])
        return 0
    args = _options(argv)
    # SIGTERM (e.g. a test timing out) unwinds like Ctrl-C, so every child gets stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stb-bench-")))
        try:
            return Bench(args, workdir, stack).run()
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"bench_proxy: FAILED: {exc}", file=sys.stderr)
            return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
