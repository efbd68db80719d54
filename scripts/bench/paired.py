"""A paired hit benchmark (bench_mcp.py, bench_openapi.py): two kinds of request to one
``stbproxy serve``, interleaved and repeated, and the ratio of the server's CPU per hit of
the one to the other's (the median of the repeats' ratios), against a target."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from scripts.bench.hitbench import Matrix, interleaved, verdict


def options(description: str, argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="few requests, one repeat: seconds")
    parser.add_argument("--requests", type=int, default=None, help="measured requests per run [6000; quick 300]")
    parser.add_argument("--requests1", type=int, default=None, help="at concurrency 1 [1500; quick 100]")
    parser.add_argument("--concurrency", default=None, help="comma-separated [1,16; quick 16]")
    parser.add_argument("--repeats", type=int, default=None, help="runs per path [3; quick 1]")
    parser.add_argument("--distinct", type=int, default=200, help="distinct calls per path [200]")
    args = parser.parse_args(argv)
    quick = args.quick
    args.requests = args.requests or (300 if quick else 6000)
    args.requests1 = args.requests1 or (100 if quick else 1500)
    args.concurrency = [int(c) for c in (args.concurrency or ("16" if quick else "1,16")).split(",")]
    args.repeats = args.repeats or (1 if quick else 3)
    return args


def compare(args, subject, plans: dict[str, Path], measured: tuple[str, str], baseline: tuple[str, str],
            target: float, checked: str) -> int:
    """Run both plans (``measured`` and ``baseline``: (path, label)) and print the ratio;
    1 when an answer failed its check (``checked`` says what every answer was checked for)."""
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
          f"{args.requests} requests per run ({args.requests1} at concurrency 1), {args.repeats} repeat(s); "
          f"{args.distinct} distinct calls per path")
    matrix = Matrix()
    for concurrency, requests, warmup in interleaved(args, warmup_per_connection=4):
        for path in (baseline[0], measured[0]):
            matrix.run(path, subject, plans[path], concurrency, requests, warmup)
    top = max(args.concurrency)
    base = matrix.get(baseline[0], "stbproxy", top, "cpu_ms")
    mine = matrix.get(measured[0], "stbproxy", top, "cpu_ms")
    ratios = [m["cpu_ms"] / b["cpu_ms"] for m, b in zip(matrix.runs[(measured[0], "stbproxy", top)],
                                                         matrix.runs[(baseline[0], "stbproxy", top)])]
    ratio = sorted(ratios)[len(ratios) // 2]
    print(f"\nCPU per hit at concurrency {top}: {measured[1]} {mine:.3f} ms, {baseline[1]} {base:.3f} ms: {ratio:.2f} "
          f"(median of the repeats' ratios, {min(ratios):.2f}-{max(ratios):.2f}; target <= {target}: "
          f"{verdict(ratio <= target)})")
    if matrix.failures:
        print("\nFAILED:\n" + "\n".join(f"  {f}" for f in matrix.failures[:20]))
        return 1
    print(f"all answers checked: {checked}")
    return 0
