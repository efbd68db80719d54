"""Injected faults (--faults): whether one fails this call, and the failure its client sees
in its kind's shape. A part of Engine (calling_rules.py)."""

from __future__ import annotations

import logging

from stbproxy.engine.answers import Answer
from stbproxy.engine.parts import EnginePart
from stbproxy.errors import UpstreamFailure
from stbproxy.models import Source
from stbproxy.sim.faults import NO_FAULT, Decision
from stbproxy.stb.bodies import error_object_response
from stbproxy.traffic.seam import Call

log = logging.getLogger("stbproxy")


class FaultInjection(EnginePart):
    """Engine's faults: needs its fault plan and kinds, and Keeping's _answer and _loggable."""

    def _decide(self, call: Call) -> Decision:
        if not self.faults or not call.faultable:
            return NO_FAULT
        tool, api = (call.api.tool, call.api.api) if call.api else (None, None)
        return self.faults.decide(call.host, tool, api, call.key)

    def _injected(self, call: Call, decision: Decision) -> Answer:
        log.info("injected fault %s for %s: the client gets the failure", decision.rule, self._loggable(call.request))
        assert decision.fault is not None  # (only a decision that failed the call is injected)
        response = self.kinds.of(call).injected(call, decision.fault, decision.rule) or decision.make_response()
        if response is None:  # down, refused, timed out: no HTTP answer to relay
            error = decision.upstream_error()
            status = 504 if error is not None and error.failure is UpstreamFailure.TIMEOUT else 502
            response = error_object_response(str(error), status=status).with_header("X-Stb-Fault", decision.rule)
        return self._answer(response, Source.INJECTED, call.key, {"fault": decision.rule})
