"""Calls that are never served from the store: to a passthrough host (forwarded and logged),
and those their kind never keeps (an MCP notification: sent on, or answered by the kind).
A part of Engine (calling_rules.py)."""

from __future__ import annotations

import fnmatch
import logging
from dataclasses import replace

from stbproxy.engine.answers import Answer
from stbproxy.engine.config import CONFIGURATION_FAILURES, REFUSED_ANSWERS
from stbproxy.engine.parts import EnginePart
from stbproxy.errors import UpstreamError, UpstreamFailure
from stbproxy.models import Mode, Source, StreamedResponse
from stbproxy.traffic.seam import Call

log = logging.getLogger("stbproxy")


class PassingOn(EnginePart):
    """Engine's passing on: needs its config, upstream and kinds, Misses' _error and
    Keeping's helpers."""

    def is_passthrough(self, host: str) -> bool:
        return any(fnmatch.fnmatchcase(host, pattern) for pattern in self.config.passthrough)

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

    async def _passthrough(self, call: Call) -> Answer:
        try:
            response, seconds = await self.upstream.send(call.request)
        except UpstreamError as exc:
            return self._error(call, exc)
        return self._keep(call, response, Source.PASSTHROUGH, self._log_key("passthrough", call), seconds, {})
