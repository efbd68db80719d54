"""A miss answered: once per key at a time among concurrent callers (and among proxies sharing
the store), from the real API when its answer is valid, else from the simulator (virtual
mode) or as an error (record mode, a setting at fault, an answer refused whole); and a
stored simulated answer replaced by a valid real one (refresh_simulated). A part of Engine
(calling_rules.py)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Awaitable, Callable

from stbproxy.engine.answers import Answer
from stbproxy.engine.config import (
    CONFIGURATION_FAILURES,
    PROXY_SIDE_FAILURES,
    REFUSED_ANSWERS,
)
from stbproxy.engine.parts import EnginePart
from stbproxy.errors import StbError, StoreError, UpstreamError
from stbproxy.models import Exchange, Mode, Response, Source
from stbproxy.stb import validity
from stbproxy.stb.bodies import error_object_response
from stbproxy.synthesis.simulation import Simulation
from stbproxy.traffic.seam import Call, Judged, TrafficKind

log = logging.getLogger("stbproxy")


WARNED_HOSTS = 1024


class Misses(EnginePart):
    """Engine's misses: needs its config, store, upstream, simulator and kinds, and the
    other parts' helpers (FaultInjection's _decide and _injected, Hits' _cached, Keeping's)."""

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
            return await self._unavailable(call,
                                           UpstreamError(call.no_upstream or "no real API is known for this call"))
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
            self._warn_once(call.host,
                            f"no call to {call.host or 'this host'} can succeed until this is fixed: {reason}")
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

    def _judge(self, kind: TrafficKind, call: Call, response: Response) -> Judged:
        """The kind's verdict on a real answer, save that a status the user listed
        (``--keep-status``) makes it real all the same: stored with origin upstream, served."""
        judged = kind.judge(call, response, self.config.validity)
        if judged.verdict.valid or response.status not in self.config.keep_status:
            return judged
        return judged._replace(verdict=validity.Verdict(
            True, f"HTTP {response.status} is kept as real (--keep-status)", judged.verdict.failure))
