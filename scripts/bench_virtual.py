#!/usr/bin/env python3
"""/virtual hit benchmark: does a hit's cost grow with the entries stored for its API?

In one run, on 127.0.0.1 only, in a temporary folder that is removed afterwards:

1. generate two StableToolBench caches of the original layout for the same handful of
   APIs, one with 50 and one with 5,000 entries per API (the first 50 are the same),
   and import each with `stbproxy import stb-cache` into its own store;
2. start `stbproxy serve --mode replay --port 0` on each store as a real process;
3. from a separate load-generator process (this file, run as `_load`: asyncio, raw
   HTTP/1.1, keep-alive connections) send `POST /virtual` at concurrency 32, with the
   body ToolBench's client sends (category, tool_name, api_name, tool_input, strip,
   toolbench_key) and tool_input holding stored arguments in another key order than
   the cache's literal; runs alternate between the stores and repeat 3 times;
4. check every answer (HTTP 200, X-Stb-Source: cache, a JSON object with error "" and
   the cached response) and print the median throughput, p50/p99 latency and server
   CPU per hit for both stores, and the throughput ratio 5,000 / 50 (target >= 0.9).

Exit status 1 means a request failed or an import was incomplete; missing the target
is reported but is not an error.

Usage: python scripts/bench_virtual.py [--quick] [--requests N] [--concurrency C] ...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from benchkit import child_env, cpu_seconds, stbproxy_command

from stbproxy.serve_process import ServeProcess

HOST = "127.0.0.1"
SCRIPT = Path(__file__).resolve()
START_TIMEOUT = 60.0  # mitmproxy's imports are slow on a busy machine
TARGET_RATIO = 0.9
TOOLBENCH_KEY = "bench-toolbench-key"  # a secret the server must accept and never store

# (category, tool, api, argument names): a handful of APIs over three tools.
APIS = [
    ("Data", "realty_listings", "get_listing", ("listing_id", "page", "lang")),
    ("Data", "realty_listings", "search_listings", ("query", "page", "limit")),
    ("Sports", "live_scores", "match_details", ("match_id", "include_events")),
    ("Sports", "live_scores", "league_table", ("league_id", "season", "page")),
    ("Travel", "flight_status", "flight_by_number", ("flight_number", "date")),
    ("Travel", "flight_status", "airport_departures", ("airport", "date", "limit")),
]
WORDS = ["sunny", "apartment", "near", "park", "two", "bedrooms", "café", "harbour", "quiet",
         "street", "modern", "kitchen", "view", "river", "downtown", "station", "garden"]


# -- the caches ---------------------------------------------------------------------------


def call_args(names: tuple[str, ...], j: int, rng: random.Random) -> dict:
    """The j-th stored call of an API: the first argument makes it unique."""
    args: dict = {}
    for n, name in enumerate(names):
        if n == 0:
            args[name] = str(1_000_000 + j) if name != "page" else j + 1
        elif name in ("page", "limit"):
            args[name] = rng.randrange(1, 50)
        elif name == "include_events":
            args[name] = rng.random() < 0.5
        elif name == "date":
            args[name] = f"2024-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
        elif name == "lang":
            args[name] = rng.choice(["en", "fr", "de"])
        else:
            args[name] = " ".join(rng.choices(WORDS, k=2))
    return args


def answer_text(rng: random.Random) -> str:
    """A JSON text of about 300-800 characters, free of words check_result rejects."""
    target = rng.randrange(300, 800)
    items: list[dict] = []
    text = ""
    while len(text) < target:
        items.append({"name": " ".join(rng.choices(WORDS, k=3)), "score": rng.randrange(1, 99),
                      "summary": " ".join(rng.choices(WORDS, k=rng.randrange(4, 10)))})
        text = json.dumps({"status": "success", "results": items}, ensure_ascii=False)
    return text


def calls(api: tuple, count: int) -> list[tuple[dict, str]]:
    """The first ``count`` calls of an API with their answers (the same in every cache)."""
    rng = random.Random("/".join(api[:3]))
    return [(call_args(api[3], j, rng), answer_text(rng)) for j in range(count)]


def write_cache(root: Path, per_api: int) -> dict[tuple, list[tuple[dict, str]]]:
    made = {}
    for api in APIS:
        category, tool, name, _ = api
        entries = calls(api, per_api)
        folder = root / category / f"{tool}_for_{category}"
        folder.mkdir(parents=True, exist_ok=True)
        document = {str(args): {"error": "", "response": text} for args, text in entries}
        (folder / f"{name}.json").write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
        made[api] = entries
    return made


def request_plan(made: dict, count: int, seed: int) -> list[list[str]]:
    """``count`` [body, expected response] pairs over every stored call, in random order."""
    rng = random.Random(seed)
    everything = [(api, args, text) for api, entries in made.items() for args, text in entries]
    plan = []
    for api, args, text in (rng.choice(everything) for _ in range(count)):
        category, tool, name, _ = api
        reordered = dict(reversed(list(args.items())))  # not the cache literal's order
        # Field for field what ToolBench's client posts (requests' json=, default separators).
        body = json.dumps({"category": category, "tool_name": tool, "api_name": name,
                           "tool_input": json.dumps(reordered), "strip": "truncate",
                           "toolbench_key": TOOLBENCH_KEY})
        plan.append([body, text])
    return plan


# -- processes ----------------------------------------------------------------------------


def import_cache(cache: Path, store: Path) -> str:
    done = subprocess.run([*stbproxy_command(), "import", "stb-cache", str(cache), "--store", str(store)],
                          capture_output=True, text=True, env=child_env(), timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"import exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def replay_server(store: Path) -> ServeProcess:
    """`stbproxy serve --mode replay` on a free port, launched (call wait_ready next)."""
    return ServeProcess(store, "--mode", "replay", "--simulator", "off").launch()

# -- the load generator (its own process) -------------------------------------------------


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    if "content-length" in headers:
        return status, headers, await reader.readexactly(int(headers["content-length"]))
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = bytearray()
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            body += await reader.readexactly(size)
            await reader.readexactly(2)
        await reader.readuntil(b"\r\n")  # no trailers expected
        return status, headers, bytes(body)
    raise ValueError("a response without Content-Length or chunked encoding")


def problem_with(status: int, headers: dict[str, str], body: bytes, expected: str) -> str | None:
    if status != 200:
        return f"HTTP {status}: {body[:200]!r}"
    if headers.get("x-stb-source") != "cache":
        return f"X-Stb-Source {headers.get('x-stb-source')!r}, not a hit: {body[:200]!r}"
    try:
        document = json.loads(body)
    except ValueError:
        return f"not JSON: {body[:200]!r}"
    if not isinstance(document, dict) or document.get("error") != "":
        return f"not an answer object with error '': {body[:200]!r}"
    if document.get("response") != expected:
        return f"another response than the cached one: {body[:200]!r}"
    return None


async def load(port: int, plan: list[list[str]], requests: int, warmup: int, concurrency: int) -> dict:
    # ToolBench's client uses requests: these are the headers it sends besides the body's.
    prefix = (f"POST /virtual HTTP/1.1\r\nHost: {HOST}:{port}\r\nUser-Agent: python-requests/2.31.0\r\n"
              f"Accept-Encoding: gzip, deflate\r\nAccept: */*\r\nConnection: keep-alive\r\n"
              f"toolbench_key: {TOOLBENCH_KEY}\r\nContent-Type: application/json\r\n")
    wire = [(f"{prefix}Content-Length: {len(body.encode())}\r\n\r\n{body}".encode(), expected)
            for body, expected in plan]
    latencies: list[float] = []
    errors: list[str] = []
    next_index = 0

    async def worker(total: int, measure: bool) -> None:
        nonlocal next_index
        reader = writer = None
        while next_index < total:
            index = next_index
            next_index += 1
            data, expected = wire[index % len(wire)]
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(HOST, port)
                started = time.perf_counter()
                writer.write(data)
                status, headers, body = await read_response(reader)
                elapsed = time.perf_counter() - started
                if headers.get("connection", "").lower() == "close":
                    writer.close()
                    writer = None
            except (OSError, ValueError, asyncio.IncompleteReadError) as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                if writer is not None:
                    writer.close()
                writer = None
                continue
            problem = problem_with(status, headers, body, expected)
            if problem:
                errors.append(problem)
            elif measure:
                latencies.append(elapsed)
        if writer is not None:
            writer.close()

    await asyncio.gather(*(worker(warmup, False) for _ in range(concurrency)))
    next_index = 0
    started = time.perf_counter()
    await asyncio.gather(*(worker(requests, True) for _ in range(concurrency)))
    seconds = time.perf_counter() - started
    latencies.sort()

    def quantile(q: float) -> float:  # in milliseconds
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] * 1000 if latencies else 0.0

    return {"ok": len(latencies), "failed": len(errors), "errors": errors[:5], "seconds": seconds,
            "rps": len(latencies) / seconds if seconds else 0.0, "p50_ms": quantile(0.50), "p99_ms": quantile(0.99)}


def load_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench_virtual.py _load")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--plan", type=Path, required=True)
    parser.add_argument("--requests", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=0)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    plan = json.loads(args.plan.read_text(encoding="utf-8"))
    result = asyncio.run(load(args.port, plan, args.requests, args.warmup, args.concurrency))
    print(json.dumps(result))
    return 0


def run_load(server: ServeProcess, plan_file: Path, requests: int, warmup: int, concurrency: int) -> dict:
    cpu = cpu_seconds(server.process.pid)
    done = subprocess.run([sys.executable, str(SCRIPT), "_load", "--port", str(server.port), "--plan",
                           str(plan_file), "--requests", str(requests), "--warmup", str(warmup),
                           "--concurrency", str(concurrency)],
                          capture_output=True, text=True, env=child_env(), timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the load generator failed:\n{done.stdout}\n{done.stderr}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    after = cpu_seconds(server.process.pid)
    # Warm-up requests are served too; count them in the CPU a hit costs.
    served = requests + warmup
    spent = after - cpu
    result["cpu_us"] = None if math.isnan(spent) else spent / served * 1e6
    return result


# -- the run ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two APIs, few requests, one repeat: seconds")
    parser.add_argument("--requests", type=int, default=None, help="measured requests per run [6000; quick 400]")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=None, help="runs per store (the median counts) [3; quick 1]")
    parser.add_argument("--small", type=int, default=50, help="entries per API in the small store")
    parser.add_argument("--large", type=int, default=5000, help="entries per API in the large store")
    args = parser.parse_args(argv)
    global APIS
    if args.quick:
        APIS = APIS[:2]
    requests = args.requests or (400 if args.quick else 6000)
    repeats = args.repeats or (1 if args.quick else 3)
    warmup = max(args.concurrency * 4, requests // 10)

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    workdir = Path(tempfile.mkdtemp(prefix="stb-bench-virtual-"))
    servers: dict[int, ServeProcess] = {}
    failures: list[str] = []
    try:
        plans: dict[int, Path] = {}
        for per_api in (args.small, args.large):
            made = write_cache(workdir / f"cache-{per_api}", per_api)
            summary = import_cache(workdir / f"cache-{per_api}", workdir / f"store-{per_api}")
            print(f"store with {per_api} entries per API ({len(APIS)} APIs): "
                  + " / ".join(line.strip() for line in summary.splitlines()))
            if f"imported: {per_api * len(APIS)}," not in summary:
                failures.append(f"the {per_api}-per-API import did not import every entry")
            plans[per_api] = workdir / f"plan-{per_api}.json"
            plans[per_api].write_text(json.dumps(request_plan(made, 4096, per_api)), encoding="utf-8")
        for per_api in plans:  # start both, then wait: their start-ups overlap
            servers[per_api] = replay_server(workdir / f"store-{per_api}")
        for server in servers.values():
            server.wait_ready(START_TIMEOUT)

        results: dict[int, list[dict]] = {per_api: [] for per_api in plans}
        for n in range(repeats):
            for per_api in plans:  # alternate, so drift in machine load hits both alike
                result = run_load(servers[per_api], plans[per_api], requests, warmup, args.concurrency)
                results[per_api].append(result)
                cpu = f", server CPU {result['cpu_us']:.0f} us/hit" if result["cpu_us"] is not None else ""
                print(f"run {n + 1}/{repeats}, {per_api:>5} per API: {result['rps']:7.0f} req/s, "
                      f"p50 {result['p50_ms']:.1f} ms, p99 {result['p99_ms']:.1f} ms{cpu}, "
                      f"{result['ok']} ok, {result['failed']} failed")
                failures += [f"{per_api} per API: {error}" for error in result["errors"]]
                if result["failed"] and not result["errors"]:
                    failures.append(f"{per_api} per API: {result['failed']} requests failed")

        print(f"\nPOST /virtual hits, concurrency {args.concurrency}, keep-alive, {requests} requests per run, "
              f"median of {repeats}:")
        medians = {}
        for per_api, runs in results.items():
            medians[per_api] = statistics.median(r["rps"] for r in runs)
            cpus = [r["cpu_us"] for r in runs if r["cpu_us"] is not None]
            cpu = f", server CPU {statistics.median(cpus):.0f} us/hit" if cpus else ""
            print(f"  {per_api:>5} entries per API: {medians[per_api]:7.0f} req/s, "
                  f"p50 {statistics.median(r['p50_ms'] for r in runs):.1f} ms, "
                  f"p99 {statistics.median(r['p99_ms'] for r in runs):.1f} ms{cpu}")
        failed = sum(r["failed"] for runs in results.values() for r in runs)
        print(f"requests failed: {failed}")
        ratio = medians[args.large] / medians[args.small] if medians[args.small] else 0.0
        print(f"throughput ratio {args.large} / {args.small}: {ratio:.2f} "
              f"(target >= {TARGET_RATIO}: {'met' if ratio >= TARGET_RATIO else 'MISSED'})")
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        failures.append(str(exc))
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    if failures:
        print("\nFAILED:\n" + "\n".join(f"  {f}" for f in failures[:20]))
        return 1
    print("all answers checked: HTTP 200, X-Stb-Source: cache, error '', the cached response")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["_load"]:
        sys.exit(load_main(sys.argv[2:]))
    sys.exit(main())
