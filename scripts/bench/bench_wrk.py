#!/usr/bin/env python3
"""Cache hits under wrk, a load generator written in C: what a plain-HTTP hit and a
``POST /virtual`` hit cost the proxy when the client costs little.

The other hit benchmarks drive the server from hitload.py, a Python process that takes a
share of the same two cores. wrk (Debian's package ``wrk``) takes less, so the server's CPU
per hit is measured with less of the client beside it. In one run, on 127.0.0.1 only, in a
temporary folder that is removed afterwards:

1. fill one store with answers for a plain-HTTP API (``stbproxy import cassette``) and for
   StableToolBench's ``/virtual`` (``stbproxy import stb-cache``), as the other hit
   benchmarks do (hitstores.py);
2. start ``stbproxy serve --mode replay`` on it, the same with ``--workers 2`` on a copy,
   ``mitmdump`` with a script answering the same bodies from a dict (the baseline) and,
   with ``--before DIR``, the stbproxy of another source tree on a copy of the store;
3. for each path (``plain``: GET in absolute form, as HTTP_PROXY clients send it;
   ``virtual``: POST /virtual), each concurrency and each repeat, subjects interleaved: wrk
   with one thread on keep-alive connections for ``--seconds`` after a warm-up second;
   req/s, p50/p99 from wrk, the server's CPU per request from its process times;
4. print medians, the plain hit's CPU over the /virtual hit's (paired per repeat: the
   target), stbproxy's CPU over the baseline's, and the requests per second of two workers
   over one's, with wrk's own share of the machine (the workers' scaling on a 2-core
   machine is bounded by what the client leaves them, and wrk leaves more than hitload.py).

Every answer is checked inside wrk (its Lua script): status 200, the subject's source
header (``X-Stb-Source: cache``, or the dict's mark), and a body equal to one of the
planned answers. Exit status 1 means an answer failed a check; 2 that wrk is missing.

Baselines (measured in the same run, interleaved): the /virtual hit on the same proxy for
the plain hit; mitmdump + dict for both; one worker for ``--workers 2``; ``--before DIR`` for
a before/after.

Usage: python scripts/bench/bench_wrk.py [--quick] [--seconds S] [--repeats R] [--concurrency 1,16] [--before DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.bench import hitload, hitstores  # noqa: E402
from scripts.bench.hitbench import (  # noqa: E402
    BASELINE,
    BEFORE,
    WORKERS,
    Subject,
    copy_store,
    mitmdump_subject,
    stbproxy_subject,
    verdict,
)
from scripts.common import HOST, children_cpu, free_port, median, run_in_workdir  # noqa: E402

PATHS = ("plain", "virtual")
PLAIN_OVER_VIRTUAL = 1.10  # a plain hit costs no more than a /virtual one (this machine's noise: about 10 %)
BASELINE_TARGET = 0.5  # of mitmdump + dict's CPU per request
WORKERS_TARGET = 1.7  # --workers 2 over one worker, in requests per second

CHECKS = """
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args) bad = 0; checked = 0; example = "" end
local i = 0
function request()
  i = i % #requests + 1
  return requests[i]
end
function response(status, headers, body)
  checked = checked + 1
  local marked = false
  for name, value in pairs(headers) do
    if string.lower(name) == mark_name and string.lower(value) == mark_value then marked = true end
  end
  if status ~= 200 or not marked or not answers[body] then
    bad = bad + 1
    if example == "" then example = status .. " " .. string.sub(body, 1, 120) end
  end
end
function done(summary, latency, requests)
  local b, c, e = 0, 0, ""
  for _, t in ipairs(threads) do
    b = b + t:get("bad"); c = c + t:get("checked")
    if e == "" then e = t:get("example") end
  end
  local errors = summary.errors
  io.write(string.format('{"requests": %d, "seconds": %.6f, "bad": %d, "checked": %d, "socket_errors": %d, ' ..
    '"p50_us": %d, "p99_us": %d, "example": %q}\\n', summary.requests, summary.duration / 1e6, b, c,
    errors.connect + errors.read + errors.write + errors.timeout, latency:percentile(50),
    latency:percentile(99), e))
