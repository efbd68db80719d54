"""StableToolBench's kind of traffic.

A request the catalog routes to a RapidAPI-style API is a StableToolBench call, and so is
every /virtual call a running proxy takes (one with a VirtualUpstream): a POST to its own
``/virtual`` (``Request.to_proxy``), and a POST with a /virtual body to another server's
/virtual on its way through. Each is keyed in one place (``_keyed``), under ToolBench's
standardized names by keys.stb_api_key: by default as StableToolBench's server looks a
call up (the arguments' text, order and types included), or with --stb-keys canonical by
the arguments compared as text; its answers are judged by StableToolBench's rules under
--validity auto.

A /virtual call's answer comes from one of three places: a ToolBench-style API server
behind the proxy's own /virtual (``--toolbench-url``) answers ``{"error", "response"}``,
judged as StableToolBench's server judges it (status 200, then check_result); the API's
URL from the catalog answers as any API does; a StableToolBench server that a /virtual call
was addressed to gives the benchmark's answer, kept as it came and never simulated over.
Its client reads every answer as StableToolBench's server writes it (``client_reply``:
virtual_calls.reply_response). A body that is no call gets the kind's own reply
(``Call.own_reply``): on the proxy's own address a 422 naming the field, a 405 for another
method than POST, and a chat with the user's answer; on its way elsewhere only
StableToolBench's answer to a tool_input that is not JSON, any other body being plain HTTP.
"""

from __future__ import annotations

from typing import Any, Mapping

from stbcore.toolbench_names import server_names
from stbproxy import jsonsafe, keys
from stbproxy.keys import KeyRules
from stbproxy.models import ApiRef, Headers, Request, Response, Source, header_value
from stbproxy.recent import Recent
from stbproxy.stb import validity
from stbproxy.stb.api_doc import ApiDoc
from stbproxy.stb.api_requests import (
    VIRTUAL_HOST,
    request_args,
    stand_in_request,
    stored_request,
    toolbench_request,
)
from stbproxy.stb.bodies import VIRTUAL_STATUS, answer_parts
from stbproxy.stb.catalog import Catalog, called_api_key, category_key, tool_key
from stbproxy.stb.virtual_calls import (
    CHAT_REPLY,
    CHAT_WITH_USER,
    INTERNAL_ERROR,
    NOT_POST,
    TOOLBENCH_KEY,
    VirtualReply,
    VirtualRequest,
    VirtualUpstream,
    error_reply,
    may_be_virtual_call,
    parse,
    reply_from_answer,
    reply_response,
)
from stbproxy.synthesis.simulation import Simulation, SimulationRequest, Simulator
from stbproxy.traffic.plain_http import judge_http
from stbproxy.traffic.seam import BaseKind, Call, Judged, Reply, ReplyFormat

NAME = "stb"
SENT_NAMES = "sent"  # Call.facts: a /virtual call's category, tool_name and api_name as its client wrote them
SERVER_REPLY: ReplyFormat = "stb-server"  # Call.reply_format of a call answered by a StableToolBench server
# Call.facts: the catalog's ref of the API as [category, tool, api] (facts cross the workers'
# link as JSON), when the call's key names it otherwise
DOC_REF = "doc"
REPLIES_KEPT = 2048  # the client replies of recent hits, each made once while its answer stays the same


def judge_server_answer(response: Response, obj: object, policy: validity.Policy) -> Judged:
    """What a StableToolBench virtual server answered: the benchmark's answer, whatever it
    holds, for that server has applied the calling rules already. An answer object is kept
    as it came (a cached failure too; its failure kind noted); anything else (an HTTP 500
    when the server failed) is passed on as it is and never kept, as that server keeps
    nothing of a call it failed on."""
    if response.status != 200 or not isinstance(obj, dict):
        verdict = validity.Verdict(True, f"the server's HTTP {response.status}, passed on", validity.FailureKind.OTHER)
        return Judged(response, verdict, {VIRTUAL_STATUS: response.status}, keep=False)
    failure = validity.judge_object(obj, policy).failure
    kept, meta = answer_parts(obj)
    return Judged(kept, validity.Verdict(True, "the server's answer", failure), {**meta, "failure": failure.value})


def keyed_back(catalog: Catalog | None, request: Request, key: str, rules: KeyRules) -> bool:
    """Whether ``request`` is keyed ``key`` again when it is read back (a cassette's
    interaction is keyed from its request): under exact keys a real call whose query turned
    typed arguments into strings, or put them in another order, is not."""
    call = StableToolBench(catalog).call(request, rules)
    return call is not None and call.key == key


