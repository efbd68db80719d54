"""The MCP kind of traffic on its own (no processes): what it takes, how it keys, judges,
serves, answers by itself and simulates."""

from __future__ import annotations

import asyncio
import json

import pytest

from stbproxy.keys import DEFAULT_RULES, KeyRules
from stbproxy.mcp import protocol
from stbproxy.mcp.sessions import SessionMap
from stbproxy.mcp.traffic import NOT_SIMULATED, REPLAY_MISS, Mcp
from stbproxy.models import Request, Response, Source
from stbproxy.synthesis.simulation import Simulation, SimulationRequest
from tests.mcp_demo import rpc

URL = "http://127.0.0.1:9/mcp"
SSE = (("Content-Type", "text/event-stream"),)
JSON = (("Content-Type", "application/json"),)
TOOLS = {"tools": [{"name": "forecast", "description": "Weather.", "inputSchema": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"]}, "outputSchema": {"type": "object", "properties": {
        "city": {"type": "string"}, "high": {"type": "number"}}, "required": ["city", "high"]}},
    {"name": "plain", "inputSchema": {"type": "object"}}]}


def post(body: dict, *headers: tuple[str, str]) -> Request:
    return Request("POST", URL, (("Content-Type", "application/json"), *headers), json.dumps(body).encode())


def answer(message_id, result) -> Response:
    return Response(200, JSON, json.dumps({"jsonrpc": "2.0", "id": message_id, "result": result}).encode())


@pytest.fixture
def kind():
    return Mcp()


def test_what_the_kind_takes(kind):
    call = kind.call(post(rpc("tools/call", {"name": "forecast", "arguments": {"city": "Oslo"}})), DEFAULT_RULES)
    assert call.kind == "mcp" and call.keep and call.faultable and call.key.startswith("mcp/127.0.0.1:9/")
    assert call.api.api == "forecast" and call.args == {"city": "Oslo"} and call.facts["id"] == 1
    listed = kind.call(post(rpc("tools/list")), DEFAULT_RULES)
    assert listed.keep and not listed.faultable and listed.api is None
    # never kept: notifications, ping, the client's answers, MRTR retries
    for body in (rpc("notifications/initialized", message_id=None), rpc("ping"),
                 rpc("tools/call", {"name": "forecast", "inputResponses": {"a": {}}, "requestState": "s"})):
        assert kind.call(post(body), DEFAULT_RULES).keep is False
    response = post({"jsonrpc": "2.0", "id": "srv-1", "result": {}}, ("Mcp-Session-Id", "abc"))
    assert kind.call(response, DEFAULT_RULES).keep is False
    # not MCP's: other JSON-RPC methods, JSON that is not JSON-RPC, a GET without a session
    for request in (post(rpc("eth_blockNumber")), post({"city": "Oslo"}), Request("GET", URL),
                    post({"jsonrpc": "2.0", "id": 1, "result": {}}), post([rpc("ping")])):
        assert kind.call(request, DEFAULT_RULES) is None
    # a session's GET stream and a listen request: carried as they arrive, never kept
    get = kind.call(Request("GET", URL, (("Mcp-Session-Id", "abc"),)), DEFAULT_RULES)
    assert get.keep is False and get.streams and get.upstream is not None
    listen = kind.call(post(rpc("subscriptions/listen", {"notifications": {"toolsListChanged": True}})),
                       DEFAULT_RULES)
    assert listen.keep is False and listen.streams
    assert not kind.call(post(rpc("tools/list")), DEFAULT_RULES).streams


def test_credentials_make_a_private_key_salted_per_store(kind):
    body = rpc("tools/list")
    public = kind.call(post(body), DEFAULT_RULES)
    private = kind.call(post(body, ("Authorization", "Bearer t1")), DEFAULT_RULES)
    other = kind.call(post(body, ("Authorization", "Bearer t2")), DEFAULT_RULES)
    salted = kind.call(post(body, ("Authorization", "Bearer t1")), KeyRules(auth_salt=b"salt"))
    assert not public.private and private.private
    assert len({public.key, private.key, other.key, salted.key}) == 4
    assert "t1" not in private.key
    # a session id is no credential: the same key in every session
    assert kind.call(post(body, ("Mcp-Session-Id", "s1")), DEFAULT_RULES).key == public.key


def test_judging_real_answers(kind):
    call = kind.call(post(rpc("tools/call", {"name": "forecast", "arguments": {}})), DEFAULT_RULES)

    def judged(response, setting="auto"):
        return kind.judge(call, response, setting)

    assert judged(answer(1, {"content": [], "isError": False})).verdict.valid
    failed = judged(answer(1, {"content": [{"type": "text", "text": "rate limited"}], "isError": True}))
    assert not failed.verdict.valid and "rate limited" in failed.verdict.reason
    assert judged(answer(1, {"content": [], "isError": True}), "strict").verdict.valid
    server_error = Response(200, JSON, b'{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"boom"}}')
    assert not judged(server_error).verdict.valid
    asked_wrong = Response(200, JSON, b'{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"bad"}}')
    assert judged(asked_wrong).verdict.valid  # the request's fault: the server's real answer
    assert not judged(Response(200, JSON, b"not json")).verdict.valid
    assert not judged(Response(503, JSON, b"")).verdict.valid
    asking = judged(answer(1, {"resultType": "input_required", "inputRequests": {}}))
    assert asking.verdict.valid and asking.keep is False  # a question back: passed on, never kept
    private = judged(answer(1, {"tools": [], "cacheScope": "private", "ttlMs": 0}))
    assert private.meta["private"] is True


