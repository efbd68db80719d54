#!/usr/bin/env python3
"""Reliability run: load, crashes, hostile input and a full disk against `stbproxy serve`.

On 127.0.0.1 only, bounded in count and time (every phase has a deadline):

1. load: N requests (100,000) at concurrency C (64) through `stbproxy serve --mode record`
   over D distinct requests, then N through `--mode replay` on that store, in one session;
   every answer is checked (status, body, X-Stb-Source). Reported: bad answers, p50/p99,
   req/s, the proxy's RSS and open files at start and end, and for replay the growth of
   the store per request (the session records; they refer to stored answers);
2. kill -9: K times (5) a record-mode proxy under load is killed mid-run and the store is
   reopened: every answer a client got with 200 must be stored, whole, and no entry damaged;
3. fuzz: the hostile inputs of scripts/reliability/fuzzkit.py for S seconds (or M cases) against the
   proxy path, /virtual and the proxy's own address: no 5xx, no traceback in the proxy's
   output, and an ordinary request answered afterwards;
4. full disk (needs root, for `mount -t tmpfs`; skipped with a message otherwise): the
   store on a tiny tmpfs, filled in record mode (every 200 stored, the rest 507, the log
   not flooded, `stats` counting the failures, a failed flush an error exit) and in
   virtual mode (every request answered; the ones not stored marked X-Stb-Stored: no).

It prints one table; exit status 1 when a check found a problem, 2 when the run itself
failed. The upstream is scripts/bench/bench_proxy.py's loopback server.

Baseline (measured in the same run): each check is pass/fail; the proxy's RSS and open
files are compared with their own values at the start of a phase.

Usage: python scripts/reliability/reliability.py [--quick] [--requests N] [--concurrency C] [--kills K] ...
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.bench.bench_proxy import body_for, request_targets  # noqa: E402
from scripts.common import HOST, child_env, percentile, run_in_workdir, stbproxy_command  # noqa: E402
from scripts.reliability import fuzzkit  # noqa: E402
from stbproxy.serve_process import ServeProcess  # noqa: E402
from stbproxy.store.embedded import Store  # noqa: E402
from stbproxy.store.folder import directory_size  # noqa: E402
from stbproxy.store.write_failures import LOG_INTERVAL  # noqa: E402

BENCH_PROXY = Path(__file__).resolve().parents[1] / "bench" / "bench_proxy.py"  # its _upstream role
READY = re.compile(r"listening on http://127\.0\.0\.1:(\d+)")


# -- the proxy's resources -------------------------------------------------------------------


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def open_files(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


# -- load --------------------------------------------------------------------------------------


@dataclass
class Load:
    latencies: list[float] = field(default_factory=list)
    bad: list[str] = field(default_factory=list)  # answers that broke an expectation
    acknowledged: list[int] = field(default_factory=list)  # target indexes answered 200, whole
    statuses: dict[int, int] = field(default_factory=dict)
    unstored: int = 0  # answers marked X-Stb-Stored: no
    dropped: int = 0  # requests without an answer (a killed proxy)
    seconds: float = 0.0

    def count_status(self, status: int) -> None:
        self.statuses[status] = self.statuses.get(status, 0) + 1


def wire(target: str, upstream_port: int) -> bytes:
    host = f"{HOST}:{upstream_port}"
    return (f"GET http://{host}{target} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n"
            f"X-Stb-Session: reliability\r\n\r\n").encode()


async def run_load(port: int, targets: list[str], upstream_port: int, *, count: int, concurrency: int,
                   source: bytes | None, deadline: float, allow: tuple[int, ...] = (200,),
                   dropped_ok: bool = False) -> Load:
    """``count`` requests over ``targets`` (request j asks for target j % len) on
    ``concurrency`` keep-alive connections. A 200 must carry the upstream's body and, when
    given, the X-Stb-Source; other statuses must be in ``allow``."""
    result = Load()
    wires = [wire(t, upstream_port) for t in targets]
    bodies = [body_for(t) for t in targets]
    want = b"\r\nx-stb-source: " + source + b"\r\n" if source else b""

    async def connection(jobs: list[int]) -> None:
        reader = writer = None
        for j in jobs:
            if time.monotonic() > deadline:
                result.bad.append("deadline reached")
                break
            i = j % len(targets)
            try:
                if writer is None:
                    reader, writer = await asyncio.open_connection(HOST, port)
                started = time.perf_counter()
                writer.write(wires[i])
                head = await reader.readuntil(b"\r\n\r\n")
                lower = head.lower()
                at = lower.find(b"\r\ncontent-length:")
                body = await reader.readexactly(int(lower[at + 17:lower.index(b"\r\n", at + 2)])) if at >= 0 else b""
                elapsed = time.perf_counter() - started
            except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                if writer is not None:
                    writer.close()
                reader = writer = None
                if dropped_ok:  # the proxy was killed: this connection's remaining requests are lost
                    result.dropped += len(jobs) - jobs.index(j)
                    return
                result.dropped += 1
                result.bad.append(f"{targets[i]}: {type(exc).__name__}: {exc}")
                continue
            status = int(head[9:12])
            result.count_status(status)
            result.latencies.append(elapsed)
            if b"\r\nx-stb-stored: no\r\n" in lower:
                result.unstored += 1
            if status == 200:
                if body != bodies[i] or (want and want not in lower):
                    result.bad.append(f"{targets[i]}: wrong body or source: {head[:200]!r}")
                else:
                    result.acknowledged.append(i)
            elif status not in allow:
                status_line = head.split(b"\r\n", 1)[0].decode(errors="replace")
                result.bad.append(f"{targets[i]}: {status_line}")
        if writer is not None:
            writer.close()

    jobs = [list(range(k, count, concurrency)) for k in range(concurrency)]
    started = time.perf_counter()
    await asyncio.gather(*(connection(js) for js in jobs))
    result.seconds = time.perf_counter() - started
    result.latencies.sort()
    return result


# -- the run -----------------------------------------------------------------------------------


@dataclass
class Row:
    check: str
    count: int
    bad: int
    figures: str


class Run:
    def __init__(self, args, workdir: Path, stack: contextlib.ExitStack) -> None:
        self.args = args
        self.workdir = workdir
        self.stack = stack
        self.rows: list[Row] = []
        self.samples: list[str] = []

    def proxy(self, store: Path, *args: str) -> ServeProcess:
        proxy = ServeProcess(store, *args, env=child_env())
        self.stack.callback(proxy.stop)
        return proxy.start()

    def upstream(self) -> int:
        process = subprocess.Popen([sys.executable, str(BENCH_PROXY), "_upstream"],
                                   stdout=subprocess.PIPE, text=True, env=child_env())
        self.stack.callback(lambda: (process.terminate(), process.wait(10)))
        match = READY.search(process.stdout.readline())
        if not match:
            raise RuntimeError("the upstream server did not start")
        return int(match.group(1))

    def load(self, port: int, targets: list[str], **how) -> Load:
        deadline = time.monotonic() + self.args.phase_timeout
        return asyncio.run(run_load(port, targets, self.upstream_port, deadline=deadline, **how))

    def add(self, row: Row, samples: list[str] = ()) -> None:
        self.rows.append(row)
        self.samples += [f"{row.check}: {s}" for s in samples[:5]]
        print(f"  done: {row.check}: {row.count} requests, {row.bad} bad", flush=True)

    # 1. load ---------------------------------------------------------------------------------
    def load_phases(self) -> None:
        a = self.args
        store = self.workdir / "load" / "store"
        targets = request_targets(a.distinct)
        for mode in ("record", "replay"):
            proxy = self.proxy(store, "--mode", mode, "--session", "reliability")
            pid = proxy.process.pid
            before = (rss_mib(pid), open_files(pid), directory_size(store))
            result = self.load(proxy.port, targets, count=a.requests, concurrency=a.concurrency,
                               source=b"upstream" if mode == "record" else b"cache")
            after = (rss_mib(pid), open_files(pid))
            code = proxy.stop()
            growth = directory_size(store) - before[2]
            bad = result.bad + ([f"exit status {code}"] if code else [])
            figures = (f"p50 {percentile(result.latencies, 50) * 1e3:.1f} ms, p99 "
                       f"{percentile(result.latencies, 99) * 1e3:.1f} ms, {a.requests / result.seconds:,.0f} req/s; "
                       f"RSS {before[0]:.0f} -> {after[0]:.0f} MiB, open files {before[1]} -> {after[1]}")
            if mode == "replay":
                figures += f"; store +{growth / 1e6:.1f} MB = {growth / a.requests:.0f} B/request"
            self.add(Row(f"{mode} c{a.concurrency}", a.requests, len(bad), figures), bad)

    # 2. kill -9 ------------------------------------------------------------------------------
    def kills(self) -> None:
        a = self.args
        store = self.workdir / "kills" / "store"
        acknowledged: set[int] = set()
        targets = [f"/v1/kill/item{i}?n={i}" for i in range(a.kill_requests * a.kills)]
        problems: list[str] = []
        for round_ in range(a.kills):
            proxy = self.proxy(store, "--mode", "record")
            chunk = targets[round_ * a.kill_requests:(round_ + 1) * a.kill_requests]
            killer = threading.Timer(a.kill_after, proxy.process.kill)
            killer.start()
            result = self.load(proxy.port, chunk, count=len(chunk), concurrency=16, source=b"upstream",
                               dropped_ok=True)
            killer.join()
            proxy.process.wait()
            if proxy.process.returncode != -9:
                problems.append(f"round {round_ + 1}: the proxy was not killed mid-run "
                                f"(exit {proxy.process.returncode}); raise --kill-requests")
            acknowledged |= {round_ * a.kill_requests + i for i in result.acknowledged}
            problems += result.bad
        url = f"http://{HOST}:{self.upstream_port}"
        with Store(store, readonly=True) as db:
            stored = {ex.request.url: ex.response.body for ex in db.entries()}
            damaged = db.stats().damaged
        missing = [targets[i] for i in sorted(acknowledged) if url + targets[i] not in stored]
        incomplete = [targets[i] for i in sorted(acknowledged)
                      if url + targets[i] in stored and stored[url + targets[i]] != body_for(targets[i])]
        problems += [f"acknowledged, not stored: {t}" for t in missing]
        problems += [f"stored incomplete: {t}" for t in incomplete]
        problems += [f"{damaged} damaged entries"] if damaged else []
        self.add(Row(f"kill -9 x{a.kills} (record)", len(acknowledged), len(problems),
                     f"acknowledged {len(acknowledged)}, "
                     f"stored whole {len(acknowledged) - len(missing) - len(incomplete)}, "
                     f"missing {len(missing)}, incomplete {len(incomplete)}, damaged entries {damaged}"), problems)

    # 3. fuzz -----------------------------------------------------------------------------------
    def fuzz(self) -> None:
        a = self.args
        proxy = self.proxy(self.workdir / "fuzz" / "store", "--simulator", "schema", "--deny-host", "*",
                           "--allow-host", HOST, "--upstream-timeout", "5")
        generated = fuzzkit.cases(a.seed, proxy.port, self.upstream_port)
        lock = threading.Lock()
        deadline = time.monotonic() + a.fuzz_seconds
        seen: dict[str, int] = {}
        problems: list[str] = []

        def worker() -> None:
            while time.monotonic() < deadline:
                with lock:
                    if sum(seen.values()) >= a.fuzz_cases:
                        return
                    case = next(generated)
                status, answer = fuzzkit.send(proxy.port, case.raw, timeout=30)
                with lock:
                    label = "no answer" if status is None else f"{status // 100}xx"
                    seen[label] = seen.get(label, 0) + 1
                    if status is None or status >= 500:
                        problems.append(f"{case.kind} {status}: {case.raw[:120]!r} -> {answer[:160]!r}")

        workers = [threading.Thread(target=worker) for _ in range(4)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        after = self.load(proxy.port, request_targets(1), count=1, concurrency=1, source=b"upstream")
        alive = proxy.process.poll() is None
        code = proxy.stop()
        output = "".join(proxy.output)
        tracebacks = output.count("Traceback")
        problems += after.bad + ([f"{tracebacks} tracebacks in the output"] if tracebacks else [])
        problems += [] if alive and code == 0 else [f"the proxy died or exited {code}"]
        total = sum(seen.values())
        shares = ", ".join(f"{k} {v}" for k, v in sorted(seen.items()))
        self.add(Row(f"fuzz (seed {a.seed}, {a.fuzz_seconds:g} s)", total, len(problems),
                     f"{shares}; tracebacks {tracebacks}; then an ordinary request: "
                     f"{'answered' if after.acknowledged else 'FAILED'}"), problems)

    # 4. full disk --------------------------------------------------------------------------------
    def full_disk(self) -> None:
        for mode in ("record", "virtual"):
            mount = self.workdir / f"tmpfs-{mode}"
            mount.mkdir()
            reason = self._mount(mount)
            if reason:
                self.add(Row(f"full disk ({mode})", 0, 0, f"skipped: {reason}"))
                return
            try:
                self._fill(mount, mode)
            finally:
                subprocess.run(["umount", str(mount)], check=False, capture_output=True)

    def _mount(self, mount: Path) -> str | None:
        if os.geteuid() != 0 or not shutil.which("mount"):
            return "needs root to mount a tmpfs"
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={self.args.tmpfs_mib}m,mode=0700", "tmpfs",
                               str(mount)], capture_output=True, text=True)
        return None if done.returncode == 0 else f"mount -t tmpfs failed: {done.stderr.strip()}"

    def _fill(self, mount: Path, mode: str) -> None:
        a = self.args
        store = mount / "store"
        # strict validity: every 200 of the upstream counts as real, so each answer is its body
        proxy = self.proxy(store, "--mode", mode, "--validity", "strict",
                           "--confdir", str(self.workdir / f"certs-{mode}"))
        targets = [f"/v1/full/{mode}/item{i}?pad={'x' * 1000}" for i in range(a.disk_requests)]
        result = self.load(proxy.port, targets, count=len(targets), concurrency=8,
                           source=b"upstream", allow=(507,) if mode == "record" else ())
        stats = subprocess.run([*stbproxy_command(), "stats", "--json", "--store", str(store)],
                               capture_output=True, text=True, env=child_env())
        failed_writes = json.loads(stats.stdout).get("failed_writes", 0) if stats.returncode == 0 else None
        code = proxy.stop()
        output = "".join(proxy.output)
        log_lines = output.count("could not store") + output.count("more writes failed")
        problems = list(result.bad)
        refused = result.statuses.get(507, 0)
        if mode == "record":
            with Store(store, readonly=True) as db:
                stored = {ex.request.url: ex.response.body for ex in db.entries()}
            base = f"http://{HOST}:{self.upstream_port}"
            lost = [targets[i] for i in result.acknowledged if stored.get(base + targets[i]) != body_for(targets[i])]
            problems += [f"acknowledged, not stored whole: {t}" for t in lost]
            problems += [] if refused else ["the disk never filled: raise --disk-requests"]
            problems += ([] if code != 0 and "could not flush" in output
                         else [f"shutdown exit {code} without a flush error"])
            figures = (f"200 (all stored whole: {not lost}) {len(result.acknowledged)}, 507 {refused}; ")
        else:
            problems += [] if result.unstored else ["the disk never filled: raise --disk-requests"]
            figures = (f"answered {sum(result.statuses.values())}/{len(targets)}, "
                       f"marked X-Stb-Stored: no {result.unstored}; ")
        problems += [] if failed_writes else [f"stats shows no failed writes ({stats.stderr.strip()[:200]})"]
        allowed_lines = 3 + result.seconds / LOG_INTERVAL  # the first failure, then one line per interval
        problems += [] if log_lines <= allowed_lines else [f"{log_lines} log lines about failed writes"]
        problems += [f"{output.count('Traceback')} tracebacks"] if "Traceback" in output else []
        figures += (f"failed-write log lines {log_lines} in {result.seconds:.0f} s, stats failed_writes "
                    f"{failed_writes}, exit {code}"
                    f"{' (could not flush)' if 'could not flush' in output else ''}")
        self.add(Row(f"full disk ({mode}, {a.tmpfs_mib} MiB tmpfs)", len(targets), len(problems), figures), problems)

    # -------------------------------------------------------------------------------------------
    def main(self) -> int:
        a = self.args
        self.upstream_port = self.upstream()
        print(f"reliability: {a.requests} requests at concurrency {a.concurrency} ({a.distinct} distinct), "
              f"{a.kills} kills, fuzz {a.fuzz_seconds:g} s, full disk on {a.tmpfs_mib} MiB; "
              f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}", flush=True)
        started = time.monotonic()
        for phase in (self.load_phases, self.kills, self.fuzz, self.full_disk):
            if phase.__name__ not in a.skip:
                phase()
        print(f"\n{'check':<32}{'count':>9}{'bad':>6}  figures")
        for row in self.rows:
            print(f"{row.check:<32}{row.count:>9}{row.bad:>6}  {row.figures}")
        print(f"\ntotal time {time.monotonic() - started:.0f} s")
        for line in self.samples[:20]:
            print(f"  problem: {line}")
        failed = sum(row.bad for row in self.rows)
        print("all checks passed" if not failed else f"{failed} problems found")
        return 1 if failed else 0


def options(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a small run for smoke tests (seconds)")
    p.add_argument("--requests", type=int, help="requests per load phase [100000]")
    p.add_argument("--concurrency", type=int, help="connections in the load phases [64]")
    p.add_argument("--distinct", type=int, help="distinct requests in the load phases [2000]")
    p.add_argument("--kills", type=int, help="kill -9 rounds [5]")
    p.add_argument("--kill-requests", type=int, help="requests sent per kill round [4000]")
    p.add_argument("--kill-after", type=float, help="seconds into a round when the proxy is killed [2.0]")
    p.add_argument("--fuzz-seconds", type=float, help="fuzz time bound [60]")
    p.add_argument("--fuzz-cases", type=int, help="fuzz case bound [10000]")
    p.add_argument("--seed", type=int, default=1, help="fuzz seed [1]")
    p.add_argument("--tmpfs-mib", type=int, default=4, help="size of the full-disk tmpfs [4]")
    p.add_argument("--disk-requests", type=int, help="requests that fill the tmpfs [4000]")
    p.add_argument("--phase-timeout", type=float, default=3600.0, help="deadline of each load phase, seconds")
    p.add_argument("--skip", action="append", default=[], choices=["load_phases", "kills", "fuzz", "full_disk"],
                   help="leave a phase out (repeatable)")
    a = p.parse_args(argv)
    quick = dict(requests=500, concurrency=16, distinct=50, kills=2, kill_requests=400, kill_after=0.5,
                 fuzz_seconds=3.0, fuzz_cases=500, disk_requests=2500)
    full = dict(requests=100_000, concurrency=64, distinct=2000, kills=5, kill_requests=4000, kill_after=2.0,
                fuzz_seconds=60.0, fuzz_cases=10_000, disk_requests=4000)
    for key, value in (quick if a.quick else full).items():
        if getattr(a, key) is None:
            setattr(a, key, value)
    if min(a.requests, a.concurrency, a.distinct, a.kills, a.kill_requests, a.fuzz_cases, a.disk_requests) < 1:
        p.error("counts must be 1 or more")
    return a


def main(argv: list[str]) -> int:
    args = options(argv)
    return run_in_workdir("reliability", "stb-reliability-", lambda workdir, stack: Run(args, workdir, stack).main(),
                          errors=(RuntimeError, OSError, subprocess.SubprocessError))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