end
"""


def lua_string(data: bytes) -> str:
    """A Lua string literal of any bytes (decimal escapes outside printable ASCII)."""
    return '"' + "".join(chr(b) if 32 <= b < 127 and b not in b'"\\' else f"\\{b:03d}" for b in data) + '"'


def wrk_script(plan: dict, hostport: str) -> str:
    """A wrk script sending the plan's requests in turn and checking every answer."""
    mark_name, _, mark_value = plan["expect"].lower().partition(": ")
    items = hitload.plan_bytes(plan, hostport)
    answers = {body for _, body in items}
    return "\n".join([
        "requests = {" + ",\n".join(lua_string(request) for request, _ in items) + "}",
        "answers = {" + ",\n".join(f"[{lua_string(a)}] = true" for a in sorted(answers)) + "}",
        f"mark_name = {lua_string(mark_name.encode())}",
        f"mark_value = {lua_string(mark_value.encode())}",
        CHECKS,
    ])


def run_wrk(subject: Subject, script: Path, connections: int, seconds: int) -> dict:
    """One measured wrk run (after a warm-up run that is not counted) with the server's CPU."""
    argv = ["wrk", "-t1", f"-c{connections}", "-s", str(script), f"http://{HOST}:{subject.port}/"]
    subprocess.run([*argv[:1], "-d1s", *argv[1:]], capture_output=True, timeout=60, check=True)
    before, client_before = subject.cpu(), children_cpu()
    done = subprocess.run([*argv[:1], f"-d{seconds}s", *argv[1:]], capture_output=True, text=True,
                          timeout=seconds + 60)
    after, client_after = subject.cpu(), children_cpu()
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed against {subject.name}:\n{done.stdout}\n{done.stderr[-2000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["cpu_ms"] = (after - before) / max(result["requests"], 1) * 1e3
    result["rps"] = result["requests"] / result["seconds"]
    # wrk's own share of the machine: it runs on the cores the server's workers would use
    result["client_share"] = (client_after - client_before) / (result["seconds"] * (os.cpu_count() or 1))
    return result


def run(args, workdir: Path, stack: contextlib.ExitStack) -> int:
    if shutil.which("wrk") is None:
        print("bench_wrk: wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    store = workdir / "store"
    targets = hitstores.http_targets(args.distinct)
    base = f"http://{hitstores.API_HOST}"
    hitstores.fill_http_store(store, workdir, [base], targets)
    made = hitstores.write_cache(workdir / "cache", max(1, args.distinct // len(hitstores.APIS)))
    hitstores.import_cache(workdir / "cache", store)
    plans = {"plain": hitstores.http_plan("plain", base, targets),
             "virtual": hitstores.virtual_plan(made, args.distinct, 1)}

    confdir = workdir / "certs"
    subjects = [stbproxy_subject("stbproxy", store, confdir=confdir),
                stbproxy_subject(WORKERS, copy_store(store, workdir / "store-workers"), "--workers", "2",
                                 confdir=confdir)]
    if args.before:
        subjects.append(stbproxy_subject(BEFORE, copy_store(store, workdir / "store-before"), confdir=confdir,
                                         source=args.before))
    addon = hitstores.dict_addon(workdir, [base], targets, plans["virtual"])
    subjects.append(mitmdump_subject(addon, free_port(), confdir))
    for subject in subjects:
        stack.callback(subject.stop)
    scripts = {}
    for subject in subjects:
        for path, plan in plans.items():
            plan = hitstores.baseline_plan(plan) if subject.name == BASELINE else plan
            scripts[subject.name, path] = workdir / f"{subject.name.replace(' ', '_')}-{path}.lua"
            scripts[subject.name, path].write_text(wrk_script(plan, f"{HOST}:{subject.port}"), encoding="latin-1")

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
          f"wrk, one thread, {args.seconds} s per run, {args.repeats} repeat(s), {args.distinct} distinct requests")
    runs: dict[tuple, list[dict]] = {}
    failures = []
    for repeat in range(args.repeats):
        for concurrency in args.concurrency:
            for path in PATHS:
                for subject in subjects:
                    result = run_wrk(subject, scripts[subject.name, path], concurrency, args.seconds)
                    runs.setdefault((path, subject.name, concurrency), []).append(result)
                    if result["bad"] or result["socket_errors"] or result["checked"] < result["requests"]:
                        failures.append(f"{subject.name}, {path}, concurrency {concurrency}: {result['bad']} bad "
                                        f"answers, {result['socket_errors']} socket errors, {result['checked']} "
                                        f"checked of {result['requests']} (e.g. {result['example']})")

    def get(path, name, concurrency, field):
        return median(r[field] for r in runs[path, name, concurrency])

    print(f"\n{'path':8} {'subject':20} {'conns':>5} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'CPU ms/hit':>10}")
    for path in PATHS:
        for subject in subjects:
            for c in args.concurrency:
                p50, p99 = (get(path, subject.name, c, field) / 1e3 for field in ("p50_us", "p99_us"))
                print(f"{path:8} {subject.name:20} {c:5d} {get(path, subject.name, c, 'rps'):8.0f} "
                      f"{p50:7.2f} {p99:7.2f} {get(path, subject.name, c, 'cpu_ms'):10.3f}")
    print()
    for c in args.concurrency:
        plain, virtual = get("plain", "stbproxy", c, "cpu_ms"), get("virtual", "stbproxy", c, "cpu_ms")
        paired = median(p["cpu_ms"] / v["cpu_ms"] for p, v in zip(runs["plain", "stbproxy", c],
                                                                   runs["virtual", "stbproxy", c]))
        print(f"concurrency {c}: CPU per hit plain {plain:.3f} ms, /virtual {virtual:.3f} ms: plain / virtual "
              f"{paired:.2f} (median of the repeats' ratios; target <= {PLAIN_OVER_VIRTUAL}: "
              f"{verdict(paired <= PLAIN_OVER_VIRTUAL)})")
        for path in PATHS:
            ratio = get(path, "stbproxy", c, "cpu_ms") / get(path, BASELINE, c, "cpu_ms")
            print(f"concurrency {c}: {path}: {ratio:.2f} of {BASELINE}'s {get(path, BASELINE, c, 'cpu_ms'):.3f} ms "
                  f"(target <= {BASELINE_TARGET}: {verdict(ratio <= BASELINE_TARGET)})")
        for path in PATHS:
            speedups = [two["rps"] / one["rps"] for two, one in zip(runs[path, WORKERS, c], runs[path, "stbproxy", c])]
            speedup = median(speedups)
            print(f"concurrency {c}: {path}: --workers 2 / 1 worker: {speedup:.2f}x (median of the repeats' ratios, "
                  f"{min(speedups):.2f}-{max(speedups):.2f}; target >= {WORKERS_TARGET}: "
                  f"{verdict(speedup >= WORKERS_TARGET)}); wrk used {get(path, WORKERS, c, 'client_share'):.0%} of "
                  f"the machine's CPU meanwhile")
        if args.before:
            for path in PATHS:
                paired = median(n["cpu_ms"] / b["cpu_ms"] for n, b in zip(runs[path, "stbproxy", c],
                                                                          runs[path, BEFORE, c]))
                print(f"concurrency {c}: {path}: CPU per hit against {args.before}: {paired:.2f} "
                      f"(median of the repeats' ratios)")
    if failures:
        print("\nFAILED:\n" + "\n".join(f"  {f}" for f in failures[:20]))
        return 1
    print("all answers checked: HTTP 200, the source header, a planned body")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one repeat of 1-s runs: a smoke run")
    parser.add_argument("--seconds", type=int, default=None, help="measured seconds per run [5; quick 1]")
    parser.add_argument("--repeats", type=int, default=None, help="runs per subject (medians count) [5; quick 1]")
    parser.add_argument("--concurrency", default="1,16", help="keep-alive connections, comma-separated [1,16]")
    parser.add_argument("--distinct", type=int, default=240, help="distinct requests per path [240]")
    parser.add_argument("--before", type=Path, default=None, metavar="DIR",
                        help="also run the stbproxy of this source tree (e.g. an older commit's), for before/after")
    args = parser.parse_args(argv)
    args.seconds = args.seconds or (1 if args.quick else 5)
    args.repeats = args.repeats or (1 if args.quick else 5)
    try:
        args.concurrency = sorted({int(c) for c in args.concurrency.split(",")})
    except ValueError:
        parser.error("--concurrency takes numbers separated by commas")
    return run_in_workdir("bench_wrk", "stb-bench-wrk-", lambda workdir, stack: run(args, workdir, stack))


if __name__ == "__main__":
    sys.exit(main())
