#!/usr/bin/env python3
"""/virtual hit benchmark: stbproxy's StableToolBench endpoint against mitmdump answering
from a dict, with one and two workers, and whether a hit's cost grows with the entries
stored for its API.

In one run, on 127.0.0.1 only, in a temporary folder that is removed afterwards:

1. generate two StableToolBench caches of the original layout for the same handful of
   APIs, one with 50 and one with 5,000 entries per API (the first 50 are the same), and
   import each with `stbproxy import stb-cache` into its own store;
2. start `stbproxy serve --mode replay` on the 50-per-API store with one worker and (on
   copies) with `--workers 2` and with `--no-fast-lane` (every request through mitmproxy's
   protocol layers), on the 5,000-per-API store with one worker, and `mitmdump`
   (all its default addons) with a script answering the same calls from a dict (the
   baseline; for context also that script in a lean mitmproxy master);
3. from the load generator (scripts/bench/hitload.py, its own process, an epoll loop, raw
   HTTP/1.1 on keep-alive connections; with ``--client c`` the same in C, hitload.c) send
   `POST /virtual` with the body ToolBench's client sends (category, tool_name, api_name,
   tool_input, strip, toolbench_key; tool_input the arguments of the cache's literal, in its
   order: a rerun's call) at concurrency 1, 16 and 32, subjects interleaved, repeated;
4. check every answer (HTTP 200, X-Stb-Source: cache, {"error": "", "response": the cached
   text}) and print medians: req/s, p50/p99, the server's CPU per hit from its process
   times (every worker counted) against its target and the baseline's, the speed-up of
   `--workers 2`, and the throughput ratio 5,000 / 50 (target >= 0.9; both asked the same
   number of different calls, repeating: the cost of recent hits), and the CPU of hits that
   do not repeat within a run (the cold path: 30,000 different calls, on a server of their
   own, a copy of the 5,000-per-API store, so that they displace no other subject's hits).

Baselines (measured in the same run, interleaved): mitmdump answering from a dict for the
CPU per hit, one worker for ``--workers 2``, the 50-per-API store for the 5,000 one.

Exit status 1 means a request failed or an import was incomplete; a missed target is
reported but is not an error.

Usage: python scripts/bench/bench_virtual.py [--quick] [--requests N] [--repeats R] [--concurrency 1,16,32]
       [--client python|c]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.bench import hitstores  # noqa: E402
from scripts.bench.hitbench import (  # noqa: E402
    BASELINE,
    BEFORE,
    LEAN,
    MITMPROXY_PATH,
    WORKERS,
    Matrix,
    copy_store,
    interleaved,
    lean_subject,
    load_generator,
    mitmdump_subject,
    stbproxy_subject,
    verdict,
    workers_speedup,
)
from scripts.common import free_port  # noqa: E402

TARGET_RATIO = 0.9  # req/s with 5,000 entries per API over 50
CPU_TARGET = 0.45  # ms of server CPU per hit
BASELINE_TARGET = 0.5  # of the baseline's CPU per request
WORKERS_TARGET = 1.7
BEFORE_TARGET = 0.8  # CPU per hit over the release before's (--before), at every concurrency (issue 43)


def run(args, workdir: Path, stack: contextlib.ExitStack) -> int:
    apis = hitstores.APIS[:2] if args.quick else hitstores.APIS
    failures: list[str] = []
    plans: dict[int | str, Path] = {}
    stores: dict[int, Path] = {}
    made_small = None
    for per_api in (args.small, args.large):
        made = hitstores.write_cache(workdir / f"cache-{per_api}", per_api, apis)
        made_small = made_small or made
        stores[per_api] = workdir / f"store-{per_api}"
        summary = hitstores.import_cache(workdir / f"cache-{per_api}", stores[per_api])
        print(f"store with {per_api} entries per API ({len(apis)} APIs): "
              + " / ".join(line.strip() for line in summary.splitlines()))
        if f"imported: {per_api * len(apis)}," not in summary:
            failures.append(f"the {per_api}-per-API import did not import every entry")
        plans[per_api] = workdir / f"plan-{per_api}.json"
        # As many different calls in both stores, so that only the store's size differs.
        plans[per_api].write_text(json.dumps(hitstores.virtual_plan(made, 4096, per_api,
                                                                    distinct=args.small * len(apis))))
        if per_api == args.large:  # and calls that do not repeat within a run: the cold path
            plans["cold"] = workdir / "plan-cold.json"
            plans["cold"].write_text(json.dumps(hitstores.virtual_plan(made, per_api * len(apis), 7)))
    baseline_plan = workdir / "plan-baseline.json"
    small_plan = json.loads(plans[args.small].read_text())
    baseline_plan.write_text(json.dumps(hitstores.baseline_plan(small_plan)))

    confdir = workdir / "certs"
    large_name = f"stbproxy, {args.large} per API"
    subjects = [
        (stbproxy_subject("stbproxy", stores[args.small], confdir=confdir), plans[args.small]),
        (stbproxy_subject(WORKERS, copy_store(stores[args.small], workdir / "store-copy"),
                          "--workers", "2", confdir=confdir), plans[args.small]),
        (stbproxy_subject(large_name, stores[args.large], confdir=confdir), plans[args.large]),
        (stbproxy_subject(MITMPROXY_PATH, copy_store(stores[args.small], workdir / "store-mitmproxy-path"),
                          "--no-fast-lane", confdir=confdir), plans[args.small]),
    ]
    if args.before:
        # imported by the older tree itself: its keys may be made otherwise (exact keys came later)
        before_store = workdir / "store-before"
        hitstores.import_cache(workdir / f"cache-{args.small}", before_store, args.before)
        subjects.append((stbproxy_subject(BEFORE, before_store, confdir=confdir, source=args.before),
                         plans[args.small]))
    # Cold hits on a process of their own: their 30,000 different calls would push the large
    # store's recent hits out of its process, and its next run would measure their return.
    cold = stbproxy_subject(f"{large_name}, cold", copy_store(stores[args.large], workdir / "store-cold"),
                            confdir=confdir)
    subjects.append((cold, plans["cold"]))
    addon = hitstores.dict_addon(workdir, [], [], small_plan)
    subjects.append((mitmdump_subject(addon, free_port(), confdir), baseline_plan))
    subjects.append((lean_subject(addon, free_port(), confdir), baseline_plan))
    for subject, _ in subjects:
        if subject.stop is not None:
            stack.callback(subject.stop)

    matrix = Matrix(load_generator(args.client, workdir))
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
          f"{args.requests} requests per run ({args.requests1} at concurrency 1), {args.repeats} repeat(s); "
          f"the load generator: {matrix.load.name}")
    for concurrency, requests, warmup in interleaved(args, warmup_per_connection=4):
        for subject, plan in subjects:
            matrix.run("virtual", subject, plan, concurrency, requests, warmup)
    failures += matrix.failures

    top = max(args.concurrency)
    matrix.table("virtual", [s.name for s, _ in subjects], args.concurrency)
    print(f"\nPOST /virtual hits, concurrency {top}, keep-alive, median of {args.repeats}:")
    for per_api, name in ((args.small, "stbproxy"), (args.large, large_name)):
        print(f"  {per_api:>5} entries per API: {matrix.get('virtual', name, top, 'rps'):7.0f} req/s, "
              f"p50 {matrix.get('virtual', name, top, 'p50_ms'):.1f} ms, "
              f"p99 {matrix.get('virtual', name, top, 'p99_ms'):.1f} ms, "
              f"server CPU {matrix.get('virtual', name, top, 'cpu_ms') * 1e3:.0f} us/hit")
    failed = sum(r["failures"] for runs in matrix.runs.values() for r in runs)
    print(f"requests failed: {failed}")
    ratio = matrix.get("virtual", large_name, top, "rps") / matrix.get("virtual", "stbproxy", top, "rps")
    print(f"throughput ratio {args.large} / {args.small}: {ratio:.2f} "
          f"(target >= {TARGET_RATIO}: {verdict(ratio >= TARGET_RATIO)})")
    cpu = matrix.get("virtual", "stbproxy", top, "cpu_ms")
    base = matrix.get("virtual", BASELINE, top, "cpu_ms")
    print(f"virtual: CPU per hit at concurrency {top}: {cpu:.3f} ms (target <= {CPU_TARGET} ms: "
          f"{verdict(cpu <= CPU_TARGET)}); {cpu / base:.2f} of mitmdump + dict's {base:.3f} ms "
          f"(target <= {BASELINE_TARGET}: {verdict(cpu / base <= BASELINE_TARGET)})")
    lane = matrix.paired_ratio("virtual", "stbproxy", MITMPROXY_PATH, top, "cpu_ms")
    print(f"virtual: CPU per hit with the fast lane / without (--no-fast-lane) at concurrency {top}: {cpu:.3f} vs "
          f"{matrix.get('virtual', MITMPROXY_PATH, top, 'cpu_ms'):.3f} ms: {lane:.2f} (median of the repeats' ratios)")
    if args.before:
        for concurrency in args.concurrency:
            mine = matrix.get("virtual", "stbproxy", concurrency, "cpu_ms")
            before = matrix.get("virtual", BEFORE, concurrency, "cpu_ms")
            ratio = matrix.paired_ratio("virtual", "stbproxy", BEFORE, concurrency, "cpu_ms")
            print(f"virtual: CPU per hit against {args.before} at concurrency {concurrency}: {mine:.3f} vs "
                  f"{before:.3f} ms: {ratio:.2f} (median of the repeats' ratios; target <= {BEFORE_TARGET}: "
                  f"{verdict(ratio <= BEFORE_TARGET)})")
    print(f"virtual: mitmproxy's own share: the lean master with a dict answers at "
          f"{matrix.get('virtual', LEAN, top, 'cpu_ms'):.3f} ms of CPU per request")
    cold_cpu = matrix.get("virtual", cold.name, top, "cpu_ms")
    print(f"virtual: CPU per hit never asked before in this process (cold: parsed, keyed, read and "
          f"decoded from the store): {cold_cpu:.3f} ms ({cold_cpu / base:.2f} of mitmdump + dict's)")
    if 1 in args.concurrency:
        print(f"virtual: p50 at concurrency 1: {matrix.get('virtual', 'stbproxy', 1, 'p50_ms'):.3f} ms "
              f"(mitmdump + dict: {matrix.get('virtual', BASELINE, 1, 'p50_ms'):.3f} ms)")
    print(workers_speedup(matrix, "virtual", top, WORKERS_TARGET))
    if failures:
        print("\nFAILED:\n" + "\n".join(f"  {f}" for f in failures[:20]))
        return 1
    print("all answers checked: HTTP 200, X-Stb-Source: cache, error '', the cached response")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two APIs, few requests, one repeat: seconds")
    parser.add_argument("--requests", type=int, default=None, help="measured requests per run [6000; quick 400]")
    parser.add_argument("--requests1", type=int, default=None, help="at concurrency 1 [1500; quick 100]")
    parser.add_argument("--concurrency", default=None, help="comma-separated [1,16,32; quick 1,32]")
    parser.add_argument("--repeats", type=int, default=None, help="runs per subject (the median counts) [3; quick 1]")
    parser.add_argument("--before", type=Path, default=None, metavar="DIR",
                        help="also run the stbproxy of this source tree (e.g. an older commit's), for before/after")
    parser.add_argument("--client", choices=("python", "c"), default="python",
                        help="the load generator: hitload.py, or hitload.c built for the run (a C compiler and "
                             "OpenSSL's headers), which costs the shared cores less per request [python]")
    parser.add_argument("--small", type=int, default=50, help="entries per API in the small store")
    parser.add_argument("--large", type=int, default=5000, help="entries per API in the large store")
    args = parser.parse_args(argv)
    args.requests = args.requests or (400 if args.quick else 6000)
    args.requests1 = args.requests1 or (100 if args.quick else 1500)
    args.repeats = args.repeats or (1 if args.quick else 3)
    try:
        given = args.concurrency or ("1,32" if args.quick else "1,16,32")
        args.concurrency = sorted({int(c) for c in given.split(",")})
    except ValueError:
        parser.error("--concurrency takes numbers separated by commas")
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stb-bench-virtual-")))
        try:
            return run(args, workdir, stack)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"\nFAILED:\n  {exc}")
            return 1


if __name__ == "__main__":
    sys.exit(main())
