"""The calling rules, independent of mitmproxy and of the kinds of traffic.

virtual (default): store hit -> answer; else upstream: a valid answer is stored and
    returned; an unreachable upstream or an invalid answer goes to the simulator.
record: always upstream; whatever comes back is stored.
verify: always upstream, and the stored answer served: the real one is compared with it
    (forensics/drift.py) and the difference kept in the session's record; the store
    changes only with ``update`` (a changed answer replaces the stored one, which is kept
    under log/history/). A call with no stored answer gets the real one.
replay: store only; a miss answers 404 naming the closest stored request (in the OpenAI
    error shape on an OpenAI-compatible endpoint, so that its client shows why).
A transport failure is not an answer: in record mode and for passthrough hosts it is
answered 502 with ``X-Stb-Source: error``, logged in the session, and never stored. A TLS
handshake failure (a certificate that cannot be verified) is a configuration to fix, not
an API that is down: in every mode it is answered the same way, with the fix in its text,
and never simulated.
With refresh_simulated (virtual mode), a hit on a simulated answer asks the real API
again, at most once per REFRESH_INTERVAL per key: a valid real answer replaces it.
Hosts marked passthrough are always forwarded and never served from the store; their
exchanges are logged (redacted) so that a run's record stays complete.
Identical concurrent misses share one upstream (or simulator) call.
Sessions may take answers from recorded sessions first (forensics/playback.py: the first K
calls of a fork, ordered replay), and an agent's own LLM calls are keyed per trial
(forensics/naming.py).

A write the store refuses is never silent: it is counted (write_failures.py); in record
mode the client gets 507 instead of an answer that was not recorded, in the other modes
the answer is served with ``X-Stb-Stored: no``. Every text kept or logged about a call
(an upstream error, a reason) is scrubbed of the call's secrets, those of the request
sent upstream included.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import logging
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Awaitable, Callable, Mapping, Protocol

from stbproxy import keys
from stbproxy.errors import StbError, StoreError, UpstreamError, UpstreamFailure
from stbproxy.forensics import drift
from stbproxy.forensics.naming import Fork, SessionRef, session_ref, shared_key, trial_key, view_key
from stbproxy.forensics.playback import Played, Recordings, SessionPlayback
from stbproxy.keys import DEFAULT_RULES, KeyRules
from stbproxy.misses import explain_miss
from stbproxy.models import BodyStream, Exchange, Mode, Request, Response, Source, StreamedResponse
from stbproxy.provenance import marked
from stbproxy.recent import Recent
from stbproxy.redact import (
    bounded_url,
    redact_request,
    redact_response,
    redact_url,
    scrub_text,
    scrub_value,
    secret_values,
)
from stbproxy.sessions import stored_record
from stbproxy.sim.faults import NO_FAULT, Decision, FaultPlan
from stbproxy.stb import validity
from stbproxy.stb.bodies import error_object_response
from stbproxy.store.contract import EngineStore
from stbproxy.store.write_failures import WriteFailures
from stbproxy.synthesis.simulation import NoSimulator, Simulation, Simulator
from stbproxy.traffic.llm_api import LlmApi
from stbproxy.traffic.plain_http import PlainHttp
from stbproxy.traffic.seam import LIVE, Call, Kinds

log = logging.getLogger("stbproxy")

STORED_HEADER = "X-Stb-Stored"  # "no" on an answer the store refused to keep
DEFAULT_MAX_BODY = 10 * 1024 * 1024
HIT_CACHE_ENTRIES = 4096  # ready-made answers of recent hits (hits repeat in benchmark reruns)
HIT_CACHE_MAX_BODY = 64 * 1024
CALL_MEMO_ENTRIES = 2048  # routed calls of recent requests (a call depends on the request alone)
CALL_MEMO_MAX_BODY = 4 * 1024
MAX_MISSES_KEPT = 10_000
WARNED_HOSTS = 1024
REFRESH_INTERVAL = 60.0  # seconds between two real calls for the same simulated answer
# Upstream failures that a setting fixes: answered as errors in every mode, never simulated.
CONFIGURATION_FAILURES = frozenset({UpstreamFailure.TLS})
# Real answers the proxy refuses whole (over --max-upstream-body, a coding it does not decode:
# upstream.py): errors in every mode too, never simulated, since the API did answer.
REFUSED_ANSWERS = frozenset({UpstreamFailure.TOO_LARGE, UpstreamFailure.UNDECODABLE})
# Failures of the proxy's own (an MCP session it could not open at the server): answered as
# errors, never simulated, so nothing made up for them is ever kept.
PROXY_SIDE_FAILURES = frozenset({UpstreamFailure.SESSION})


# -- pluggable parts ----------------------------------------------------------------------


class UpstreamClient(Protocol):
    async def send(self, request: Request) -> tuple[Response, float]: ...


# -- the engine ---------------------------------------------------------------------------


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


@dataclass(frozen=True)
class Answer:
    response: Response  # carries the X-Stb-Source header
    source: Source
    key: str | None = None  # the call's key
    meta: Mapping = field(default_factory=dict)  # the entry's facts (error text, taxonomy, model)
    record_key: str | None = None  # where these answer bytes are kept (an entry or a log/ record)
    stored_source: Source | None = None  # a hit: the source of the stored entry
    write_failed: bool = False  # the store refused a write this answer needed
    stream: BodyStream | None = None  # a body still arriving: the response carries only the head
    note: Mapping = field(default_factory=dict)  # facts for the session's record (drift, fork)


class Engine:
    def __init__(
        self,
        store: EngineStore,
        upstream: UpstreamClient,
        config: EngineConfig = EngineConfig(),
        *,
        simulator: Simulator | None = None,
        kinds: Kinds | None = None,
        faults: FaultPlan = FaultPlan(),
        clock: Callable[[], float] = time.time,
        write_failures: WriteFailures | None = None,
    ) -> None:
        self.store = store
        self.upstream = upstream
        self.config = config
        self.simulator = simulator or NoSimulator()
        # The kinds of traffic, the one thing the engine knows of them (traffic/seam.py).
        self.kinds = kinds or Kinds((LlmApi(), PlainHttp()))
        self.faults = faults
        self.clock = clock
        self.write_failures = write_failures or WriteFailures()
        self._inflight: dict[str, asyncio.Future[Answer]] = {}
        self._waiting: dict[asyncio.Future[Answer], int] = {}  # callers of each shared call
        self._log_seq = 0
        # Hits decoded once and answered from memory after: stored entries are only
        # written on a miss (or in record mode, which never reads), so none goes stale.
        self._hits: OrderedDict[str, Answer] = OrderedDict()
        self._replies: Recent[tuple[Answer, Answer]] = Recent(HIT_CACHE_ENTRIES)  # hits as their clients read them
        self.misses: list[dict] = []  # replay misses with their explanation, for reports
        self._refreshed: dict[str, float] = {}  # key -> when the real API was last asked again
        # Routing and keying a request is pure: equal requests (every header and byte alike)
        # get the same Call, so a repeated one skips URL parsing, canonical JSON and hashing.
        self._calls: Recent[Call] = Recent(CALL_MEMO_ENTRIES)
        # Hosts whose TLS failure was logged as a warning (bounded: any client names hosts).
        self._warned: Recent[bool] = Recent(WARNED_HOSTS)
        self.playback = SessionPlayback(Recordings(store, lambda request: self.http_call(request).key),
                                        ordered=config.ordered and config.mode in (Mode.VIRTUAL, Mode.REPLAY),
                                        fork=config.fork)

    # entry points ---------------------------------------------------------------------
    async def handle(self, request: Request, session: str | None = None) -> Answer:
        """A request from the front end (proxied, or to the proxy's own /virtual): passed
        through to a passthrough host, answered by its kind when it asks for no call
        (Call.own_reply), else its call answered by the calling rules."""
        if self.config.passthrough and not request.to_proxy and self.is_passthrough(request.host):
            return await self.pass_through(request, session)
        call = self.http_call(request)
        if call.own_reply is not None:  # nothing to store, ask or record
            return Answer(call.own_reply.response, call.own_reply.source)
        return await self.answer(call, session)

    async def pass_through(self, request: Request, session: str | None) -> Answer:
        """A request to a passthrough host: forwarded, never served from the store, logged."""
        call = Call(keys.request_key(request, self.config.rules), request, request, host=request.host)
        return await self._run(call, self.session_of(session), self._passthrough)

    def failure_reply(self, request: Request) -> Response | None:
        """The answer a client reads when the proxy failed on its request, in its kind's
        shape (a /virtual client's answer object); None: the front end's own error."""
        if self.config.passthrough and not request.to_proxy and self.is_passthrough(request.host):
            return None
        return self.kinds.failure_reply(request)

    def http_call(self, request: Request) -> Call:
        """A proxied request as the call of its kind (memoized: equal requests make equal calls)."""
        small = len(request.body) <= CALL_MEMO_MAX_BODY
        call = self._calls.get(request) if small else None
        if call is None:
            call = self.kinds.call(request, self.config.rules)
            if small:
                self._calls.put(request, call)
        return call

    async def answer(self, call: Call, session: str | None = None) -> Answer:
        """The calling rules for one call, whatever its kind; ``session``: the session string a
        request names (forensics/naming.py)."""
        ref = self.session_of(session)
        call = self.scoped(call, ref)
        if not call.keep:
            return await self._run(call, ref, self._passed_on)
        if self.playback.involves(ref):
            played = self.playback.answer(ref, call.key, call.request)
            if played is not None:
                return await self._run(call, ref, lambda _call: made(self._played(call, played)))
            note = self.playback.stop_note(ref)
            if note:
                return await self._run(call, ref, self._answer_call, note)
        if (call.live and self.config.mode in (Mode.VIRTUAL, Mode.RECORD)  # (verify serves the stored answer)
                and getattr(self.upstream, "open_stream", None) is not None):
            return await self._live(call, ref)
        return await self._run(call, ref, self._answer_call)

    async def _live(self, call: Call, ref: SessionRef | None) -> Answer:
        """A call whose real answer may arrive as events (an MCP server's stream): the calling
        rules run as for any call (the whole answer judged, kept or simulated), while its
        kind's channel carries each event to the client as the server sends it. The client
        gets whichever comes first: the whole answer, or the stream's head and the rest."""
        channel = self.kinds.of(call).live(call, self.upstream.send, self.upstream.open_stream)
        task = asyncio.ensure_future(self._run(replace(call, facts={**call.facts, LIVE: channel}), ref,
                                               self._answer_call))
        head = await channel.started(task)
        if head is None:
            return await task
        return replace(self._answer(head, Source.UPSTREAM, call.key), stream=channel.rest(task))

    def session_of(self, session: str | None) -> SessionRef | None:
        return session_ref(session) if session else None

    def scoped(self, call: Call, ref: SessionRef | None) -> Call:
        """The call keyed for its session: an agent's own LLM call per trial (its sampling
        differs; tool calls are not), and every call kept in the session's view of the store
        (a user's, a credential's), whose answers stay that view's own: never written to the
        shared tier, whose proxies have other salts. Applied twice it changes nothing."""
        if ref is None:
            return call
        if ref.trial is not None and self.kinds.of(call).keyed_per_trial:
            call = replace(call, key=trial_key(call.key, ref.trial))
        if ref.view is not None and call.keep:
            call = replace(call, key=view_key(call.key, ref.view), private=True)
        return call

    async def _run(self, call: Call, ref: SessionRef | None, how: Callable[[Call], Awaitable[Answer]],
                   note: Mapping | None = None) -> Answer:
        started = time.perf_counter()
        answer = await how(call)
        kind = self.kinds.of(call)
        served = kind.served(call, answer.response, answer.source, answer.meta)
        if served is not answer.response:  # the kind shaped it for this request (an MCP id)
            answer = replace(answer, response=served)
        if isinstance(served, StreamedResponse):  # played to the client as it goes (an MCP server's question)
            answer = replace(answer, stream=served.stream)
        if note:
            answer = replace(answer, note={**note, **answer.note})
        if ref is not None:
            answer = self._record_session(ref.name, call, answer, time.perf_counter() - started)
        if answer.write_failed:
            answer = self._unstored(answer)
        # in the shape its client reads (a /virtual answer object), once all is recorded
        reply = kind.client_reply(call, answer.response, answer.source, answer.meta)
        return answer if reply is answer.response else self._replied(answer, reply)

    def _replied(self, answer: Answer, reply: Response) -> Answer:
        """``answer`` with the response its client reads: for a hit made once while the hit
        and its reply stay the same objects (a kind makes a hit's reply once too)."""
        if answer.source is not Source.CACHE:
            return replace(answer, response=reply)
        known = self._replies.get(answer.key)
        if known is not None and known[0] is answer and known[1].response is reply:
            return known[1]
        return self._replies.put(answer.key, (answer, replace(answer, response=reply)))[1]

    def _played(self, call: Call, played: Played) -> Answer:
        """A recorded answer served again, as a hit on the entry (or copy) that holds it."""
        stored = played.exchange
        response = marked(stored.response, Source.CACHE, stored.source, stored.meta)
        return Answer(response, Source.CACHE, call.key, stored.meta, stored.key, stored.source, note=played.record)

    def _unstored(self, answer: Answer) -> Answer:
        """An answer the store could not keep: record mode refuses to pass on what it did not
        record (507); the other modes serve it, marked."""
        if self.config.mode is Mode.RECORD and answer.source is Source.UPSTREAM:
            response = error_object_response(
                "stbproxy record: this answer could not be stored, so it is not passed on as recorded "
                "(the store refused the write; see the proxy's log)", status=507)
            answer = replace(answer, source=Source.ERROR, response=marked(response, Source.ERROR, Source.ERROR))
        return replace(answer, response=answer.response.with_header(STORED_HEADER, "no"))

    async def _answer_call(self, call: Call) -> Answer:
        mode = self.config.mode
        if mode is Mode.REPLAY and self.faults:
            # Replay never reaches a real API, so faults apply before the store: a
            # regression test can still check how an agent copes with failures.
            decision = self._decide(call)
            if decision.latency:
                await asyncio.sleep(decision.latency)
            if decision.failed:
                return self._injected(call, decision)
        if mode is Mode.VERIFY:
            return await self._verify(call)
        if mode is not Mode.RECORD:
            hit = await self._lookup(call.key)
            if hit is None and shared_key(call.key) != call.key:  # a view sees the shared part too
                hit = await self._lookup(shared_key(call.key))
            if hit is not None:
                if self.refreshes(hit):
                    return await self._shared(call.key, lambda: self._refresh(call, hit))
                return hit
        if mode is Mode.REPLAY:
            return self._replay_miss(call)
        return await self._shared(call.key, lambda: self._miss_once(call))

    async def _lookup(self, key: str) -> Answer | None:
        """The stored answer of ``key``: this process's, else a tier behind it."""
        hit = self._hit(key)
        if hit is None:
            stored = await self.store.fetch(key)  # a tier behind the local one, if any
            hit = self._cached(key, stored) if stored is not None else None
        return hit

    def local_hit(self, key: str) -> Answer | None:
        """A hit in this process's store alone: the key's own, else (for a view's call) the
        shared part's."""
        hit = self._hit(key)
        if hit is None and shared_key(key) != key:
            hit = self._hit(shared_key(key))
        return hit

    def refreshes(self, hit: Answer) -> bool:
        """Whether a hit asks the real API again (a simulated answer, with refresh_simulated)."""
        return (hit.stored_source is Source.SIMULATED and self.config.refresh_simulated
                and self.config.mode is Mode.VIRTUAL)

    def _hit(self, key: str) -> Answer | None:
        answer = self._hits.get(key)
        if answer is not None:
            self._hits.move_to_end(key)
            return answer
        stored = self.store.get(key)
        if stored is None:
            return None
        return self._cached(key, stored)

    def _cached(self, key: str, stored: Exchange) -> Answer:
        answer = Answer(marked(stored.response, Source.CACHE, stored.source, stored.meta), Source.CACHE, key,
                        stored.meta, key, stored.source)
        # A store may ask to see every read (a cassette counts which answers were played).
        if len(stored.response.body) <= HIT_CACHE_MAX_BODY and self.store.reads_cacheable:
            self._hits[key] = answer
            if len(self._hits) > HIT_CACHE_ENTRIES:
                self._hits.popitem(last=False)
        return answer

    def is_passthrough(self, host: str) -> bool:
        return any(fnmatch.fnmatchcase(host, pattern) for pattern in self.config.passthrough)

    # misses ---------------------------------------------------------------------------
    async def _shared(self, key: str, work: Callable[[], Awaitable[Answer]]) -> Answer:
        """Run ``work`` once per key at a time; concurrent callers share its answer, and it is
        cancelled once every caller is (HTTP/2 clients that reset their streams: mitm/h2_guard.py)."""
        task = self._inflight.get(key)
        if task is None:
            task = asyncio.ensure_future(work())
            self._inflight[key] = task
            task.add_done_callback(lambda done: self._inflight.pop(key) if self._inflight.get(key) is done else None)
        self._waiting[task] = self._waiting.get(task, 0) + 1
        try:
            # shield: one client hanging up must not cancel the call the others wait for
            return await asyncio.shield(task)
        finally:
            left = self._waiting.pop(task) - 1
            if left:
                self._waiting[task] = left
            elif not task.done():  # the last caller has gone: so does the call
                task.cancel()
                if self._inflight.get(key) is task:
                    del self._inflight[key]

    async def _miss_once(self, call: Call) -> Answer:
        """A virtual-mode miss, answered once among all proxies sharing the store: the store
        hands back the entry another proxy stored meanwhile instead of running the miss here."""
        if self.config.mode is not Mode.VIRTUAL:
            return await self._miss(call)  # record mode always asks the real API itself
        result = await self.store.single_flight(call.key, lambda: self._miss(call))
        return self._cached(call.key, result) if isinstance(result, Exchange) else result

    async def _miss(self, call: Call) -> Answer:
        decision = self._decide(call)
        if decision.latency:
            await asyncio.sleep(decision.latency)
        if decision.failed:
            if self.config.mode is Mode.RECORD or not call.may_simulate:
                return self._injected(call, decision)  # the client sees the fault
            log.info("injected fault %s for %s: the real API is not asked, the simulator answers", decision.rule,
                     self._loggable(call.request))
            return await self._simulate(call, f"injected fault {decision.rule}", fault=decision.rule)
        if call.upstream is None:
            return await self._unavailable(call, UpstreamError(call.no_upstream or "no real API is known for this call"))
        try:
            response, seconds = await self.kinds.of(call).send_upstream(call, self.upstream.send)
        except UpstreamError as exc:
            return await self._unavailable(call, exc)

        judged = self._judge(self.kinds.of(call), call, response)
        response, verdict, meta = judged.response, judged.verdict, dict(judged.meta)
        if self.config.mode is Mode.VIRTUAL and not verdict.valid:
            reason = self._scrub(call, verdict.reason)
            log.info("invalid upstream answer for %s: %s", self._loggable(call.request), reason)
            try:
                self._save(call, response, self._log_key("invalid", call), Source.UPSTREAM, seconds, meta)
            except StoreError:
                pass  # counted and logged; the simulator's answer is what the client gets
            return await self._simulate(call, reason)
        if not judged.keep:  # an answer that only makes sense once: passed on, never stored
            return self._answer(response, Source.UPSTREAM, call.key, meta)
        return self._keep(call, response, Source.UPSTREAM, call.key, seconds, meta)

    async def _unavailable(self, call: Call, exc: UpstreamError) -> Answer:
        """The real API gave no answer: simulated in virtual mode when it is down; an error
        in record mode, and in every mode when a setting is at fault (TLS) or the answer was
        refused whole (too large, an unknown coding)."""
        if (self.config.mode is Mode.RECORD or exc.failure in CONFIGURATION_FAILURES or exc.failure in REFUSED_ANSWERS
                or exc.failure in PROXY_SIDE_FAILURES or not call.may_simulate):
            return self._error(call, exc)
        reason = self._scrub(call, str(exc))  # upstream errors quote the URL as sent
        log.info("upstream failed for %s: %s", self._loggable(call.request), reason)
        return await self._simulate(call, reason, failure=validity.FailureKind.NOT_CONNECTED)

    def _error(self, call: Call, exc: UpstreamError) -> Answer:
        """No answer at all (the proxy's own failure to reach the API): a 502 that says why,
        marked ``error``, kept in the session's log but never stored, exported or replayed."""
        reason = self._scrub(call, str(exc))
        if exc.failure in CONFIGURATION_FAILURES:
            self._warn_once(call.host, f"no call to {call.host or 'this host'} can succeed until this is fixed: {reason}")
        else:
            log.info("upstream failed for %s: %s", self._loggable(call.request), reason)
        return self._answer(error_object_response(f"stbproxy: {reason}", status=502), Source.ERROR, call.key,
                            {"error_kind": exc.failure, "reason": reason})

    def _warn_once(self, host: str, text: str) -> None:
        """A warning seen without -v, once per host (a misconfiguration fails every call)."""
        if self._warned.get(host) is None:
            self._warned.put(host, True)
            log.warning("%s", text)

    async def _simulate(self, call: Call, reason: str, fault: str | None = None,
                        failure: validity.FailureKind | None = None) -> Answer:
        try:
            result = await self.kinds.of(call).simulate(call, self.simulator, reason)
        except StbError as exc:
            result = Simulation(error_object_response(f"Simulation failed: {self._scrub(call, str(exc))}"), ok=False)
        # Answers made up for an injected fault say so: `forget --faulted` removes exactly
        # what an experiment added, and `stats --errors` counts them apart from real failures.
        marks = {"fault": fault} if fault else {}
        if failure is not None:  # why the real API gave nothing, for `stats --errors`
            marks["failure"] = failure.value
        if not result.ok:
            # Nothing simulated when no simulator is on: the call is named for what it is.
            source = Source.SIMULATED_ERROR if result.attempted else Source.UNAVAILABLE
            return self._keep(call, result.response, source, self._log_key(source.value, call),
                              None, {"reason": reason, **result.meta, **marks})
        return self._keep(call, result.response, Source.SIMULATED, call.key, None, {**result.meta, **marks})

    async def _refresh(self, call: Call, simulated: Answer) -> Answer:
        """A stored simulated answer, unless the real API now gives a valid one, which
        replaces it. Anything else (down, invalid, a fault) leaves the simulated answer."""
        now = time.monotonic()
        last = self._refreshed.get(call.key)
        if call.upstream is None or (last is not None and now - last < self.config.refresh_interval):
            return simulated
        if self._decide(call).failed:
            return simulated  # an injected fault: the API stays "down" for this run
        self._refreshed[call.key] = now
        try:
            response, seconds = await self.kinds.of(call).send_upstream(call, self.upstream.send)
        except UpstreamError as exc:
            log.info("still no real answer for %s: %s", self._loggable(call.request), self._scrub(call, str(exc)))
            return simulated
        judged = self._judge(self.kinds.of(call), call, response)
        response, verdict, meta = judged.response, judged.verdict, dict(judged.meta)
        if not verdict.valid or not judged.keep:
            log.info("still an invalid real answer for %s: %s", self._loggable(call.request),
                     self._scrub(call, verdict.reason))
            return simulated
        self._refreshed.pop(call.key, None)
        return self._keep(call, response, Source.UPSTREAM, call.key, seconds, {**meta, "replaced": "simulated"})

    def _judge(self, kind, call: Call, response: Response):
        """The kind's verdict on a real answer, save that a status the user listed
        (``--keep-status``) makes it real all the same: stored with origin upstream, served."""
        judged = kind.judge(call, response, self.config.validity)
        if judged.verdict.valid or response.status not in self.config.keep_status:
            return judged
        return judged._replace(verdict=validity.Verdict(
            True, f"HTTP {response.status} is kept as real (--keep-status)", judged.verdict.failure))

    def _decide(self, call: Call) -> Decision:
        if not self.faults or not call.faultable:
            return NO_FAULT
        tool, api = (call.api.tool, call.api.api) if call.api else (None, None)
        return self.faults.decide(call.host, tool, api, call.key)

    def _injected(self, call: Call, decision: Decision) -> Answer:
        log.info("injected fault %s for %s: the client gets the failure", decision.rule, self._loggable(call.request))
        response = self.kinds.of(call).injected(call, decision.fault, decision.rule) or decision.make_response()
        if response is None:  # down, refused, timed out: no HTTP answer to relay
            error = decision.upstream_error()
            status = 504 if error is not None and error.failure is UpstreamFailure.TIMEOUT else 502
            response = error_object_response(str(error), status=status).with_header("X-Stb-Fault", decision.rule)
        return self._answer(response, Source.INJECTED, call.key, {"fault": decision.rule})

    def _replay_miss(self, call: Call) -> Answer:
        # A store may know better (a cassette whose recorded answers were all played).
        note = self.store.miss_note(call.key)
        explanation = explain_miss(call, self.store, self.config.rules, note)
        if len(self.misses) < MAX_MISSES_KEPT:
            self.misses.append(explanation)
        document = self.kinds.of(call).miss_document(call, explanation)
        body = json.dumps(document, ensure_ascii=False, indent=2).encode()
        response = Response(404, (("Content-Type", "application/json"),), body)
        return Answer(marked(response, Source.MISS, Source.MISS), Source.MISS, call.key)

    # verify ---------------------------------------------------------------------------
    async def _verify(self, call: Call) -> Answer:
        """Ask the real API, serve the stored answer, and note how the two differ (the
        module docstring); a call with nothing stored gets the real answer."""
        stored = self.store.get(call.key) or await self.store.fetch(call.key)
        kind = self.kinds.of(call)
        try:
            response, seconds = await kind.send_upstream(call, self.upstream.send)
        except UpstreamError as exc:
            if stored is None:
                return self._error(call, exc)
            reason = self._scrub(call, str(exc))
            if exc.failure in CONFIGURATION_FAILURES:  # a setting to fix, not an API that is down: said at once
                self._warn_once(call.host, f"no call to {call.host or 'this host'} can be verified until this is "
                                           f"fixed: {reason}")
            return replace(self._cached(call.key, stored), note={"drift": {
                "verdict": "unreachable", "api": drift_api(call), "error_kind": exc.failure, "reason": reason}})
        judged = self._judge(kind, call, response)
        updatable = self.config.update and judged.verdict.valid and judged.keep
        if stored is None:
            answer = (self._keep(call, judged.response, Source.UPSTREAM, call.key, seconds, judged.meta) if updatable
                      else self._answer(judged.response, Source.UPSTREAM, call.key, judged.meta))
            return replace(answer, note={"drift": {"verdict": "new", "api": drift_api(call)}})
        secrets = self._secrets(call)
        live = redact_response(judged.response, secrets)
        rules = self.config.drift_rules.for_call((call.host, drift_api(call)))
        found = drift.compare(stored.response, live, rules, self.config.rules.secret_fields)
        # The stored answer's origin: a real answer compared with a simulated one is no news.
        note = {"api": drift_api(call), "origin": stored.source.value, **scrub_value(found.to_dict(), secrets)}
        served = self._cached(call.key, stored)
        if found.changed and updatable:
            served, note["updated"] = self._update(call, stored, served, judged, seconds)
        return replace(served, note={"drift": note})

    def _update(self, call: Call, stored: Exchange, served: Answer, judged, seconds: float) -> tuple[Answer, bool]:
        """Replace a stored answer by a changed real one, the old kept under log/history/;
        the served answer then points at that copy. False when the store refused."""
        history = self._log_key("history", call)
        try:
            self.store.put(replace(stored, key=history, meta={**stored.meta, "replaced": call.key}))
            self._save(call, judged.response, call.key, Source.UPSTREAM, seconds, dict(judged.meta))
        except StoreError:
            return replace(served, write_failed=True), False
        return replace(served, record_key=history), True

    # passed on ------------------------------------------------------------------------
    async def _passed_on(self, call: Call) -> Answer:
        """A call its kind never keeps (an MCP notification): sent to the real API when
        there is one to ask, else answered by the kind itself."""
        kind = self.kinds.of(call)
        send = getattr(self.upstream, "open_stream", None) if call.streams else self.upstream.send
        if self.config.mode is Mode.REPLAY or call.upstream is None or send is None:
            return self._answer(kind.local_answer(call), Source.LOCAL, call.key)
        try:
            response, seconds = await kind.send_upstream(call, send)
        except UpstreamError as exc:
            deferred = exc.failure is UpstreamFailure.DEFERRED  # a real API not there yet, on purpose: nothing failed
            if not deferred and (self.config.mode is Mode.RECORD or exc.failure in CONFIGURATION_FAILURES
                                 or exc.failure in REFUSED_ANSWERS):
                return self._error(call, exc)
            reason = self._scrub(call, str(exc))
            if not deferred:
                log.info("upstream failed for %s: %s; answered by the proxy", self._loggable(call.request), reason)
            return self._answer(kind.local_answer(call), Source.LOCAL, call.key, {"reason": reason})
        if isinstance(response, StreamedResponse):  # carried as it arrives: nothing of it is kept
            return replace(self._answer(response, Source.PASSTHROUGH, call.key), stream=response.stream)
        return self._keep(call, response, Source.PASSTHROUGH, self._log_key("passthrough", call), seconds, {})

    # passthrough ----------------------------------------------------------------------
    async def _passthrough(self, call: Call) -> Answer:
        try:
            response, seconds = await self.upstream.send(call.request)
        except UpstreamError as exc:
            return self._error(call, exc)
        return self._keep(call, response, Source.PASSTHROUGH, self._log_key("passthrough", call), seconds, {})

    # sessions -------------------------------------------------------------------------
    def _record_session(self, session: str, call: Call, answer: Answer, seconds: float) -> Answer:
        """Append the call to its session's log; the answer, marked when a write failed."""
        record_key = answer.record_key
        source = Source(answer.source)
        failed = answer.write_failed
        # Keep a copy for the session when the answer is kept nowhere yet (injected, miss),
        # and in record mode, where a repeated request overwrites its entry: the session
        # must replay the n-th answer it got, not the last one. An error is no answer: its
        # record says what failed, and nothing is kept to export or replay.
        keeps_copy = answer.stream is None and (
            record_key is None or (self.config.mode is Mode.RECORD and source is Source.UPSTREAM))
        if not failed and keeps_copy and source is not Source.ERROR:
            try:
                record_key = self._save(call, answer.response, self._log_key(source.value, call), source, None,
                                        dict(answer.meta))
            except StoreError:
                record_key, failed = None, True
        # A record that points at a stored exchange needs no URL of its own (sessions.stored_record).
        url = "" if record_key else redact_url(call.request, self.config.rules)
        origin = answer.stored_source.value if source is Source.CACHE and answer.stored_source else ""
        error = str(answer.meta.get("error_kind", "")) if source is Source.ERROR else ""
        # An answer kept apart (a copy under log/) names the call it answered, for ordered replay.
        answered = call.key if record_key and record_key != call.key and call.key else ""
        # (a SessionRecord's stored form, made without the record: this runs on every request)
        record = stored_record(self.clock(), call.request.method, url, answer.response.status, source.value,
                               record_key or "", round(seconds, 6), origin, error, _tool_of(call), answered,
                               answer.note)
        try:
            self.store.append_session(session, record)
        except StoreError as exc:
            self.write_failures.record(f"the log of session {session}", str(exc))
            failed = True
        return replace(answer, write_failed=True) if failed else answer

    # storing --------------------------------------------------------------------------
    def _log_key(self, kind: str, call: Call) -> str:
        """A key under log/: kept for the record, never served as an answer (no secret of the
        call in its host, as in every key)."""
        self._log_seq += 1
        host = keys.host_without(call.host, self._secrets(call)) if call.host else "-"
        return f"log/{kind}/{host}/{time.time_ns():020d}-{os.getpid()}-{self._log_seq}"

    def _keep(self, call: Call, response: Response, source: Source, key: str, seconds: float | None,
              meta: Mapping) -> Answer:
        """Store the exchange under ``key`` and answer with it; the answer says when the write failed."""
        try:
            saved = self._save(call, response, key, source, seconds, dict(meta))
        except StoreError:
            return Answer(marked(response, source, source, meta), source, call.key, meta, write_failed=True)
        return self._answer(response, source, call.key, meta, saved)

    def _save(self, call: Call, response: Response, key: str, source: Source,
              seconds: float | None, meta: dict) -> str | None:
        """Store the exchange under ``key`` (redacted); the key, or None when it is not to be
        kept (a body over the cap). StoreError when the store refused it (counted and logged)."""
        request = call.request
        cap = self.config.max_body_bytes
        if len(request.body) > cap or len(response.body) > cap:
            log.warning(
                "not storing %s: body over the %d-byte cap (request %d, response %d bytes)",
                self._loggable(request), cap, len(request.body), len(response.body),
            )
            return None
        secrets = self._secrets(call)
        if call.private:
            meta = {**meta, "private": True}  # the caller's own answer: never in the shared tier
        exchange = Exchange(
            key=key,
            request=redact_request(request, self.config.rules),
            response=redact_response(response, secrets),
            source=source,
            stored_at=self.clock(),
            upstream_seconds=seconds,
            api=call.api,
            meta=scrub_value(meta, secrets),
        )
        self._hits.pop(key, None)
        try:
            self.store.put(exchange)
        except StoreError as exc:  # counted, logged without flooding, and reported to the caller
            self.write_failures.record(self._loggable(request), str(exc))
            raise
        return key

    def _secrets(self, call: Call) -> frozenset[str]:
        """Every secret value of a call: the client's request, and the request sent upstream
        when that is another one (the toolbench_key or RapidAPI key of a /virtual call)."""
        found = secret_values(call.request, self.config.rules)
        if call.upstream is not None and call.upstream is not call.request:
            found |= secret_values(call.upstream, self.config.rules)
        return found

    def _scrub(self, call: Call, text: str) -> str:
        """A text about a call (an error, a reason) as it may be logged, stored or answered:
        its URLs redacted as requests are (and cut to redact.LOGGED_URL_CHARS once scrubbed), and no
        secret value of the call left in it."""
        secrets = self._secrets(call)
        for request in (call.request, call.upstream):
            if request is not None and request.url in text:
                shown = bounded_url(scrub_text(redact_url(request, self.config.rules), secrets))
                text = text.replace(request.url, shown)
        return scrub_text(text, secrets)

    def _answer(self, response: Response, source: Source, key: str | None, meta: Mapping | None = None,
                record_key: str | None = None) -> Answer:
        return Answer(marked(response, source, source, meta), source, key, meta or {}, record_key)

    def _loggable(self, request: Request) -> str:
        return f"{request.method} {bounded_url(redact_url(request, self.config.rules))}"


async def made(answer: Answer) -> Answer:
    """An answer already made, for ``_run``, which awaits how an answer is made."""
    return answer


def drift_api(call: Call) -> str:
    """The API a call is counted under in drift reports: its key without the final digest
    (``api/Category/tool/api``, ``http/host/GET/path``, ``openapi/spec/operation``)."""
    return call.key.rsplit("/", 1)[0]


def _tool_of(call: Call) -> str:
    """``<server>/<tool>`` for an MCP tool call (its kind names both), else empty."""
    tool = call.facts.get("tool") if call.facts else None
    return f"{call.facts.get('where', '')}/{tool}" if tool else ""
