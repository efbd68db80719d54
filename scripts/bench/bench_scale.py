#!/usr/bin/env python3
"""How an import and serving grow with the store: the same measurements on StableToolBench
caches of 100,000, 1,000,000 and 10,000,000 entries, so that the growth is visible.

For each size, in a temporary folder that is removed afterwards, on 127.0.0.1 only:

1. generate a cache of the original layout with bench_import.py's generator (about 60
   entries per API file, answers of 300-800 characters, a small share of failures,
   repeated calls and unparseable entries, as in the published cache);
2. `stbproxy import stb-cache CACHE --store STORE` as a real process: seconds, entries/s,
   the peak RSS of the command and with its encoding workers (sampled from /proc), and
   the store's size on disk;
3. start `stbproxy serve --mode replay` on that store, as users do, and time it from
   launch to the ready line (a cold start: a fresh process on a store nobody opened since
   it was written); its RSS once ready;
4. send M `POST /virtual` calls (ToolBench's client's body, arguments in another order
   than the cache's literal) for calls drawn at random from up to 20,000 of the cache's
   files, spread over the whole store, from the load generator (hitload.py) at
   concurrency 16, every answer checked: req/s, p50, p99, the server's CPU per hit (from
   its process times; hits/s per core is its inverse); the RSS after the hits and its peak;
5. print one row per size and, against the smallest size (the baseline, measured in the
   same run), the ratios. Nothing may grow worse than linearly in entries: entries/s of
   the import, disk per entry and the RSS figures should stay about flat, req/s within a
   small factor.

The store's block cache (STBPROXY_STORE_CACHE_MB, default 64 MiB per process) holds every
table's index and filter blocks as well as data blocks: the serving process's RSS should
not grow with the store beyond it.

Usage: python scripts/bench/bench_scale.py [--quick] [--sizes 100000,1000000,10000000] [--hits M]
"""

from __future__ import annotations

import argparse
import ast
import gc
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.bench.bench_import import FAILURES, generate  # noqa: E402
from scripts.bench.bench_memory import random_hits, status_kb  # noqa: E402
from scripts.bench.hitstores import virtual_plan  # noqa: E402
from scripts.common import child_env, cpu_seconds, stbproxy_command, tree_pids  # noqa: E402
from stbproxy.serve_process import ServeProcess  # noqa: E402

DEFAULT_SIZES = (100_000, 1_000_000, 10_000_000)
SAMPLED_FILES = 20_000


@dataclass
class Row:
    entries: int
    imported: int
    import_s: float
    import_peak_mb: float
    tree_peak_mb: float  # with its workers
    disk_mib: float
    cold_start_s: float
    ready_mb: float
    rps: float
    p50_ms: float
    p99_ms: float
    cpu_ms: float  # the server's CPU per hit
    after_mb: float
    peak_mb: float
    failures: int
    samples: list[str]

    @property
    def import_rate(self) -> float:
        return self.entries / self.import_s

    @property
    def bytes_per_entry(self) -> float:
        return self.disk_mib * 2**20 / self.imported


def tree_rss_kb(pid: int) -> int:
    """The RSS of a process and of every process below it (an import's encoding workers)."""
    total = 0
    for current in tree_pids(pid):
        try:
            total += status_kb(current, "VmRSS")
        except (OSError, RuntimeError):  # it ended meanwhile
            continue
    return total


