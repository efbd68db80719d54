#!/usr/bin/env python3
"""OpenAPI replay-hit benchmark: a call to an operation of an imported OpenAPI document
(keyed by operation and named arguments), against the same call to a host no document
describes (keyed by its URL), on the same proxy, in the same run.

In one run, on 127.0.0.1 only, in a temporary folder that is removed afterwards:

1. import a small OpenAPI document for one host (``stbproxy import openapi``), then a
   cassette of the same GET requests to that host and to another (``stbproxy import
   cassette``: each keyed as the proxy keys it);
2. start ``stbproxy serve --mode replay`` on the store (one worker, as users start it);
3. from the load generator (scripts/bench/hitload.py, its own process, raw HTTP/1.1 on
   keep-alive connections) send the requests to both hosts, interleaved and repeated;
4. check every answer (HTTP 200, ``X-Stb-Source: cache``, the recorded body) and print the
   server's CPU per hit of each path and their ratio.

Baseline (measured in the same run, interleaved, on the same process): the plain HTTP hit.
Target: an OpenAPI operation's hit costs at most 1.5x the CPU of a plain HTTP hit.

Usage: python scripts/bench/bench_openapi.py [--quick] [--requests N] [--repeats R] [--concurrency 1,16]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.bench import hitstores  # noqa: E402
from scripts.bench.hitbench import Matrix, interleaved, stbproxy_subject, verdict  # noqa: E402
from scripts.common import run_in_workdir  # noqa: E402

TARGET = 1.5  # OpenAPI hit CPU over plain HTTP hit CPU
DESCRIBED = "http://tools.openapi.bench.test"  # never resolved: replay answers from the store
PLAIN = "http://tools.plain.bench.test"


def spec() -> dict:
    """The document of DESCRIBED: hitstores.http_targets' search, with its three parameters."""
    item = {"type": "object", "required": ["rank", "name"],
            "properties": {"rank": {"type": "integer"}, "name": {"type": "string"}, "score": {"type": "number"}}}
    return {"openapi": "3.1.0", "info": {"title": "Bench tools", "version": "1"},
            "servers": [{"url": f"{DESCRIBED}/v1"}],
            "paths": {"/tools/{tool}/search": {"get": {
                "operationId": "search",
                "parameters": [{"name": "tool", "in": "path", "required": True, "schema": {"type": "string"}},
                               {"name": "q", "in": "query", "schema": {"type": "string"}},
                               {"name": "page", "in": "query", "schema": {"type": "integer"}},
                               {"name": "lang", "in": "query", "schema": {"type": "string"}}],
                "responses": {"200": {"description": "Results.", "content": {"application/json": {"schema": {
                    "type": "object", "required": ["target", "items"],
                    "properties": {"target": {"type": "string"}, "id": {"type": "integer"},
                                   "items": {"type": "array", "items": item}, "note": {"type": "string"}}}}}}}}}}}


def run(args, workdir: Path, stack: contextlib.ExitStack) -> int:
    store = workdir / "store"
    (workdir / "spec.json").write_text(json.dumps(spec()))
    print(hitstores.run_stbproxy("import", "openapi", str(workdir / "spec.json"), "--store", str(store))
          .strip().splitlines()[0])
    targets = hitstores.http_targets(args.distinct)
    hitstores.fill_http_store(store, workdir, [DESCRIBED, PLAIN], targets)
    report = json.loads(hitstores.run_stbproxy("check", "--store", str(store), "--json"))
    stored = report["operations"][0]["stored"]
    if stored != len(targets):  # else the OpenAPI path would measure plain keys
        print(f"FAILED: {stored} answers stored under the operation's keys, not {len(targets)}")
        return 1
    print(f"{stored} answers stored under the operation's keys, {len(targets)} under URL keys")
    plans = {"plain": workdir / "plain.json", "openapi": workdir / "openapi.json"}
    plans["plain"].write_text(json.dumps(hitstores.http_plan("plain", PLAIN, targets)))
    plans["openapi"].write_text(json.dumps(hitstores.http_plan("plain", DESCRIBED, targets)))

    subject = stbproxy_subject("stbproxy", store, confdir=workdir / "certs")
    stack.callback(subject.stop)
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
          f"{args.requests} requests per run ({args.requests1} at concurrency 1), {args.repeats} repeat(s); "
          f"{args.distinct} distinct calls per path")
    matrix = Matrix()
    for concurrency, requests, warmup in interleaved(args, warmup_per_connection=4):
        for path in ("plain", "openapi"):
            matrix.run(path, subject, plans[path], concurrency, requests, warmup)
    top = max(args.concurrency)
    plain = matrix.get("plain", "stbproxy", top, "cpu_ms")
    described = matrix.get("openapi", "stbproxy", top, "cpu_ms")
    ratios = [o["cpu_ms"] / p["cpu_ms"] for o, p in zip(matrix.runs[("openapi", "stbproxy", top)],
                                                        matrix.runs[("plain", "stbproxy", top)])]
    ratio = sorted(ratios)[len(ratios) // 2]
    print(f"\nCPU per hit at concurrency {top}: OpenAPI operation {described:.3f} ms, plain HTTP {plain:.3f} ms: "
          f"{ratio:.2f} (median of the repeats' ratios, {min(ratios):.2f}-{max(ratios):.2f}; target <= {TARGET}: "
          f"{verdict(ratio <= TARGET)})")
    if matrix.failures:
        print("\nFAILED:\n" + "\n".join(f"  {f}" for f in matrix.failures[:20]))
        return 1
    print("all answers checked: HTTP 200, X-Stb-Source: cache, the recorded answer")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
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
    return run_in_workdir("bench_openapi", "stbproxy-bench-openapi-", lambda workdir, stack: run(args, workdir, stack))


if __name__ == "__main__":
    sys.exit(main())
