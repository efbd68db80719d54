#!/usr/bin/env python3
"""Import benchmark: `stbproxy import stb-cache` on a generated StableToolBench cache.

In one run, in a temporary folder that is removed afterwards:

1. generate a cache of the original layout, ``<cache>/<category>/<tool>_for_<category>/
   <api>.json``, each file one JSON object mapping ``str(args_dict)`` (a Python literal)
   to ``{"error": "", "response": "..."}``; a small share of entries is deliberately
   bad (keys that are not dict literals, values that are not answer objects, two files
   that are not JSON), some are failures that check_result rejects (imported and kept,
   as StableToolBench's server serves them), and some repeat an earlier call with its
   arguments in another order and another type (another call to that server, so another
   entry under the default exact keys);
2. time merely reading and json-parsing every file (the baseline);
3. run `stbproxy import stb-cache CACHE --store STORE` as a real process, 3 times on
   fresh stores (the median counts), and once more into the last store, which must
   import nothing;
4. print entries/s (target >= 20,000/s), the ratio import time / parse time, and the
   summary lines the command printed, checked against what was generated.

Baseline (measured in the same run): reading and json-parsing the same files (step 2).

Exit status 1 means the import reported other counts than the generator made (or the
command failed); missing the speed target is reported but is not an error.

Usage: python scripts/bench/bench_import.py [--entries N] [--quick] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.common import child_env, children_cpu, stbproxy_command  # noqa: E402

TARGET_RATE = 20_000.0  # entries/s, from the issue
ENTRIES_PER_FILE = 60  # the published cache averages about this many calls per API file
RUN_TIMEOUT = 900.0

CATEGORIES = ["Data", "Sports", "Finance", "Entertainment", "Travel", "eCommerce", "Weather",
              "Social", "Business_Software", "Location", "Movies", "Music"]
WORDS = ["realty", "listing", "weather", "score", "match", "flight", "hotel", "stock", "quote",
         "movie", "song", "lyrics", "city", "geo", "search", "news", "crypto", "recipe", "book",
         "airport", "league", "player", "team", "currency", "rates", "product", "review", "video"]
VERBS = ["get", "search", "list", "fetch", "find", "lookup", "retrieve"]
TEXT_WORDS = ["the", "a", "sunny", "apartment", "near", "park", "with", "two", "bedrooms", "café",
              "東京", "harbour", "o'clock", "quiet", "street", "modern", "kitchen", "view", "river",
              "downtown", "station", "garden", "balcony", "bright", "spacious", "cosy", "renovated"]

# Substrings that make StableToolBench's check_result reject an answer (STB_FORMATS.md 5).
# Good answers must contain none of them, or the expected counts would be wrong.
FAILURE_MARKERS = (
    "rate limit", "time out", "timed out", "does not exist", "404", "504", "500", "internal error",
    "api doesn't exists", "service not found", "authoriz", "authenticat", "unauthorized",
    "blocked user", "unsubscribe", "blocked", "401", "403", "credential", "unauthenticated",
    "disabled for your subscription", "invalid consumer key", "access_denied", "parameter",
    "parse", "is not defined", "status_code=50", "status_code=429",
)

# Answers a real API gave when it failed: all rejected by check_result.
FAILURES = [
    {"error": "", "response": '{"message":"You have exceeded the rate limit per second for your plan, BASIC"}'},
    {"error": "", "response": '{"message":"Service Not Found"}'},
    {"error": "", "response": "<html><body><h1>504 Gateway Time-out</h1></body></html>"},
    {"error": "", "response": '{"message":"Unauthorized"}'},
    {"error": "", "response": ""},
    {"error": "", "response": "Request failed: status_code=429"},
    {"error": "", "response": "{'detail': 'Missing required parameter: query'}"},
    {"error": "Function executing from my_tools.Data.x.api import get raised an exception: "
              "HTTPSConnectionPool: Read timed out. (read timeout=15)", "response": ""},
    {"response": "no error field at all"},
]
# Keys that are not Python dict literals ({} placeholder: makes each one unique in its file).
BAD_KEYS = ["listing_id={}&page=2", "{{'q': undefined_{}}}", "dict(page={})", "[{}, 2, 3]",
            "{{'page': {}", "None  # {}"]
# Values that are not {error, response} objects.
BAD_VALUES = ["plain text, not an answer object", ["a", "list"], 42, None]
# Objects without the two members: imported whole, as StableToolBench's server serves them, and
# failures by check_result.
ODD_ANSWERS = [{"error": ""}, {"result": "no response field"}]

# Shares of the generated entries (the rest are good, distinct calls).
SHARE_FAILURE = 0.03
SHARE_BAD_KEY = 0.004
SHARE_BAD_VALUE = 0.003
SHARE_DUPLICATE = 0.005

PARAM_KINDS = {  # name -> how its values look
    "listing_id": "id", "page": "int", "query": "text", "limit": "int", "lang": "lang",
    "include_details": "bool", "lat": "float", "city": "text", "date": "date", "sort": "none",
}


@dataclass
class Expected:
    """What the generator made, so the import's summary can be checked."""

    files: int = 0
    entries: int = 0  # entries in readable files (what the import counts as read)
    good: int = 0
    repeats: int = 0  # an earlier call in another spelling: its own entry under exact keys
    failures: int = 0
    unparseable: int = 0  # bad keys, bad values and unreadable files
    bytes: int = 0
    tools: set = field(default_factory=set)


