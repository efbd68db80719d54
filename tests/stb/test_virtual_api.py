"""POST /virtual: parsing, the calling rules behind it, and StableToolBench clients end to end."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from stbproxy.engine import Engine, EngineConfig
from stbproxy.keys import DEFAULT_RULES, KeyRules
from stbproxy.kinds import http_call, kinds_for
from stbproxy.models import Mode, Request, Response, Source
from stbproxy.sessions import safe_session_name
from stbproxy.stb.catalog import ApiDoc, Catalog, Param
from stbproxy.stb.traffic import StableToolBench
from stbproxy.stb.virtual_calls import VirtualReply, VirtualUpstream, may_be_virtual_call, own_virtual_path, parse
from stbproxy.store.embedded import Store
from stbproxy.upstream import Upstream, UpstreamConfig
from stbproxy.workers.link import call_from_wire, call_to_wire
from tests.own_virtual import ask, own_request, seen, virtual_engine
from tests.servers import ProxyProcess

TOOLBENCH_KEY = "tbk-never-store-me-31337"


def body(**fields) -> bytes:
    base = {"category": "Data", "tool_name": "TheClique", "api_name": "Songkick concert",
            "tool_input": '{"id_conc": "1"}', "strip": "truncate", "toolbench_key": TOOLBENCH_KEY}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not ...}).encode()


# -- parsing ---------------------------------------------------------------------------------
@pytest.mark.parametrize("raw,status,message", [
    (b"not json", 422, "not JSON"),
    (b"[1, 2]", 422, "JSON object"),
    (body(category=...), 422, "'category' is missing"),
    (body(api_name=...), 422, "'api_name' is missing"),
    (body(tool_name=7), 422, "'tool_name' must be a string"),
    (body(tool_input=[1]), 422, "'tool_input' must be a JSON string or object"),
    (body(tool_input="{oops"), 200, "Tool input parse error...\n"),  # StableToolBench's words
    (body(tool_input="[1, 2]"), 200, "JSON object of arguments"),
])
def test_bad_bodies_get_a_clear_error_naming_the_problem(raw, status, message):
    reply = parse(raw)
    assert isinstance(reply, VirtualReply)
    assert reply.status == status and message in reply.document["error"]
    assert reply.document["response"] == ""


@pytest.mark.parametrize("tool_input,args", [
    ('{"a": 1, "b": "x"}', {"a": 1, "b": "x"}), ("", {}), ({"a": 2}, {"a": 2}), (None, {}),
])
def test_tool_input_forms(tool_input, args):
    parsed = parse(body(tool_input=tool_input))
    assert parsed.args == args and parsed.api_name == "Songkick concert"


def test_only_an_empty_tool_input_means_no_arguments():
    """StableToolBench's server takes "" for {} and answers blanks as any other text that is not JSON."""
    reply = parse(body(tool_input="  "))
    assert isinstance(reply, VirtualReply) and reply.document == {"error": "Tool input parse error...\n",
                                                                 "response": ""}


# -- the calling rules behind /virtual ---------------------------------------------------------
def weather_catalog(base_url: str | None) -> Catalog:
    return Catalog([ApiDoc(
        category="Weather", tool="Open Weather", api="Forecast by city",
        url=f"{base_url}/echo/{{city}}" if base_url else None, method="GET",
        required_parameters=(Param("city", "STRING"),), optional_parameters=(Param("days", "NUMBER"),),
        template_response={"temp": "float", "summary": "str"},
    )])


def run_virtual(store, catalog, calls, *, mode=Mode.VIRTUAL, toolbench_url=None, timeout=5.0, rapidapi_key=None,
                upstream_proxy=None, rules=DEFAULT_RULES):
    async def main():
        upstream = Upstream(UpstreamConfig(timeout=timeout, proxy=upstream_proxy))
        engine = virtual_engine(store, upstream, EngineConfig(mode=mode, rules=rules), catalog,
                                toolbench_url=toolbench_url, rapidapi_key=rapidapi_key)
        try:
            return [await ask(engine, call) for call in calls]
        finally:
            await upstream.aclose()

    return asyncio.run(main())


