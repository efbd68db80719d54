"""MCP answers as they go (no processes but a stdio child): session ids on every answer, an
unknown session opened again and never simulated, progress tokens and request ids fitted on
replay, a call's events carried live with its answer held until judged, a server's questions
replayed in place and held to the recorded answers, what a stdio server says kept with its
request."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from stbproxy.engine import Engine, EngineConfig
from stbproxy.errors import UpstreamError
from stbproxy.keys import DEFAULT_RULES
from stbproxy.mcp import sse
from stbproxy.mcp.live import LiveAnswer
from stbproxy.mcp.questions import Questions, replayed
from stbproxy.mcp.sessions import SessionMap
from stbproxy.mcp.stdio import StdioServer
from stbproxy.mcp.traffic import Mcp
from stbproxy.models import Mode, Request, Response, Source, StreamedResponse
from stbproxy.store.embedded import Store
from stbproxy.traffic.plain_http import PlainHttp
from stbproxy.traffic.seam import Kinds
from tests.mcp_demo import rpc

URL = "http://127.0.0.1:9/mcp"
SSE = (("Content-Type", "text/event-stream"),)
JSON = (("Content-Type", "application/json"),)


def post(body: dict, *headers: tuple[str, str]) -> Request:
    return Request("POST", URL, (("Content-Type", "application/json"), *headers), json.dumps(body).encode())


def events(*messages: dict) -> bytes:
    return b"".join(b"event: message\ndata: " + json.dumps(m).encode() + b"\n\n" for m in messages)


def test_every_answer_carries_the_session_id_its_client_sent():
    kind = Mcp()
    call = kind.call(post(rpc("tools/call", {"name": "echo", "arguments": {}}, 4), ("Mcp-Session-Id", "mine")),
                     DEFAULT_RULES)
    stored = Response(200, (*JSON, ("Mcp-Session-Id", "REDACTED")), json.dumps(rpc("x", None, 1)).encode())
    assert kind.served(call, stored, Source.CACHE, {}).header("Mcp-Session-Id") == "mine"
    live = Response(200, (*JSON, ("mcp-session-id", "the-servers-own")), b"{}")
    assert kind.served(call, live, Source.UPSTREAM, {}).header("Mcp-Session-Id") == "mine"
    bare = kind.call(post(rpc("tools/list", None, 2)), DEFAULT_RULES)  # no session: no REDACTED id either
    assert kind.served(bare, stored, Source.CACHE, {}).header("Mcp-Session-Id") is None


def test_an_unknown_session_is_opened_again_once_and_else_is_a_session_failure():
    sessions, seen = SessionMap(), []

    async def server(request: Request, forgets: int):
        seen.append((json.loads(request.body).get("method"), request.header("Mcp-Session-Id")))
        if json.loads(request.body).get("method") == "initialize":
            return Response(200, (("Mcp-Session-Id", f"new-{len(seen)}"),), b"{}"), 0.0
        if request.header("Mcp-Session-Id") == "gone" or len(seen) <= forgets:
            return Response(400, JSON, b'{"error": {"message": "Bad Request: No valid session ID provided"}}'), 0.0
        return Response(200, JSON, b'{"ok": 1}'), 0.0

    answer, _ = asyncio.run(sessions.send(post(rpc("tools/list"), ("Mcp-Session-Id", "gone")),
                                          lambda r: server(r, 0)))
    assert answer.status == 200 and [m for m, _ in seen] == ["tools/list", "initialize",
                                                             "notifications/initialized", "tools/list"]
    assert seen[-1][1] == "new-2"  # the proxy's own session, in the client's place
    seen.clear()
    with pytest.raises(UpstreamError) as failed:
        asyncio.run(sessions.send(post(rpc("tools/list"), ("Mcp-Session-Id", "other")), lambda r: server(r, 99)))
    assert failed.value.failure == "session"


def test_a_session_failure_is_an_error_never_simulated_nor_stored(tmp_path):
    class Forgetful:
        async def send(self, request):
            if b'"initialize"' in request.body:
                return Response(500, JSON, b"{}"), 0.0
            return Response(404, JSON, b"{}"), 0.0

    kind = Mcp()
    tools = Response(200, JSON, json.dumps(rpc("x", None, 1) | {"result": {"tools": [
        {"name": "echo", "inputSchema": {"type": "object"}}]}}).encode())
    kind.tools.note(URL + "", tools)

    async def main(store):
        engine = Engine(store, Forgetful(), EngineConfig(mode=Mode.VIRTUAL), kinds=Kinds((kind, PlainHttp())))
        request = post(rpc("tools/call", {"name": "echo", "arguments": {}}, 3), ("Mcp-Session-Id", "stbproxy-x"))
        return await engine.handle(request)

    with Store(tmp_path / "store") as store:
        answer = asyncio.run(main(store))
        assert answer.source is Source.ERROR and json.loads(answer.response.body)["error"]["code"] == -32011
        assert list(store.scan("mcp/")) == []


def test_a_replayed_stream_carries_the_new_requests_progress_token_and_id():
    body = events({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 7, "progress": 1}},
                  {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}},
                  {"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "kept as is"}},
                  {"jsonrpc": "2.0", "id": 7, "result": {"ok": True}})
    fitted = sse.messages(sse.with_request_ids(body, 12, "tok-12"))
    assert fitted[0]["params"]["progressToken"] == "tok-12" and fitted[1]["params"]["requestId"] == 12
    assert fitted[2]["params"] == {"data": "kept as is"} and fitted[3]["id"] == 12
    unasked = sse.messages(sse.with_request_ids(body, 12, None))  # no progress asked for: none sent
    assert [m.get("method") for m in unasked] == ["notifications/cancelled", "notifications/message", None]
    assert sse.with_request_ids(body, 7, 7) == body  # the recording's own request: every byte as it was


def test_a_live_answer_passes_events_as_they_come_and_holds_the_answer_for_the_engine():
    class Events:
        def __init__(self):
            self.gate = asyncio.Event()

        async def chunks(self):
            yield events({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1}})[:20]
            yield events({"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1}})[20:]
            await self.gate.wait()
            yield events({"jsonrpc": "2.0", "id": 1, "result": {"real": True}})

        async def aclose(self):
            pass

    async def main():
        stream = Events()

        async def open_stream(request, answer=False):
            return StreamedResponse(200, SSE, b"", "", stream), 0.0

        live = LiveAnswer(b"call", 1, None, open_stream, lambda head: head)

        async def engine():  # as the engine: the whole answer judged, and another one served in its place
            whole, _ = await live.send(Request("POST", URL, (), b"call"))
            assert sse.answer_in(whole.body)["result"] == {"real": True}

            class Settled:
                response = Response(200, JSON, json.dumps({"jsonrpc": "2.0", "id": 1,
                                                           "result": {"simulated": True}}).encode())
            return Settled()

        task = asyncio.ensure_future(engine())
        assert (await live.started(task)).status == 200
        pieces = live.rest(task).chunks()
        first = await pieces.__anext__()  # before the server has answered
        stream.gate.set()
        rest = [piece async for piece in pieces]
        return first, rest

    first, rest = asyncio.run(main())
    assert sse.messages(first)[0]["method"] == "notifications/progress"
    assert [sse.messages(piece)[0].get("result") for piece in rest] == [{"simulated": True}]


def test_a_replayed_question_waits_for_the_clients_answer_and_holds_it_to_the_recorded_one():
    question = {"jsonrpc": "2.0", "id": 0, "method": "sampling/createMessage", "params": {"messages": []}}
    body = events(question, {"jsonrpc": "2.0", "id": 5, "result": {"content": []}})
    asked = [{"method": "sampling/createMessage", "id": 0, "answer": {"result": {"text": "yes"}}}]

    async def play(answer_text: str, questions: Questions):
        stream = replayed(Response(200, SSE, body), asked, questions, URL, "s", 5).stream
        pieces = stream.chunks()
        sent = sse.messages(await pieces.__anext__())[0]
        reply = {"jsonrpc": "2.0", "id": sent["id"], "result": {"text": answer_text, "_meta": {"any": 1}}}
        assert questions.answered(URL, "s", json.dumps(reply).encode())  # it goes to the replay, not a server
        return sent, [sse.messages(piece)[0] async for piece in pieces]

    sent, rest = asyncio.run(play("yes", Questions()))
    assert sent["id"] == 0 and rest[0]["result"] == {"content": []}
    _, rest = asyncio.run(play("no", Questions()))
    assert rest[0]["error"]["code"] == -32010 and rest[0]["error"]["data"]["differs_at"] == "/result/text"

    async def clash():  # the same id already waits in this session: the replay asks with another
        questions = Questions()
        questions.wait(URL, "s", 0)
        stream = replayed(Response(200, SSE, body), asked, questions, URL, "s", 5).stream
        return sse.messages(await stream.chunks().__anext__())[0]["id"]

    assert asyncio.run(clash()) == "stbproxy-0-1"


def test_what_a_stdio_server_says_for_a_request_is_kept_with_its_answer(tmp_path):
    child = tmp_path / "child.py"
    child.write_text(
        "import json, sys\n"
        "for line in sys.stdin:\n"
        "    m = json.loads(line)\n"
        "    token = m['params']['_meta']['progressToken']\n"
        "    for out in ({'jsonrpc': '2.0', 'method': 'notifications/progress', 'params': {'progressToken': token,"
        " 'progress': 1}}, {'jsonrpc': '2.0', 'id': 'q', 'method': 'ping'},"
        " {'jsonrpc': '2.0', 'id': m['id'], 'result': {}}):\n"
        "        print(json.dumps(out), flush=True)\n")
    heard = []

    async def main():
        async def to_client(line):
            heard.append(line)

        server = StdioServer([sys.executable, str(child)], to_client, timeout=10)
        try:
            body = json.dumps(rpc("tools/call", {"name": "t", "_meta": {"progressToken": "p"}}, 3)).encode()
            return await server.send(Request("POST", "stdio://x", (), body))
        finally:
            await server.aclose()

    answer, _ = asyncio.run(main())
    assert answer.header("content-type") == "text/event-stream" and len(heard) == 2  # live, and kept
    assert [m.get("method") for m in sse.messages(answer.body)] == ["notifications/progress", "ping", None]
