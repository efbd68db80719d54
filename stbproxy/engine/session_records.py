"""The session's record of each call: appended to its session's log (a light record that
points at the stored answer, or at a copy kept under log/ when the answer is kept nowhere
else). A part of Engine (calling_rules.py)."""

from __future__ import annotations

from dataclasses import replace

from stbproxy.engine.answers import Answer
from stbproxy.engine.parts import EnginePart
from stbproxy.errors import StoreError
from stbproxy.models import Mode, Source
from stbproxy.redact import redact_url
from stbproxy.sessions import stored_record
from stbproxy.traffic.seam import LANE, Call


class SessionRecords(EnginePart):
    """Engine's session records: needs its config, store, clock and write_failures, and
    Keeping's _save and _log_key."""

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
                               answer.note, lane=call.facts.get(LANE, ""))
        try:
            self.store.append_session(session, record)
        except StoreError as exc:
            self.write_failures.record(f"the log of session {session}", str(exc))
            failed = True
        return replace(answer, write_failed=True) if failed else answer


def _tool_of(call: Call) -> str:
    """``<server>/<tool>`` for an MCP tool call (its kind names both), else empty."""
    tool = call.facts.get("tool") if call.facts else None
    return f"{call.facts.get('where', '')}/{tool}" if tool else ""