def weather_call(tool_input: str, **fields) -> bytes:
    return body(**{"category": "Weather", "tool_name": "Open Weather", "api_name": "Forecast by city",
                   "tool_input": tool_input, **fields})


@pytest.mark.parametrize("stb_keys", ["exact", "canonical"])
def test_virtual_miss_calls_the_catalog_url_and_arguments_in_another_order_hit_only_canonically(
        tmp_path, upstream, stb_keys):
    """StableToolBench's server looks a call up by its arguments' text: another order, or a
    string for the number, is another call (exact keys); canonical keys take it for the same."""
    canonical = stb_keys == "canonical"
    with Store(tmp_path / "s") as store:
        first, second, third = run_virtual(store, weather_catalog(upstream.base), [
            weather_call('{"city": "Paris", "days": 3}'),
            weather_call('{"days": "3", "city": "Paris"}'),  # other order, a string for the number
            weather_call('{"city": "Paris", "days": 3}'),
        ], rules=KeyRules(stb_keys=stb_keys))
        assert (first.source, second.source, third.source) == (
            ("upstream", "cache", "cache") if canonical else ("upstream", "upstream", "cache"))
        assert first.document == third.document and second.document["response"]["calls"] == (1 if canonical else 2)
        assert first.document["error"] == "" and first.document["response"]["path"] == "/echo/Paris"
        assert first.document["response"]["query"] == {"days": "3"}
        stored = {e.key: e.request for e in store.scan("api/Weather/open_weather_for_Weather/forecast_by_city/")}
        assert len(stored) == (1 if canonical else 2)
        # the request kept with an entry gives its key back when read again (a cassette is keyed
        # from it): the real call where its query does, else a stand-in with the typed arguments
        if canonical:
            assert [r.url for r in stored.values()] == [upstream.url("/echo/Paris?days=3")]
        else:  # a number, and strings in another order than the doc's: neither reads back from a query
            assert {r.url for r in stored.values()} == {
                "http://virtual.invalid/Weather/open_weather_for_Weather/forecast_by_city"}
            assert sorted(r.body for r in stored.values()) == [b'{"city": "Paris", "days": 3}',
                                                                b'{"days": "3", "city": "Paris"}']
    assert upstream.hits["/echo/Paris"] == (1 if canonical else 2)


@pytest.mark.parametrize("stb_keys,tool_input", [
    ("exact", '{"city": "Paris", "days": "3"}'),  # the text an HTTP call's arguments make, in the doc's order
    ("canonical", '{"days": 3, "city": "Paris"}'),  # any order, any type
])
def test_same_call_over_http_proxy_and_virtual_meets_one_entry(tmp_path, upstream, stb_keys, tool_input):
    catalog = weather_catalog(upstream.base)
    rules = KeyRules(stb_keys=stb_keys)
    with Store(tmp_path / "s") as store:
        (over_virtual,) = run_virtual(store, catalog, [weather_call(tool_input)], rules=rules)

        async def over_proxy():
            upstream_client = Upstream(UpstreamConfig(timeout=5))
            engine = Engine(store, upstream_client, EngineConfig(rules=rules), kinds=kinds_for(catalog))
            try:
                return await engine.handle(Request("GET", upstream.url("/echo/Paris?days=3")))
            finally:
                await upstream_client.aclose()

        answer = asyncio.run(over_proxy())
    assert over_virtual.source == "upstream" and answer.source.value == "cache"
    assert json.loads(answer.response.body) == over_virtual.document["response"]
    assert upstream.hits["/echo/Paris"] == 1
    assert http_call(Request("GET", upstream.url("/echo/Paris?days=3")), catalog, rules).key == answer.key


