"""What an engine is built with: its settings (EngineConfig), the client that asks real APIs
(UpstreamClient), and the limits and failure classes the calling rules share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from stbproxy.errors import UpstreamFailure
from stbproxy.forensics import drift
from stbproxy.forensics.naming import Fork
from stbproxy.keys import DEFAULT_RULES, KeyRules
from stbproxy.models import Mode, Request, Response
from stbproxy.stb import validity

DEFAULT_MAX_BODY = 10 * 1024 * 1024
REFRESH_INTERVAL = 60.0  # seconds between two real calls for the same simulated answer
# Upstream failures that a setting fixes: answered as errors in every mode, never simulated.
CONFIGURATION_FAILURES = frozenset({UpstreamFailure.TLS})
# Real answers the proxy refuses whole (over --max-upstream-body, a coding it does not decode:
# upstream/codings.py): errors in every mode too, never simulated, since the API did answer.
REFUSED_ANSWERS = frozenset({UpstreamFailure.TOO_LARGE, UpstreamFailure.UNDECODABLE})
# Failures of the proxy's own (an MCP session it could not open at the server): answered as
# errors, never simulated, so nothing made up for them is ever kept.
PROXY_SIDE_FAILURES = frozenset({UpstreamFailure.SESSION})


class UpstreamClient(Protocol):
    async def send(self, request: Request) -> tuple[Response, float]: ...


@dataclass(frozen=True)
class EngineConfig:
    mode: Mode = Mode.VIRTUAL
    passthrough: tuple[str, ...] = ()  # host globs, e.g. "api.openai.com", "*.openai.azure.com"
    rules: KeyRules = DEFAULT_RULES
    max_body_bytes: int = DEFAULT_MAX_BODY
    validity: str = validity.AUTO  # which answers count as real: auto, stb or strict (stb/validity.py)
    keep_status: frozenset[int] = frozenset()  # 4xx statuses whose real answers count as real all the same
    refresh_simulated: bool = False  # virtual mode: try the real API again for stored simulated answers
    refresh_interval: float = REFRESH_INTERVAL
    ordered: bool = False  # a session's n-th identical request gets the n-th answer its namesake recorded
    fork: Fork | None = None  # every other session starts as a fork of this recorded one
    update: bool = False  # verify mode: a changed real answer replaces the stored one
    drift_rules: drift.Rules = drift.Rules()  # verify mode: what differs on every call
