"""The calling rules, independent of mitmproxy and of /virtual.

virtual (default): store hit -> answer; else upstream: a valid answer is stored and
    returned; an unreachable upstream or an invalid answer goes to the simulator.
record: always upstream; whatever comes back is stored (transport failures are not).
replay: store only; a miss answers 404 naming the closest stored request.
Hosts marked passthrough are always forwarded and never served from the store; their
exchanges are logged (redacted) so that a run's record stays complete.
Identical concurrent misses share one upstream (or simulator) call.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Protocol

from stbproxy import keys
from stbproxy.errors import StbError, UpstreamError
from stbproxy.keys import DEFAULT_RULES, KeyRules
from stbproxy.models import ApiRef, Exchange, Mode, Request, Response, Source
from stbproxy.redact import redact_request, redact_response, secret_values

log = logging.getLogger("stbproxy")

SOURCE_HEADER = "X-Stb-Source"
MISS = "miss"  # X-Stb-Source of a replay miss: no source answered
DEFAULT_MAX_BODY = 10 * 1024 * 1024
CLOSEST_SCAN_LIMIT = 5000  # bound the work a replay miss may do to explain itself


# -- pluggable parts ----------------------------------------------------------------------


class UpstreamClient(Protocol):
    async def send(self, request: Request) -> tuple[Response, float]: ...


@dataclass(frozen=True)
class Verdict:
    """Whether a real answer may be stored and served as real, and why not."""

    valid: bool
    reason: str = ""
    failure: str = "success"  # the failure taxonomy's kind, kept with the entry


def status_validity(response: Response) -> Verdict:
    """The fallback policy: server errors and rate limits are not real answers."""
    if response.status >= 500 or response.status == 429:
        return Verdict(False, f"upstream answered HTTP {response.status}", "not_connected")
    return Verdict(True)


@dataclass(frozen=True)
class SimulationRequest:
    request: Request  # the original request (secrets included: simulators must not store it)
    key: str
    api: ApiRef | None
    reason: str  # why the real API could not answer


@dataclass(frozen=True)
class Simulation:
    response: Response
    ok: bool  # False: a failed simulation, answered but never stored
    meta: dict = field(default_factory=dict)


class Simulator(Protocol):
    async def simulate(self, job: SimulationRequest) -> Simulation: ...


def error_object_response(error: str, status: int = 200) -> Response:
    """A StableToolBench-shaped ``{"error": ..., "response": ""}`` JSON answer."""
    body = json.dumps({"error": error, "response": ""}).encode()
    return Response(status, (("Content-Type", "application/json"),), body)


class NoSimulator:
    """Answers a clear error object: used until a simulator is configured."""

    async def simulate(self, job: SimulationRequest) -> Simulation:
        return Simulation(
            error_object_response(f"The real API is unavailable ({job.reason}) and no simulator is configured."),
            ok=False,
        )


# -- the engine ---------------------------------------------------------------------------


@dataclass(frozen=True)
class EngineConfig:
    mode: Mode = Mode.VIRTUAL
    passthrough: tuple[str, ...] = ()  # host globs, e.g. "api.openai.com", "*.openai.azure.com"
    rules: KeyRules = DEFAULT_RULES
    max_body_bytes: int = DEFAULT_MAX_BODY


@dataclass(frozen=True)
class Answer:
    response: Response  # carries the X-Stb-Source header
    source: Source | str
    key: str | None = None


class Engine:
    def __init__(
        self,
        store,
        upstream: UpstreamClient,
        config: EngineConfig = EngineConfig(),
        *,
        simulator: Simulator | None = None,
        validity: Callable[[Response], Verdict] = status_validity,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.upstream = upstream
        self.config = config
        self.simulator = simulator or NoSimulator()
        self.validity = validity
        self.clock = clock
        self._inflight: dict[str, asyncio.Future[Answer]] = {}
        self._log_seq = 0

    # entry point ----------------------------------------------------------------------
    async def handle(self, request: Request) -> Answer:
        if self.is_passthrough(request.host):
            return await self._passthrough(request)
        key = keys.request_key(request, self.config.rules)
        if self.config.mode is not Mode.RECORD:
            hit = self.store.get(key)
            if hit is not None:
                return Answer(hit.response.with_header(SOURCE_HEADER, Source.CACHE.value), Source.CACHE, key)
        if self.config.mode is Mode.REPLAY:
            return self._replay_miss(request, key)
        return await self._shared(key, lambda: self._miss(request, key))

    def is_passthrough(self, host: str) -> bool:
        return any(fnmatch.fnmatchcase(host, pattern) for pattern in self.config.passthrough)

    # misses ---------------------------------------------------------------------------
    async def _shared(self, key: str, work: Callable[[], Awaitable[Answer]]) -> Answer:
        """Run ``work`` once per key at a time; concurrent callers share its answer."""
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(work())
            self._inflight[key] = task
            task.add_done_callback(lambda _t: self._inflight.pop(key, None))
        # shield: one client hanging up must not cancel the call the others wait for
        return await asyncio.shield(task)

    async def _miss(self, request: Request, key: str) -> Answer:
        try:
            response, seconds = await self.upstream.send(request)
        except UpstreamError as exc:
            log.info("upstream failed for %s: %s", self._loggable(request), exc)
            if self.config.mode is Mode.RECORD:
                return self._answer(error_object_response(str(exc), status=502), Source.UPSTREAM, key)
            return await self._simulate(request, key, str(exc))

        verdict = self.validity(response)
        if self.config.mode is Mode.VIRTUAL and not verdict.valid:
            log.info("invalid upstream answer for %s: %s", self._loggable(request), verdict.reason)
            return await self._simulate(request, key, verdict.reason)
        self._save(request, response, key, Source.UPSTREAM, seconds, {"failure": verdict.failure})
        return self._answer(response, Source.UPSTREAM, key)

    async def _simulate(self, request: Request, key: str, reason: str) -> Answer:
        job = SimulationRequest(request, key, None, reason)
        try:
            result = await self.simulator.simulate(job)
        except StbError as exc:
            result = Simulation(error_object_response(f"Simulation failed: {exc}"), ok=False)
        if not result.ok:
            return self._answer(result.response, Source.SIMULATED_ERROR, key)
        self._save(request, result.response, key, Source.SIMULATED, None, result.meta)
        return self._answer(result.response, Source.SIMULATED, key)

    def _replay_miss(self, request: Request, key: str) -> Answer:
        incoming = keys.canonical(request, self.config.rules)
        explanation: dict = {
            "error": "stbproxy replay: no stored answer for this request",
            "request": {"method": incoming.method, "url": redact_request(request, self.config.rules).url},
            "key": key,
            "closest": None,
        }
        closest = self.closest(request)
        if closest is not None:
            stored, differences = closest
            explanation["closest"] = {
                "key": stored.key,
                "method": stored.request.method,
                "url": stored.request.url,
                "differences": [
                    {"part": d.part, "stored": d.expected, "got": d.actual} for d in differences
                ],
            }
        body = json.dumps(explanation, ensure_ascii=False, indent=2).encode()
        response = Response(404, (("Content-Type", "application/json"),), body)
        return Answer(response.with_header(SOURCE_HEADER, MISS), MISS, key)

    def closest(self, request: Request) -> tuple[Exchange, list[keys.Difference]] | None:
        """The stored request nearest to this one (same host first), with the differences."""
        incoming = keys.canonical(request, self.config.rules)
        best: tuple[int, Exchange, list[keys.Difference]] | None = None
        for prefix in (f"http/{incoming.host}/{incoming.method}/", f"http/{incoming.host}/", "http/"):
            for n, stored in enumerate(self.store.scan(prefix)):
                if n >= CLOSEST_SCAN_LIMIT:
                    break
                differences = keys.diff(keys.canonical(stored.request, self.config.rules), incoming)
                if best is None or len(differences) < best[0]:
                    best = (len(differences), stored, differences)
            if best is not None:
                return best[1], best[2]
        return None

    # passthrough ----------------------------------------------------------------------
    async def _passthrough(self, request: Request) -> Answer:
        try:
            response, seconds = await self.upstream.send(request)
        except UpstreamError as exc:
            return self._answer(error_object_response(str(exc), status=502), Source.PASSTHROUGH, None)
        self._log_seq += 1
        log_key = f"log/passthrough/{request.host}/{time.time_ns():020d}-{os.getpid()}-{self._log_seq}"
        self._save(request, response, log_key, Source.PASSTHROUGH, seconds, {})
        return self._answer(response, Source.PASSTHROUGH, log_key)

    # storing --------------------------------------------------------------------------
    def _save(self, request: Request, response: Response, key: str, source: Source,
              seconds: float | None, meta: dict) -> None:
        cap = self.config.max_body_bytes
        if len(request.body) > cap or len(response.body) > cap:
            log.warning(
                "not storing %s: body over the %d-byte cap (request %d, response %d bytes)",
                self._loggable(request), cap, len(request.body), len(response.body),
            )
            return
        secrets = secret_values(request, self.config.rules)
        exchange = Exchange(
            key=key,
            request=redact_request(request, self.config.rules),
            response=redact_response(response, secrets),
            source=source,
            stored_at=self.clock(),
            upstream_seconds=seconds,
            meta=meta,
        )
        try:
            self.store.put(exchange)
        except StbError as exc:  # a full disk must not take the answer away from the client
            log.error("could not store %s: %s", self._loggable(request), exc)

    def _answer(self, response: Response, source: Source, key: str | None) -> Answer:
        return Answer(response.with_header(SOURCE_HEADER, source.value), source, key)

    def _loggable(self, request: Request) -> str:
        return f"{request.method} {redact_request(request, self.config.rules).url}"
