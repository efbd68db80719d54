"""StableToolBench's kind of traffic.

A request the catalog routes to a RapidAPI-style API is a StableToolBench call, keyed under
ToolBench's standardized names by keys.stb_api_key: by default as StableToolBench's server
looks a call up (the arguments' text, order and types included), or with --stb-keys
canonical by the arguments compared as text; its answers are judged by StableToolBench's
rules under --validity auto. A /virtual call is one too (virtual_api.py makes its Call).
Its answer comes from one of two kinds of server: a ToolBench-style API server behind the
proxy's own /virtual answers ``{"error", "response"}``, judged as StableToolBench's server
judges it (status 200, then check_result); a StableToolBench server that a /virtual call
was addressed to gives the benchmark's answer, kept as it came.
"""

from __future__ import annotations

from stbproxy import jsonsafe, keys
from stbproxy.keys import KeyRules
from stbproxy.models import Request, Response
from stbproxy.stb import validity
from stbproxy.stb.api_doc import ApiDoc
from stbproxy.stb.api_requests import request_args
from stbproxy.stb.bodies import VIRTUAL_STATUS, answer_parts
from stbproxy.stb.catalog import Catalog
from stbproxy.synthesis.simulation import Simulation, SimulationRequest, Simulator
from stbproxy.traffic.plain_http import judge_http
from stbproxy.traffic.seam import BaseKind, Call, Judged

NAME = "stb"
SENT_NAMES = "sent"  # Call.facts: a /virtual call's category, tool_name and api_name as its client wrote them
SERVER_REPLY = "stb-server"  # Call.reply_format of a call answered by a StableToolBench server
DOC_REF = "doc"  # Call.facts: the catalog's ref of the API, when the call's key names it otherwise


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


class StableToolBench(BaseKind):
    name = NAME

    def __init__(self, catalog: Catalog | None) -> None:
        self.catalog = catalog

    def call(self, request: Request, rules: KeyRules) -> Call | None:
        match = self.catalog.route(request.method, request.url, request.headers) if self.catalog else None
        if match is None:
            return None
        args = match.doc.key_args({**request_args(request), **match.path_params})
        if rules.stb_keys == keys.EXACT:
            args = match.doc.in_doc_order(args)
        ref = match.doc.ref
        return Call(keys.stb_api_key(ref, args, rules), request, request, ref, args, request.host, kind=self.name)

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
        ref = call.facts.get(DOC_REF) or call.api
        doc = self.catalog.get(ref) if ref is not None else None
        if doc is None:
            match = self.catalog.route(call.request.method, call.request.url, call.request.headers)
            doc = match.doc if match else None
        return doc
