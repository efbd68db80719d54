#!/usr/bin/env python3
"""MCP replay-hit benchmark: a ``tools/call`` answered from the store through the proxy,
against a StableToolBench ``POST /virtual`` hit on the same proxy, in the same run.

In one run, on 127.0.0.1 only, in a temporary folder that is removed afterwards:

1. fill one store with StableToolBench cache entries (``stbproxy import stb-cache``) and
   with recorded MCP ``tools/call`` answers of a server at an http:// URL, as JSON and as
   server-sent events (``stbproxy import cassette``: the proxy's own MCP keys);
2. start ``stbproxy serve --mode replay`` on it (one worker, as users start it);
3. from the load generator (scripts/bench/hitload.py, its own process, raw HTTP/1.1 on
   keep-alive connections) send the MCP SDK client's requests (absolute form through the
   proxy, its headers, JSON-RPC ids other than the recorded ones, so that every answer has
   its id put back) and ToolBench's ``POST /virtual`` calls, interleaved and repeated;
4. check every answer (HTTP 200, ``X-Stb-Source: cache``, the recorded body with the
   request's own id) and print the server's CPU per hit of each path and their ratio.

Baseline (measured in the same run, interleaved, on the same process): the /virtual hit.
Target: an MCP tools/call hit costs at most 2x the CPU of a /virtual hit.

Usage: python scripts/bench/bench_mcp.py [--quick] [--requests N] [--repeats R] [--concurrency 1,16]
"""

from __future__ import annotations

import contextlib
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.bench import (
    hitstores,  # noqa: E402
    paired,  # noqa: E402
)
from scripts.bench.hitbench import stbproxy_subject  # noqa: E402
from scripts.common import run_in_workdir  # noqa: E402

TARGET = 2.0  # MCP tools/call hit CPU over /virtual hit CPU
SERVER_PORT = 18000  # nothing listens there: replay never calls out
TOOLS = ["search_listings", "get_listing", "match_details", "league_table", "flight_status", "departures"]


def mcp_exchanges(distinct: int, sse_every: int = 3):
    """Recorded tools/call exchanges: the SDK client's request, the server's answer (every
    ``sse_every``-th as server-sent events, as FastMCP answers by default)."""
    from stbproxy.models import Exchange, Request, Response, Source

    rng = random.Random(11)
    out = []
    for i in range(distinct):
        tool = TOOLS[i % len(TOOLS)]
        arguments = {"query": f"item {i}", "page": i % 5, "lang": "en"}
        body = json.dumps({"method": "tools/call", "params": {"name": tool, "arguments": arguments},
                           "jsonrpc": "2.0", "id": 2}, separators=(",", ":"))
        structured = {"items": [{"rank": r, "name": f"{tool}-{i}-{r}", "score": round(rng.random(), 3)}
                                for r in range(6)], "total": 6}
        result = {"content": [{"type": "text", "text": json.dumps(structured, indent=2)}],
                  "structuredContent": structured, "isError": False}
        answer = json.dumps({"jsonrpc": "2.0", "id": 2, "result": result}, separators=(",", ":"))
        if i % sse_every == 0:
            headers, payload = (("Content-Type", "text/event-stream"),), f"event: message\r\ndata: {answer}\r\n\r\n"
        else:
            headers, payload = (("Content-Type", "application/json"),), answer
        request = Request("POST", f"http://127.0.0.1:{SERVER_PORT}/mcp", (
            ("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json"),
            ("mcp-protocol-version", "2025-11-25")), body.encode())
        out.append((Exchange(key="", request=request, response=Response(200, headers, payload.encode(), "OK"),
                             source=Source.UPSTREAM, stored_at=0.0), body, payload))
    return out


def mcp_plan(exchanges, count: int) -> dict:
    """``count`` requests as the SDK client sends them through HTTP_PROXY, each with an id of
    its own; the answer expected is the recorded one with that id."""
    rng = random.Random(5)
    items = []
    for n in range(count):
        _exchange, body, payload = rng.choice(exchanges)
        message_id = n + 10
        sent = body.replace('"id":2}', f'"id":{message_id}}}')
        expected = payload.replace('"jsonrpc":"2.0","id":2,', f'"jsonrpc":"2.0","id":{message_id},', 1)
        head = (f"POST http://127.0.0.1:{SERVER_PORT}/mcp HTTP/1.1\r\nHost: 127.0.0.1:{SERVER_PORT}\r\n"
                "Accept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\nUser-Agent: python-httpx/0.28.1\r\n"
                "accept: application/json, text/event-stream\r\ncontent-type: application/json\r\n"
                f"mcp-session-id: stbproxy-bench\r\nmcp-protocol-version: 2025-11-25\r\n"
                f"Content-Length: {len(sent)}\r\n\r\n")
        items.append([head + sent, expected])
    return {"kind": "plain", "expect": hitstores.HIT, "items": items}


def run(args, workdir: Path, stack: contextlib.ExitStack) -> int:
    from stbproxy.cassettes import vcr_format

    store = workdir / "store"
    apis = hitstores.APIS[:2] if args.quick else hitstores.APIS
    made = hitstores.write_cache(workdir / "cache", 50, apis)
    print(hitstores.import_cache(workdir / "cache", store).strip().splitlines()[-1])
    exchanges = mcp_exchanges(args.distinct)
    cassette = workdir / "mcp.yaml"
    vcr_format.write_cassette(cassette, [e for e, _, _ in exchanges], "yaml")
    print(hitstores.run_stbproxy("import", "cassette", str(cassette), "--store", str(store)).strip().splitlines()[-1])
    plans = {"virtual": workdir / "virtual.json", "mcp": workdir / "mcp.json"}
    plans["virtual"].write_text(json.dumps(hitstores.virtual_plan(made, 4096, 1, distinct=args.distinct)))
    plans["mcp"].write_text(json.dumps(mcp_plan(exchanges, 4096)))

    subject = stbproxy_subject("stbproxy", store, confdir=workdir / "certs")
    stack.callback(subject.stop)
    return paired.compare(args, subject, plans, ("mcp", "MCP tools/call"), ("virtual", "/virtual"), TARGET,
                          "HTTP 200, X-Stb-Source: cache, the recorded answer with the request's own id")


def main(argv: list[str] | None = None) -> int:
    args = paired.options(__doc__.split("\n\n", 1)[0], argv)
    return run_in_workdir("bench_mcp", "stbproxy-bench-mcp-", lambda workdir, stack: run(args, workdir, stack))


if __name__ == "__main__":
    sys.exit(main())