def run_import(cache: Path, store: Path) -> tuple[float, float, float, int]:
    """Seconds, peak RSS of the command alone and of it with its workers (MB), entries
    imported. Both are read from /proc every 0.1 s while it runs (its VmHWM is the peak
    since its exec; wait4's figure would count what it shared with this process before)."""
    out_file, err_file = store.with_suffix(".out"), store.with_suffix(".err")
    started = time.perf_counter()
    with out_file.open("w") as out, err_file.open("w") as err:
        process = subprocess.Popen([*stbproxy_command(), "import", "stb-cache", str(cache), "--store", str(store)],
                                   stdout=out, stderr=err, env=child_env())
        peak_kb = tree_peak_kb = 0
        while process.poll() is None:
            try:
                peak_kb = max(peak_kb, status_kb(process.pid, "VmHWM"))
            except (OSError, RuntimeError):  # it ended meanwhile
                pass
            tree_peak_kb = max(tree_peak_kb, tree_rss_kb(process.pid))
            time.sleep(0.1)
    seconds = time.perf_counter() - started
    out, err = out_file.read_text(), err_file.read_text()
    if process.returncode != 0:
        raise RuntimeError(f"import exited {process.returncode}:\n{out}\n{err[-2000:]}")
    imported = int(out.split("imported: ", 1)[1].split(",", 1)[0])
    return seconds, peak_kb / 1024, max(tree_peak_kb, peak_kb) / 1024, imported


def sampled_calls(cache: Path, files: int, seed: int) -> dict:
    """The calls of up to ``files`` cache files picked at random, with the answer the store
    holds for each: the first of calls that meet under one key, never a failure."""
    paths = sorted(cache.glob("*/*/*.json"))
    made = {}
    for path in random.Random(seed).sample(paths, min(files, len(paths))):
        try:
            document = json.loads(path.read_bytes())
        except ValueError:
            continue  # the generator's truncated downloads
        category, tool = path.parent.parent.name, path.parent.name.rsplit("_for_", 1)[0]
        seen, entries = set(), []
        for literal, value in document.items():
            try:
                args = ast.literal_eval(literal)
            except (ValueError, SyntaxError):
                continue
            if not isinstance(args, dict):
                continue
            canonical = tuple(sorted((name, str(v)) for name, v in args.items()))
            if canonical in seen:
                continue
            seen.add(canonical)
            if isinstance(value, dict) and value.get("error") == "" and isinstance(value.get("response"), str) \
                    and value not in FAILURES:
                entries.append((args, value["response"]))
        if entries:
            made[(category, tool, path.stem, None)] = entries
    return made


def measure(entries: int, hits: int, workdir: Path) -> Row:
    cache, store = workdir / f"cache-{entries}", workdir / f"store-{entries}"
    started = time.perf_counter()
    expected = generate(cache, entries)
    print(f"{entries:,}: generated {expected.entries:,} entries in {expected.files:,} files "
          f"({expected.bytes / 2**20:,.0f} MiB) in {time.perf_counter() - started:.0f} s", flush=True)
    import_s, import_peak, tree_peak, imported = run_import(cache, store)
    disk = sum(f.stat().st_size for f in store.iterdir() if f.is_file()) / 2**20
    plan = workdir / "plan.json"
    plan.write_text(json.dumps(virtual_plan(sampled_calls(cache, SAMPLED_FILES, seed=entries), hits, seed=entries)))
    gc.collect()  # the plan is on disk: its gigabyte need not stay in this process
    shutil.rmtree(cache, ignore_errors=True)  # the disk is for the store now
    server = ServeProcess(store, "--mode", "replay", "--simulator", "off", confdir=workdir / "certs")
    try:
        started = time.perf_counter()
        server.start(600)
        cold_start = time.perf_counter() - started
        pid = server.process.pid
        ready_kb = status_kb(pid, "VmRSS")
        cpu = cpu_seconds(pid)
        result = random_hits(server.port, plan, hits)
        cpu_ms = (cpu_seconds(pid) - cpu) / hits * 1000
        after_kb, peak_kb = status_kb(pid, "VmRSS"), status_kb(pid, "VmHWM")
    finally:
        server.stop()
    shutil.rmtree(store, ignore_errors=True)  # the next size needs the disk
    return Row(entries, imported, import_s, import_peak, tree_peak, disk, cold_start, ready_kb / 1024,
               result["rps"], result["p50_ms"], result["p99_ms"], cpu_ms, after_kb / 1024, peak_kb / 1024,
               result["failures"], result["samples"])