def test_generic_host_routes_by_x_rapidapi_host():
    catalog = Catalog([ApiDoc(category="Weather", tool="Open Weather", api="Forecast by city",
                              url="https://open-weather.p.rapidapi.com/forecast/{city}", method="GET")])
    call = http_call(Request("GET", "http://127.0.0.1:5000/forecast/Rome",
                             (("X-RapidAPI-Host", "open-weather.p.rapidapi.com"),)), catalog, DEFAULT_RULES)
    assert call.api is not None and call.api.api == "forecast_by_city" and call.args == {"city": "Rome"}
    unmapped = http_call(Request("GET", "http://127.0.0.1:5000/other"), catalog, DEFAULT_RULES)
    assert unmapped.api is None and unmapped.key.startswith("http/127.0.0.1:5000/GET/other/")


def test_toolbench_upstream_gets_the_call_and_failures_go_to_the_simulator(tmp_path, upstream):
    with Store(tmp_path / "s") as store:
        ok, failed = run_virtual(store, None, [
            body(tool_input='{"id_conc": "1"}'),
            body(tool_input='{"fail": true}'),
        ], toolbench_url=upstream.url("/virtual"))
        assert ok.source == "upstream" and ok.document["response"]["from"] == "toolbench"
        # "rate limit" is invalid under check_result: the (default, no-LLM) error path answers
        assert failed.source == "unavailable" and failed.document["response"] == ""
        assert upstream.toolbench_keys == [TOOLBENCH_KEY, TOOLBENCH_KEY]  # forwarded, not stored
        assert list(store.keys("log/invalid/"))
    # re-packed as StableToolBench's server sends it on: the category and API keys, the tool
    # name as the client gave it, the arguments as an object, the key in the body and as a header
    headers, sent = upstream.virtual_calls[0]
    assert sent == {"category": "Data", "tool_name": "TheClique", "api_name": "songkick_concert",
                    "tool_input": {"id_conc": "1"}, "strip": "", "toolbench_key": TOOLBENCH_KEY}
    assert headers["toolbench_key"] == TOOLBENCH_KEY and headers["content-type"] == "application/json"
    assert headers["accept"] == "application/json"
    raw = b"".join(open(os.path.join(r, f), "rb").read() for r, _, fs in os.walk(tmp_path / "s") for f in fs)
    assert TOOLBENCH_KEY.encode() not in raw


def test_a_hit_is_answered_with_the_same_reply_object_while_its_answer_stays(tmp_path, upstream):
    """The front end builds a hit's response once and reuses it while the engine answers with
    the very same object (mitm/flows.py: Prebuilt): so repeated /virtual hits must get one
    reply object, the answer object made once."""
    async def main(store):
        client = Upstream(UpstreamConfig(timeout=5))
        engine = virtual_engine(store, client, EngineConfig(), weather_catalog(upstream.base))
        try:
            asked = [await engine.handle(own_request(weather_call('{"city": "Lima"}')), "s") for _ in range(3)]
            other = await engine.handle(own_request(weather_call('{"city": "Quito"}')), "s")
            return asked, other
        finally:
            await client.aclose()

    with Store(tmp_path / "s") as store:
        (miss, hit, again), other = asyncio.run(main(store))
    assert (miss.source, hit.source, again.source) == (Source.UPSTREAM, Source.CACHE, Source.CACHE)
    assert again is hit and again.response is hit.response
    assert seen(hit).document == seen(miss).document and other.response is not hit.response


def test_replay_miss_over_virtual_explains_itself(tmp_path):
    with Store(tmp_path / "s") as store:
        (reply,) = run_virtual(store, weather_catalog(None), [weather_call('{"city": "Oslo"}')], mode=Mode.REPLAY)
    assert reply.status == 200 and "no stored answer" in reply.document["error"]


@pytest.mark.parametrize("api_name", ["chat_with_user", "Chat With User", "chat_with_user_for_theclique"])
def test_chat_with_user_is_answered_after_standardization(api_name):
    call = StableToolBench(None, VirtualUpstream()).call(own_request(body(tool_name="theclique", api_name=api_name)),
                                                         DEFAULT_RULES)
    assert call.own_reply is not None and call.own_reply.source is Source.CHAT
    assert json.loads(call.own_reply.response.body) == {"error": "", "response": "Chat with user."}


