"""One fuzz lane end to end: a proxy, the hostile cases, the checks afterwards, its log.

``fuzz_lane`` starts ``stbproxy serve`` in one lane (``LANES``: the fast lane, serve's default,
or --no-fast-lane, mitmproxy's own layers) with a ``FuzzUpstream`` (fuzz_upstream.py), sends it
``hostile_cases`` (fuzz_hostile.py) through fuzz_runner.py, checks that the framings to refuse were
refused and never forwarded (``refused_framing``) and that an ordinary proxied GET, a /virtual
call and a GET inside a tunnel still work (``still_serving``), stops it and scans its
log for tracebacks, "mitmproxy has crashed" and "internal error" (``log_problems``). The
``LaneRun`` it returns says whether the lane passed and prints the report that
scripts/reliability/fuzz_proxy.py and tests/proxy/test_fuzz_proxy.py show.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
from collections import Counter
from dataclasses import dataclass

from scripts.reliability.fuzz_carriers import CASE_TAG
from scripts.reliability.fuzz_hostile import REFUSED_CLASSES, hostile_cases
from scripts.reliability.fuzz_judge import FINE, Result
from scripts.reliability.fuzz_runner import run_case, run_cases
from scripts.reliability.fuzz_upstream import FuzzUpstream, make_tls
from scripts.reliability.fuzzkit import ANSWER, Case

LANES = {"fast-lane": (), "no-fast-lane": ("--no-fast-lane",)}  # serve's default, and mitmproxy's own layers
LOG_MARKERS = ("Traceback", "mitmproxy has crashed", "internal error")


@dataclass
class LaneRun:
    lane: str
    seed: int
    results: list[Result]
    checks: list[tuple[str, bool, str]]  # (what, passed, what came back) after the cases
    log_problems: list[str]  # each marked log line, with the exception that ends its traceback
    output: str
    seconds: float  # from the first case to the last answer (or timeout)
    sending: float = 0.0  # seconds over which cases were started

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.failed]

    @property
    def ok(self) -> bool:
        return not self.failures and not self.log_problems and all(passed for _, passed, _ in self.checks)

    def counts(self) -> dict[str, Counter]:
        """Outcomes by class."""
        table: dict[str, Counter] = {}
        for result in self.results:
            table.setdefault(result.case.cls, Counter())[result.outcome] += 1
        return table

    def examples(self, limit: int = 8) -> list[Result]:
        """The first failing case of each (class, kind, outcome), up to ``limit``."""
        seen, found = set(), []
        for result in sorted(self.failures, key=lambda r: r.case.number or 0):
            key = (result.case.cls, result.case.kind, result.outcome)
            if key not in seen:
                seen.add(key)
                found.append(result)
        return found[:limit]

    def report(self, examples: int = 8) -> str:
        outcomes = Counter(r.outcome for r in self.results)
        lines = [f"lane {self.lane} (seed {self.seed}): {len(self.results)} cases started over {self.sending:.1f}s, "
                 f"the last one done after {self.seconds:.1f}s: "
                 + ", ".join(f"{name} {count}" for name, count in outcomes.most_common())]
        width = max((len(name) for name in self.counts()), default=5)
        for cls, counter in sorted(self.counts().items()):
            bad = sum(n for outcome, n in counter.items() if outcome not in FINE)
            lines.append(f"  {cls:<{width}} {sum(counter.values()):>6}  {'FAIL' if bad else 'ok  '}  "
                         + ", ".join(f"{outcome} {n}" for outcome, n in counter.most_common()))
        for what, passed, detail in self.checks:
            lines.append(f"  after the run, {what}: {'ok' if passed else 'FAILED: ' + detail}")
        if self.log_problems:
            lines.append(f"  the proxy's log: {len(self.log_problems)} marked lines")
            lines += [f"    {count} x {problem}" for problem, count in Counter(self.log_problems).most_common(10)]
        else:
            lines.append("  the proxy's log: no Traceback, no 'mitmproxy has crashed', no 'internal error'")
        if self.failures:
            lines.append(f"  {len(self.failures)} failing cases; the first of each kind:")
            lines += ["  " + r.describe().replace("\n", "\n  ") for r in self.examples(examples)]
        return "\n".join(lines)


def log_problems(output: str) -> list[str]:
    """The log's marked lines; a traceback is named by the exception line that ends it."""
    lines = output.splitlines()
    found = []
    for at, line in enumerate(lines):
        if not any(marker in line for marker in LOG_MARKERS):
            continue
        text = re.sub(r"^[-\d]+ [:,\d]+ ", "", line.strip())
        if "Traceback" in line:
            end = next((lines[k].strip() for k in range(at + 1, len(lines))
                        if lines[k] and not lines[k].startswith((" ", "\t"))), "?")
            text = f"Traceback ... {end}"
        found.append(text[:300])
    return found


async def _request(port: int, raw: bytes, upstream: FuzzUpstream, kind: str = "proxy", number: int | None = None,
                   client_tls: ssl.SSLContext | None = None, tunnel: bytes = b"") -> Result:
    case = Case(kind, raw, "after the run", ANSWER, number, number is not None, tunnel=tunnel)
    return await run_case(case, port, upstream, timeout=15, client_tls=client_tls)


