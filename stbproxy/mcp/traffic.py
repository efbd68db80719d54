"""MCP's kind of traffic: a JSON-RPC message of MCP's to a Streamable HTTP endpoint (or a
stdio server, mcp/stdio.py), keyed by what chooses its answer and answered in the shape an
MCP client reads.

- **Kept**: the answers of CACHED_METHODS (protocol.py), keyed by server, method, era and
  version and the params without the JSON-RPC id or ``_meta``; a call that carried
  credentials is keyed by a digest of them too, so its answers are its own, and those
  answers (and any the server marks ``cacheScope: "private"``) never reach the shared tier.
- **Passed on, never kept**: notifications, ``ping``, the client's answers to a server,
  MRTR retries (``inputResponses`` / ``requestState``), a session's DELETE. When no server
  can be asked (replay, or it is down) the proxy answers them itself: 202 for a
  notification, ``{}`` for ping, 200 for DELETE.
- **Carried live, never kept**: a session's GET stream (what a server starts itself: list
  changes, its own requests; or, with ``Last-Event-ID``, the rest of a stream that broke
  off) and the stateless era's ``subscriptions/listen`` stream, event by event as the
  server sends it. Without a server to ask, or for a session the store opened and no
  call has taken to the server yet, the proxy offers none (405; an error for listen).
- **Served**: a stored answer gets the client's JSON-RPC id (JSON or SSE, every other byte
  as recorded), and a stored stream the client's progress token and request id (sse.py);
  ``initialize`` from the store gets a fresh session id (sessions.py), and every answer
  the session id its client sent; the proxy's own failures (a replay miss, no server, no
  simulation) are JSON-RPC errors an MCP client reads at once, with the ``X-Stb-*``
  headers saying what happened.
- **Live**: a call's real answer stream reaches the client event by event while it is
  recorded (live.py); a server's questions in the middle of a call are kept with the
  client's answers and asked again when the call is replayed (questions.py).
- **Judged**: a JSON-RPC error the request itself caused (invalid params, unknown method)
  is a real answer; a server error or ``isError: true`` is a failed one, which virtual mode
  hands to the simulator as it does other failed answers (``--validity strict``: only the
  HTTP status counts).
- **Simulated**: only ``tools/call``, for a tool a stored ``tools/list`` answer describes:
  arguments that break its ``inputSchema`` get an ``isError`` result naming the problem;
  otherwise the simulator's answer becomes a ``CallToolResult`` whose ``structuredContent``
  follows the tool's ``outputSchema`` (an answer that does not is replaced by one made from
  the schema, and says so).
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any, Mapping

from stbproxy import json_schema, keys
from stbproxy.errors import UpstreamError, UpstreamFailure
from stbproxy.keys import KeyRules
from stbproxy.mcp import jsonrpc, protocol, sse
from stbproxy.mcp.jsonrpc import Message
from stbproxy.mcp.live import LiveAnswer
from stbproxy.mcp.questions import Questions, asked_in, replayed
from stbproxy.mcp.sessions import SessionMap
from stbproxy.mcp.tools import StoredBodies, ToolIndex, answer_object, call_tool_result, tool_doc
from stbproxy.models import ApiRef, Request, Response, Source
from stbproxy.recent import Recent
from stbproxy.stb.validity import FailureKind, Verdict
from stbproxy.synthesis.from_schema import value_for
from stbproxy.synthesis.simulation import Simulation, SimulationRequest
from stbproxy.traffic.plain_http import judge_http
from stbproxy.traffic.seam import LIVE, BaseKind, Call, Judged

NAME = "mcp"
SESSION = protocol.SESSION_HEADER.lower()
# Error codes of the proxy's own answers (the range MCP leaves to implementations).
REPLAY_MISS, NO_ANSWER, NOT_SIMULATED = -32010, -32011, -32012
# JSON-RPC errors that say the request was wrong: the server's real answer to it.
REQUEST_ERRORS = frozenset({jsonrpc.PARSE_ERROR, jsonrpc.INVALID_REQUEST, jsonrpc.METHOD_NOT_FOUND,
                            jsonrpc.INVALID_PARAMS, -32002, -32020, -32021, -32022})
CALLS_KEPT = 2048  # calls made recently, by their message without its id
PROXY_FAILURES = frozenset({Source.MISS, Source.ERROR, Source.UNAVAILABLE, Source.SIMULATED_ERROR})
JSON = (("Content-Type", "application/json"),)
# Requests that only set something up for the session: answered {} when no server can be asked.
SETTINGS = frozenset({"ping", "logging/setLevel", "resources/subscribe", "resources/unsubscribe"})
# Faults on stdio, where no HTTP status can carry them: the JSON-RPC error each stands for.
STDIO_FAULTS = {"down": (NO_ANSWER, "the server is down"), "refuse": (NO_ANSWER, "the server refused the connection"),
                "timeout": (NO_ANSWER, "the server gave no answer in time"),
                "status": (jsonrpc.INTERNAL_ERROR, "the server failed"),
                "malformed": (jsonrpc.INTERNAL_ERROR, "the server's answer was not valid JSON"),
                "empty": (jsonrpc.INTERNAL_ERROR, "the server's answer was empty")}


class Mcp(BaseKind):
    name = NAME

    def __init__(self, stored: StoredBodies | None = None) -> None:
        self.tools = ToolIndex(stored)
        self.sessions = SessionMap()
        self.questions = Questions()  # what servers asked clients in the middle of a call, and their answers
        self._made: Recent[Call] = Recent(CALLS_KEPT)

    # -- recognising -------------------------------------------------------------------
    def call(self, request: Request, rules: KeyRules) -> Call | None:
        if request.method == "POST" and b'"jsonrpc"' not in request.body:
            return None  # no JSON-RPC message: found by one scan in C, every other POST is never parsed here
        # A client's calls differ by their JSON-RPC id alone when it repeats one: the call
        # made of the same message with another id serves again, with this id.
        seen = jsonrpc.id_apart(request.body) if request.method == "POST" else None
        if seen is not None:
            memo_key = (request.url, tuple(h for h in request.headers if h[0].lower() != "content-length"), rules,
                        seen[1])
            made = self._made.get(memo_key)
            if made is not None:
                return replace(made, request=request, upstream=request, facts={**made.facts, "id": seen[0]})
        call = self._call(request, rules)
        if seen is not None and call is not None and call.keep and call.facts.get("id") == seen[0]:
            self._made.put(memo_key, call)
        return call

    def _call(self, request: Request, rules: KeyRules) -> Call | None:
        headers = protocol.lowered(request.headers)
        if request.method in ("GET", "DELETE"):
            if SESSION not in headers:
                return None
            call = self._passed_on(request, request.method, None)
            # The session's GET stream carries what a server starts itself (list changes, its
            # own requests) or the rest of a broken stream (Last-Event-ID): carried live, never kept.
            return replace(call, streams=True) if request.method == "GET" else call
        if not protocol.is_json_rpc_post(request, headers):
            return None
        message = jsonrpc.read(request.body)
        over_stdio = request.url.startswith(protocol.STDIO_SCHEME)  # every message there is MCP's
        if message.kind in (jsonrpc.INVALID, jsonrpc.BATCH) and _speaks_mcp(headers):
            return self._broken(request, message)
        if message.kind == jsonrpc.RESPONSE:
            if not (over_stdio or _speaks_mcp(headers)):
                return None
            call = self._passed_on(request, "response", None)
            return replace(call, facts={**call.facts, "answers": message.id})
        if message.kind not in (jsonrpc.REQUEST, jsonrpc.NOTIFICATION) or not (
                over_stdio or protocol.is_mcp_method(message.method)):
            return None
        if message.kind == jsonrpc.NOTIFICATION:
            return self._passed_on(request, message.method, None)
        era = protocol.era_of(message.method, message.params, headers)
        facts = {"method": message.method, "id": message.id, "era": era.name, "version": era.version,
                 "server": protocol.server_id(request.url)}
        mismatch = protocol.header_mismatch(message.method, message.params, headers, era)
        if mismatch:
            return Call(f"mcp-refused/{message.method}", request, None, host=request.host, kind=self.name,
                        keep=False, faultable=False, facts={**facts, "refused": mismatch})
        if message.method not in protocol.CACHED_METHODS or protocol.carries_input_responses(message.params):
            call = self._passed_on(request, message.method, message.id, facts)
            # the answer to a listen request is a stream of change notifications, open as long as the client listens
            return replace(call, streams=True) if message.method == protocol.LISTEN else call
        auth = _auth_context(headers, rules)
        key = protocol.key(facts["server"], message.method, message.params, era, auth)
        name = protocol.named(message.method, message.params)
        arguments = message.params.get("arguments") if isinstance(message.params, dict) else None
        tool = name if message.method == "tools/call" else None
        if tool is not None:  # named in session records, for counts by server and tool
            facts = {**facts, "tool": tool, "where": protocol.server_label(facts["server"])}
        facts = {**facts, "progress": _progress_token(message.params),
                 "near": (protocol.key_prefix(facts["server"], message.method, name),
                          protocol.key_prefix(facts["server"], message.method))}
        api = ApiRef(facts["server"], tool, tool) if tool is not None else None
        return Call(key, request, request, api, arguments if isinstance(arguments, dict) else {}, request.host,
                    kind=self.name, faultable=tool is not None, private=bool(auth), facts=facts, live=True)

    def _broken(self, request: Request, message: Message) -> Call:
        """A message of an MCP session that is no JSON-RPC message MCP takes: a batch (2025-03-26
        only) is passed on, never kept; anything else is refused here, as a server would."""
        if message.kind == jsonrpc.BATCH:
            return self._passed_on(request, "batch", None)
        code = jsonrpc.PARSE_ERROR if message.why.startswith("not JSON") else jsonrpc.INVALID_REQUEST
        return Call("mcp-refused/invalid", request, None, host=request.host, kind=self.name, keep=False,
                    faultable=False, facts={"method": "", "id": None, "server": protocol.server_id(request.url),
                                            "refused": message.why, "code": code})

    def _passed_on(self, request: Request, what: str, message_id: Any, facts: Mapping | None = None) -> Call:
        facts = dict(facts or {"method": what, "id": message_id, "server": protocol.server_id(request.url)})
        return Call(f"mcp-passed/{what}", request, request, host=request.host, kind=self.name, keep=False,
                    faultable=False, facts=facts)

    def _unopened(self, call: Call) -> bool:
        """A message that only concerns a session the store opened, which no call has taken to the
        server yet (its notifications, its end, the client's answers): answered here. Asked when
        it is sent, not when it is keyed: the same message may come before and after."""
        minted = call.request.header(protocol.SESSION_HEADER)
        return (call.facts.get("id") is None and self.sessions.is_minted(minted)
                and self.sessions.real_id(minted) is None)

    # -- judging -----------------------------------------------------------------------
    def judge(self, call: Call, response: Response, setting: str) -> Judged:
        judged = judge_http(response, "strict")  # the HTTP status first; the JSON-RPC answer below
        if call.facts.get("method") == "tools/list":
            self.tools.note(call.facts["server"], response)
        if not judged.verdict.valid or setting == "strict":
            return judged
        answer = answer_object(response)
        if answer is None:
            return _failed(judged, "the answer holds no JSON-RPC response", FailureKind.PARSING_ERROR)
        result = answer.get("result")
        keep = not (isinstance(result, dict) and result.get("resultType") == "input_required")
        meta = dict(judged.meta)
        asked = self.questions.recorded(call.facts["server"], _session_of(call), asked_in(response))
        if asked:  # the server's questions in the middle of the call, with the client's answers
            meta["asked"] = asked
        if isinstance(result, dict) and result.get("cacheScope") == "private":
            meta["private"] = True
        if "error" in answer:
            error = answer["error"] if isinstance(answer["error"], dict) else {}
            if error.get("code") not in REQUEST_ERRORS:
                return _failed(judged, f"JSON-RPC error {error.get('code')}: {str(error.get('message'))[:200]}",
                               FailureKind.OTHER)
        elif isinstance(result, dict) and result.get("isError") is True:
            return _failed(judged, f"the tool reported an error: {_result_text(result)[:200]}", FailureKind.OTHER)
        return Judged(response, judged.verdict, meta, keep=keep)

    def miss_document(self, call: Call, explanation: dict) -> dict:
        """The explanation, with the closest stored call's differences in what keys it only (its
        JSON-RPC id and ``_meta`` differ on every call and choose nothing)."""
        closest = explanation.get("closest")
        if not isinstance(closest, dict):
            return explanation
        kept = [d for d in closest.get("differences", ()) if not (
            d.get("part") in ("json:id", "json:jsonrpc") or str(d.get("part")).startswith("json:params._meta"))]
        return {**explanation, "closest": {**closest, "differences": kept}}

    # -- serving -----------------------------------------------------------------------
    def served(self, call: Call, response: Response, source: Source, meta: Mapping) -> Response:
        served = self._with_session(call, self._shaped(call, response, source, meta), source)
        if source is Source.CACHE and meta.get("asked") and call.facts.get("id") is not None:
            # the server asked the client something: played in place, the client's answers awaited
            channel = call.facts.get(LIVE)  # virtual mode: a client that answers otherwise gets the server's
            upstream = call.upstream
            resend = (lambda: channel.passed_on(lambda: self.sessions.send(upstream, channel.send))
                      ) if channel is not None and upstream is not None else None
            return replayed(served, meta["asked"], self.questions, call.facts["server"], _session_of(call),
                            call.facts["id"], resend)
        return served

    def _shaped(self, call: Call, response: Response, source: Source, meta: Mapping) -> Response:
        facts = call.facts
        if facts.get("refused"):
            return response
        if source in PROXY_FAILURES and facts.get("id") is not None:  # a request: its error, in JSON-RPC
            return self._proxy_failure(call, response, source)
        if source is not Source.CACHE or facts.get("id") is None:
            return response
        if facts.get("method") == "tools/list":
            self.tools.note(facts["server"], response)
        body = response.body
        if sse.is_event_stream(response.header("content-type")):
            # the client's own id, progress token and request ids in place of the recording's
            body = sse.with_request_ids(body, facts["id"], facts.get("progress"))
        else:
            body = jsonrpc.with_id(body, facts["id"])
        served = Response(response.status, response.headers, body, response.reason)
        if facts.get("method") == "initialize" and response.header(protocol.SESSION_HEADER) is not None:
            served = served.with_header(protocol.SESSION_HEADER, self.sessions.mint(call.request.body))
        return served

    def _with_session(self, call: Call, response: Response, source: Source) -> Response:
        """Every answer carries the session id its client is to use: the one it sent (never a
        stored REDACTED, nor the server's own id where the proxy stands in for it)."""
        answered = response.header(protocol.SESSION_HEADER)
        if answered is None:
            return response
        sent = call.request.header(protocol.SESSION_HEADER)
        if sent:
            return response if answered == sent else response.with_header(protocol.SESSION_HEADER, sent)
        if source is Source.UPSTREAM:
            if call.facts.get("method") == "initialize":  # a session the client opened itself
                self.sessions.opened(answered, call.request.body)
            return response
        if call.facts.get("method") == "initialize" and self.sessions.is_minted(answered):
            return response
        return Response(response.status, tuple(h for h in response.headers if h[0].lower() != SESSION),
                        response.body, response.reason)

    def _proxy_failure(self, call: Call, response: Response, source: Source) -> Response:
        """A failure of the proxy's own as the JSON-RPC error an MCP client reads at once
        (one this kind made already, as for an unknown tool, stays as it is)."""
        made = jsonrpc.answer_of(response.body)
        if made is not None and "error" in made:
            return Response(200, response.headers, jsonrpc.with_id(response.body, call.facts["id"]), response.reason)
        try:
            document = json.loads(response.body)
        except ValueError:
            document = {"error": response.body.decode("utf-8", "replace")}
        code = {Source.MISS: REPLAY_MISS, Source.ERROR: NO_ANSWER}.get(source, NOT_SIMULATED)
        text = _failure_text(source, call, document)
        body = jsonrpc.error_body(call.facts["id"], code, text, document)
        headers = tuple((k, v) for k, v in response.headers if k.lower() not in ("content-type", "content-length"))
        return Response(200, headers + JSON, body)

    def local_answer(self, call: Call) -> Response:
        """What the proxy answers itself when no server can be asked for a passed-on message."""
        facts = call.facts
        if facts.get("code"):  # no JSON-RPC message at all
            return Response(400, JSON, jsonrpc.error_body(None, facts["code"], f"stbproxy: {facts['refused']}"))
        if facts.get("refused"):
            return Response(400, JSON, jsonrpc.error_body(facts.get("id"), jsonrpc.HEADER_MISMATCH,
                                                          f"Header mismatch: {facts['refused']}"))
        what = facts.get("method")
        if call.request.method == "GET":
            return Response(405, (("Allow", "POST, DELETE"),) + JSON, b"")
        if call.request.method == "DELETE":
            minted = call.request.header(protocol.SESSION_HEADER)
            if minted:
                self.sessions.forget(minted)
            return Response(200, JSON, b"")
        if facts.get("answers") is not None:  # the client's answer to a question the proxy replayed
            self.questions.answered(facts["server"], _session_of(call), call.request.body)
        if facts.get("id") is None:
            return Response(202, JSON, b"")  # a notification, or the client's answer to a server
        if what in SETTINGS:
            return Response(200, JSON, jsonrpc.result_body(facts["id"], {}))
        return Response(200, JSON, jsonrpc.error_body(
            facts["id"], NO_ANSWER, f"stbproxy: {what} is always passed on to the server, and none can be asked"))

    async def send_upstream(self, call: Call, send) -> tuple[Response, float]:
        if call.facts.get("answers") is not None and self.questions.answered(
                call.facts["server"], _session_of(call), call.request.body):
            return Response(202, JSON, b""), 0.0  # it answers a question the proxy replayed: never the server's
        if not call.keep and self._unopened(call):
            raise UpstreamError("the session the store opened has no session at the server yet",
                                failure=UpstreamFailure.DEFERRED)
        if call.streams:
            return await self.sessions.send_in_open_session(_upstream_of(call), send)
        channel = call.facts.get(LIVE)
        return await self.sessions.send(_upstream_of(call), channel.send if channel is not None else send)

    def live(self, call: Call, send, open_stream) -> LiveAnswer:
        return LiveAnswer(_upstream_of(call).body, call.facts.get("id"), send, open_stream,
                          lambda head: self.served(call, head, Source.UPSTREAM, {}))

    # -- simulating --------------------------------------------------------------------
    def describe(self, call: Call):
        tool = self._tool(call)
        return tool_doc(_server_name(call), tool) if tool is not None else None

    async def simulate(self, call: Call, simulator, reason: str) -> Simulation:
        facts = call.facts
        if facts.get("method") != "tools/call" or call.api is None:
            return Simulation(self._error(call, NOT_SIMULATED, f"stbproxy: the MCP server cannot answer ({reason}), "
                                                               f"and only tools/call is simulated"),
                              ok=False, attempted=False)
        tool = self._tool(call)
        if tool is None:
            return Simulation(self._error(call, jsonrpc.INVALID_PARAMS, (
                f"Unknown tool: {call.api.api} (the MCP server cannot answer ({reason}), and no tools/list "
                "answer of it that the proxy kept lists this tool)")), ok=False, attempted=False)
        schema = tool.get("inputSchema")
        problem = json_schema.problem(call.args, schema) if isinstance(schema, dict) else None
        if problem is not None:
            result = call_tool_result(f"Invalid arguments for tool {call.api.api}: {problem}", tool, is_error=True)
            return Simulation(self._result(call, result), ok=True, meta={"simulator": "input-check"})
        doc = tool_doc(_server_name(call), tool)
        made = await simulator.simulate(SimulationRequest(call.request, call.key, call.api, reason, doc=doc,
                                                          args=call.args))
        if not made.ok:
            return Simulation(self._error(call, NOT_SIMULATED, _body_text(made.response)), ok=False,
                              meta=made.meta, attempted=made.attempted)
        value = _value_of(made.response)
        meta = dict(made.meta)
        output = tool.get("outputSchema")
        if output is not None:
            problem = json_schema.problem(value, output)
            if problem is not None:  # the simulator's answer breaks the promise: one from the schema
                value = value_for(output, call.seed)
                meta = {**meta, "simulator": "schema", "replaced": f"{meta.get('simulator', 'the simulator')}'s "
                                                                  f"answer broke the outputSchema at {problem}"}
        return Simulation(self._result(call, call_tool_result(value, tool)), ok=True, meta=meta)

    def _tool(self, call: Call) -> dict | None:
        if call.api is None:
            return None
        server = call.facts["server"]
        return self.tools.tool(server, call.api.api, protocol.key_prefix(server, "tools/list"))

    # -- faults ------------------------------------------------------------------------
    def injected(self, call: Call, fault: str, rule: str) -> Response | None:
        """An injected fault as a tool error result or a JSON-RPC error (other faults answer
        as HTTP, which an MCP client also sees)."""
        if fault == "tool-error":
            return self._result(call, {"content": [{"type": "text", "text": f"Injected fault ({rule}): the tool "
                                                                            "failed."}], "isError": True})
        if fault == "rpc-error":
            return self._error(call, jsonrpc.INTERNAL_ERROR, f"Injected fault ({rule}): internal error")
        if call.request.url.startswith(protocol.STDIO_SCHEME) and fault in STDIO_FAULTS:
            code, what = STDIO_FAULTS[fault]  # stdio has no HTTP status: MCP's own error, with the request's id
            return self._error(call, code, f"Injected fault ({rule}): {what}")
        return None

    def _result(self, call: Call, result: dict) -> Response:
        if call.facts.get("era") == protocol.STATELESS_ERA:  # every result of that era says it is final
            result = {**result, "resultType": "complete"}
        return Response(200, JSON, jsonrpc.result_body(call.facts.get("id"), result))

    def _error(self, call: Call, code: int, text: str) -> Response:
        return Response(200, JSON, jsonrpc.error_body(call.facts.get("id"), code, text))


def _upstream_of(call: Call) -> Request:
    """What to send the server: a call the engine sends on always has it."""
    if call.upstream is None:
        raise UpstreamError(call.no_upstream or "no real API is known for this call")
    return call.upstream


def _session_of(call: Call) -> str:
    """The session a message belongs to, as its client names it (empty over stdio and in the
    stateless era)."""
    return call.request.header(protocol.SESSION_HEADER) or ""


def _progress_token(params: Any) -> Any:
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None


def _speaks_mcp(headers: Mapping[str, str]) -> bool:
    return SESSION in headers or protocol.VERSION_HEADER.lower() in headers


def _auth_context(headers: Mapping[str, str], rules: KeyRules) -> str:
    """A digest of the credentials a request carries (empty when it carries none): calls
    with other credentials get other answers; the values themselves are never kept."""
    return keys.credentials_digest(headers.items(), rules)


def _failed(judged: Judged, reason: str, failure: FailureKind) -> Judged:
    verdict = Verdict(False, reason, failure)
    return Judged(judged.response, verdict, {**judged.meta, "failure": failure.value})


def _result_text(result: dict) -> str:
    content = result.get("content")
    if isinstance(content, list):
        return " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    return ""


def _failure_text(source: Source, call: Call, document: Any) -> str:
    what = call.facts.get("method", "the call")
    if source is Source.MISS:
        return f"stbproxy replay: no stored answer for {what} (the error's data says what was closest)"
    if isinstance(document, dict) and isinstance(document.get("error"), str):
        return document["error"]
    return f"stbproxy: no answer for {what}"


def _server_name(call: Call) -> str:
    return str(call.facts.get("server", call.host))


def _value_of(response: Response) -> Any:
    """A simulator's answer as a value: JSON when it says so, else its text."""
    text = response.body.decode("utf-8", "replace")
    if "json" in (response.header("content-type") or "").lower():
        try:
            return json.loads(text)
        except ValueError:
            pass
    return text


def _body_text(response: Response) -> str:
    try:
        document = json.loads(response.body)
    except ValueError:
        return response.body.decode("utf-8", "replace")
    if isinstance(document, dict) and isinstance(document.get("error"), str):
        return document["error"]
    return json.dumps(document)[:500]