def test_full_function_name_as_api_name_meets_the_same_entry(tmp_path, upstream):
    with Store(tmp_path / "s") as store:
        by_name, by_function = run_virtual(store, weather_catalog(upstream.base), [
            weather_call('{"city": "Rome"}'),
            weather_call('{"city": "Rome"}', tool_name="open_weather", api_name="forecast_by_city_for_open_weather"),
        ])
        # and without a catalog, keyed as StableToolBench's server names its cache file
        uncataloged = StableToolBench(None, VirtualUpstream())
        call = uncataloged.virtual_call(parse(body(tool_name="theclique", api_name="songkick_concert_for_theclique")),
                                        DEFAULT_RULES)
        assert call.key.startswith("api/Data/theclique_for_Data/songkick_concert/")
        assert call.key == uncataloged.virtual_call(parse(body(api_name="Songkick concert")), DEFAULT_RULES).key
    assert (by_name.source, by_function.source) == ("upstream", "cache")
    assert upstream.hits["/echo/Rome"] == 1


def test_a_call_named_by_a_cut_function_name_crosses_the_workers_link_and_keeps_its_doc():
    """A function name agents see is cut at 64 characters, so the call's key names another API
    than the catalog's doc; the doc's name travels with the call, also to the primary worker
    (serve --workers), where a miss is answered and the simulator reads the doc."""
    doc = ApiDoc(category="Data", tool="Weather Forecast Tool", method="GET",
                 api="Get the hourly forecast for a city by its name and country code please")
    stb = StableToolBench(Catalog([doc]), VirtualUpstream())
    call = stb.virtual_call(parse(body(category="Data", tool_name="Weather Forecast Tool",
                                       api_name=doc.function_name)), DEFAULT_RULES)
    assert call.api != doc.ref and stb.describe(call) is doc
    crossed = call_from_wire(json.loads(json.dumps(call_to_wire(call))))
    assert crossed.key == call.key and stb.describe(crossed) is doc


def test_no_keyless_rapidapi_call_goes_out(tmp_path, upstream):
    """A RapidAPI URL without a key is never called: the simulator answers at once. The
    proof: real calls go through an outbound proxy on loopback, which sees none until a
    key is set."""
    catalog = Catalog([ApiDoc(category="Sports", tool="Loop Ball", api="Team", method="GET",
                              url="https://loop-ball.p.rapidapi.com/team", required_parameters=(Param("id"),))])
    call = body(category="Sports", tool_name="loop_ball", api_name="team", tool_input='{"is_id": 1}')
    with Store(tmp_path / "s") as store:
        (keyless,) = run_virtual(store, catalog, [call], upstream_proxy=upstream.base)
        assert upstream.requests == []
        assert keyless.source == "unavailable" and "no RapidAPI key" in keyless.document["error"]
        (keyed,) = run_virtual(store, catalog, [call], upstream_proxy=upstream.base, rapidapi_key="rk-1")
    assert [r[:2] for r in upstream.requests] == [("CONNECT", "loop-ball.p.rapidapi.com:443")]
    assert "no RapidAPI key" not in keyed.document["error"]


def test_ready_line_names_the_real_upstream_of_virtual_misses():
    catalog = weather_catalog(None)  # no URL: nothing to call
    assert VirtualUpstream().real_calls(catalog) == "none (the catalog lists no URL)"
    assert "k" not in VirtualUpstream(rapidapi_key="k").real_calls(catalog).replace("key", "")
    described = VirtualUpstream(toolbench_url="http://u:secret@tb.example:8080/virtual?key=s").real_calls(None)
    assert described == "to a ToolBench server at http://tb.example:8080/virtual"


@pytest.mark.parametrize("path,expected", [
    ("/virtual", (True, None)), ("/virtual/", (True, None)), ("/virtual?x=1", (True, None)),
    ("/s/run-42/virtual", (True, "run-42")), ("/s/run%2042/virtual", (True, safe_session_name("run 42"))),
    ("/s/../virtual", (True, safe_session_name(".."))),
    ("/s//virtual", (False, None)), ("/s/a/b/virtual", (False, None)), ("/other/virtual", (False, None)),
    ("/virtualx", (False, None)), ("/", (False, None)),
])
def test_own_virtual_path_and_the_session_it_names(path, expected):
    assert own_virtual_path(path) == expected


