"""StableToolBench's stability experiment, offline and repeatable (``stbproxy eval stability``).

The paper knocks out a growing share of tools and shows that, with a simulator, the share
of tool calls that still get a valid answer stays flat. This module repeats that on
127.0.0.1 alone, with no network and no LLM:

1. a loopback "real API" answers every ToolBench-style call validly, so with no tool down
   every call gets a real answer;
2. for each share of tools down (0, 10, 20, 50 %) and each setting (the offline schema
   simulator, or none), a fresh ``stbproxy serve`` with an empty store and
   ``--faults down=SHARE --fault-seed SEED`` sits in front of it;
3. a client sends, for every query, one call per listed API with example arguments, as
   ToolBench's client does (POST /virtual with its six fields), and StableToolBench's
   ``check_result`` judges each answer.

The queries are a StableToolBench query file, or the built-in synthetic set
(queries.py). The results say, per share and setting, how many answers were
valid, and three checks: all real at 0 %, falling without the simulator, flat with it.
"""

from __future__ import annotations

import functools
import json
import shutil
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import requests

from stbproxy.errors import InputError, StbError
from stbproxy.serve_process import ServeProcess
from stbproxy.sim.faults import FaultPlan
from stbproxy.stb.catalog import Catalog, api_key_name, standardize, tool_key
from stbproxy.stb.validity import check_result, judge_object

LEVELS = (0.0, 0.1, 0.2, 0.5)
SETTINGS = ("schema", "off")  # the proxy's --simulator in each run
PARALLEL_RUNS = 4  # proxies at once: most of a run is a proxy starting up
CLIENT_THREADS = 8
CLIENT_TIMEOUT = 15  # seconds, ToolBench's own request timeout
CLIENT_RETRIES = 3
# A stand-in secret: the proxy forwards it and never stores it.
TOOLBENCH_KEY = "stability-experiment-key"

# Values for parameters without a usable default, by ToolBench's type names.
PLACEHOLDERS = {"NUMBER": 1, "INTEGER": 1, "FLOAT": 1.0, "BOOLEAN": True, "OBJECT": {}, "ARRAY": []}
STRING_PLACEHOLDER = "example"
DATE_PLACEHOLDER = "2024-01-01"


# -- the calls --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    category: str
    tool: str  # standardized, as ToolBench's client sends it
    api: str  # standardized, as ToolBench's client sends it
    tool_input: str  # the arguments, as a JSON string
    tool_key: str  # the identity fault injection decides "down" by

    def payload(self) -> dict[str, str]:
        return {"category": self.category, "tool_name": self.tool, "api_name": self.api,
                "tool_input": self.tool_input, "strip": "truncate", "toolbench_key": TOOLBENCH_KEY}


def placeholder(param_type: str) -> Any:
    kind = (param_type or "").upper()
    return DATE_PLACEHOLDER if kind.startswith("DATE") else PLACEHOLDERS.get(kind, STRING_PLACEHOLDER)


def example_args(api: dict) -> dict[str, Any]:
    """Required parameters always (their default, else a placeholder); optional ones only
    with a default, as an agent copying the documentation's example would."""
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


def calls_of(queries: list[dict]) -> list[ToolCall]:
    """One call per API listed by each query; InputError names an entry that cannot be called."""
    calls = []
    for number, query in enumerate(queries):
        for index, api in enumerate(query.get("api_list") or []):
            names = [api.get(key) if isinstance(api, dict) else None
                     for key in ("category_name", "tool_name", "api_name")]
            given = [name for name in names if isinstance(name, str) and name]
            if len(given) != len(names):
                raise InputError(f"query [{number}] api_list[{index}] needs category_name, tool_name and api_name")
            category, tool, api_name = given
            calls.append(ToolCall(category, standardize(tool), api_key_name(api_name),
                                  json.dumps(example_args(api), ensure_ascii=False), tool_key(tool, category)))
    return calls


