"""Stores, request plans and the mitmdump baseline that the hit benchmarks and the profiler
share (it imports stbproxy only to write inputs).

Three paths of cache hits:
- ``plain``: GET through the proxy (absolute form), answers stored for a plain-HTTP API;
- ``https``: the same API over HTTPS, through one CONNECT tunnel per connection;
- ``virtual``: StableToolBench's ``POST /virtual``, answers imported with
  ``stbproxy import stb-cache`` from a cache of the original layout.
Stores are filled the way users fill them (``stbproxy import cassette`` / ``import
stb-cache``), so keys and stored records are the proxy's own.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
import zlib
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: scripts.* from the repository root

from scripts.common import child_env, stbproxy_command  # noqa: E402
from stbproxy.models import Exchange, Request, Response, Source  # noqa: E402

API_HOST = "api.bench.test"  # never resolved: replay answers from the store (lazy connections)
TOOLBENCH_KEY = "bench-toolbench-key"  # a secret the server must accept and never store
HIT = "x-stb-source: cache"
DICT_HIT = "x-bench-source: dict"


# -- plain HTTP and HTTPS ------------------------------------------------------------------


def http_targets(distinct: int) -> list[str]:
    """Origin-form targets: distinct paths and queries, as a tool-calling agent sends."""
    return [f"/v1/tools/t{i % 13}/search?q=item{i}&page={i % 5}&lang=en" for i in range(distinct)]


def http_body(target: str) -> bytes:
    doc = {"target": target, "id": zlib.crc32(target.encode()),
           "items": [{"rank": r, "name": f"item-{r}", "score": r * 0.25} for r in range(8)],
           "note": "benchmark answer"}
    return json.dumps(doc, separators=(",", ":")).encode()


HEADERS = (("Accept", "application/json"), ("User-Agent", "stbproxy-bench"))
ANSWER_HEADERS = (("Content-Type", "application/json"), ("Server", "bench-upstream"),
                  ("Cache-Control", "no-store"))


def http_exchanges(base: str, targets: list[str]) -> list[Exchange]:
    """What a recording of these requests stores (redacted requests, the upstream's answers)."""
    return [Exchange(key="", request=Request("GET", base + t, HEADERS), source=Source.UPSTREAM,
                     response=Response(200, ANSWER_HEADERS, http_body(t), "OK"), stored_at=0.0)
            for t in targets]


def fill_http_store(store: Path, workdir: Path, bases: list[str], targets: list[str],
                    source: Path | None = None) -> None:
    """Import a cassette of these requests under each base URL (``stbproxy import cassette``;
    ``source``: by another source tree's stbproxy, as import_cache)."""
    from stbproxy.cassettes import vcr_format as cassettes
    cassette = workdir / "http-hits.yaml"
    cassettes.write_cassette(cassette, [ex for base in bases for ex in http_exchanges(base, targets)], "yaml")
    run_stbproxy("import", "cassette", str(cassette), "--store", str(store), source=source)


def http_plan(kind: str, base: str, targets: list[str], expect: str = HIT) -> dict:
    """Requests as HTTP_PROXY clients send them: absolute form in the clear, origin form in a tunnel."""
    host = base.split("://", 1)[1]
    prefix = base if kind == "plain" else ""
    items = [[f"GET {prefix}{t} HTTP/1.1\r\nHost: {host}\r\nAccept: application/json\r\n"
              f"User-Agent: stbproxy-bench\r\n\r\n", http_body(t).decode("latin-1")] for t in targets]
    plan = {"kind": kind, "expect": expect, "items": items}
    if kind == "https":
        plan["tunnel"] = f"{host}:443"
    return plan


# -- /virtual ---------------------------------------------------------------------------------

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


def write_cache(root: Path, per_api: int, apis: list = APIS) -> dict[tuple, list[tuple[dict, str]]]:
    """A StableToolBench cache of the original layout: category/tool_for_category/api.json."""
    made = {}
    for api in apis:
        category, tool, name, _ = api
        entries = calls(api, per_api)
        folder = root / category / f"{tool}_for_{category}"
        folder.mkdir(parents=True, exist_ok=True)
        document = {str(args): {"error": "", "response": text} for args, text in entries}
        (folder / f"{name}.json").write_text(json.dumps(document, ensure_ascii=False), encoding="utf-8")
        made[api] = entries
    return made


def import_cache(cache: Path, store: Path, source: Path | None = None) -> str:
    """``stbproxy import stb-cache``; ``source``: by the stbproxy of another source tree (an
    older commit keys calls its own way, so its store is made by its own import)."""
    return run_stbproxy("import", "stb-cache", str(cache), "--store", str(store), source=source)


def virtual_plan(made: dict, count: int, seed: int, expect: str = HIT, distinct: int | None = None) -> dict:
    """``count`` calls, in random order, as ToolBench's client posts them (requests' json=, its
    headers), tool_input the JSON of the arguments the cache's literal holds, in its order (a
    rerun's call, which StableToolBench's server and the proxy's exact keys both hit):
    picked among every stored call, or among ``distinct`` of them chosen at random (so that
    stores of different sizes can be asked the same number of different calls)."""
    rng = random.Random(seed)
    everything = [(api, args, text) for api, entries in made.items() for args, text in entries]
    if distinct is not None and distinct < len(everything):
        everything = rng.sample(everything, distinct)
    items = []
    for api, args, text in (rng.choice(everything) for _ in range(count)):
        category, tool, name, _ = api
        body = json.dumps({"category": category, "tool_name": tool, "api_name": name,
                           "tool_input": json.dumps(args), "strip": "truncate",
                           "toolbench_key": TOOLBENCH_KEY}).encode()
        head = ("POST /virtual HTTP/1.1\r\nHost: @HOSTPORT@\r\nUser-Agent: python-requests/2.31.0\r\n"
                "Accept-Encoding: gzip, deflate\r\nAccept: */*\r\nConnection: keep-alive\r\n"
                f"toolbench_key: {TOOLBENCH_KEY}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n")
        items.append([head + body.decode("latin-1"), text])
    return {"kind": "virtual", "expect": expect, "items": items}


# -- the baseline: mitmdump answering from a dict ----------------------------------------------

DICT_ADDON = '''\
"""Benchmark baseline: answer from an in-memory dict, nothing else."""
import json
from mitmproxy import http

with open({answers!r}) as f:
    _loaded = json.load(f)
BY_URL = {{url: body.encode("latin-1") for url, body in _loaded["by_url"].items()}}
BY_BODY = {{body.encode("latin-1"): answer.encode() for body, answer in _loaded["by_body"].items()}}
HEADERS = {{"Content-Type": "application/json", "X-Bench-Source": "dict"}}


class DictAnswers:
    def request(self, flow: http.HTTPFlow) -> None:
        if flow.request.method == "POST":
            body = BY_BODY.get(flow.request.raw_content)
        else:
            body = BY_URL.get(flow.request.url)
        if body is not None:
            flow.response = http.Response.make(200, body, HEADERS)


addons = [DictAnswers()]
'''


def dict_addon(workdir: Path, http_bases: list[str], targets: list[str], virtual: dict | None) -> Path:
    """A mitmdump script answering every planned request from memory, as stbproxy would."""
    by_url = {base + t: http_body(t).decode("latin-1") for base in http_bases for t in targets}
    by_body = {}
    for request, text in (virtual or {}).get("items", []):
        by_body[request.split("\r\n\r\n", 1)[1]] = json.dumps({"error": "", "response": text}, ensure_ascii=False)
    answers = workdir / "dict-answers.json"
    answers.write_text(json.dumps({"by_url": by_url, "by_body": by_body}), encoding="utf-8")
    addon = workdir / "dict_addon.py"
    addon.write_text(DICT_ADDON.format(answers=str(answers)), encoding="utf-8")
    return addon


def baseline_plan(plan: dict) -> dict:
    """The same requests, expecting the dict addon's mark instead of a cache hit."""
    return {**plan, "expect": DICT_HIT}


def run_stbproxy(*args: str, source: Path | None = None) -> str:
    command, cwd = stbproxy_command(), None
    if source is not None:  # run from that tree: ``-m`` puts the working folder first on the path
        command, cwd = [sys.executable, "-m", "stbproxy"], Path(source).resolve()
    done = subprocess.run([*command, *args], capture_output=True, text=True, env=child_env(), cwd=cwd, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"stbproxy {' '.join(args[:2])} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout
