#!/usr/bin/env python3
"""Cache-hit benchmark through the proxy: plain HTTP and HTTPS keep-alive, stbproxy against
a direct call and against plain mitmdump answering from a dict.

In one run, on 127.0.0.1 only, in a temporary folder that is removed afterwards:

1. start a fast upstream HTTP server (its own process) answering a few hundred bytes of
   JSON per path and query, and fill a store with those answers for the plain-HTTP API and
   for the same API over HTTPS (``stbproxy import cassette``: the proxy's own keys);
2. start, each on its own copy of the store, ``stbproxy serve --mode replay`` with one
   worker, with ``--workers 2`` and with ``--no-fast-lane`` (every request through
   mitmproxy's protocol layers), and ``mitmdump`` (all its default addons) with a script
   answering the same bodies from a dict: the baseline;
3. from the load generator (scripts/bench/hitload.py, a process of its own, an epoll loop, raw
   HTTP/1.1 on keep-alive connections; HTTPS through one CONNECT tunnel per connection,
   trusting the proxy's CA), measure each path at concurrency 1, 16 and 32, subjects interleaved and
   repeated: req/s, p50/p99 latency, and the server's CPU milliseconds per request from its
   process times (every worker counted);
4. print the medians, the CPU per hit against its target and against the baseline's, the
   p50 that stbproxy adds over a direct call at concurrency 1, and the speed-up of
   ``--workers 2`` over one worker with the load generator's share of the machine.

Every answer is checked (status 200, the upstream's body, the header saying it was a hit
or came from the dict). Exit status 1 means requests failed; a missed target is reported
but is not an error.

Baselines (measured in the same run, interleaved): mitmdump answering from a dict for the
CPU per hit, a direct call to the upstream for the added latency, one worker for
``--workers 2``.

``--workers-only`` runs just stbproxy with one worker and with ``--workers 2``: on a noisy
2-core machine the speed-up's paired ratios spread widely, and this takes more repeats in
less time.

``--client c`` sends the same load from hitload.c, built for the run, instead of hitload.py.
On 2 cores the client's own CPU per request bounds what ``--workers 2`` can show: if a hit
costs the server w and the client g, two workers reach at most 2w / (w + g) of one.

Usage: python scripts/bench/bench_proxy.py [--quick] [--workers-only] [--requests N] [--repeats R]
       [--concurrency 1,16,32] [--client python|c]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
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
    Subject,
    copy_store,
    interleaved,
    lean_subject,
    load_generator,
    mitmdump_subject,
    stbproxy_subject,
    verdict,
    workers_speedup,
)
from scripts.common import HOST, child_env, free_port, median, run_in_workdir  # noqa: E402

SCRIPT = Path(__file__).resolve()
READY_RE = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")
CPU_TARGET = {"plain": 0.45, "https": 0.6}  # ms of server CPU per hit
RATIO_TARGET = 0.5  # of the baseline's CPU per request
ADDED_P50_TARGET = 0.6  # ms over a direct call, concurrency 1
WORKERS_TARGET = 1.7  # req/s of --workers 2 over one worker
BEFORE_TARGET = 0.8  # CPU per hit over the release before's (--before), at every concurrency (issue 43)
HTTPS_TARGET = 1.5  # CPU per HTTPS keep-alive hit over a plain one


# What the upstream serves (reliability.py serves and checks the same).
request_targets, body_for = hitstores.http_targets, hitstores.http_body


# -- role: upstream ---------------------------------------------------------------------


def _content_length(head: bytes) -> int:
    lower = head.lower()
    pos = lower.find(b"\r\ncontent-length:")
    if pos < 0:
        return 0
    return int(lower[pos + 17: lower.index(b"\r\n", pos + 2)])


async def _upstream_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    answers: dict[bytes, bytes] = {}
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            target = head[: head.index(b"\r\n")].split(b" ")[1]
            if length := _content_length(head):
                await reader.readexactly(length)
            if target.startswith(b"http://"):  # absolute form: keep path and query only
                target = b"/" + target.split(b"/", 3)[3]
            answer = answers.get(target)
            if answer is None:
                body = hitstores.http_body(target.decode())
                answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
                    len(body), body)
                answers[target] = answer
            writer.write(answer)
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _run_upstream() -> None:
    server = await asyncio.start_server(_upstream_conn, HOST, 0, backlog=512)
    print(f"listening on http://{HOST}:{server.sockets[0].getsockname()[1]}", flush=True)
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with server:
        await stop.wait()


def start_upstream(workdir: Path) -> tuple[subprocess.Popen, int]:
    out = workdir / "upstream.out"
    with open(out, "wb") as handle:
        process = subprocess.Popen([sys.executable, str(SCRIPT), "_upstream"], stdout=handle,
                                   stderr=subprocess.STDOUT, env=child_env(), start_new_session=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if match := READY_RE.search(out.read_text()):
            return process, int(match.group(1))
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"the upstream did not start:\n{out.read_text()}")


def direct_plan(base: str, targets: list[str]) -> dict:
    """The requests a client sends the upstream itself (origin form)."""
    host = base.split("://", 1)[1]
    items = [[f"GET {t} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\nUser-Agent: stbproxy-bench\r\n\r\n",
              hitstores.http_body(t).decode("latin-1")] for t in targets]
    return {"kind": "plain", "expect": "content-type: application/json", "items": items}


# -- the run ----------------------------------------------------------------------------


def run(args, workdir: Path, stack: contextlib.ExitStack) -> int:
    targets = hitstores.http_targets(args.distinct)
    upstream, upstream_port = start_upstream(workdir)
    stack.callback(lambda: (upstream.terminate(), upstream.wait()))
    bases = {"plain": f"http://{HOST}:{upstream_port}", "https": f"https://{hitstores.API_HOST}"}
    store = workdir / "store"
    hitstores.fill_http_store(store, workdir, list(bases.values()), targets)

    plans: dict[tuple[str, str], Path] = {}
    for path, base in bases.items():
        plan = hitstores.http_plan(path, base, targets)
        for who, document in (("stbproxy", plan), (BASELINE, hitstores.baseline_plan(plan))):
            plans[(path, who)] = workdir / f"plan-{path}-{who.split()[0]}.json"
            plans[(path, who)].write_text(json.dumps(document))
    plans[("plain", "direct")] = workdir / "plan-direct.json"
    plans[("plain", "direct")].write_text(json.dumps(direct_plan(bases["plain"], targets)))

    confdir = workdir / "certs"
    addon = hitstores.dict_addon(workdir, list(bases.values()), targets, None)
    subjects: list[Subject] = [] if args.workers_only else [Subject("direct", upstream_port, None)]
    stbproxies = (("stbproxy", ()), (WORKERS, ("--workers", "2")), (MITMPROXY_PATH, ("--no-fast-lane",)))
    for name, extra in stbproxies[:2] if args.workers_only else stbproxies:
        subjects.append(stbproxy_subject(name, copy_store(store, workdir / f"store-{len(subjects)}"), *extra,
                                         confdir=confdir))
        stack.callback(subjects[-1].stop)
    if args.before and not args.workers_only:
        # the older tree's store is made by its own import (its keys may be its own)
        before_store = workdir / "store-before"
        hitstores.fill_http_store(before_store, workdir, list(bases.values()), targets, source=args.before)
        subjects.append(stbproxy_subject(BEFORE, before_store, confdir=confdir, source=args.before))
        stack.callback(subjects[-1].stop)
    if not args.workers_only:
        subjects.append(mitmdump_subject(addon, free_port(), confdir))
        stack.callback(subjects[-1].stop)
        subjects.append(lean_subject(addon, free_port(), confdir))
        stack.callback(subjects[-1].stop)

    print(f"stbproxy hit benchmark: {args.distinct} distinct requests, concurrency {args.concurrency}, "
          f"{args.requests} requests per run ({args.requests1} at concurrency 1), {args.repeats} repeat(s), medians")
    matrix = Matrix(load_generator(args.client, workdir))
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}; the load generator "
          f"({matrix.load.name}) is a separate process sharing these cores; load average at start "
          f"{os.getloadavg()[0]:.2f}")
    for concurrency, requests, warmup in interleaved(args, warmup_per_connection=10):
        for path in ("plain", "https"):
            for subject in subjects:
                if subject.name == "direct" and path != "plain":
                    continue
                who = {"direct": "direct", BASELINE: BASELINE, LEAN: BASELINE}.get(subject.name, "stbproxy")
                matrix.run(path, subject, plans[(path, who)], concurrency, requests, warmup)

    names = [s.name for s in subjects]
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")
    for path in ("plain", "https"):
        matrix.table(path, names, args.concurrency)
    print()
    top = max(args.concurrency)
    if not args.workers_only:
        summarize(args, matrix, top)
    for path in ("plain", "https"):
        print(workers_speedup(matrix, path, top, WORKERS_TARGET))
    if matrix.failures:
        print("\n!!! FAILED REQUESTS: these figures are not valid !!!")
        for line in matrix.failures[:20]:
            print(f"  {line}")
        return 1
    print("failed requests: 0")
    return 0


def summarize(args, matrix: Matrix, top: int) -> None:
    """CPU per hit against its targets, the baseline and --no-fast-lane; p50 added at concurrency 1."""
    for path in ("plain", "https"):
        cpu = matrix.get(path, "stbproxy", top, "cpu_ms")
        base = matrix.get(path, BASELINE, top, "cpu_ms")
        print(f"{path}: CPU per hit at concurrency {top}: {cpu:.3f} ms (target <= {CPU_TARGET[path]} ms: "
              f"{verdict(cpu <= CPU_TARGET[path])}); {cpu / base:.2f} of mitmdump + dict's {base:.3f} ms "
              f"(target <= {RATIO_TARGET}: {verdict(cpu / base <= RATIO_TARGET)})")
    if not args.workers_only:
        for concurrency in args.concurrency:
            pairs = zip(matrix.runs[("https", "stbproxy", concurrency)],
                        matrix.runs[("plain", "stbproxy", concurrency)])
            tls = median(https["cpu_ms"] / plain["cpu_ms"] for https, plain in pairs)
            print(f"https / plain: CPU per keep-alive hit at concurrency {concurrency}: {tls:.2f} (median of the "
                  f"repeats' ratios; target <= {HTTPS_TARGET}: {verdict(tls <= HTTPS_TARGET)})")
    for path in ("plain", "https"):
        lane = matrix.paired_ratio(path, "stbproxy", MITMPROXY_PATH, top, "cpu_ms")
        print(f"{path}: CPU per hit with the fast lane / without (--no-fast-lane) at concurrency {top}: "
              f"{cpu_of(matrix, path, top):.3f} vs {matrix.get(path, MITMPROXY_PATH, top, 'cpu_ms'):.3f} ms: "
              f"{lane:.2f} (median of the repeats' ratios)")
        if args.before:
            for concurrency in args.concurrency:
                before = matrix.get(path, BEFORE, concurrency, "cpu_ms")
                ratio = matrix.paired_ratio(path, "stbproxy", BEFORE, concurrency, "cpu_ms")
                print(f"{path}: CPU per hit against {args.before} at concurrency {concurrency}: "
                      f"{cpu_of(matrix, path, concurrency):.3f} vs {before:.3f} ms: {ratio:.2f} (median of the "
                      f"repeats' ratios; target <= {BEFORE_TARGET}: {verdict(ratio <= BEFORE_TARGET)})")
        print(f"{path}: mitmproxy's own share: the lean master with a dict answers at "
              f"{matrix.get(path, LEAN, top, 'cpu_ms'):.3f} ms of CPU per request at concurrency {top}")
    if 1 in args.concurrency:
        added = matrix.get("plain", "stbproxy", 1, "p50_ms") - matrix.get("plain", "direct", 1, "p50_ms")
        baseline_added = matrix.get("plain", BASELINE, 1, "p50_ms") - matrix.get("plain", "direct", 1, "p50_ms")
        print(f"p50 added at concurrency 1 over a direct call: {added:.3f} ms (target <= {ADDED_P50_TARGET} ms: "
              f"{verdict(added <= ADDED_P50_TARGET)}); by mitmdump + dict: {baseline_added:.3f} ms")


def cpu_of(matrix: Matrix, path: str, concurrency: int) -> float:
    return matrix.get(path, "stbproxy", concurrency, "cpu_ms")


def _options(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, help="measured requests per run at concurrency > 1 [8000]")
    p.add_argument("--requests1", type=int, help="measured requests per run at concurrency 1 [2000]")
    p.add_argument("--concurrency", help="keep-alive connections, comma-separated [1,16,32]")
    p.add_argument("--repeats", type=int, help="runs per subject; medians are reported [3]")
    p.add_argument("--distinct", type=int, help="distinct requests stored and replayed [200]")
    p.add_argument("--quick", action="store_true", help="a small run for smoke tests (a minute)")
    p.add_argument("--workers-only", action="store_true",
                   help="only stbproxy with one worker and with --workers 2: the speed-up, "
                        "with more repeats in less time")
    p.add_argument("--before", type=Path, default=None, metavar="DIR",
                   help="also run the stbproxy of this source tree (e.g. an older commit's), for before/after")
    p.add_argument("--client", choices=("python", "c"), default="python",
                   help="the load generator: hitload.py, or hitload.c built for the run (a C compiler and "
                        "OpenSSL's headers), which costs the shared cores less per request [python]")
    a = p.parse_args(argv)
    small = dict(requests=600, requests1=150, concurrency="1,16", repeats=1, distinct=40)
    full = dict(requests=8000, requests1=2000, concurrency="1,16,32", repeats=3, distinct=200)
    for key, value in (small if a.quick else full).items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    try:
        a.concurrency = sorted({int(c) for c in a.concurrency.split(",")})
    except ValueError:
        p.error("--concurrency takes numbers separated by commas")
    if min(a.requests, a.requests1, a.repeats, a.distinct, *a.concurrency) < 1:
        p.error("counts must be 1 or more")
    return a


def main(argv: list[str]) -> int:
    if argv[:1] == ["_upstream"]:
        asyncio.run(_run_upstream())
        return 0
    args = _options(argv)
    return run_in_workdir("bench_proxy", "stb-bench-", lambda workdir, stack: run(args, workdir, stack))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
