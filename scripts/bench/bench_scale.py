#!/usr/bin/env python3
"""How serving grows with the store: the same measurements on stores of 100,000, 1,000,000
and 10,000,000 answers, so that the growth is visible.

For each size, in a temporary folder that is removed afterwards, on 127.0.0.1 only:

1. write a store of N answers of a plain-HTTP API (bench_memory.py's: about 300 bytes of
   JSON each, keyed by the proxy's key function, encoded by its store module, in batches):
   the time, answers/s and the size on disk;
2. start `stbproxy serve --mode replay` on it, as users do, and time it from launch to the
   ready line (a cold start: a fresh process on a store nobody opened since it was closed);
   its RSS once ready;
3. send M GET requests for targets drawn at random from the N (almost every one a first
   hit) from the load generator (hitload.py) at concurrency 16, every answer checked:
   req/s, p50, p99; the RSS after the hits and its peak;
4. print one row per size and, against the smallest size (the baseline, measured in the
   same run), the ratios: disk per answer, req/s, p99, RSS and cold start. Nothing may
   grow worse than linearly in entries: disk per answer and RSS after the hits should stay
   about flat, req/s within a small factor.

Not measured here (yet): `stbproxy import stb-cache` of 10M entries (bench_import.py
measures the import's speed at 120,000), HTTPS hits, the shared tier (bench_shared.py).

Usage: python scripts/bench/bench_scale.py [--quick] [--sizes 100000,1000000,10000000] [--hits M]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.bench.bench_memory import fill, random_hits, status_kb, write_plan  # noqa: E402
from stbproxy.serve_process import ServeProcess  # noqa: E402

DEFAULT_SIZES = (100_000, 1_000_000, 10_000_000)


@dataclass
class Row:
    entries: int
    fill_s: float
    disk_mib: float
    cold_start_s: float
    ready_mb: float
    rps: float
    p50_ms: float
    p99_ms: float
    after_mb: float
    peak_mb: float
    failures: int

    @property
    def bytes_per_answer(self) -> float:
        return self.disk_mib * 2**20 / self.entries


def measure(entries: int, hits: int, workdir: Path) -> Row:
    store = workdir / f"store-{entries}"
    fill_s = fill(store, entries)
    disk = sum(f.stat().st_size for f in store.iterdir() if f.is_file()) / 2**20
    plan = write_plan(workdir / "plan.json", entries, hits, seed=entries)
    server = ServeProcess(store, "--mode", "replay", "--simulator", "off", confdir=workdir / "certs")
    try:
        started = time.perf_counter()
        server.start(600)
        cold_start = time.perf_counter() - started
        pid = server.process.pid
        ready_kb = status_kb(pid, "VmRSS")
        result = random_hits(server.port, plan, hits)
        after_kb, peak_kb = status_kb(pid, "VmRSS"), status_kb(pid, "VmHWM")
    finally:
        server.stop()
    shutil.rmtree(store, ignore_errors=True)  # the next size needs the disk
    return Row(entries, fill_s, disk, cold_start, ready_kb / 1024, result["rps"], result["p50_ms"], result["p99_ms"],
               after_kb / 1024, peak_kb / 1024, result["failures"])


def report(rows: list[Row], hits: int) -> None:
    print(f"\n{'entries':>12} {'written/s':>10} {'disk MiB':>9} {'B/answer':>9} {'cold start':>10} {'RSS ready':>10} "
          f"{'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'RSS after':>10} {'peak':>7}")
    for r in rows:
        print(f"{r.entries:>12,} {r.entries / r.fill_s:>10,.0f} {r.disk_mib:>9.0f} {r.bytes_per_answer:>9.0f} "
              f"{r.cold_start_s:>9.2f}s {r.ready_mb:>8.0f}MB {r.rps:>7.0f} {r.p50_ms:>7.2f} {r.p99_ms:>7.2f} "
              f"{r.after_mb:>8.0f}MB {r.peak_mb:>5.0f}MB")
    base = rows[0]
    for r in rows[1:]:
        growth = r.entries / base.entries
        print(f"{r.entries:,} vs {base.entries:,} entries ({growth:.0f}x), {hits:,} random hits each: "
              f"disk per answer {r.bytes_per_answer / base.bytes_per_answer:.2f}x, "
              f"req/s {r.rps / base.rps:.2f}x, p99 {r.p99_ms / base.p99_ms:.2f}x, "
              f"RSS after the hits {r.after_mb / base.after_mb:.2f}x, cold start {r.cold_start_s / base.cold_start_s:.2f}x "
              f"({'no worse than linear' if r.after_mb / base.after_mb <= growth and r.cold_start_s / base.cold_start_s <= growth else 'WORSE THAN LINEAR'})")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="sizes 2,000 and 20,000, 2,000 hits each (a smoke run)")
    p.add_argument("--sizes", default=None, help="store sizes, comma-separated [100000,1000000,10000000]")
    p.add_argument("--hits", type=int, default=None, help="random hits per size [1,000,000]")
    args = p.parse_args(argv)
    sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes
             else [2_000, 20_000] if args.quick else list(DEFAULT_SIZES))
    hits = args.hits or (2_000 if args.quick else 1_000_000)
    workdir = Path(tempfile.mkdtemp(prefix="stb-bench-scale-"))
    rows: list[Row] = []
    try:
        for entries in sorted(sizes):
            row = measure(entries, hits, workdir)
            rows.append(row)
            print(f"{entries:,} answers: written in {row.fill_s:.1f} s, {row.disk_mib:.0f} MiB; ready in "
                  f"{row.cold_start_s:.2f} s; {hits:,} hits at {row.rps:.0f} req/s, p99 {row.p99_ms:.2f} ms; "
                  f"RSS {row.ready_mb:.0f} -> {row.after_mb:.0f} MB", flush=True)
        report(rows, hits)
        failed = sum(r.failures for r in rows)
        print(f"failed requests: {failed}")
        return 1 if failed else 0
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        print(f"bench_scale: FAILED: {exc}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