async def still_serving(port: int, upstream: FuzzUpstream, mode: str,
                        client_tls: ssl.SSLContext | None) -> list[tuple[str, bool, str]]:
    """An ordinary proxied GET, a /virtual call (and a GET inside a tunnel) after the cases."""
    checks = []
    number = 10**9
    own, up = b"127.0.0.1:%d" % port, b"127.0.0.1:%d" % upstream.port
    got = await _request(port, b"GET http://%s/echo?%s%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (up, CASE_TAG, number, up),
                         upstream, number=number)
    checks.append(("a proxied GET", got.status == 200 and got.source == "upstream" and upstream.reached(number),
                   got.describe()))
    body = json.dumps({"category": "Data", "tool_name": "AfterFuzz", "api_name": "still_serving",
                       "tool_input": "{}"}).encode()
    got = await _request(port, b"POST /virtual HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (own, len(body), body), upstream, kind="virtual")
    try:
        answer = json.loads(got.answer.partition(b"\r\n\r\n")[2])
        shaped = isinstance(answer, dict) and {"error", "response"} <= set(answer)
        fine = shaped and (mode != "virtual" or answer["error"] == "")
    except ValueError:
        fine = False
    checks.append(("a /virtual call", got.status == 200 and fine, got.describe()))
    if client_tls is not None and upstream.tls_port:
        number += 1
        host = b"localhost:%d" % upstream.tls_port
        got = await _request(port, b"GET /echo?%s%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (CASE_TAG, number, host),
                             upstream, kind="tunnel", number=number, client_tls=client_tls, tunnel=host)
        checks.append(("a GET inside a CONNECT tunnel",
                       got.status == 200 and got.source == "upstream" and upstream.reached(number), got.describe()))
    return checks


def refused_framing(results: list[Result], upstream: FuzzUpstream) -> tuple[str, bool, str]:
    """Every case of REFUSED_CLASSES refused (a 4xx, or 501) and none of them forwarded: each
    is framing that another reader would take otherwise (request smuggling)."""
    cases = [r for r in results if r.case.cls in REFUSED_CLASSES and r.status is not None]
    wrong = [r for r in cases if not (400 <= r.status < 500 or r.status == 501) or upstream.reached(r.case.number)]
    return (f"the {len(cases)} framings to refuse refused, none forwarded", not wrong,
            wrong[0].describe() if wrong else "")


async def _fuzz_lane(folder, lane: str, *, seed: int, seconds: float, max_cases: int, concurrency: int,
                     timeout: float, classes: list[str] | None, tls: bool, mode: str, extra_args: tuple[str, ...]):
    from pathlib import Path

    from stbproxy.serve_process import ServeProcess

    folder = Path(folder)
    ca_file, server_tls = make_tls(folder / "tls") if tls else (None, None)
    upstream = await FuzzUpstream().start(server_tls)
    args = ["--mode", mode, "--simulator", "schema", "--deny-host", "*", "--allow-host", "127.0.0.1",
            "--allow-host", "localhost", "--upstream-timeout", "3", *LANES[lane], *extra_args]
    proxy = ServeProcess(folder / "store", *args, *(["--upstream-ca", ca_file] if ca_file else []))
    try:
        await asyncio.to_thread(proxy.start)
        started = time.monotonic()
        client_tls = ssl.create_default_context(cafile=str(proxy.ca_file)) if tls else None
        generated = hostile_cases(seed, proxy.port, upstream.port, upstream.tls_port, classes)
        timing: dict[str, float] = {}
        results = await run_cases(proxy.port, generated, upstream, seconds=seconds, max_cases=max_cases,
                                  concurrency=concurrency, timeout=timeout, client_tls=client_tls, timing=timing)
        elapsed = time.monotonic() - started
        checks = [refused_framing(results, upstream)] + await still_serving(proxy.port, upstream, mode, client_tls)
    finally:
        await asyncio.to_thread(proxy.stop)
        await upstream.stop()
    size, quiet_since, give_up = -1, time.monotonic(), time.monotonic() + 5  # the output thread reads to the end
    while time.monotonic() - quiet_since < 0.3 and time.monotonic() < give_up:
        if len(proxy.output) != size:
            size, quiet_since = len(proxy.output), time.monotonic()
        await asyncio.sleep(0.05)
    output = "".join(proxy.output)
    return LaneRun(lane, seed, results, checks, log_problems(output), output, elapsed, timing.get("sending", 0.0))


def fuzz_lane(folder, lane: str, *, seed: int, seconds: float = 7.0, max_cases: int = 10_000, concurrency: int = 8,
              timeout: float = 8.0, classes: list[str] | None = None, tls: bool = True, mode: str = "virtual",
              extra_args: tuple[str, ...] = ()) -> LaneRun:
    """Start ``stbproxy serve`` (``lane``: a key of LANES) with its store
    in ``folder`` and a FuzzUpstream, send hostile cases for ``seconds`` (at most ``max_cases``),
    check that it still serves, stop it, scan its log. Only 127.0.0.1 is used; every process
    started is stopped."""
    return asyncio.run(_fuzz_lane(folder, lane, seed=seed, seconds=seconds, max_cases=max_cases,
                                  concurrency=concurrency, timeout=timeout, classes=classes, tls=tls, mode=mode,
                                  extra_args=extra_args))