def _keyed(ref: ApiRef, args: dict[str, Any], rules: KeyRules) -> str:
    """The key of a StableToolBench call, however it came (routed HTTP or /virtual)."""
    return keys.stb_api_key(ref, args, rules)


class StableToolBench(BaseKind):
    """``virtual``: where a running proxy's own /virtual sends misses; with it the kind takes
    /virtual calls (a proxy's), without it only the requests the catalog routes (the keys of
    imports, exports and cassettes)."""

    name = NAME

    def __init__(self, catalog: Catalog | None, virtual: VirtualUpstream | None = None) -> None:
        self.catalog = catalog
        self.virtual = virtual
        # A hit's reply depends only on its stored answer: repeated hits reuse it.
        self._replies: Recent[tuple[Response, Response]] = Recent(REPLIES_KEPT)

    def call(self, request: Request, rules: KeyRules) -> Call | None:
        if self.virtual is not None:
            if request.to_proxy:
                return self._own_virtual(request, rules)
            if may_be_virtual_call(request):
                call = self._proxied_virtual(request, rules)
                if call is not None:
                    return call
        match = self.catalog.route(request.method, request.url, request.headers) if self.catalog else None
        if match is None:
            return None
        args = match.doc.key_args({**request_args(request), **match.path_params})
        if rules.stb_keys == keys.EXACT:
            args = match.doc.in_doc_order(args)
        ref = match.doc.ref
        return Call(_keyed(ref, args, rules), request, request, ref, args, request.host, kind=self.name)

    def _own_virtual(self, request: Request, rules: KeyRules) -> Call:
        """A request to the proxy's own /virtual: a call whose misses go where VirtualUpstream
        says, or the kind's own reply (not a POST, not a call, a chat with the user)."""
        if request.method != "POST":
            return self._replied(request, NOT_POST)
        parsed = parse(request.body)
        if isinstance(parsed, VirtualReply):
            return self._replied(request, parsed)
        if called_api_key(parsed.api_name, parsed.tool_name, parsed.category) == CHAT_WITH_USER:
            return self._replied(request, CHAT_REPLY)
        toolbench_url = self.virtual.toolbench_url if self.virtual is not None else None
        return self.virtual_call(parsed, rules, headers=request.headers, server=toolbench_url)

    def _proxied_virtual(self, request: Request, rules: KeyRules) -> Call | None:
        """A POST to another server's /virtual: a call when its body is one, sent as it came
        to that server (a StableToolBench server, whose answer is the benchmark's answer);
        StableToolBench's reply to a tool_input that is not JSON, which that server gives
        without a call; None (plain HTTP) for any other body."""
        parsed = parse(request.body)
        if isinstance(parsed, VirtualReply):
            return self._replied(request, parsed) if parsed.status == 200 else None
        return self.virtual_call(parsed, rules, headers=request.headers, server=request)

    def _replied(self, request: Request, reply: VirtualReply) -> Call:
        return Call("", request, None, kind=self.name, keep=False,
                    own_reply=Reply(reply_response(reply), Source(reply.source)))

    def virtual_call(self, request: VirtualRequest, rules: KeyRules, *, headers: Headers = (),
                     server: str | Request | None = None) -> Call:
        """A /virtual call's key and where a miss goes: ``server`` (a ToolBench-style server's
        URL, or the client's request to a StableToolBench server), else the API's own URL."""
        doc = self.catalog.lookup(request.category, request.tool_name, request.api_name) if self.catalog else None
        facts: dict[str, Any] = {SENT_NAMES: {"category": request.category, "tool_name": request.tool_name,
                                              "api_name": request.api_name}}
        if rules.stb_keys == keys.EXACT:  # the cache file and entry StableToolBench's server reads
            ref = ApiRef(*server_names(request.category, request.tool_name, request.api_name))
            key_args = request.args
            if doc is not None and doc.ref != ref:
                facts[DOC_REF] = [doc.ref.category, doc.ref.tool, doc.ref.api]
        elif doc is not None:
            ref, key_args = doc.ref, doc.key_args(request.args)
        else:  # unknown API: still keyed by its standardized names, so it caches
            ref = ApiRef(category_key(request.category), tool_key(request.tool_name, request.category),
                         called_api_key(request.api_name, request.tool_name, request.category))
            key_args = request.args
        key = _keyed(ref, key_args, rules)
        stored = stored_request(ref, doc, request.args)
        if stored.host != VIRTUAL_HOST and rules.stb_keys == keys.EXACT and not keyed_back(self.catalog, stored, key,
                                                                                            rules):
            stored = stand_in_request(ref, request.args)  # the arguments as they were, so that a cassette keys them so
        if isinstance(server, Request):
            return Call(key, stored, server, ref, key_args, stored.host, SERVER_REPLY, kind=self.name,
                        may_simulate=False, facts=facts)
        if server:
            secret = request.toolbench_key or header_value(headers, TOOLBENCH_KEY) or ""
            upstream = toolbench_request(server, request.category, request.tool_name, request.api_name,
                                         request.args, secret)
            return Call(key, stored, upstream, ref, key_args, stored.host, "virtual", kind=self.name, facts=facts)
        real, why_not = (self.virtual or VirtualUpstream()).direct_call(self.catalog, doc, request.args)
        return Call(key, stored, real, ref, key_args, stored.host, no_upstream=why_not, kind=self.name, facts=facts)

    def client_reply(self, call: Call, response: Response, source: Source, meta: Mapping[str, Any]) -> Response:
        """A /virtual call's answer as StableToolBench's server writes it (virtual_calls:
        reply_from_answer, reply_response); a call the catalog routed gets the API's own."""
        if SENT_NAMES not in call.facts:
            return response
        if source is Source.CACHE:
            known = self._replies.get(call.key)
            if known is not None and known[0] is response:  # the engine's very answer: not stale
                return known[1]
            return self._replies.put(call.key, (response, reply_response(reply_from_answer(response, source,
                                                                                             meta))))[1]
        if source is Source.ERROR and call.reply_format == SERVER_REPLY:
            # No answer from the server it was addressed to: the client learns so as it would
            # have without the proxy, from the proxy's 502, and no answer object is made up.
            return reply_response(VirtualReply(response.status, {}, source.value, raw=response))
        return reply_response(reply_from_answer(response, source, meta))

    def failure_reply(self, request: Request) -> Response | None:
        """A /virtual client gets an answer object even when the proxy failed on its call."""
        if self.virtual is None:
            return None
        if not request.to_proxy:
            if not may_be_virtual_call(request):
                return None
            parsed = parse(request.body)
            if isinstance(parsed, VirtualReply) and parsed.status != 200:
                return None  # plain HTTP
        return reply_response(error_reply(INTERNAL_ERROR))

    def judge(self, call: Call, response: Response, setting: str) -> Judged:
        policy = validity.policy_for(setting, stb_traffic=True)
        if call.reply_format == "http":
            return judge_http(response, policy)
        try:
            obj = jsonsafe.loads(response.body)
        except (ValueError, UnicodeDecodeError):
            obj = None
        if call.reply_format == SERVER_REPLY:
            return judge_server_answer(response, obj, policy)
        # A ToolBench-style API server answers {"error", "response"}: the API's own body is
        # the response kept, its error text beside it. StableToolBench's server takes such
        # an answer only with status 200.
        if response.status != 200:
            failure = validity.failure_of_status(response.status, "")
            return Judged(response, validity.Verdict(False, f"the ToolBench server answered HTTP {response.status}",
                                                     failure), {"failure": failure.value})
        verdict = validity.judge_object(obj, policy)
        if not isinstance(obj, dict):
            return Judged(response, verdict, {"failure": verdict.failure.value})
        kept, meta = answer_parts(obj)
        return Judged(kept, verdict, {**meta, "failure": verdict.failure.value})

    async def simulate(self, call: Call, simulator: Simulator, reason: str) -> Simulation:
        """BaseKind's, with the names a /virtual client wrote (a simulator that plays
        StableToolBench's server describes the API by them)."""
        return await simulator.simulate(SimulationRequest(call.request, call.key, call.api, reason,
                                                          doc=self.describe(call), args=call.args or None,
                                                          names=call.facts.get(SENT_NAMES)))

    def describe(self, call: Call) -> ApiDoc | None:
        """The catalog's doc of the call's API (found by name, else by routing its request)."""
        if self.catalog is None:
            return None
        named = call.facts.get(DOC_REF)
        ref = ApiRef(*named) if named else call.api
        doc = self.catalog.get(ref) if ref is not None else None
        if doc is None:
            match = self.catalog.route(call.request.method, call.request.url, call.request.headers)
            doc = match.doc if match else None
        return doc