@pytest.mark.parametrize("method,url,expected", [
    ("POST", "http://stb.example:8080/virtual", True),
    ("POST", "https://stb.example/api/virtual/?x=1", True),
    ("GET", "http://stb.example/virtual", False),
    ("POST", "http://stb.example/virtual/more", False),
    ("POST", "http://stb.example/rapidapi", False),
])
def test_which_proxied_requests_may_be_virtual_calls(method, url, expected):
    assert may_be_virtual_call(Request(method, url)) is expected


class Server:
    """A real API that is never reached over the network: it answers every request it is sent."""

    def __init__(self) -> None:
        self.sent: list[Request] = []

    async def send(self, request: Request) -> tuple[Response, float]:
        self.sent.append(request)
        return Response(200, (("Content-Type", "application/json"),), b'{"error": "", "response": "fine"}'), 0.0


def test_proxied_request_is_a_virtual_call_only_with_a_virtual_body(tmp_path):
    """A POST to another server's /virtual is a StableToolBench call when its body is one;
    any other body is plain HTTP, sent on as it came, as is every request to a passthrough
    host; a tool_input that is not JSON gets StableToolBench's own words, sent nowhere."""
    to = "http://stb.example:8080/virtual"
    requests = [Request("POST", to, (), b'{"hello": 1}'), Request("POST", to, (), body(tool_name=7)),
                Request("POST", to, (), body(tool_input="{oops")),
                Request("POST", "http://stb.passthrough/virtual", (), body()), Request("POST", to, (), body())]
    server = Server()

    async def main(store):
        engine = virtual_engine(store, server, EngineConfig(passthrough=("stb.passthrough",)))
        return [seen(await engine.handle(request)) for request in requests]

    with Store(tmp_path / "s") as store:
        not_json, wrong_field, bad_input, passthrough, call = asyncio.run(main(store))
        plain_keys, call_keys = list(store.keys("http/")), list(store.keys("api/"))
    assert server.sent == [requests[0], requests[1], requests[3], requests[4]]  # each as the client sent it
    for answer, source in ((not_json, "upstream"), (wrong_field, "upstream"), (passthrough, "passthrough"),
                           (call, "upstream")):
        assert (answer.status, answer.document, answer.source) == (200, {"error": "", "response": "fine"}, source)
    assert bad_input.status == 200 and bad_input.document == {"error": "Tool input parse error...\n", "response": ""}
    assert bad_input.source == "error"
    # plain HTTP is keyed by its request, the call under its API, as StableToolBench's server keys it
    assert len(plain_keys) == 2 and [k.split("/")[:4] for k in call_keys] == [["api", "Data", "theclique_for_Data",
                                                                               "songkick_concert"]]


# -- end to end: ToolBench's own client against `stbproxy serve` ---------------------------------
# What StableToolBench's inference client sends (STB_FORMATS.md section 4): a POST of the six
# fields as JSON, with the key repeated as a header; it retries on any non-200.
TOOLBENCH_CLIENT = """
import json, sys, requests
url, calls = sys.argv[1], json.loads(sys.argv[2])
out = []
for call in calls:
    payload = {"category": call["category"], "tool_name": call["tool_name"], "api_name": call["api_name"],
               "tool_input": call["tool_input"], "strip": "truncate", "toolbench_key": call["key"]}
    r = requests.post(url, json=payload, headers={"toolbench_key": call["key"]}, timeout=15)
    out.append({"status": r.status_code, "source": r.headers.get("X-Stb-Source"),
                "failure": r.headers.get("X-Stb-Failure"), "json": r.json()})
print(json.dumps(out))
"""