def read_queries(path: Path) -> list[dict]:
    """A StableToolBench query file (a JSON list of queries with their ``api_list``)."""
    try:
        queries = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"cannot read the query file {path}: {exc}") from exc
    if not isinstance(queries, list) or not all(isinstance(q, dict) for q in queries):
        raise InputError(f"{path} is not a StableToolBench query file (a JSON list of queries)")
    return queries


# -- the loopback "real API" ------------------------------------------------------------------

# Fixed and free of anything check_result reads as a failure (digits such as 500 or 404,
# "parse", "parameter"...), so every real answer is valid whatever the call.
REAL_ANSWER = json.dumps({"error": "", "response": {"source": "real api", "items": [
    {"name": "sample", "rank": 1}, {"name": "example", "rank": 2}]}}).encode()


class _Listening(ThreadingHTTPServer):
    # Four proxies with eight clients each connect at once: the standard backlog of 5 can
    # overflow on a busy machine, and a connection lost there would count as an API down.
    request_queue_size = 128


class RealApi:
    """A ToolBench-style server on loopback that answers every call validly."""

    def __init__(self) -> None:
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body leave as two writes

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(REAL_ANSWER)))
                self.end_headers()
                self.wfile.write(REAL_ANSWER)

        self._server = _Listening(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/virtual"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> RealApi:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


# -- one run: a proxy, a client ------------------------------------------------------------------


@dataclass
class RunResult:
    valid: list[bool]
    sources: Counter = field(default_factory=Counter)  # X-Stb-Source of the answers
    invalid: list[tuple[ToolCall, Any]] = field(default_factory=list)  # kept to explain them

    @property
    def share(self) -> float:
        return sum(self.valid) / len(self.valid) if self.valid else 0.0


def call_once(session: requests.Session, url: str, call: ToolCall) -> tuple[Any, str]:
    """One call as ToolBench's client makes it: the key repeated as a header, another try on
    anything but a 200. Returns the answer object and the proxy's X-Stb-Source."""
    answer: Any = None
    for attempt in range(CLIENT_RETRIES):
        try:
            reply = session.post(url, json=call.payload(), headers={"toolbench_key": TOOLBENCH_KEY},
                                 timeout=CLIENT_TIMEOUT)
        except requests.RequestException as exc:
            answer = {"error": f"request failed: {exc}", "response": ""}
        else:
            if reply.status_code == 200:
                try:
                    return reply.json(), reply.headers.get("X-Stb-Source", "?")
                except ValueError:
                    return {"error": "answer is not JSON", "response": reply.text}, "not-json"
            answer = {"error": f"request invalid, data error. status_code={reply.status_code}", "response": ""}
        if attempt + 1 < CLIENT_RETRIES:
            time.sleep(0.2 * (attempt + 1))
    return answer, "client-error"


def run_client(url: str, calls: list[ToolCall]) -> RunResult:
    local = threading.local()

    def one(call: ToolCall) -> tuple[Any, str]:
        if not hasattr(local, "session"):
            local.session = requests.Session()
            local.session.trust_env = False  # straight to this proxy, never through the caller's
        return call_once(local.session, url, call)

    with ThreadPoolExecutor(CLIENT_THREADS) as pool:
        answers = list(pool.map(one, calls))
    valid = [check_result(answer) for answer, _ in answers]
    invalid = [(call, answer) for call, (answer, _), ok in zip(calls, answers, valid) if not ok]
    return RunResult(valid, Counter(source for _, source in answers), invalid)


def run_setting(workdir: Path, catalog: Path, real: RealApi, simulator: str, level: float, seed: int,
                calls: list[ToolCall]) -> RunResult:
    """One proxy with a fresh, empty store, removed afterwards."""
    folder = workdir / f"{simulator}-{level:g}"
    args = ["--catalog", str(catalog), "--toolbench-url", real.url, "--simulator", simulator,
            "--faults", f"down={level:g}", "--fault-seed", str(seed)]
    try:
        with ServeProcess(folder / "store", *args) as proxy:
            return run_client(f"{proxy.url}/virtual", calls)
    except RuntimeError as exc:  # the proxy did not start: its last line says why
        last = str(exc).strip().splitlines()[-1]
        raise StbError(f"the proxy for down={level:g}, --simulator {simulator} did not start: {last}") from exc
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# -- the experiment -----------------------------------------------------------------------------


@dataclass
class Experiment:
    name: str  # of the query set
    queries: list[dict]
    seed: int
    flat_tolerance: float  # how far (in share) the curve with the simulator may move and still be flat
    results: dict[tuple[float, str], RunResult] = field(default_factory=dict)

    @classmethod
    def plan(cls, queries: list[dict], name: str, *, limit: int | None, seed: int,
             flat_tolerance: float) -> Experiment:
        """The experiment on the first ``limit`` queries; InputError when they list no API."""
        experiment = cls(name, queries[:limit], seed, flat_tolerance)
        if not experiment.calls:
            raise InputError(f"{name} lists no API calls (no query has an api_list)")
        return experiment

    @functools.cached_property
    def calls(self) -> list[ToolCall]:
        return calls_of(self.queries)

    @property
    def tools(self) -> list[str]:
        return sorted({call.tool_key for call in self.calls})

    def down(self, level: float) -> list[str]:
        return FaultPlan.from_specs(f"down={level:g}", self.seed).down_tools(self.tools)

    def shares(self, setting: str) -> list[float]:
        return [self.results[level, setting].share for level in LEVELS]

    def checks(self) -> list[tuple[bool, str]]:
        with_sim, without = self.shares("schema"), self.shares("off")
        at_zero = self.results[LEVELS[0], "off"]
        return [
            (at_zero.sources.keys() <= {"upstream", "cache"} and at_zero.share == 1.0,
             "at 0% down every call is answered validly by the real API"),
            (all(b <= a for a, b in zip(without, without[1:])) and without[-1] < without[0],
             f"without the simulator the valid share falls as more tools are down ({_curve(without)})"),
            (max(with_sim) - min(with_sim) <= self.flat_tolerance,
             f"with the simulator the valid share stays flat, within {100 * self.flat_tolerance:g} points "
             f"({_curve(with_sim)})"),
        ]

    @property
    def passed(self) -> bool:
        return all(ok for ok, _ in self.checks())


def run_experiment(experiment: Experiment, progress: Callable[[str], None] = lambda _line: None) -> Experiment:
    """Every share of tools down, with and without the simulator: one proxy each, a few at a
    time (their runs are independent: own proxy, own store)."""
    workdir = Path(tempfile.mkdtemp(prefix="stbproxy-stability-"))
    started = time.monotonic()
    try:
        catalog = _catalog_of(experiment.queries, workdir)
        with RealApi() as real, ThreadPoolExecutor(PARALLEL_RUNS) as runs:
            jobs = {runs.submit(run_setting, workdir, catalog, real, setting, level, experiment.seed,
                                experiment.calls): (level, setting) for level in LEVELS for setting in SETTINGS}
            try:
                for job in as_completed(jobs):
                    level, setting = jobs[job]
                    experiment.results[level, setting] = job.result()
                    progress(f"  down={level:g} simulator={setting}: done ({time.monotonic() - started:.0f}s)")
            except BaseException:
                runs.shutdown(cancel_futures=True)  # runs not started yet never start
                raise
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return experiment


def _catalog_of(queries: list[dict], workdir: Path) -> Path:
    """The catalog the proxies route and simulate with, built from the queries' API lists."""
    source, target = workdir / "queries.json", workdir / "catalog.json"
    source.write_text(json.dumps(queries), encoding="utf-8")
    catalog = Catalog()
    catalog.load_query_file(source)
    catalog.save(target)
    return target


# -- report ---------------------------------------------------------------------------------------


def _curve(shares: list[float]) -> str:
    return " -> ".join(f"{100 * share:.1f}%" for share in shares)


def summary_line(experiment: Experiment) -> str:
    calls = experiment.calls
    return (f"{experiment.name}: {len(calls)} calls to {len({(c.tool_key, c.api) for c in calls})} APIs "
            f"of {len(experiment.tools)} tools; fault seed {experiment.seed}")


def report_lines(experiment: Experiment) -> list[str]:
    """The table, the answer sources per run, what stayed invalid, and the checks."""
    calls, tools = experiment.calls, experiment.tools
    lines = ["", f"{'down':>5}  {'tools down':>10}  {'with simulator':>14}  {'without':>8}  {'expected w/o':>12}"]
    for level in LEVELS:
        down = set(experiment.down(level))
        expected = sum(call.tool_key not in down for call in calls) / len(calls)
        with_sim, without = experiment.results[level, "schema"], experiment.results[level, "off"]
        lines.append(f"{100 * level:>4.0f}%  {len(down):>4}/{len(tools):<5}  {100 * with_sim.share:>13.1f}%  "
                     f"{100 * without.share:>7.1f}%  {100 * expected:>11.1f}%")
    lines.append(f"({len(calls)} calls per run; 'expected w/o' is the share of calls to tools that are not down)")
    lines += ["", "answer sources (X-Stb-Source) per run:"]
    for level in LEVELS:
        for label, setting in (("simulator", "schema"), ("off", "off")):
            sources = experiment.results[level, setting].sources
            lines.append(f"  {100 * level:>3.0f}% {label:<9} "
                         + ", ".join(f"{k} {v}" for k, v in sorted(sources.items())))
    lines += _invalid_with_simulator(experiment)
    lines.append("")
    lines += [f"{'PASS' if ok else 'FAIL'}: {text}" for ok, text in experiment.checks()]
    return lines


def _invalid_with_simulator(experiment: Experiment, most: int = 10) -> list[str]:
    """Which APIs still got invalid answers with the simulator on, and by which rule."""
    reasons: Counter = Counter()
    for level in LEVELS:
        for call, answer in experiment.results[level, "schema"].invalid:
            reasons[(call.tool_key, call.api, judge_object(answer).reason)] += 1
    if not reasons:
        return []
    return ["", "invalid answers with the simulator (calls over all levels, API, check_result's rule):",
            *(f"  {n:>4}  {tool} / {api}: {why}" for (tool, api, why), n in reasons.most_common(most))]


def series(experiment: Experiment) -> dict:
    """Both curves as data (``eval report --stability`` draws them in the page)."""
    xs = [100 * level for level in LEVELS]
    return {"title": f"Stability: {experiment.name}, {len(experiment.calls)} calls, seed {experiment.seed}",
            "x_label": "tools down (%)", "y_label": "calls with a valid answer (%)",
            "series": [{"name": "with simulator (schema)", "points": [[x, 100 * y] for x, y in
                                                                     zip(xs, experiment.shares("schema"))]},
                       {"name": "without simulator", "points": [[x, 100 * y] for x, y in
                                                                 zip(xs, experiment.shares("off"))]}]}


def plot(experiment: Experiment, out: Path) -> None:
    """Both curves as a PNG."""
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    xs = [100 * level for level in LEVELS]
    figure, axes = plt.subplots(figsize=(6, 4), dpi=120)
    axes.plot(xs, [100 * s for s in experiment.shares("schema")], "o-", label="with simulator (schema)")
    axes.plot(xs, [100 * s for s in experiment.shares("off")], "s--", label="without simulator")
    axes.set_xlabel("tools down (%)")
    axes.set_ylabel("calls with a valid answer (%)")
    axes.set_ylim(0, 105)
    axes.set_xticks(xs)
    axes.set_title(f"Stability: {experiment.name}, {len(experiment.calls)} calls, seed {experiment.seed}")
    axes.grid(alpha=0.3)
    axes.legend(loc="lower left")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, format="png")
    plt.close(figure)
