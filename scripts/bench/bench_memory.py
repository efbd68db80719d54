#!/usr/bin/env python3
"""Memory of one proxy on a large store: RSS of `stbproxy serve` with 1,000,000 stored
answers, before and after 100,000 random hits (target: at most 250 MB after).

In one run, on 127.0.0.1 only, in a temporary folder that is removed afterwards:

1. write a store of N answers for a plain-HTTP API (each about 300 bytes of JSON), keyed
   by the proxy's own key function and encoded by its own store module, in batches;
2. start `stbproxy serve --mode replay` on it (one worker, as users start it) and read its
   RSS once it is ready;
3. send M GET requests for targets drawn at random from the N (so almost every hit is a
   first one: the store is read and decoded, the memos of recent hits keep turning over)
   from the load generator (scripts/bench/hitload.py) at concurrency 16, every answer checked;
4. print the RSS after the hits, its growth, the peak (VmHWM), and the target verdict.

Baseline (measured in the same run): the proxy's own RSS once ready, before the hits; the
250 MB target is fixed.

Usage: python scripts/bench/bench_memory.py [--quick] [--entries N] [--hits M]
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.common import child_env  # noqa: E402
from stbproxy import keys  # noqa: E402
from stbproxy.models import Exchange, Request, Response, Source  # noqa: E402
from stbproxy.serve_process import ServeProcess  # noqa: E402
from stbproxy.store.embedded import Store  # noqa: E402
from stbproxy.store.record_format import encode_exchange  # noqa: E402

HITLOAD = Path(__file__).resolve().with_name("hitload.py")
HOST = "api.bench.test"
TARGET_MB = 250.0
HEADERS = (("Accept", "application/json"), ("User-Agent", "stbproxy-bench"))
ANSWER_HEADERS = (("Content-Type", "application/json"), ("Server", "bench-upstream"))


def target(i: int) -> str:
    return f"/v1/catalog/items/{i}?lang=en&fields=name,price,stock"


def body(i: int) -> bytes:
    doc = {"id": i, "name": f"item {i}", "price": round(i * 0.37 % 500, 2), "stock": i % 97,
           "tags": ["bench", f"group-{i % 31}"], "description": "a stored answer of a plain-HTTP API " * 4}
    return json.dumps(doc, separators=(",", ":")).encode()


def fill(store_path: Path, entries: int) -> float:
    started = time.perf_counter()
    with Store(store_path) as store:
        batch: list[tuple[str, bytes]] = []
        for i in range(entries):
            request = Request("GET", f"http://{HOST}{target(i)}", HEADERS)
            exchange = Exchange(keys.request_key(request), request, Response(200, ANSWER_HEADERS, body(i), "OK"),
                                Source.UPSTREAM, stored_at=time.time())
            batch.append((exchange.key, encode_exchange(exchange)))
            if len(batch) >= 20_000:
                store.put_encoded_many(batch)
                batch = []
        if batch:
            store.put_encoded_many(batch)
    return time.perf_counter() - started


def write_plan(path: Path, entries: int, hits: int, *, seed: int) -> Path:
    """The load generator's plan: ``hits`` GETs of targets drawn at random from ``entries``,
    each with the answer it must get."""
    rng = random.Random(seed)
    items = [[f"GET http://{HOST}{target(i)} HTTP/1.1\r\nHost: {HOST}\r\nAccept: application/json\r\n"
              f"User-Agent: stbproxy-bench\r\n\r\n", body(i).decode("latin-1")]
             for i in (rng.randrange(entries) for _ in range(hits))]
    path.write_text(json.dumps({"kind": "plain", "expect": "x-stb-source: cache", "items": items}))
    return path


def random_hits(port: int, plan: Path, hits: int) -> dict:
    """The load generator's result for ``hits`` requests of ``plan`` at concurrency 16."""
    budget = max(300, hits / 500)  # seconds for the whole load: at 500 hits/s something is wrong
    done = subprocess.run([sys.executable, str(HITLOAD), "--port", str(port), "--plan", str(plan),
                           "--requests", str(hits), "--concurrency", "16", "--timeout", str(budget)],
                          capture_output=True, text=True, env=child_env(), timeout=7200)
    if done.returncode != 0:
        raise RuntimeError(f"the load generator failed:\n{done.stdout}\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} for pid {pid}")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="20,000 entries, 4,000 hits (a smoke run)")
    p.add_argument("--entries", type=int, default=None, help="stored answers [1,000,000]")
    p.add_argument("--hits", type=int, default=None, help="random hits [100,000]")
    args = p.parse_args(argv)
    entries = args.entries or (20_000 if args.quick else 1_000_000)
    hits = args.hits or (4_000 if args.quick else 100_000)
    workdir = Path(tempfile.mkdtemp(prefix="stb-bench-memory-"))
    server: ServeProcess | None = None
    try:
        seconds = fill(workdir / "store", entries)
        size = sum(f.stat().st_size for f in (workdir / "store").iterdir()) / 2**20
        print(f"store: {entries:,} answers written in {seconds:.1f} s, {size:.0f} MiB on disk")
        plan = write_plan(workdir / "plan.json", entries, hits, seed=13)
        server = ServeProcess(workdir / "store", "--mode", "replay", "--simulator", "off",
                              confdir=workdir / "certs").start(120)
        pid = server.process.pid
        ready_kb = status_kb(pid, "VmRSS")
        result = random_hits(server.port, plan, hits)
        after_kb, peak_kb = status_kb(pid, "VmRSS"), status_kb(pid, "VmHWM")
        print(f"{hits:,} random hits at concurrency 16: {result['rps']:.0f} req/s, p50 {result['p50_ms']:.2f} ms, "
              f"p99 {result['p99_ms']:.2f} ms, {result['failures']} failed")
        print(f"RSS of the proxy: {ready_kb / 1024:.0f} MB when ready, {after_kb / 1024:.0f} MB after the hits "
              f"(+{(after_kb - ready_kb) / 1024:.0f} MB), peak {peak_kb / 1024:.0f} MB")
        after_mb = after_kb / 1024
        print(f"RSS after {hits:,} random hits on {entries:,} entries: {after_mb:.0f} MB "
              f"(target <= {TARGET_MB:.0f} MB: {'met' if after_mb <= TARGET_MB else 'MISSED'})")
        if result["failures"]:
            print(f"FAILED requests: {result['samples']}")
            return 1
        return 0
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"bench_memory: FAILED: {exc}", file=sys.stderr)
        return 2
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
