#!/usr/bin/env python3
"""HTTP/2 rapid reset (CVE-2023-44487) against `stbproxy serve`: what it does to another client.

On 127.0.0.1 only, bounded in time, per lane (the fast lane, serve's default, and
--no-fast-lane, mitmproxy's own layers), each with a proxy of its own:

1. baseline: another client (HTTP/1.1, one keep-alive connection) asks, round after round, a
   cache hit and a miss (a new URL of a plain-HTTP upstream each time); its latencies;
2. flood: a hostile client (``HostileH2`` of h2_hostile.py, in a process of its own) sends
   request-then-reset pairs over HTTP/2 inside CONNECT tunnels with TLS, each to a new URL of
   a slow HTTPS upstream (every stream would be an upstream call), in batches (HEADERS, then their
   RST_STREAMs), as fast as the proxy takes them, and opens a new connection whenever the
   proxy closes one; meanwhile the other client asks again, as in 1;
3. SIGTERM while the flood goes on: the time until the proxy has exited.

Reported per lane: the other client's latency (p50, p99, max) for hits and misses, quiet and
during the flood; the pairs sent, the connections they took and how many of those the proxy
ended with GOAWAY ENHANCE_YOUR_CALM; how many flood streams reached the upstream; the time
from SIGTERM to exit.

The hostile side (the flood and its upstream) stands for other machines: with 2 cores or more
it runs on the last core and the proxy, the other client and its upstream on the others
(``keep_to_cores``), so that the figures measure the proxy, not the scheduler. The upstream
is h2_upstream.py's, the other client h2_other_client.py's; this file runs the lanes, and
runs itself again as each child process (the roles ``_upstream`` and ``_flood``).

Baseline (measured in the same run): the other client's quiet latency. Checks: during the
flood its p99 stays within --max-added ms of the quiet p99 (hits and misses) and no request
of it fails; the proxy waits for the upstream's answer to no reset stream (--max-waited); the
proxy exits within --grace seconds of SIGTERM. Exit status 1 when a check fails, 2 when the
run fails. Before the fix (issue 38, item 2) a flood delayed the other client by seconds to
minutes and SIGTERM went unanswered; run against an older tree with PYTHONPATH=that/tree.

Usage: python scripts/reliability/h2_flood.py [--quick] [--pairs N] [--seconds S] [--lane fast-lane|no-fast-lane|both]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.common import child_env, run_in_workdir  # noqa: E402
from scripts.reliability.h2_hostile import BATCH, ENHANCE_YOUR_CALM, HostileH2, keep_to_cores  # noqa: E402
from scripts.reliability.h2_other_client import Latencies, OtherClient  # noqa: E402
from scripts.reliability.h2_upstream import READY, SLOW, Upstream, upstream_stats  # noqa: E402

SCRIPT = Path(__file__).resolve()  # the child roles (_upstream, _flood) run this file again
LANES = {"fast-lane": (), "no-fast-lane": ("--no-fast-lane",)}


# -- the run ------------------------------------------------------------------------------------------


@dataclass
class LaneResult:
    lane: str
    quiet: Latencies
    flooded: Latencies
    flood: dict
    reached: int  # flood requests that reached the upstream
    waited: int  # ... and whose answer the proxy waited for (not cancelled)
    sigterm: float  # seconds from SIGTERM to exit (inf: it did not exit)
    exit_code: int | None
    problems: list[str]


class Run:
    def __init__(self, args, workdir: Path, stack: contextlib.ExitStack) -> None:
        self.args = args
        self.workdir = workdir
        self.stack = stack

    def upstream(self, role: str) -> tuple[int, int, str]:
        """An upstream process: "hostile" (the flood's, niced) or "other" (the other client's)."""
        process = subprocess.Popen([sys.executable, str(SCRIPT), "_upstream", role, str(self.workdir / role)],
                                   stdout=subprocess.PIPE, text=True, env=child_env())
        self.stack.callback(lambda: (process.terminate(), process.wait(10)))
        line = process.stdout.readline()
        match = READY.search(line)
        if not match:
            raise RuntimeError(f"the upstream did not start: {line!r}")
        return int(match.group(1)), int(match.group(2)), line.split()[-1]

    def lane(self, lane: str, plain: int, tls: int, ca_file: str, stats_port: int) -> LaneResult:
        from stbproxy.serve_process import ServeProcess

        a = self.args
        proxy = ServeProcess(self.workdir / lane / "store", "--upstream-ca", ca_file, "--upstream-timeout", "30",
                             *LANES[lane], env=child_env())
        self.stack.callback(proxy.stop)
        proxy.start()
        keep_to_cores(False, proxy.process.pid)
        client = OtherClient(proxy.port, plain, timeout=a.request_timeout)
        client.ask("/hit?n=0")  # stored: every later ask is a hit
        quiet = client.measure(a.quiet_seconds)
        before = upstream_stats(stats_port)
        flood = subprocess.Popen([sys.executable, str(SCRIPT), "_flood", str(proxy.port), str(proxy.ca_file),
                                  f"127.0.0.1:{tls}", str(a.pairs), str(a.seconds + a.grace + 30)],
                                 stdout=subprocess.PIPE, text=True, env=child_env())
        self.stack.callback(lambda: flood.poll() is None and flood.kill())
        time.sleep(0.3)  # the flood is under way
        flooded = client.measure(a.seconds)
        client.close()
        stopped = time.monotonic()
        proxy.process.send_signal(signal.SIGTERM)
        try:
            code = proxy.process.wait(a.grace + 60)
            sigterm = time.monotonic() - stopped
        except subprocess.TimeoutExpired:
            code, sigterm = None, float("inf")
        flood.send_signal(signal.SIGTERM)
        try:
            out, _ = flood.communicate(timeout=30)
            stats = json.loads(out.strip().splitlines()[-1])
        except (subprocess.TimeoutExpired, ValueError, IndexError):
            flood.kill()
            stats = {"pairs": 0, "connections": 0, "goaways": {}, "refused": 0, "errors": {"no report": 1}}
        time.sleep(SLOW + 0.2)  # flood requests already sent upstream arrive
        after = upstream_stats(stats_port)
        reached, waited = after["flood"] - before["flood"], after["waited"] - before["waited"]
        proxy.stop()
        problems = self.checks(quiet, flooded, stats, waited, sigterm, code, "".join(proxy.output))
        return LaneResult(lane, quiet, flooded, stats, reached, waited, sigterm, code, problems)

    def checks(self, quiet: Latencies, flooded: Latencies, stats: dict, waited: int, sigterm: float,
               code: int | None, output: str) -> list[str]:
        a = self.args
        problems = [f"the other client: {failure}" for failure in quiet.failures + flooded.failures][:5]
        for kind in ("hits", "misses"):
            added = (flooded.p99(kind) - quiet.p99(kind)) * 1e3
            if not getattr(flooded, kind) or added > a.max_added:
                problems.append(f"{kind}: p99 {added:+.1f} ms during the flood (at most +{a.max_added:g} ms)")
        if stats["pairs"] < min(a.pairs, 1000):
            problems.append(f"the flood sent only {stats['pairs']} pairs")
        if waited > a.max_waited:
            problems.append(f"the proxy waited for the upstream's answer to {waited} reset streams "
                            f"(at most {a.max_waited})")
        if sigterm > a.grace:
            problems.append(f"{sigterm:.1f} s from SIGTERM to exit (at most {a.grace:g} s)")
        if code not in (0, -signal.SIGTERM):
            problems.append(f"exit status {code} after SIGTERM")
        if "Traceback" in output or "mitmproxy has crashed" in output:
            first = output[output.find("Traceback"):][:1500] if "Traceback" in output else ""
            problems.append(f"{output.count('Traceback')} tracebacks in the proxy's output; the first:\n{first}")
        return problems

    def main(self) -> int:
        a = self.args
        where = keep_to_cores(False)
        stats_port, tls, ca_file = self.upstream("hostile")
        plain, _, _ = self.upstream("other")
        lanes = list(LANES) if a.lane == "both" else [a.lane]
        print(f"h2_flood: {a.pairs} request-then-reset pairs (batches of {BATCH}) "
              f"for at most {a.seconds:g} s per lane, "
              f"lanes {', '.join(lanes)}; {os.cpu_count()} cores ({where}), load average {os.getloadavg()[0]:.1f}",
              flush=True)
        results = [self.lane(lane, plain, tls, ca_file, stats_port) for lane in lanes]
        for result in results:
            flood = result.flood
            calm = flood["goaways"].get(str(ENHANCE_YOUR_CALM), flood["goaways"].get(ENHANCE_YOUR_CALM, 0))
            print(f"\nlane {result.lane}")
            print(f"  other client, quiet:        hits {result.quiet.summary('hits')}; "
                  f"misses {result.quiet.summary('misses')}")
            print(f"  other client, during flood: hits {result.flooded.summary('hits')}; "
                  f"misses {result.flooded.summary('misses')}")
            print(f"  flood: {flood['pairs']} pairs over {flood['connections']} connections in "
                  f"{flood.get('seconds', 0):.1f} s; GOAWAY ENHANCE_YOUR_CALM {calm}, other endings "
                  f"{dict(flood['errors']) or 'none'}; streams refused {flood['refused']}")
            print(f"  flood streams that reached the upstream: {result.reached}, of which the proxy waited for the "
                  f"answer: {result.waited}")
            print(f"  SIGTERM to exit: {result.sigterm:.2f} s (exit status {result.exit_code})")
            for problem in result.problems:
                print(f"  problem: {problem}")
        failed = sum(len(r.problems) for r in results)
        print("\nall checks passed" if not failed else f"\n{failed} problems found")
        return 1 if failed else 0


def options(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a small run for smoke tests (seconds)")
    p.add_argument("--pairs", type=int, help="at most this many request-then-reset pairs per lane [10,000,000]")
    p.add_argument("--seconds", type=float, help="how long the other client measures during the flood [20]")
    p.add_argument("--quiet-seconds", type=float, help="how long it measures before [5]")
    p.add_argument("--lane", choices=[*LANES, "both"], default="both")
    p.add_argument("--max-added", type=float, default=100.0, help="ms the other client's p99 may grow [100]")
    p.add_argument("--max-waited", type=int, default=0,
                   help="reset streams whose upstream answer the proxy may still wait for [0]")
    p.add_argument("--grace", type=float, default=15.0, help="seconds from SIGTERM to exit (serve's STOP_GRACE) [15]")
    p.add_argument("--request-timeout", type=float, default=120.0, help="the other client's timeout, seconds [120]")
    a = p.parse_args(argv)
    quick = dict(pairs=1_000_000, seconds=3.0, quiet_seconds=1.5)
    full = dict(pairs=10_000_000, seconds=20.0, quiet_seconds=5.0)
    for key, value in (quick if a.quick else full).items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    if a.pairs < 1 or a.seconds <= 0:
        p.error("--pairs and --seconds must be positive")
    return a


def _flood_role(argv: list[str]) -> None:
    """The hostile client as a process of its own (it must not share the measuring client's GIL)."""
    port, ca_file, authority, pairs, seconds = argv
    keep_to_cores(hostile=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stats = HostileH2(int(port), ca_file, authority).run(int(pairs), float(seconds), stop)
    print(json.dumps(stats.as_dict()), flush=True)


def main(argv: list[str]) -> int:
    if argv[:1] == ["_upstream"]:
        asyncio.run(Upstream().serve(Path(argv[2]), hostile=argv[1] == "hostile"))
        return 0
    if argv[:1] == ["_flood"]:
        _flood_role(argv[1:])
        return 0
    args = options(argv)
    return run_in_workdir("h2_flood", "stb-h2-flood-", lambda workdir, stack: Run(args, workdir, stack).main(),
                          errors=(RuntimeError, OSError, subprocess.SubprocessError))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
