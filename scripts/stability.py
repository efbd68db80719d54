#!/usr/bin/env python3
"""StableToolBench's stability experiment, offline and deterministic.

The paper makes a growing share of tools fail and shows that, thanks to the simulator,
the share of tool calls that still get a valid answer stays flat. This script repeats
that on 127.0.0.1 only, with no network and no LLM:

1. a loopback "real API" (a thread here) answers every ToolBench-style call validly, so
   at 0% down every call is answered for real;
2. for each down level (0%, 10%, 20%, 50%) and each setting (the offline schema
   simulator, or none), a fresh `stbproxy serve` with an empty store and
   `--faults down=LEVEL --fault-seed SEED` sits in front of it;
3. a scripted client sends, for every query of a StableToolBench query file, one call
   per listed API with example arguments, as ToolBench's client does (POST /virtual with
   the six fields); each answer object is judged by stbproxy.validity.check_result.

It prints the share of valid answers per level and setting, the number of tools down,
PASS/FAIL lines for "without the simulator the share falls" and "with it, it stays
flat", and writes a PNG of both curves. Exit status 1 when a check fails.

Usage: python scripts/stability.py [--queries FILE] [--limit N | --quick] [--seed S] [--out PNG]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests

from stbproxy.catalog import api_key_name, standardize, tool_key
from stbproxy.faults import FaultPlan
from stbproxy.validity import check_result, judge_object
from benchkit import child_env, stbproxy_command

from stbproxy.serve_process import ServeProcess

REPO = Path(__file__).resolve().parent.parent
DEFAULT_QUERIES = (REPO.parent / "shared" / "data" / "stabletoolbench" / "solvable_queries"
                   / "test_instruction" / "G1_instruction.json")
HOST = "127.0.0.1"
LEVELS = (0.0, 0.1, 0.2, 0.5)
QUICK_LIMIT = 20
CLIENT_THREADS = 8
PARALLEL_RUNS = max(1, min(4, os.cpu_count() or 1))  # proxies at once: their start-up is CPU-bound
CLIENT_TIMEOUT = 15  # seconds, ToolBench's own request timeout
CLIENT_RETRIES = 3
# How far (in share) the curve with the simulator may move and still count as flat. Not
# zero: the offline simulator keeps a template's key names, and a few templates carry
# keys that check_result reads as failures ("parameters", "404"), so those APIs' calls
# stay invalid once their tool is down (G1_instruction, seed 0: 12 of 862 calls at 50%).
FLAT_TOLERANCE = 0.02
# A stand-in secret: the proxy must forward it, never store it.
TOOLBENCH_KEY = "stability-experiment-key"

# Placeholders for parameters without a usable default, by ToolBench's type names.
PLACEHOLDERS = {"NUMBER": 1, "INTEGER": 1, "FLOAT": 1.0, "BOOLEAN": True, "OBJECT": {}, "ARRAY": []}
STRING_PLACEHOLDER = "example"
DATE_PLACEHOLDER = "2024-01-01"


# -- the calls ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    category: str
    tool: str  # standardized, as ToolBench's client sends it
    api: str  # standardized, as ToolBench's client sends it
    tool_input: str  # the arguments as a JSON string
    tool_key: str  # the identity fault injection decides "down" by

    def payload(self) -> dict:
        return {"category": self.category, "tool_name": self.tool, "api_name": self.api,
                "tool_input": self.tool_input, "strip": "truncate", "toolbench_key": TOOLBENCH_KEY}


def placeholder(param_type: str):
    kind = (param_type or "").upper()
    if kind.startswith("DATE"):
        return DATE_PLACEHOLDER
    return PLACEHOLDERS.get(kind, STRING_PLACEHOLDER)


def example_args(api: dict) -> dict:
    """Required parameters always (default, else a placeholder); optional ones only when
    they have a default, as an agent copying the documentation's example would."""
    args = {}
    for required, params in ((True, api.get("required_parameters") or []),
                             (False, api.get("optional_parameters") or [])):
        for param in params:
            name, default = param.get("name"), param.get("default")
            if not name:
                continue
            if default not in (None, ""):
                args[name] = default
            elif required:
                args[name] = placeholder(param.get("type", ""))
    return args


def load_calls(path: Path, limit: int | None) -> list[ToolCall]:
    queries = json.loads(path.read_text(encoding="utf-8"))
    calls = []
    for query in queries[:limit]:
        for api in query.get("api_list", []):
            category, tool = api["category_name"], api["tool_name"]
            calls.append(ToolCall(category, standardize(tool), api_key_name(api["api_name"]),
                                  json.dumps(example_args(api), ensure_ascii=False),
                                  tool_key(tool, category)))
    return calls


# -- the loopback "real API" --------------------------------------------------------------