# -- generating the cache -----------------------------------------------------------------


def value_of(kind: str, rng: random.Random, unique: int | None = None):
    if kind == "id":
        return str(100_000 + unique) if unique is not None else str(rng.randrange(100_000, 999_999))
    if kind == "int":
        return unique + 1 if unique is not None else rng.randrange(1, 60)
    if kind == "text":
        return " ".join(rng.choices(TEXT_WORDS, k=rng.randrange(1, 4)))
    if kind == "lang":
        return rng.choice(["en", "fr", "de", "ja"])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "float":
        return round(rng.uniform(-80, 80), 4)
    if kind == "date":
        return f"2023-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
    return None  # "none": an optional argument the client passed as None


def response_text(rng: random.Random) -> str | dict:
    """A realistic answer of about 300-800 characters that check_result accepts."""
    while True:
        target = rng.randrange(300, 800)
        items: list[dict] = []
        document = {"status": "success", "count": 0, "data": items}
        text = ""
        while len(text) < target:
            items.append({
                "id": rng.randrange(10_000, 99_999),
                "name": " ".join(rng.choices(TEXT_WORDS, k=3)).title(),
                "price": round(rng.uniform(10, 990), 2),
                "rating": round(rng.uniform(1, 5), 1),
                "tags": rng.sample(WORDS, 3),
                "summary": " ".join(rng.choices(TEXT_WORDS, k=rng.randrange(4, 12))),
            })
            document["count"] = len(items)
            text = json.dumps(document, ensure_ascii=False)
        # Most cached answers are JSON text; some dumps stored the parsed object.
        value: str | dict = document if rng.random() < 0.1 else text
        if not any(marker in str(value).lower() for marker in FAILURE_MARKERS):
            return value


def tool_layout(files: int, rng: random.Random) -> list[tuple[str, str, list[tuple[str, list[str]]]]]:
    """(category, tool key, [(api key, param names)]) with about seven APIs per tool."""
    tools = []
    made = 0
    n = 0
    while made < files:
        category = CATEGORIES[n % len(CATEGORIES)]
        tool = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}_{n}_for_{category}"
        apis = []
        for a in range(min(rng.randrange(3, 12), files - made)):
            api = f"{rng.choice(VERBS)}_{rng.choice(WORDS)}_{a}"
            # At least two arguments, so a repeated call can list them in another order.
            params = ["listing_id" if rng.random() < 0.5 else "page"]
            params += rng.sample([p for p in PARAM_KINDS if p not in params], rng.randrange(1, 4))
            rng.shuffle(params)
            apis.append((api, params))
        made += len(apis)
        tools.append((category, tool, apis))
        n += 1
    return tools