def report(rows: list[Row], hits: int) -> None:
    print(f"\n{'entries':>11} {'import s':>8} {'entries/s':>9} {'peak RSS':>9} {'+workers':>8} {'disk MiB':>8} "
          f"{'B/entry':>7} {'ready in':>8} {'RSS ready':>9} {'req/s':>6} {'p50 ms':>6} {'p99 ms':>6} {'CPU/hit':>7} "
          f"{'RSS after':>9} {'peak':>6}")
    for r in rows:
        print(f"{r.entries:>11,} {r.import_s:>8.1f} {r.import_rate:>9,.0f} {r.import_peak_mb:>7.0f}MB "
              f"{r.tree_peak_mb:>6.0f}MB {r.disk_mib:>8,.0f} {r.bytes_per_entry:>7.0f} {r.cold_start_s:>7.2f}s "
              f"{r.ready_mb:>7.0f}MB {r.rps:>6.0f} {r.p50_ms:>6.2f} {r.p99_ms:>6.2f} {r.cpu_ms:>5.3f}ms "
              f"{r.after_mb:>7.0f}MB {r.peak_mb:>4.0f}MB")
    base = rows[0]
    for r in rows[1:]:
        growth = r.entries / base.entries
        grew = {"import seconds": r.import_s / base.import_s, "import peak RSS": r.import_peak_mb / base.import_peak_mb,
                "disk": r.disk_mib / base.disk_mib * base.imported / r.imported * growth,  # per entry imported
                "cold start": r.cold_start_s / base.cold_start_s, "RSS after the hits": r.after_mb / base.after_mb}
        worse = [name for name, ratio in grew.items() if ratio > growth * 1.05]  # 5 %: this machine's noise
        print(f"{r.entries:,} vs {base.entries:,} entries ({growth:.0f}x), {hits:,} random hits each: "
              f"entries/s {r.import_rate / base.import_rate:.2f}x, import peak RSS {grew['import peak RSS']:.2f}x, "
              f"disk per entry {r.bytes_per_entry / base.bytes_per_entry:.2f}x, req/s {r.rps / base.rps:.2f}x, "
              f"p99 {r.p99_ms / base.p99_ms:.2f}x, CPU per hit {r.cpu_ms / base.cpu_ms:.2f}x, "
              f"RSS after the hits {grew['RSS after the hits']:.2f}x, cold start {grew['cold start']:.2f}x "
              f"({'WORSE THAN LINEAR: ' + ', '.join(worse) if worse else 'no worse than linear'})")


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="sizes 2,000 and 20,000, 2,000 hits each (a smoke run)")
    p.add_argument("--sizes", default=None, help="cache sizes, comma-separated [100000,1000000,10000000]")
    p.add_argument("--hits", type=int, default=None, help="random hits per size [1,000,000]")
    args = p.parse_args(argv)
    sizes = ([int(s) for s in args.sizes.split(",")] if args.sizes
             else [2_000, 20_000] if args.quick else list(DEFAULT_SIZES))
    hits = args.hits or (2_000 if args.quick else 1_000_000)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}, "
          f"store cache {os.environ.get('STBPROXY_STORE_CACHE_MB') or 'default'} MiB", flush=True)
    workdir = Path(tempfile.mkdtemp(prefix="stb-bench-scale-"))
    rows: list[Row] = []
    try:
        for entries in sorted(sizes):
            row = measure(entries, hits, workdir)
            rows.append(row)
            print(f"{entries:,}: imported {row.imported:,} in {row.import_s:.1f} s ({row.import_rate:,.0f}/s, "
                  f"peak RSS {row.import_peak_mb:.0f} MB), {row.disk_mib:,.0f} MiB; ready in {row.cold_start_s:.2f} s; "
                  f"{hits:,} hits at {row.rps:.0f} req/s, p99 {row.p99_ms:.2f} ms, {row.cpu_ms:.3f} ms CPU each; "
                  f"RSS {row.ready_mb:.0f} -> {row.after_mb:.0f} MB", flush=True)
            if row.failures:
                print(f"{entries:,}: {row.failures} requests FAILED, for example: {row.samples}", flush=True)
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
