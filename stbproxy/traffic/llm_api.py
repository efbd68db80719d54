"""OpenAI-compatible LLM APIs (chat completions and the like), which agents call for their
own turns: keyed and judged as plain HTTP, but a replay miss is answered in OpenAI's error
shape, the only one their clients read (the openai client shows ``error.message``). Which
paths those are is stbcore's (llm_apis.py), shared with the evaluator."""

from __future__ import annotations

from dataclasses import replace

from stbcore.llm_apis import is_openai_compatible
from stbproxy.keys import KeyRules
from stbproxy.models import Request, Response
from stbproxy.traffic.plain_http import PlainHttp
from stbproxy.traffic.seam import BaseKind, Call, Judged


def is_openai_endpoint(request: Request) -> bool:
    return is_openai_compatible(request.method, request.url.split("?", 1)[0])


class LlmApi(BaseKind):
    name = "llm"
    keyed_per_trial = True  # each trial samples the agent's model afresh

    def __init__(self) -> None:
        self._http = PlainHttp()

    def call(self, request: Request, rules: KeyRules) -> Call | None:
        if not is_openai_endpoint(request):
            return None
        return replace(self._http.call(request, rules), kind=self.name)

    def judge(self, call: Call, response: Response, setting: str) -> Judged:
        return self._http.judge(call, response, setting)

    def miss_document(self, call: Call, explanation: dict) -> dict:
        """The explanation in the message, which the openai client shows, and whole beside it."""
        message = explanation["error"]
        closest = explanation.get("closest")
        if closest:
            parts = ", ".join(d["part"] for d in closest["differences"]) or "nothing"
            message += f"; the closest stored request ({closest['method']} {closest['url']}) differs in: {parts}"
        else:
            message += "; nothing like it is stored"
        return {"error": {"message": message, "type": "stbproxy_replay_miss", "code": "replay_miss", "param": None},
                "stbproxy": explanation}
