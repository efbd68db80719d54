#!/usr/bin/env python3
"""/virtual cache hits side by side: stbproxy against StableToolBench's own server.

StableToolBench's server (``server/main.py`` of its repository, run with uvicorn as its
README says) answers a cached call by reading the API's cache file and writing a log
entry; stbproxy answers it from its store. This script runs both on the same cache and
the same load. In one run, on 127.0.0.1 only, in a temporary folder removed afterwards:

1. generate a StableToolBench cache of the original layout (``--categories`` x ``--tools``
   x ``--apis`` APIs with ``--entries`` cached calls each; by default 20 x 10 x 5 x 50, as
   issue 43 measured) and import it into a store (``stbproxy import stb-cache``);
2. copy the checkout's ``server/`` folder into the temporary folder (the checkout is
   never written to), give it a config.yml pointing at that cache (its real-API URL and
   model point at a closed loopback port: a hit reaches neither), and start it with
   ``--python`` (an interpreter with its server's requirements) as ``uvicorn main:app``;
   start ``stbproxy serve --mode replay`` on the store;
3. for each concurrency and repeat, subjects interleaved: wrk (Debian's package, one
   thread, keep-alive connections) for ``--seconds`` after a warm-up second, sending
   ``--distinct`` different calls as ToolBench's client posts them; req/s, p50/p99, the
   server's CPU per hit from its process times;
4. print medians and, paired per repeat, stbproxy's req/s over StableToolBench's (target
   >= 4) and its CPU per hit against StableToolBench's.

Every answer is checked inside wrk: HTTP 200, the cached answer object as each server
writes it (FastAPI's compact JSON; stbproxy's ``X-Stb-Source: cache``).

Without ``--stb-checkout`` (nor $STB_CHECKOUT) the script says so and exits 0 having run
nothing: StableToolBench is not part of this repository. Exit status 1: an answer failed
a check; 2: wrk is missing.

Usage: python scripts/bench/bench_stb_server.py --stb-checkout DIR --python STB_VENV/bin/python
       [--concurrency 1,16,32] [--seconds 5] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.bench import hitstores  # noqa: E402
from scripts.bench.bench_wrk import CHECKS, lua_string, run_wrk  # noqa: E402
from scripts.bench.hitbench import Subject, stbproxy_subject, verdict  # noqa: E402
from scripts.common import HOST, child_env, free_port, median, run_in_workdir  # noqa: E402

STB = "StableToolBench server"
STBPROXY = "stbproxy"
TARGET = 4.0  # stbproxy's req/s over StableToolBench's server's, at every concurrency
ARGUMENTS = (("query", "page", "limit"), ("listing_id", "lang"), ("match_id", "include_events"),
             ("flight_number", "date"), ("airport", "date", "limit"))
CONFIG = """\
api_key: not-used
api_base: http://127.0.0.1:{closed}/v1
model: not-used
temperature: 0
toolbench_url: http://127.0.0.1:{closed}/rapidapi
tools_folder: "{tools}"
cache_folder: "{cache}"
is_save: false
port: {port}
log_file: "{log}"
"""


def apis(categories: int, tools: int, per_tool: int) -> list[tuple]:
    return [(f"Category{c}", f"tool{c}_{t}", f"api_{a}", ARGUMENTS[a % len(ARGUMENTS)])
            for c in range(categories) for t in range(tools) for a in range(per_tool)]


def stb_server(checkout: Path, python: str, workdir: Path, cache: Path) -> Subject:
    """StableToolBench's server from a copy of the checkout's server/ folder, as its README runs it."""
    folder = workdir / "stb-server"
    shutil.copytree(checkout / "server", folder)
    (workdir / "stb-tools").mkdir()
    port, closed = free_port(), free_port()
    (folder / "config.yml").write_text(CONFIG.format(closed=closed, tools=workdir / "stb-tools", cache=cache,
                                                     port=port, log=workdir / "stb-server.log"))
    log = open(workdir / "uvicorn.log", "w")
    process = subprocess.Popen([python, "-m", "uvicorn", "main:app", "--host", HOST, "--port", str(port),
                                "--log-level", "warning"], cwd=folder, env=child_env(), stdout=log,
                               stderr=subprocess.STDOUT, start_new_session=True)

    def stop() -> None:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.close()

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if process.poll() is not None:
            stop()
            raise RuntimeError(f"StableToolBench's server exited:\n{(workdir / 'uvicorn.log').read_text()[-2000:]}")
        with contextlib.suppress(OSError), socket.create_connection((HOST, port), timeout=1):
            return Subject(STB, port, process.pid, None, stop)
        time.sleep(0.2)
    stop()
    raise RuntimeError("StableToolBench's server did not start in 90 s")


def script_for(plan: dict, hostport: str, fastapi: bool) -> str:
    """A wrk script sending the plan's calls in turn and checking each answer: the cached
    answer object as this server writes it (FastAPI: compact JSON; stbproxy: json.dumps's
    default spacing, and its source header)."""
    separators = (",", ":") if fastapi else (", ", ": ")
    mark = "content-type: application/json" if fastapi else plan["expect"].lower()
    mark_name, _, mark_value = mark.partition(": ")
    requests = [request.replace("@HOSTPORT@", hostport).encode("latin-1") for request, _ in plan["items"]]
    answers = {json.dumps({"error": "", "response": text}, ensure_ascii=False, separators=separators).encode()
               for _, text in plan["items"]}
    return "\n".join([
        "requests = {" + ",\n".join(lua_string(request) for request in requests) + "}",
        "answers = {" + ",\n".join(f"[{lua_string(a)}] = true" for a in sorted(answers)) + "}",
        f"mark_name = {lua_string(mark_name.encode())}",
        f"mark_value = {lua_string(mark_value.encode())}",
        CHECKS,
    ])


def run(args, workdir: Path, stack: contextlib.ExitStack) -> int:
    if shutil.which("wrk") is None:
        print("bench_stb_server: wrk is not installed (Debian: apt-get install wrk)", file=sys.stderr)
        return 2
    made = hitstores.write_cache(workdir / "cache", args.entries, apis(args.categories, args.tools, args.apis))
    store = workdir / "store"
    hitstores.import_cache(workdir / "cache", store)
    plan = hitstores.virtual_plan(made, args.distinct, 1, distinct=args.distinct)

    subjects = [stb_server(args.stb_checkout, args.python, workdir, workdir / "cache")]
    stack.callback(subjects[0].stop)
    subjects.append(stbproxy_subject(STBPROXY, store, confdir=workdir / "certs"))
    stack.callback(subjects[1].stop)
    scripts = {}
    for subject in subjects:
        scripts[subject.name] = workdir / f"{subject.name.split()[0]}.lua"
        scripts[subject.name].write_text(script_for(plan, f"{HOST}:{subject.port}", subject.name == STB),
                                         encoding="latin-1")

    entries = len(made) * args.entries
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; "
          f"cache of {len(made)} APIs x {args.entries} entries ({entries:,}), {args.distinct} different calls "
          f"asked; wrk, one thread, {args.seconds} s per run, {args.repeats} repeat(s)")
    runs: dict[tuple, list[dict]] = {}
    failures = []
    for repeat in range(args.repeats):
        for concurrency in args.concurrency:
            for subject in subjects if repeat % 2 == 0 else subjects[::-1]:  # A/B, then B/A
                result = run_wrk(subject, scripts[subject.name], concurrency, args.seconds)
                runs.setdefault((subject.name, concurrency), []).append(result)
                if result["bad"] or result["socket_errors"] or result["checked"] < result["requests"]:
                    failures.append(f"{subject.name}, concurrency {concurrency}: {result['bad']} bad answers, "
                                    f"{result['socket_errors']} socket errors, {result['checked']} checked of "
                                    f"{result['requests']} (e.g. {result['example']})")

    def get(name, concurrency, field):
        return median(r[field] for r in runs[name, concurrency])

    print(f"\n{'subject':24} {'conns':>5} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'CPU ms/hit':>10}")
    for subject in subjects:
        for c in args.concurrency:
            p50, p99 = (get(subject.name, c, field) / 1e3 for field in ("p50_us", "p99_us"))
            print(f"{subject.name:24} {c:5d} {get(subject.name, c, 'rps'):8.0f} {p50:7.2f} {p99:7.2f} "
                  f"{get(subject.name, c, 'cpu_ms'):10.3f}")
    print()
    for c in args.concurrency:
        pairs = list(zip(runs[STBPROXY, c], runs[STB, c]))
        speed = median(ours["rps"] / theirs["rps"] for ours, theirs in pairs)
        cpu = median(theirs["cpu_ms"] / ours["cpu_ms"] for ours, theirs in pairs)
        print(f"concurrency {c}: stbproxy answers {speed:.2f}x StableToolBench's server's requests per second "
              f"(median of the repeats' ratios; target >= {TARGET:g}: {verdict(speed >= TARGET)}), with {cpu:.2f}x "
              f"less CPU per hit")
    if failures:
        print("\nFAILED:\n" + "\n".join(f"  {f}" for f in failures[:20]))
        return 1
    print("all answers checked: HTTP 200 and the cached answer object")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stb-checkout", type=Path, default=os.environ.get("STB_CHECKOUT") or None,
                        help="a checkout of StableToolBench (its server/ folder is copied) [$STB_CHECKOUT]")
    parser.add_argument("--python", default=sys.executable,
                        help="an interpreter with StableToolBench's server requirements (fastapi, pydantic 1, "
                             "uvicorn, slowapi, openai, requests, pyyaml, tenacity) [this one]")
    parser.add_argument("--quick", action="store_true", help="a small cache, one repeat of 1-s runs: a smoke run")
    parser.add_argument("--seconds", type=int, default=None, help="measured seconds per run [5; quick 1]")
    parser.add_argument("--repeats", type=int, default=None, help="runs per subject (medians count) [3; quick 1]")
    parser.add_argument("--concurrency", default="1,16,32", help="keep-alive connections, comma-separated [1,16,32]")
    parser.add_argument("--categories", type=int, default=None, help="[20; quick 2]")
    parser.add_argument("--tools", type=int, default=None, help="tools per category [10; quick 2]")
    parser.add_argument("--apis", type=int, default=5, help="APIs per tool [5]")
    parser.add_argument("--entries", type=int, default=50, help="cached calls per API [50]")
    parser.add_argument("--distinct", type=int, default=None, help="different calls asked [2000; quick 200]")
    args = parser.parse_args(argv)
    if args.stb_checkout is None:
        print("bench_stb_server: skipped: no StableToolBench checkout named (--stb-checkout DIR or $STB_CHECKOUT; "
              "and --python, an interpreter with its server's requirements)")
        return 0
    if not (args.stb_checkout / "server" / "main.py").is_file():
        parser.error(f"--stb-checkout: no server/main.py in {args.stb_checkout}")
    args.stb_checkout = args.stb_checkout.resolve()
    args.seconds = args.seconds or (1 if args.quick else 5)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.categories = args.categories or (2 if args.quick else 20)
    args.tools = args.tools or (2 if args.quick else 10)
    args.distinct = args.distinct or (200 if args.quick else 2000)
    try:
        args.concurrency = sorted({int(c) for c in args.concurrency.split(",")})
    except ValueError:
        parser.error("--concurrency takes numbers separated by commas")
    return run_in_workdir("bench_stb_server", "stb-bench-stbserver-", lambda workdir, stack: run(args, workdir, stack))


if __name__ == "__main__":
    sys.exit(main())
