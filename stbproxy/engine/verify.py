"""Verify mode: the real API asked, the stored answer served, and how the two differ kept in
the session's record (forensics/drift.py); with ``update`` a changed real answer replaces
the stored one, which is kept under log/history/. A part of Engine (calling_rules.py)."""

from __future__ import annotations

from dataclasses import replace
from typing import cast

from stbproxy.engine.answers import Answer
from stbproxy.engine.config import CONFIGURATION_FAILURES
from stbproxy.engine.parts import EnginePart
from stbproxy.errors import StoreError, UpstreamError
from stbproxy.forensics import drift
from stbproxy.keys import Names
from stbproxy.models import Exchange, Source
from stbproxy.redact import redact_response, scrub_value
from stbproxy.traffic.seam import Call, Judged


class Verifying(EnginePart):
    """Engine's verify mode: needs its config, store, upstream and kinds, and the other
    parts' helpers (Hits' _cached; Misses' _error, _judge and _warn_once; Keeping's)."""

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
        # (KeyRules makes its secret_fields Names: matched whatever their case)
        found = drift.compare(stored.response, live, rules, cast(Names, self.config.rules.secret_fields))
        # The stored answer's origin: a real answer compared with a simulated one is no news.
        note = {"api": drift_api(call), "origin": stored.source.value, **scrub_value(found.to_dict(), secrets)}
        served = self._cached(call.key, stored)
        if found.changed and updatable:
            served, note["updated"] = self._update(call, stored, served, judged, seconds)
        return replace(served, note={"drift": note})

    def _update(self, call: Call, stored: Exchange, served: Answer, judged: Judged,
                seconds: float) -> tuple[Answer, bool]:
        """Replace a stored answer by a changed real one, the old kept under log/history/;
        the served answer then points at that copy. False when the store refused."""
        history = self._log_key("history", call)
        try:
            self.store.put(replace(stored, key=history, meta={**stored.meta, "replaced": call.key}))
            self._save(call, judged.response, call.key, Source.UPSTREAM, seconds, dict(judged.meta))
        except StoreError:
            return replace(served, write_failed=True), False
        return replace(served, record_key=history), True


def drift_api(call: Call) -> str:
    """The API a call is counted under in drift reports: its key without the final digest
    (``api/Category/tool/api``, ``http/host/GET/path``, ``openapi/spec/operation``)."""
    return call.key.rsplit("/", 1)[0]
