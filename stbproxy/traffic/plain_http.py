"""Plain HTTP: any request, keyed by its method, URL and canonical body (keys.py), its
answers judged by their HTTP status first (validity's strict policy under --validity auto)."""

from __future__ import annotations

from stbproxy import keys
from stbproxy.keys import KeyRules
from stbproxy.models import Request, Response
from stbproxy.stb import validity
from stbproxy.traffic.seam import BaseKind, Call, Judged


class PlainHttp(BaseKind):
    name = "http"

    def call(self, request: Request, rules: KeyRules) -> Call:
        return Call(keys.request_key(request, rules), request, request, host=request.host, kind=self.name)

    def judge(self, call: Call, response: Response, setting: str) -> Judged:
        return judge_http(response, validity.policy_for(setting, stb_traffic=False))

    # describe() is BaseKind's None: an HTTP API nobody described, which the simulator
    # answers from the request alone.


def judge_http(response: Response, policy: validity.Policy) -> Judged:
    """An HTTP answer judged under ``policy``, kept as it came."""
    verdict = validity.judge(response.status, response.body, response.header("content-type"), policy)
    return Judged(response, verdict, {"failure": verdict.failure.value})
