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

import contextlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.bench import (
    hitstores,  # noqa: E402
    paired,  # noqa: E402
)
from scripts.bench.hitbench import stbproxy_subject  # noqa: E402
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
    return paired.compare(args, subject, plans, ("openapi", "OpenAPI operation"), ("plain", "plain HTTP"), TARGET,
                          "HTTP 200, X-Stb-Source: cache, the recorded answer")


def main(argv: list[str] | None = None) -> int:
    args = paired.options(__doc__.split("\n\n", 1)[0], argv)
    return run_in_workdir("bench_openapi", "stbproxy-bench-openapi-", lambda workdir, stack: run(args, workdir, stack))


if __name__ == "__main__":
    sys.exit(main())
