"""StableToolBench's kind of traffic.

A request the catalog routes to a RapidAPI-style API is a StableToolBench call: keyed by
(category, tool, api, canonical arguments) under ToolBench's standardized names, so the
same call over the HTTP proxy and over /virtual meets one store entry, and
its answers judged by StableToolBench's rules under --validity auto. A /virtual call is
one too (virtual_api.py makes its Call); when it goes to a ToolBench-style server, that
server answers ``{"error", "response"}``, of which the API's own body is kept.
"""

from __future__ import annotations

from stbproxy import jsonsafe, keys
from stbproxy.keys import KeyRules
from stbproxy.models import Request, Response
from stbproxy.stb.api_requests import request_args
from stbproxy.stb import validity
from stbproxy.stb.bodies import api_body_response
from stbproxy.stb.api_doc import ApiDoc
from stbproxy.stb.catalog import Catalog
from stbproxy.traffic.plain_http import judge_http
from stbproxy.traffic.seam import BaseKind, Call, Judged

NAME = "stb"


class StableToolBench(BaseKind):
    name = NAME

    def __init__(self, catalog: Catalog | None) -> None:
        self.catalog = catalog

    def call(self, request: Request, rules: KeyRules) -> Call | None:
        match = self.catalog.route(request.method, request.url, request.headers) if self.catalog else None
        if match is None:
            return None
        args = match.doc.key_args({**request_args(request), **match.path_params})
        ref = match.doc.ref
        return Call(keys.api_key(ref, args, rules), request, request, ref, args, request.host, kind=self.name)

    def judge(self, call: Call, response: Response, setting: str) -> Judged:
        policy = validity.policy_for(setting, stb_traffic=True)
        if call.reply_format != "virtual":
            return judge_http(response, policy)
        # A ToolBench-style server answers {"error", "response"}: the API's own body is the
        # response kept, and its error text goes beside it.
        try:
            obj = jsonsafe.loads(response.body)
        except (ValueError, UnicodeDecodeError):
            obj = None
        verdict = validity.judge_object(obj, policy)
        meta = {"failure": verdict.failure.value}
        if isinstance(obj, dict):
            meta = {"error": str(obj.get("error") or ""), **meta}
            response = api_body_response(obj.get("response"))
        return Judged(response, verdict, meta)

    def describe(self, call: Call) -> ApiDoc | None:
        """The catalog's doc of the call's API (found by name, else by routing its request)."""
        if self.catalog is None:
            return None
        doc = self.catalog.get(call.api) if call.api is not None else None
        if doc is None:
            match = self.catalog.route(call.request.method, call.request.url, call.request.headers)
            doc = match.doc if match else None
        return doc
