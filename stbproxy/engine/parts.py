"""What every part of Engine shares (calling_rules.py): the state Engine.__init__ sets, and,
for the type checker alone, the helpers one part calls on another. Each part (hits.py,
misses.py, faults.py, verify.py, passing_on.py, session_records.py, keeping.py) subclasses
EnginePart, so that its uses of the others are checked against what they define."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from typing import TYPE_CHECKING, Callable, Mapping

from stbproxy.engine.answers import Answer
from stbproxy.engine.config import EngineConfig, UpstreamClient
from stbproxy.errors import UpstreamError
from stbproxy.models import Exchange, Request, Response, Source
from stbproxy.recent import Recent
from stbproxy.sim.faults import Decision, FaultPlan
from stbproxy.store.contract import EngineStore
from stbproxy.store.write_failures import WriteFailures
from stbproxy.synthesis.simulation import Simulator
from stbproxy.traffic.seam import Call, Judged, Kinds, TrafficKind


class EnginePart:
    """The engine's state, as Engine.__init__ sets it."""

    store: EngineStore
    upstream: UpstreamClient
    config: EngineConfig
    simulator: Simulator
    kinds: Kinds
    faults: FaultPlan
    clock: Callable[[], float]
    write_failures: WriteFailures
    misses: list[dict]  # replay misses with their explanation
    _inflight: dict[str, asyncio.Future[Answer]]
    _waiting: dict[asyncio.Future[Answer], int]
    _log_seq: int
    _hits: OrderedDict[str, Answer]
    _refreshed: dict[str, float]
    _warned: Recent[bool]

    if TYPE_CHECKING:  # defined by the parts named; declared here so that the others may call them
        # Hits
        def _cached(self, key: str, stored: Exchange) -> Answer: ...

        # FaultInjection
        def _decide(self, call: Call) -> Decision: ...
        def _injected(self, call: Call, decision: Decision) -> Answer: ...

        # Misses
        def _error(self, call: Call, exc: UpstreamError) -> Answer: ...
        def _warn_once(self, host: str, text: str) -> None: ...
        def _judge(self, kind: TrafficKind, call: Call, response: Response) -> Judged: ...

        # Keeping
        def _log_key(self, kind: str, call: Call) -> str: ...
        def _keep(self, call: Call, response: Response, source: Source, key: str, seconds: float | None,
                  meta: Mapping) -> Answer: ...
        def _save(self, call: Call, response: Response, key: str, source: Source,
                  seconds: float | None, meta: dict) -> str | None: ...
        def _secrets(self, call: Call) -> frozenset[str]: ...
        def _scrub(self, call: Call, text: str) -> str: ...
        def _answer(self, response: Response, source: Source, key: str | None, meta: Mapping | None = None,
                    record_key: str | None = None) -> Answer: ...
        def _loggable(self, request: Request) -> str: ...