def generate(root: Path, entries: int, seed: int = 7) -> Expected:
    rng = random.Random(seed)
    expected = Expected()
    # Making an answer costs more than the rest of an entry: draw from a pool instead.
    pool = [response_text(rng) for _ in range(min(4096, entries))]
    files = max(4, round(entries / ENTRIES_PER_FILE))
    layout = tool_layout(files, rng)
    apis = [(category, tool, api, params) for category, tool, api_list in layout for api, params in api_list]
    share, extra = divmod(entries, len(apis))
    for n, (category, tool, api, params) in enumerate(apis):
        folder = root / category / tool
        folder.mkdir(parents=True, exist_ok=True)
        document: dict[str, object] = {}
        good_args: list[dict] = []
        unique_param = "listing_id" if "listing_id" in params else "page"
        for j in range(share + (1 if n < extra else 0)):
            roll = rng.random()
            if roll < SHARE_BAD_KEY:
                key = rng.choice(BAD_KEYS).format(j)
                document[key] = {"error": "", "response": "fine, but the key is not a literal"}
                expected.unparseable += 1
                continue
            args = {p: value_of(PARAM_KINDS[p], rng, j if p == unique_param else None) for p in params}
            roll -= SHARE_BAD_KEY
            if roll < SHARE_BAD_VALUE:
                bad = rng.choice(BAD_VALUES + ODD_ANSWERS)
                document[str(args)] = bad
                if bad in ODD_ANSWERS:
                    expected.failures += 1
                else:
                    expected.unparseable += 1
                continue
            roll -= SHARE_BAD_VALUE
            if roll < SHARE_FAILURE:
                document[str(args)] = rng.choice(FAILURES)
                expected.failures += 1
                continue
            roll -= SHARE_FAILURE
            if roll < SHARE_DUPLICATE and good_args:
                # The same call again, as another client wrote it: keys reversed, numbers as text.
                earlier = rng.choice(good_args)
                again = {k: (str(v) if type(v) is int else v) for k, v in reversed(earlier.items())}
                if str(again) not in document:  # one repeat per call: a JSON object has unique keys
                    document[str(again)] = {"error": "", "response": rng.choice(pool)}
                    expected.repeats += 1
                    continue
            document[str(args)] = {"error": "", "response": rng.choice(pool)}
            good_args.append(args)
            expected.good += 1
        data = json.dumps(document, ensure_ascii=False).encode()
        (folder / f"{api}.json").write_bytes(data)
        expected.files += 1
        expected.entries += len(document)
        expected.bytes += len(data)
        expected.tools.add(tool)
    # Two files that are not JSON at all (a truncated download): each one problem, no entries.
    for category, tool, api_list in layout[:2]:
        (root / category / tool / "truncated_download.json").write_bytes(b'{"{\'page\': 1}": {"error": "", "resp')
        expected.files += 1
        expected.unparseable += 1
    return expected


# -- measuring ----------------------------------------------------------------------------


def parse_all(root: Path) -> tuple[float, float, int]:
    """Seconds (wall and CPU) to read and json-parse every cache file, and the entries found."""
    started, cpu = time.perf_counter(), time.process_time()
    entries = 0
    for path in sorted(root.glob("*/*/*.json")):
        try:
            entries += len(json.loads(path.read_bytes()))
        except ValueError:
            pass
    return time.perf_counter() - started, time.process_time() - cpu, entries


@dataclass
class ImportRun:
    seconds: float
    cpu_seconds: float  # user + system of the import process: what a busy machine does not inflate
    stdout: str
    stderr: str
    counts: dict[str, int]


SUMMARY_RE = re.compile(r"(files|entries read|imported|duplicates|failed answers kept|unparseable)"
                        r"(?: \([^)]*\))?: (\d+)")


