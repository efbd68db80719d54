"""The seam for kinds of traffic (stbproxy/traffic/): which kind takes a request, what each
kind judges and answers on a miss, and a new kind plugged into an engine that knows
nothing of it (as MCP and OpenAPI traffic will be)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import fields, replace

import pytest

from stbproxy import keys
from stbproxy.engine import Engine, EngineConfig
from stbproxy.keys import DEFAULT_RULES, KeyRules
from stbproxy.kinds import kinds_for
from stbproxy.models import ApiRef, Mode, Request, Response, Source
from stbproxy.stb.catalog import ApiDoc, Catalog, Param
from stbproxy.store.embedded import Store
from stbproxy.traffic.llm_api import LlmApi
from stbproxy.traffic.plain_http import PlainHttp, judge_http
from stbproxy.traffic.seam import BaseKind, Call, Judged, Kinds, Reply
from stbproxy.workers.link import call_from_wire, call_to_wire


def weather_catalog() -> Catalog:
    return Catalog([ApiDoc(category="Data", tool="Weather", api="Forecast", method="GET",
                           url="https://weather.p.rapidapi.com/forecast/{city}",
                           required_parameters=(Param("city", "STRING"),))])


def test_each_request_is_taken_by_the_first_kind_that_knows_it():
    kinds = kinds_for(weather_catalog())
    routed = kinds.call(Request("GET", "https://weather.p.rapidapi.com/forecast/Paris"), DEFAULT_RULES)
    llm = kinds.call(Request("POST", "http://127.0.0.1:9/v1/chat/completions", (), b"{}"), DEFAULT_RULES)
    plain = kinds.call(Request("GET", "http://127.0.0.1:9/anything"), DEFAULT_RULES)
    assert (routed.kind, llm.kind, plain.kind) == ("stb", "llm", "http")
    assert routed.api is not None and routed.args == {"city": "Paris"}
    assert plain.key == keys.request_key(Request("GET", "http://127.0.0.1:9/anything"))
    assert kinds.names() == ["stb", "mcp", "llm", "openapi", "http"]
    assert kinds.of(replace(plain, kind="not-here")).name == "http"  # an unknown name: the last kind


def test_kinds_judge_by_their_own_rules_under_auto():
    kinds = kinds_for(weather_catalog())
    rate_limited = Response(200, (("Content-Type", "application/json"),), b'{"message": "rate limit exceeded"}')
    routed = kinds.call(Request("GET", "https://weather.p.rapidapi.com/forecast/Rome"), DEFAULT_RULES)
    plain = kinds.call(Request("GET", "http://127.0.0.1:9/x"), DEFAULT_RULES)
    # StableToolBench's check_result rejects a rate-limit text; plain HTTP goes by the status
    assert not kinds.of(routed).judge(routed, rate_limited, "auto").verdict.valid
    assert kinds.of(plain).judge(plain, rate_limited, "auto").verdict.valid
    # a ToolBench-style server's {error, response}: the API's body is kept, its error beside it
    virtual = replace(routed, reply_format="virtual")
    wrapped = Response(200, (), json.dumps({"error": "", "response": {"temp": 21}}).encode())
    response, verdict, meta, _keep = kinds.of(virtual).judge(virtual, wrapped, "auto")
    assert verdict.valid and json.loads(response.body) == {"temp": 21} and meta["error"] == ""


def test_a_replay_miss_reads_as_its_kinds_clients_read_errors():
    explanation = {"error": "stbproxy replay: no stored answer", "closest": None}
    llm_call = LlmApi().call(Request("POST", "http://127.0.0.1:9/v1/chat/completions", (), b"{}"), DEFAULT_RULES)
    plain_call = PlainHttp().call(Request("GET", "http://127.0.0.1:9/x"), DEFAULT_RULES)
    assert LlmApi().miss_document(llm_call, explanation)["error"]["code"] == "replay_miss"
    assert PlainHttp().miss_document(plain_call, explanation) is explanation


def test_a_call_keeps_its_kind_across_the_workers_link():
    call = kinds_for(weather_catalog()).call(Request("GET", "https://weather.p.rapidapi.com/forecast/Oslo"),
                                             DEFAULT_RULES)
    assert call_from_wire(json.loads(json.dumps(call_to_wire(call)))).kind == "stb"


def test_every_field_of_a_call_crosses_the_workers_link():
    request = Request("POST", "http://127.0.0.1:9/mcp", (("Mcp-Session-Id", "s"),), b"{}")
    call = Call("mcp/key", request, request, ApiRef("srv", "tool", "tool"), {"a": 1}, host="127.0.0.1",
                reply_format="virtual", no_upstream="why", kind="mcp", keep=False, streams=True, live=True,
                faultable=False, may_simulate=False, private=True, facts={"method": "tools/call", "id": 3},
                own_reply=Reply(Response(422), Source.ERROR))
    defaults = Call("k", request, None)
    assert all(getattr(call, f.name) != getattr(defaults, f.name) for f in fields(Call) if f.name != "request")
    # all but ``live`` and ``own_reply``: a call sent over the link comes back whole (docs/mcp.md,
    # serve --workers); a kind's own reply is answered where the request arrived (Engine.handle)
    assert call_from_wire(json.loads(json.dumps(call_to_wire(call)))) == replace(call, live=False, own_reply=None)


class PathOnly(BaseKind):
    """A kind of traffic the engine has never heard of: requests to /tools/<name> are one
    call per tool name, whatever their query; its answers are valid when they parse as JSON."""

    name = "path-only"

    def call(self, request: Request, rules: KeyRules) -> Call | None:
        path = request.url.split("?", 1)[0]
        if "/tools/" not in path:
            return None
        return Call(f"path-only/{path.rsplit('/', 1)[-1]}", request, request, host=request.host, kind=self.name)

    def judge(self, call: Call, response: Response, validity: str) -> Judged:
        judged = judge_http(response, "strict")
        try:
            json.loads(response.body)
        except ValueError:
            return Judged(response, replace(judged.verdict, valid=False, reason="not JSON"), judged.meta)
        return judged

    def miss_document(self, call: Call, explanation: dict) -> dict:
        return {"tool_missing": call.key}


class Upstream:
    def __init__(self) -> None:
        self.sent: list[Request] = []

    async def send(self, request: Request):
        self.sent.append(request)
        return Response(200, (("Content-Type", "application/json"),), b'{"ok": true}'), 0.01


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store") as db:
        yield db


def test_a_new_kind_plugs_into_an_engine_that_knows_nothing_of_it(store):
    kinds = Kinds((PathOnly(), PlainHttp()))
    upstream = Upstream()

    async def scenario():
        record = Engine(store, upstream, EngineConfig(mode=Mode.RECORD), kinds=kinds)
        first = await record.handle(Request("GET", "http://127.0.0.1:9/tools/search?q=1"))
        replay = Engine(store, upstream, EngineConfig(mode=Mode.REPLAY), kinds=kinds)
        hit = await replay.handle(Request("GET", "http://127.0.0.1:9/tools/search?q=2"))  # another query: one call
        miss = await replay.handle(Request("GET", "http://127.0.0.1:9/tools/other"))
        return first, hit, miss

    first, hit, miss = asyncio.run(scenario())
    assert first.source is Source.UPSTREAM and first.key == "path-only/search"
    assert hit.source is Source.CACHE and hit.key == "path-only/search" and len(upstream.sent) == 1
    assert miss.source is Source.MISS and json.loads(miss.response.body) == {"tool_missing": "path-only/other"}


def test_a_proxy_needs_a_kind():
    with pytest.raises(ValueError):
        Kinds(())


def test_the_simulator_gets_the_api_as_the_calls_kind_describes_it(store):
    from stbproxy.errors import UpstreamError
    from stbproxy.synthesis.simulation import Simulation

    described = ApiDoc(category="Tools", tool="Search", api="search", api_description="finds things", method="GET")

    class Described(PathOnly):
        def describe(self, call):
            return described

    class Down:
        async def send(self, request):
            raise UpstreamError("connection refused", failure="unreachable")

    class Seeing:
        def __init__(self) -> None:
            self.docs = []

        async def simulate(self, job):
            self.docs.append(job.doc)
            return Simulation(Response(200, (("Content-Type", "application/json"),), b'{"made": "up"}'), ok=True)

    seeing = Seeing()
    kinds = Kinds((Described(), PlainHttp()))

    async def scenario():
        engine = Engine(store, Down(), EngineConfig(), simulator=seeing, kinds=kinds)
        await engine.handle(Request("GET", "http://127.0.0.1:9/tools/search"))
        await engine.handle(Request("GET", "http://127.0.0.1:9/plain"))

    asyncio.run(scenario())
    assert seeing.docs == [described, None]  # plain HTTP describes nothing
    routed = kinds_for(weather_catalog()).call(Request("GET", "https://weather.p.rapidapi.com/forecast/Lima"),
                                                DEFAULT_RULES)
    assert kinds_for(weather_catalog()).of(routed).describe(routed).api == "Forecast"