# Fixed and free of anything check_result reads as a failure (digits like 500 or 404,
# "parse", "parameter"...), so every real answer is valid whatever the call was.
REAL_ANSWER = json.dumps({"error": "", "response": {"source": "real api", "items": [
    {"name": "sample", "rank": 1}, {"name": "example", "rank": 2}]}}).encode()


class RealApi:
    """A ToolBench-style server that answers every call validly, and counts them."""

    def __init__(self) -> None:
        self.calls = 0
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as two writes

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with owner._lock:
                    owner.calls += 1
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(REAL_ANSWER)))
                self.end_headers()
                self.wfile.write(REAL_ANSWER)

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://{HOST}:{self._server.server_address[1]}/virtual"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "RealApi":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# -- the proxy ------------------------------------------------------------------------------




# -- the client -----------------------------------------------------------------------------


@dataclass
class RunResult:
    valid: list[bool]
    sources: Counter = field(default_factory=Counter)
    invalid: list[tuple[ToolCall, object]] = field(default_factory=list)  # for the diagnosis

    @property
    def share(self) -> float:
        return sum(self.valid) / len(self.valid) if self.valid else 0.0


def call_once(session: requests.Session, url: str, call: ToolCall) -> tuple[object, str]:
    """One call as ToolBench's client makes it: the key repeated as a header, a retry on
    anything but 200. Returns the answer object and the proxy's X-Stb-Source."""
    last = None
    for attempt in range(CLIENT_RETRIES):
        try:
            r = session.post(url, json=call.payload(), headers={"toolbench_key": TOOLBENCH_KEY},
                             timeout=CLIENT_TIMEOUT)
        except requests.RequestException as exc:
            last = {"error": f"request failed: {exc}", "response": ""}
        else:
            if r.status_code == 200:
                try:
                    return r.json(), r.headers.get("X-Stb-Source", "?")
                except ValueError:
                    return {"error": "answer is not JSON", "response": r.text}, "not-json"
            last = {"error": f"request invalid, data error. status_code={r.status_code}", "response": ""}
        if attempt + 1 < CLIENT_RETRIES:
            time.sleep(0.2 * (attempt + 1))
    return last, "client-error"


def run_client(url: str, calls: list[ToolCall]) -> RunResult:
    local = threading.local()

    def one(call: ToolCall) -> tuple[object, str]:
        if not hasattr(local, "session"):
            local.session = requests.Session()
            local.session.trust_env = False  # never through a proxy from the environment
        return call_once(local.session, url, call)

    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        answers = list(pool.map(one, calls))
    valid = [check_result(obj) for obj, _ in answers]
    invalid = [(call, obj) for call, (obj, _), ok in zip(calls, answers, valid) if not ok]
    return RunResult(valid, Counter(source for _, source in answers), invalid)


def run_setting(workdir: Path, name: str, catalog: Path, real: RealApi, simulator: str, level: float,
                seed: int, calls: list[ToolCall]) -> RunResult:
    store = workdir / name / "store"  # fresh and empty for every run
    args = ["--catalog", str(catalog), "--toolbench-url", real.url,
            "--simulator", simulator, "--faults", f"down={level:g}", "--fault-seed", str(seed)]
    try:
        with ServeProcess(store, *args) as proxy:
            return run_client(f"{proxy.url}/virtual", calls)
    finally:
        shutil.rmtree(workdir / name, ignore_errors=True)


def import_catalog(queries: Path, target: Path) -> None:
    result = subprocess.run([*stbproxy_command(), "import", "tools", str(queries), "--catalog", str(target),
                             "--store", str(target.parent / "unused-store")],
                            capture_output=True, text=True, timeout=300, env=child_env())
    if result.returncode != 0 or not target.exists():
        raise RuntimeError(f"stbproxy import tools failed:\n{result.stdout}{result.stderr}")


# -- report ---------------------------------------------------------------------------------


def non_increasing(values: list[float]) -> bool:
    return all(b <= a for a, b in zip(values, values[1:]))


def report_invalid(runs: list[RunResult], most: int = 10) -> None:
    """Which APIs still got invalid answers with the simulator on, and by which rule."""
    reasons = Counter()
    for run in runs:
        for call, obj in run.invalid:
            reasons[(call.tool_key, call.api, judge_object(obj).reason)] += 1
    if not reasons:
        return
    print("\ninvalid answers with the simulator (calls over all levels, API, check_result's rule):")
    for (tool, api, why), n in reasons.most_common(most):
        print(f"  {n:>4}  {tool} / {api}: {why}")