def test_served_answers_carry_the_clients_id_byte_for_byte(kind):
    stored = answer(7, {"content": [{"type": "text", "text": "{\"id\": 7}"}]})
    call = kind.call(post(rpc("tools/call", {"name": "forecast"}, message_id=42)), DEFAULT_RULES)
    served = kind.served(call, stored, Source.CACHE, {})
    assert served.body == stored.body.replace(b'"id": 7, "result"', b'"id": 42, "result"')
    same = kind.call(post(rpc("tools/call", {"name": "forecast"}, message_id=7)), DEFAULT_RULES)
    assert kind.served(same, stored, Source.CACHE, {}).body == stored.body
    events = Response(200, SSE, b'event: message\r\ndata: {"jsonrpc":"2.0","id":7,"result":{}}\r\n\r\n')
    assert kind.served(call, events, Source.CACHE, {}).body == events.body.replace(b'"id":7', b'"id":42')
    # a live answer is the server's own: untouched
    assert kind.served(call, stored, Source.UPSTREAM, {}) is stored


def test_an_initialize_from_the_store_gets_a_fresh_session_id(kind):
    stored = answer(0, {"protocolVersion": "2025-11-25"}).with_header("Mcp-Session-Id", "REDACTED")
    call = kind.call(post(rpc("initialize", {"protocolVersion": "2025-11-25"}, message_id=0)), DEFAULT_RULES)
    first = kind.served(call, stored, Source.CACHE, {}).header("mcp-session-id")
    second = kind.served(call, stored, Source.CACHE, {}).header("mcp-session-id")
    assert first != second and SessionMap.is_minted(first)
    # a server that opened no session: none is made up
    sessionless = kind.served(call, answer(0, {}), Source.CACHE, {})
    assert sessionless.header("mcp-session-id") is None


def test_the_proxys_own_failures_are_json_rpc_errors(kind):
    call = kind.call(post(rpc("tools/call", {"name": "forecast"}, message_id=3)), DEFAULT_RULES)
    miss = Response(404, JSON, json.dumps({"error": "replay: no stored answer", "closest": None}).encode())
    served = kind.served(call, miss, Source.MISS, {})
    document = json.loads(served.body)
    assert served.status == 200 and document["id"] == 3 and document["error"]["code"] == REPLAY_MISS
    assert document["error"]["data"] == {"error": "replay: no stored answer", "closest": None}
    assert kind.served(call, served, Source.MISS, {}).body == served.body  # twice is once
    # a message no JSON-RPC answer belongs to (a session's GET stream, a notification) keeps
    # the HTTP error: a 200 would tell its client that the server took it
    failed = Response(502, JSON, b'{"error": "stbproxy: upstream unreachable", "response": ""}')
    for message in (Request("GET", URL, (("Mcp-Session-Id", "abc"),)),
                    post(rpc("notifications/initialized", message_id=None), ("Mcp-Session-Id", "abc"))):
        assert kind.served(kind.call(message, DEFAULT_RULES), failed, Source.ERROR, {}) is failed


def test_what_the_proxy_answers_itself(kind):
    def local(request):
        return kind.local_answer(kind.call(request, DEFAULT_RULES))

    assert local(post(rpc("notifications/initialized", message_id=None))).status == 202
    assert json.loads(local(post(rpc("ping", message_id=5))).body) == {"jsonrpc": "2.0", "id": 5, "result": {}}
    assert local(Request("GET", URL, (("Mcp-Session-Id", "s"),))).status == 405
    assert local(Request("DELETE", URL, (("Mcp-Session-Id", "s"),))).status == 200
    mismatch = post(rpc("tools/call", {"name": "forecast", "_meta": {protocol.META_VERSION: "2026-07-28"}}),
                    ("Mcp-Name", "other"))
    refused = kind.call(mismatch, DEFAULT_RULES)
    assert refused.upstream is None and refused.keep is False
    assert json.loads(kind.local_answer(refused).body)["error"]["code"] == -32020


class Fixed:
    """A simulator that answers ``value``, and remembers what it was asked."""

    def __init__(self, value) -> None:
        self.value, self.jobs = value, []

    async def simulate(self, job: SimulationRequest) -> Simulation:
        self.jobs.append(job)
        return Simulation(Response(200, JSON, json.dumps(self.value).encode()), ok=True, meta={"simulator": "llm"})


def simulated(kind, name, arguments, simulator):
    kind.tools.note(protocol.server_id(URL), answer(0, TOOLS))
    call = kind.call(post(rpc("tools/call", {"name": name, "arguments": arguments}, message_id=9)), DEFAULT_RULES)
    return asyncio.run(kind.simulate(call, simulator, "down"))