def run_import(cache: Path, store: Path, *, exit_status: int = 0) -> ImportRun:
    cpu = children_cpu()
    started = time.perf_counter()
    done = subprocess.run([*stbproxy_command(), "import", "stb-cache", str(cache), "--store", str(store)],
                          capture_output=True, text=True, env=child_env(), timeout=RUN_TIMEOUT)
    seconds = time.perf_counter() - started
    cpu = children_cpu() - cpu
    if done.returncode != exit_status:
        raise RuntimeError(f"import exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    counts = {name: int(value) for name, value in SUMMARY_RE.findall(done.stdout)}
    return ImportRun(seconds, cpu, done.stdout, done.stderr, counts)


def check(run: ImportRun, expected: Expected, *, again: bool) -> list[str]:
    """How the summary differs from what was generated (empty: as expected)."""
    want = {
        "files": expected.files,
        "entries read": expected.entries,
        "imported": 0 if again else expected.good + expected.repeats + expected.failures,
        # A second import finds every entry already stored.
        "duplicates": expected.good + expected.repeats + expected.failures if again else 0,
        "failed answers kept": expected.failures,
        "unparseable": expected.unparseable,
    }
    return [f"{name}: got {run.counts.get(name)}, expected {value}"
            for name, value in want.items() if run.counts.get(name) != value]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entries", type=int, default=120_000, help="cache entries to generate")
    parser.add_argument("--quick", action="store_true", help="a small cache: a few seconds in all")
    parser.add_argument("--repeats", type=int, default=3, help="fresh-store imports (the median counts)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder (printed)")
    args = parser.parse_args(argv)
    entries = min(args.entries, 3_000) if args.quick else args.entries

    # Other work on the machine slows every figure here: say how busy it was.
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    workdir = Path(tempfile.mkdtemp(prefix="stb-bench-import-"))
    failures: list[str] = []
    try:
        cache = workdir / "cache"
        started = time.perf_counter()
        expected = generate(cache, entries)
        print(f"generated {expected.entries} entries in {expected.files} files of {len(expected.tools)} tools "
              f"({expected.bytes / 1024**2:.1f} MiB) in {time.perf_counter() - started:.1f}s: "
              f"{expected.good} good, {expected.repeats} repeated calls, {expected.failures} failures, "
              f"{expected.unparseable} unparseable")

        parse_all(cache)  # warm the page cache, so the baseline and the imports read alike
        baselines = [parse_all(cache) for _ in range(3)]
        parse_seconds = statistics.median(wall for wall, _, _ in baselines)
        parse_cpu = statistics.median(cpu for _, cpu, _ in baselines)
        print(f"baseline: read + json.loads of all files: {parse_seconds:.3f}s "
              f"({expected.entries / parse_seconds:,.0f} entries/s, CPU {parse_cpu:.3f}s)")

        empty = workdir / "empty-cache"
        empty.mkdir()
        startup = run_import(empty, workdir / "store-empty", exit_status=1).seconds  # "nothing imported"
        print(f"command start-up (import of an empty cache): {startup:.2f}s")

        runs = []
        for n in range(args.repeats):
            run = run_import(cache, workdir / f"store-{n}")
            runs.append(run)
            rate = run.counts.get("entries read", 0) / run.seconds
            print(f"import {n + 1}/{args.repeats}: {run.seconds:.2f}s, {rate:,.0f} entries/s "
                  f"(CPU {run.cpu_seconds:.2f}s)")
            failures += [f"import {n + 1}: {problem}" for problem in check(run, expected, again=False)]
        again = run_import(cache, workdir / f"store-{args.repeats - 1}")
        failures += [f"second import: {problem}" for problem in check(again, expected, again=True)]

        seconds = statistics.median(run.seconds for run in runs)
        rate = expected.entries / seconds
        print("\nsummary printed by the first import:")
        print("".join(f"  | {line}\n" for line in runs[0].stdout.splitlines()), end="")
        problems = [line for line in runs[0].stderr.splitlines() if "unparseable:" in line]
        print(f"  ({len(problems)} problem lines on stderr, e.g. {problems[0].strip() if problems else '-'})")
        print("summary printed by the second import into the same store:")
        print("".join(f"  | {line}\n" for line in again.stdout.splitlines()), end="")

        print(f"\nimport (median of {len(runs)}): {seconds:.2f}s for {expected.entries} entries: "
              f"{rate:,.0f} entries/s (target >= {TARGET_RATE:,.0f}: {'met' if rate >= TARGET_RATE else 'MISSED'})")
        cpu = statistics.median(run.cpu_seconds for run in runs)
        print(f"without start-up: {expected.entries / max(seconds - startup, 1e-9):,.0f} entries/s; "
              f"by CPU time: {cpu:.2f}s, {expected.entries / cpu:,.0f} entries/s")
        print(f"ratio import time / parse time: {seconds / parse_seconds:.1f} (by CPU time: {cpu / parse_cpu:.1f})")
        print(f"second import: {again.seconds:.2f}s, imported {again.counts.get('imported')} "
              f"({'idempotent' if again.counts.get('imported') == 0 else 'NOT idempotent'})")
    except (RuntimeError, subprocess.TimeoutExpired) as exc:
        failures.append(str(exc))
    finally:
        if args.keep:
            print(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if failures:
        print("\nFAILED checks:\n" + "\n".join(f"  {f}" for f in failures))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