def plot(levels, with_sim, without_sim, out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    xs = [100 * x for x in levels]
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    ax.plot(xs, [100 * s for s in with_sim], "o-", label="with simulator (schema)")
    ax.plot(xs, [100 * s for s in without_sim], "s--", label="without simulator")
    ax.set_xlabel("tools down (%)")
    ax.set_ylabel("calls with a valid answer (%)")
    ax.set_ylim(0, 105)
    ax.set_xticks(xs)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, format="png")
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=Path, default=DEFAULT_QUERIES, help="StableToolBench query file")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N queries")
    parser.add_argument("--quick", action="store_true", help=f"same as --limit {QUICK_LIMIT}")
    parser.add_argument("--seed", type=int, default=0, help="--fault-seed: which tools are down")
    parser.add_argument("--out", type=Path, default=Path("stability.png"), help="PNG plot to write")
    parser.add_argument("--flat-tolerance", type=float, default=FLAT_TOLERANCE,
                        help="largest spread of the with-simulator shares that still counts as flat")
    opts = parser.parse_args(argv)
    if not opts.queries.is_file():
        parser.error(f"query file not found: {opts.queries}")
    if opts.limit is not None and opts.limit < 1:
        parser.error("--limit must be at least 1")
    limit = opts.limit if opts.limit is not None else (QUICK_LIMIT if opts.quick else None)

    calls = load_calls(opts.queries, limit)
    if not calls:
        parser.error("the query file lists no API calls")
    tools = sorted({c.tool_key for c in calls})
    print(f"{opts.queries.name}: {len(calls)} calls to {len({(c.tool_key, c.api) for c in calls})} APIs "
          f"of {len(tools)} tools; fault seed {opts.seed}", flush=True)

    downs = {level: set(FaultPlan.from_specs(f"down={level:g}", opts.seed).down_tools(tools)) for level in LEVELS}
    workdir = Path(tempfile.mkdtemp(prefix="stb-stability-"))
    results: dict[tuple[float, str], RunResult] = {}
    started = time.monotonic()
    try:
        catalog = workdir / "catalog.json"
        import_catalog(opts.queries, catalog)
        with RealApi() as real, ThreadPoolExecutor(PARALLEL_RUNS) as runs:
            # The runs are independent (own proxy, own store), so they overlap: most of a
            # run's time is the proxy starting up.
            jobs = {runs.submit(run_setting, workdir, f"{simulator}-{level:g}", catalog, real, simulator,
                                level, opts.seed, calls): (level, simulator)
                    for level in LEVELS for simulator in ("schema", "off")}
            try:
                for job in as_completed(jobs):
                    results[jobs[job]] = job.result()
                    level, simulator = jobs[job]
                    print(f"  down={level:g} simulator={simulator}: done ({time.monotonic() - started:.0f}s)",
                          flush=True)
            except BaseException:
                runs.shutdown(cancel_futures=True)  # runs not yet started never start
                raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = [(level, len(downs[level]), sum(c.tool_key not in downs[level] for c in calls) / len(calls),
             results[level, "schema"], results[level, "off"]) for level in LEVELS]

    print()
    print(f"{'down':>5}  {'tools down':>10}  {'with simulator':>14}  {'without':>8}  {'expected w/o':>12}")
    for level, n_down, expected, sim, off in rows:
        print(f"{100 * level:>4.0f}%  {n_down:>4}/{len(tools):<5}  {100 * sim.share:>13.1f}%  "
              f"{100 * off.share:>7.1f}%  {100 * expected:>11.1f}%")
    print(f"({len(calls)} calls per run; 'expected w/o' is the share of calls to tools that are not down)")
    print("\nanswer sources (X-Stb-Source) per run:")
    for level, _, _, sim, off in rows:
        for label, run in (("simulator", sim), ("off", off)):
            print(f"  {100 * level:>3.0f}% {label:<9} " + ", ".join(f"{k} {v}" for k, v in sorted(run.sources.items())))

    report_invalid([r[3] for r in rows])

    with_sim = [r[3].share for r in rows]
    without = [r[4].share for r in rows]
    zero_real = rows[0][4].sources.keys() <= {"upstream", "cache"} and rows[0][4].share == 1.0
    falls = non_increasing(without) and without[-1] < without[0]
    flat = max(with_sim) - min(with_sim) <= opts.flat_tolerance
    checks = [
        (zero_real, "at 0% down every call is answered validly by the real API"),
        (falls, "without the simulator the valid share falls as more tools are down "
                f"({' -> '.join(f'{100 * s:.1f}%' for s in without)})"),
        (flat, f"with the simulator the valid share stays flat, within {100 * opts.flat_tolerance:g} points "
               f"({' -> '.join(f'{100 * s:.1f}%' for s in with_sim)})"),
    ]
    print()
    for ok, text in checks:
        print(f"{'PASS' if ok else 'FAIL'}: {text}")

    plot(LEVELS, with_sim, without, opts.out,
         f"Stability: {opts.queries.stem}, {len(calls)} calls, seed {opts.seed}")
    print(f"\nplot written to {opts.out}")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
