"""The engine: a request or call in, an answer out, by the calling rules (the package's
docstring). Its entry points (handle, answer), the session a call is keyed for, and the
order of the rules; each part is a module of its own, mixed in here."""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from dataclasses import replace
from typing import Awaitable, Callable, Mapping

from stbproxy import keys
from stbproxy.engine.answers import Answer, made
from stbproxy.engine.config import EngineConfig, UpstreamClient
from stbproxy.engine.faults import FaultInjection
from stbproxy.engine.hits import HIT_CACHE_ENTRIES, Hits
from stbproxy.engine.keeping import Keeping
from stbproxy.engine.misses import WARNED_HOSTS, Misses
from stbproxy.engine.passing_on import PassingOn
from stbproxy.engine.session_records import SessionRecords
from stbproxy.engine.verify import Verifying
from stbproxy.forensics.naming import SessionRef, session_ref, shared_key, trial_key, view_key
from stbproxy.forensics.playback import Played, Recordings, SessionPlayback
from stbproxy.models import Mode, Request, Response, Source, StreamedResponse
from stbproxy.provenance import marked
from stbproxy.recent import Recent
from stbproxy.sim.faults import FaultPlan
from stbproxy.store.contract import EngineStore
from stbproxy.store.write_failures import WriteFailures
from stbproxy.synthesis.simulation import NoSimulator, Simulator
from stbproxy.traffic.llm_api import LlmApi
from stbproxy.traffic.plain_http import PlainHttp
from stbproxy.traffic.seam import LANE, LIVE, Call, Kinds, Send

CALL_MEMO_ENTRIES = 2048  # routed calls of recent requests (a call depends on the request alone)
CALL_MEMO_MAX_BODY = 4 * 1024


class Engine(Hits, Misses, FaultInjection, Verifying, PassingOn, SessionRecords, Keeping):
    """The calling rules of one proxy (or one worker of it) over its store, real APIs,
    simulator and kinds of traffic. Its parts are mixed in from the modules beside this one
    and share its state (what __init__ sets)."""

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
        call = Call(keys.request_key(request, self.config.rules), request, request, host=request.host,
                    facts={LANE: request.lane} if request.lane else {})
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
            if request.lane:  # (memoized with the call: a hit pays nothing for it)
                call = replace(call, facts={**call.facts, LANE: request.lane})
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
        if ref is not None and self.playback.involves(ref):  # (it never involves no session)
            played = self.playback.answer(ref, call.key, call.request)
            if played is not None:
                return await self._run(call, ref, lambda _call: made(self._played(call, played)))
            note = self.playback.stop_note(ref)
            if note:
                return await self._run(call, ref, self._answer_call, note)
        if (call.live and self.config.mode in (Mode.VIRTUAL, Mode.RECORD)  # (verify serves the stored answer)
                and (open_stream := getattr(self.upstream, "open_stream", None)) is not None):
            return await self._live(call, ref, open_stream)
        return await self._run(call, ref, self._answer_call)

    async def _live(self, call: Call, ref: SessionRef | None, open_stream: Send) -> Answer:
        """A call whose real answer may arrive as events (an MCP server's stream): the calling
        rules run as for any call (the whole answer judged, kept or simulated), while its
        kind's channel carries each event to the client as the server sends it. The client
        gets whichever comes first: the whole answer, or the stream's head and the rest."""
        channel = self.kinds.of(call).live(call, self.upstream.send, open_stream)
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
