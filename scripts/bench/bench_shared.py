#!/usr/bin/env python3
"""Shared-tier benchmark: a fleet of `stbproxy serve --shared URL` on one real redis-server.

In one run, on 127.0.0.1 only, with bounded request counts, it prints each target's figure:

1. fleet: two proxies with empty local stores; N distinct calls through proxy A, then the
   same through proxy B. B must make 0 upstream calls and 0 simulations (every answer of
   B carries X-Stb-Source: cache, and the upstream's own count does not move).
2. single flight: 64 identical misses, 32 on each proxy at once, on a call that takes
   0.3 s upstream; the upstream must see 1 call (several rounds, each on a new call).
3. hit throughput of a proxy whose local tier is cold and shared tier warm (its first pass
   fills the local tier) against proxy A with a warm local tier, and of the same proxy's
   second pass: ratios of medians over fresh cold proxies (targets >= 0.8 and ~1.0).
4. outage: a proxy under a load of misses; redis-server is SIGKILLed mid-load and started
   again 1.5 s later (it keeps an append-only file, as a production server would). Client
   requests that failed (target 0), seconds from restart to reconnect (target <= 5) and
   writes pushed on return; every answer the proxy made must be in the shared tier after.
5. import: `stbproxy import stb-cache` of a generated cache (600,000 entries by default,
   bench_import.py's generator) into a local store alone, then into a fresh store with
   --shared on a fresh server; entries/s of the shared import (target >= 20,000) and the
   ratio to the local-only import, then a second shared import that must add 0.

The load generator is hitload.py (a separate process that checks every answer's
status, body and X-Stb-Source); the upstream here counts the calls it gets. Exit status 1
means a check failed (failed requests, wrong counts); a missed speed target is reported
but is not an error.

Baselines (measured in the same run): for hits, a proxy with a warm local tier (A); for
the import, the same cache imported into a local store alone. Fleet, single flight and
outage are counts checked against exact targets.

Usage: python scripts/bench/bench_shared.py [--quick] [--calls N] [--hit-entries N] [--import-entries N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.bench.bench_import import generate  # noqa: E402
from scripts.bench.hitstores import http_body as body_for  # noqa: E402
from scripts.bench.hitstores import http_plan, http_targets
from scripts.common import HOST, child_env, children_cpu, stbproxy_command  # noqa: E402
from stbproxy.serve_process import ServeProcess  # noqa: E402
from stbproxy.store.redis_process import RedisProcess  # noqa: E402
from stbproxy.store.shared_bulk import SharedBulk  # noqa: E402
from stbproxy.store.shared_url import parse_shared_url  # noqa: E402

SCRIPTS = Path(__file__).resolve().parent
SERVE_ARGS = ("--validity", "strict", "--simulator", "schema")  # the generated bodies are valid answers


# -- an upstream that counts its calls ---------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        target = self.path
        if target.startswith("http://"):
            target = "/" + target.split("/", 3)[3]
        with self.server.lock:
            self.server.hits[target] += 1
        if target.startswith("/slow/"):
            time.sleep(0.3)
            body = json.dumps({"slow": target}).encode()
        else:
            body = body_for(target)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class CountingUpstream:
    def __init__(self) -> None:
        self.server = ThreadingHTTPServer((HOST, 0), _Handler)
        self.server.daemon_threads = True
        self.server.hits = Counter()
        self.server.lock = threading.Lock()
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def calls(self, prefix: str = "/") -> int:
        with self.server.lock:
            return sum(n for target, n in self.server.hits.items() if target.startswith(prefix))

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- clients -------------------------------------------------------------------------------------------


def load(port: int, upstream_port: int, distinct: int, *, expect: str = "", concurrency: int = 32,
         requests: int | None = None, background: bool = False):
    """The shared load generator (hitload.py): GETs through the proxy over `distinct` targets,
    every answer checked (and carrying ``expect``, a header line, when given)."""
    plan = http_plan("plain", f"http://{HOST}:{upstream_port}", http_targets(distinct), expect)
    handle, path = tempfile.mkstemp(prefix="stb-bench-shared-plan-", suffix=".json")
    with os.fdopen(handle, "w") as out:
        json.dump(plan, out)
    argv = [sys.executable, str(SCRIPTS / "hitload.py"), "--port", str(port), "--plan", path,
            "--requests", str(requests or distinct), "--concurrency", str(concurrency), "--timeout", "600"]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())
    process.plan = path
    return process if background else finished(process)


def finished(process: subprocess.Popen) -> dict:
    try:
        out, err = process.communicate(timeout=660)
    finally:
        os.unlink(process.plan)
    if process.returncode != 0:
        raise RuntimeError(f"load generator failed:\n{err[-2000:]}")
    return json.loads(out.strip().splitlines()[-1])


async def _one(port: int, upstream_port: int, target: str) -> tuple[int, str]:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(f"GET http://{HOST}:{upstream_port}{target} HTTP/1.1\r\nHost: {HOST}:{upstream_port}\r\n"
                     f"Connection: close\r\n\r\n".encode())
        raw = await asyncio.wait_for(reader.read(), 60)
    finally:
        writer.close()
    head = raw.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    source = re.search(r"(?im)^x-stb-source: *(\S+)", head)
    return int(head.split(" ", 2)[1]), source.group(1) if source else "?"


async def identical(ports: list[int], upstream_port: int, target: str, each: int) -> list[tuple[int, str]]:
    return await asyncio.gather(*(_one(port, upstream_port, target) for _ in range(each) for port in ports))


# -- the measurements ----------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args, workdir: Path, stack: contextlib.ExitStack) -> None:
        self.args = args
        self.workdir = workdir
        self.stack = stack
        self.problems: list[str] = []
        self.proxies = 0

    def check(self, ok: bool, problem: str) -> None:
        if not ok:
            self.problems.append(problem)

    def proxy(self, url: str, *, launch_only: bool = False) -> ServeProcess:
        self.proxies += 1
        proxy = ServeProcess(self.workdir / f"proxy{self.proxies}" / "store", "--shared", url, *SERVE_ARGS)
        self.stack.callback(proxy.stop)
        return proxy.launch() if launch_only else proxy.start()

    def run(self) -> int:
        a = self.args
        if not self.wanted(1, 2, 3, 4):
            self.import_bench()
            return self.report()
        redis = RedisProcess(self.workdir / "redis", "--appendonly", "yes", "--appendfsync", "always")
        self.stack.callback(redis.stop)
        redis.start()
        upstream = CountingUpstream()
        self.stack.callback(upstream.stop)
        proxy_a, proxy_b = self.proxy(redis.url, launch_only=True), self.proxy(redis.url, launch_only=True)
        proxy_a.wait_ready(), proxy_b.wait_ready()

        # 1. the fleet: what A answered, B serves
        via_a = load(proxy_a.port, upstream.port, a.calls)
        after_a = upstream.calls()
        via_b = load(proxy_b.port, upstream.port, a.calls, expect="X-Stb-Source: cache")
        b_calls = upstream.calls() - after_a
        print(f"1. fleet: {a.calls} distinct calls through A: {after_a} upstream calls, {via_a['failures']} failed; "
              f"the same through B: {b_calls} upstream calls, 0 simulations "
              f"({a.calls - via_b['failures']} of {a.calls} answers from the cache, {via_b['failures']} not)  "
              f"[target: 0 and 0]")
        self.check(via_a["failures"] == 0 and after_a == a.calls, f"A: {via_a}")
        self.check(b_calls == 0 and via_b["failures"] == 0, f"B made {b_calls} calls; {via_b['samples']}")

        # 2. single flight over the fleet
        rounds = []
        for r in range(a.rounds):
            answers = asyncio.run(identical([proxy_a.port, proxy_b.port], upstream.port, f"/slow/{r}", 32))
            rounds.append(upstream.calls(f"/slow/{r}"))
            self.check(all(status == 200 for status, _ in answers), f"single flight round {r}: {answers[:3]}")
            self.check(Counter(s for _, s in answers)["upstream"] == 32, f"round {r} sources {Counter(answers)}")
        print(f"2. single flight: 64 identical misses (32 on A, 32 on B at once), {a.rounds} rounds: "
              f"upstream calls per round {rounds}  [target: 1]")
        self.check(all(n == 1 for n in rounds), f"single flight made {rounds} calls")

        # 3. hit throughput: cold local + warm shared, against a warm local tier
        if self.wanted(3):
            self.hits(redis, upstream, proxy_a)
        if self.wanted(4):
            self.outage(redis)
        if self.wanted(5):
            self.import_bench()
        return self.report()

    def wanted(self, *steps: int) -> bool:
        return any(step in self.args.steps for step in steps)

    def report(self) -> int:
        for problem in self.problems:
            print(f"  check failed: {problem}")
        print("all checks passed" if not self.problems else f"{len(self.problems)} checks failed")
        return 1 if self.problems else 0

    def hits(self, redis: RedisProcess, upstream: CountingUpstream, proxy_a: ServeProcess) -> None:
        a = self.args
        load(proxy_a.port, upstream.port, a.hit_entries)  # A stores (and shares) every entry
        cold, repeat, warm = [], [], []
        for _ in range(a.rounds):
            proxy_c = self.proxy(redis.url)
            warm.append(load(proxy_a.port, upstream.port, a.hit_entries, expect="X-Stb-Source: cache"))
            cold.append(load(proxy_c.port, upstream.port, a.hit_entries, expect="X-Stb-Source: cache"))
            repeat.append(load(proxy_c.port, upstream.port, a.hit_entries, expect="X-Stb-Source: cache"))
            proxy_c.stop()
        for runs in (cold, repeat, warm):
            for run in runs:
                self.check(run["failures"] == 0, f"hit pass: {run['samples']}")
        med = {name: statistics.median(r["rps"] for r in runs)
               for name, runs in (("cold", cold), ("repeat", repeat), ("warm", warm))}
        p50 = {name: statistics.median(r["p50_ms"] for r in runs)
               for name, runs in (("cold", cold), ("repeat", repeat), ("warm", warm))}
        print(f"3. hits, {a.hit_entries} distinct at concurrency 32, median of {a.rounds} fresh proxies: "
              f"warm local {med['warm']:.0f} req/s (p50 {p50['warm']:.2f} ms); cold local + warm shared "
              f"{med['cold']:.0f} req/s (p50 {p50['cold']:.2f} ms): {med['cold'] / med['warm']:.2f}x  "
              f"[target >= 0.8x]; its second pass {med['repeat']:.0f} req/s: {med['repeat'] / med['warm']:.2f}x")

    def outage(self, redis: RedisProcess) -> None:
        """4. the shared tier killed mid-load"""
        a = self.args
        second = CountingUpstream()  # new keys: every request of this load is a miss
        self.stack.callback(second.stop)
        proxy_d = self.proxy(redis.url)
        running = load(proxy_d.port, second.port, a.outage_calls, concurrency=16, background=True)
        time.sleep(1.0)
        redis.kill()
        killed_at = time.monotonic()
        time.sleep(1.5)
        redis.start()
        restarted = time.monotonic()
        back = pushed = None
        while time.monotonic() - restarted < 15 and (back is None or pushed is None):
            text = "".join(proxy_d.output)
            if back is None and "is back after" in text:
                back = time.monotonic() - restarted
            found = re.search(r"pushed (\d+) writes kept", text)
            if found:
                pushed = int(found.group(1))
            time.sleep(0.02)
        outcome = finished(running)
        time.sleep(0.5)  # the last answers' writes
        with SharedBulk(parse_shared_url(redis.url)) as bulk:
            shared_keys = sum(1 for _ in bulk.keys([f"http/{HOST}:{second.port}/"]))
        print(f"4. outage: {outcome['requests']} requests of misses at concurrency 16; redis SIGKILLed 1 s into "
              f"the load, restarted {restarted - killed_at:.1f} s later: {outcome['failures']} failed "
              f"requests [target 0]; reconnected {back if back is None else round(back, 2)} s after the restart "
              f"[target <= 5]; {pushed} writes kept and pushed; {shared_keys} of {second.calls()} answers in the "
              f"shared tier afterwards")
        self.check(outcome["failures"] == 0, f"outage: {outcome['samples']}")
        self.check(back is not None and back <= 5, f"reconnect after {back}")
        self.check(pushed is not None and pushed > 0, "no write was kept and pushed")
        self.check(shared_keys == second.calls(), f"{shared_keys} answers shared of {second.calls()}")
        proxy_d.stop()

    def import_bench(self) -> None:
        a = self.args
        cache = self.workdir / "cache"
        started = time.perf_counter()
        expected = generate(cache, a.import_entries)
        print(f"5. import: generated {expected.entries} entries ({expected.good} good) in "
              f"{time.perf_counter() - started:.0f} s")
        server = RedisProcess(self.workdir / "redis-import")
        self.stack.callback(server.stop)
        server.start()
        with SharedBulk(parse_shared_url(server.url)) as bulk:
            empty = bulk.memory()
        local = self.import_run(cache, self.workdir / "import-local")
        shared = self.import_run(cache, self.workdir / "import-shared", "--shared", server.url)
        again = self.import_run(cache, self.workdir / "import-again", "--shared", server.url)
        with SharedBulk(parse_shared_url(server.url)) as bulk:
            memory, keys = bulk.memory(), bulk.key_count()
        added = re.search(r"shared tier: (\d+) added", shared["stdout"])
        added_again = re.search(r"shared tier: (\d+) added", again["stdout"])
        rate = expected.good / shared["seconds"]
        print(f"   local only: {local['seconds']:.1f} s ({expected.good / local['seconds']:,.0f} entries/s, "
              f"CPU {local['cpu']:.1f} s); with --shared: {shared['seconds']:.1f} s = {rate:,.0f} entries/s "
              f"[target >= 20,000/s], CPU {shared['cpu']:.1f} s, ratio to local only "
              f"{local['seconds'] / shared['seconds']:.2f}; "
              f"again: {added_again.group(1) if added_again else '?'} added")
        print(f"   redis: {keys} keys, {memory / 2**20:.0f} MiB used: "
              f"{(memory - empty) / max(keys, 1):,.0f} bytes per entry "
              f"(values average {expected.bytes / max(expected.entries, 1):,.0f} bytes of cache JSON)")
        self.check(added is not None and int(added.group(1)) == expected.good == keys,
                   f"shared import added {added and added.group(1)}, expected {expected.good}, server has {keys}")
        self.check(added_again is not None and added_again.group(1) == "0", "a second import added entries")

    def import_run(self, cache: Path, store: Path, *extra: str) -> dict:
        cpu, started = children_cpu(), time.perf_counter()
        done = subprocess.run([*stbproxy_command(), "import", "stb-cache", str(cache), "--store", str(store), *extra],
                              capture_output=True, text=True, env=child_env(), timeout=1800)
        seconds = time.perf_counter() - started
        if done.returncode != 0:
            raise RuntimeError(f"import failed:\n{done.stdout}\n{done.stderr[-2000:]}")
        return {"seconds": seconds, "cpu": children_cpu() - cpu, "stdout": done.stdout}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts: a smoke run")
    parser.add_argument("--calls", type=int, default=1000, help="distinct calls through A, then B")
    parser.add_argument("--hit-entries", type=int, default=4000, help="distinct hits per throughput pass")
    parser.add_argument("--outage-calls", type=int, default=3000, help="requests during the outage test")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--import-entries", type=int, default=600_000)
    parser.add_argument("--steps", type=lambda text: {int(n) for n in text.split(",")}, default={1, 2, 3, 4, 5},
                        help="which measurements to run, e.g. 3,5 (1 and 2 always run when 3 or 4 does)")
    args = parser.parse_args(argv)
    if args.quick:
        args.calls, args.hit_entries, args.outage_calls, args.rounds, args.import_entries = 100, 300, 600, 1, 3000
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="stb-bench-shared-") as tmp, contextlib.ExitStack() as stack:
        return Bench(args, Path(tmp), stack).run()


if __name__ == "__main__":
    sys.exit(main())