def test_a_simulated_call_follows_the_tools_schemas(kind):
    good = Fixed({"city": "Oslo", "high": 3.5})
    result = simulated(kind, "forecast", {"city": "Oslo"}, good)
    document = json.loads(result.response.body)
    assert document["id"] == 9 and document["result"]["structuredContent"] == {"city": "Oslo", "high": 3.5}
    assert json.loads(document["result"]["content"][0]["text"]) == {"city": "Oslo", "high": 3.5}
    assert good.jobs[0].doc.api == "forecast" and good.jobs[0].doc.output_schema == TOOLS["tools"][0]["outputSchema"]
    # an answer that breaks the outputSchema is replaced by one made from it, and says so
    broken = simulated(kind, "forecast", {"city": "Oslo"}, Fixed({"city": 5}))
    assert broken.meta["simulator"] == "schema" and "broke the outputSchema" in broken.meta["replaced"]
    structured = json.loads(broken.response.body)["result"]["structuredContent"]
    assert isinstance(structured["city"], str) and isinstance(structured["high"], (int, float))
    # arguments that break the inputSchema: an isError result, and no simulator asked
    asked = Fixed({})
    bad = simulated(kind, "forecast", {"days": 0}, asked)
    text = json.loads(bad.response.body)["result"]["content"][0]["text"]
    assert bad.ok and asked.jobs == [] and "'city' is a required property" in text
    # a tool no stored list names, and a method other than tools/call: not simulated
    unknown = simulated(kind, "nosuch", {}, Fixed({}))
    assert not unknown.ok and json.loads(unknown.response.body)["error"]["code"] == -32602
    listed = kind.call(post(rpc("tools/list")), DEFAULT_RULES)
    refused = asyncio.run(kind.simulate(listed, Fixed({}), "down"))
    assert not refused.ok and json.loads(refused.response.body)["error"]["code"] == NOT_SIMULATED


def test_tool_lists_are_found_in_the_store_when_none_was_seen():
    stored = {protocol.key_prefix(protocol.server_id(URL), "tools/list"): [answer(0, TOOLS)]}
    kind = Mcp(lambda prefix: stored.get(prefix, []))
    result = asyncio.run(kind.simulate(kind.call(post(rpc("tools/call", {"name": "plain", "arguments": {}})),
                                                 DEFAULT_RULES), Fixed("just text"), "down"))
    document = json.loads(result.response.body)["result"]
    assert document["content"] == [{"type": "text", "text": "just text"}] and "structuredContent" not in document


def test_a_message_repeated_with_another_id_is_the_same_call_with_that_id(kind):
    def sent(message_id, first=False):
        body = {"jsonrpc": "2.0", "id": message_id, "method": "tools/call", "params": {"name": "forecast"}}
        text = json.dumps(body) if first else json.dumps({k: body[k] for k in ("method", "params", "jsonrpc", "id")})
        return Request("POST", URL, (("Content-Type", "application/json"), ("Content-Length", str(len(text)))),
                       text.encode())

    for first in (False, True):  # the id last (SDK 1.x) or first (SDK 2.x)
        one, two, named = (kind.call(sent(i, first), DEFAULT_RULES) for i in (1, 12345, "a-b"))
        assert one.key == two.key == named.key
        assert (one.facts["id"], two.facts["id"], named.facts["id"]) == (1, 12345, "a-b")
        assert two.request.body == sent(12345, first).body and two.upstream is two.request
    other = kind.call(post(rpc("tools/call", {"name": "add"}, message_id=1)), DEFAULT_RULES)
    assert other.key != one.key


def test_results_the_proxy_makes_in_the_stateless_era_say_they_are_final(kind):
    meta = {protocol.META_VERSION: "2026-07-28", protocol.META_CAPABILITIES: {}}
    call = kind.call(post(rpc("tools/call", {"name": "forecast", "_meta": meta})), DEFAULT_RULES)
    assert json.loads(kind.injected(call, "tool-error", "tool-error").body)["result"]["resultType"] == "complete"
    older = kind.call(post(rpc("tools/call", {"name": "forecast"})), DEFAULT_RULES)
    assert "resultType" not in json.loads(kind.injected(older, "tool-error", "tool-error").body)["result"]


def test_a_broken_message_of_an_mcp_session_is_refused_as_a_server_would(kind):
    session = ("Mcp-Session-Id", "s1")
    for body, code in ((b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\xff"}}', -32700),
                       (b'{"jsonrpc":"2.0","id":1}', -32600)):
        call = kind.call(Request("POST", URL, (("Content-Type", "application/json"), session), body), DEFAULT_RULES)
        assert call.keep is False and call.upstream is None  # never sent, never kept
        answer = kind.local_answer(call)
        assert answer.status == 400 and json.loads(answer.body)["error"]["code"] == code
    batch = kind.call(post([rpc("ping")], session), DEFAULT_RULES)
    assert batch.keep is False and batch.upstream is not None  # 2025-03-26's batches: passed on
    # without MCP's headers a broken body is nobody's in particular: plain HTTP takes it
    assert kind.call(post([rpc("ping")]), DEFAULT_RULES) is None