def toolbench_client(service_url: str, calls: list[dict]) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    result = subprocess.run([sys.executable, "-c", TOOLBENCH_CLIENT, service_url, json.dumps(calls)],
                            capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def write_cache(root, stb_data):
    """A cache of the original layout for two real G1 APIs, keys as Python literals."""
    folder = root / "Data" / "theclique_for_Data"
    folder.mkdir(parents=True)
    (folder / "songkick_concert.json").write_text(json.dumps({
        "{'id_conc': '40698227-lumineers-at-aware-super-theatre'}": {
            "error": "", "response": "{\"name\": \"The Lumineers\", \"venue_name\": \"Aware Super Theatre\"}"},
        "{'id_conc': 'bad'}": {"error": "", "response": "API rate limit exceeded"},
        "not a literal {": {"error": "", "response": "x"},
    }))
    return root


@pytest.mark.integration
def test_toolbench_client_against_serve_after_import(tmp_path, stb_data):
    store = tmp_path / "stb" / "store"
    cache = write_cache(tmp_path / "cache", stb_data)
    cli = [sys.executable, "-m", "stbproxy"]
    imported = subprocess.run([*cli, "import", "stb-cache", str(cache), "--store", str(store)],
                              capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr
    assert ("imported: 2, duplicates: 0, failed answers kept (served as StableToolBench serves them): 1, "
            "unparseable: 1") in imported.stdout
    assert "not a literal" in imported.stderr
    tools = subprocess.run([*cli, "import", "tools",
                            str(stb_data / "solvable_queries/test_instruction/G1_instruction.json"),
                            "--store", str(store)], capture_output=True, text=True, timeout=120)
    assert tools.returncode == 0, tools.stderr
    again = subprocess.run([*cli, "import", "stb-cache", str(cache), "--store", str(store)],
                           capture_output=True, text=True, timeout=120)
    assert "imported: 0, duplicates: 2" in again.stdout

    with ProxyProcess(store, "--simulator", "off") as proxy:
        service = f"{proxy.url}/virtual"
        seen = toolbench_client(service, [
            {"category": "Data", "tool_name": "TheClique", "api_name": "Songkick concert",
             "tool_input": json.dumps({"id_conc": "40698227-lumineers-at-aware-super-theatre"}), "key": TOOLBENCH_KEY},
            {"category": "Data", "tool_name": "TheClique", "api_name": "chat_with_user", "tool_input": "{}",
             "key": TOOLBENCH_KEY},
            {"category": "Data", "tool_name": "TheClique", "api_name": "Songkick concert", "tool_input": "{broken",
             "key": TOOLBENCH_KEY},
            {"category": "Data", "tool_name": "TheClique", "api_name": "Songkick concert",
             "tool_input": json.dumps({"id_conc": "bad"}), "key": TOOLBENCH_KEY},
        ])
        bad = subprocess.run([sys.executable, "-c",
                              "import requests,sys; r=requests.post(sys.argv[1], json={'tool_name': 1});"
                              "print(r.status_code, r.text)", service], capture_output=True, text=True, timeout=60)
    assert [s["status"] for s in seen] == [200, 200, 200, 200]
    assert seen[0]["source"] == "cache"
    assert seen[0]["json"] == {"error": "", "response": "{\"name\": \"The Lumineers\", "
                                                        "\"venue_name\": \"Aware Super Theatre\"}"}
    assert seen[1]["json"] == {"error": "", "response": "Chat with user."}
    assert seen[2]["json"] == {"error": "Tool input parse error...\n", "response": ""}
    # a cached failure is served as StableToolBench's server serves it, and says where it came from
    assert seen[3]["json"] == {"error": "", "response": "API rate limit exceeded"} and seen[3]["source"] == "cache"
    assert (seen[0]["failure"], seen[3]["failure"]) == (None, "not_connected")  # the failure kind, shown
    assert bad.stdout.startswith("422") and "category" in bad.stdout
    raw = b"".join(open(os.path.join(r, f), "rb").read() for r, _, fs in os.walk(store) for f in fs)
    assert TOOLBENCH_KEY.encode() not in raw
