"""Keeping answers, and what is said about a call: an exchange stored redacted (or not, over
the size cap, or refused by the store: counted, and the answer marked), keys under log/ for
what is kept only for the record, and every text about a call scrubbed of its secrets.
A part of Engine (calling_rules.py)."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from typing import Mapping

from stbproxy import keys
from stbproxy.engine.answers import Answer
from stbproxy.engine.parts import EnginePart
from stbproxy.errors import StoreError
from stbproxy.models import Exchange, Mode, Request, Response, Source
from stbproxy.provenance import marked
from stbproxy.redact import (
    bounded_url,
    redact_request,
    redact_response,
    redact_url,
    scrub_text,
    scrub_value,
    secret_values,
)
from stbproxy.stb.bodies import error_object_response
from stbproxy.traffic.seam import Call

log = logging.getLogger("stbproxy")


STORED_HEADER = "X-Stb-Stored"  # "no" on an answer the store refused to keep


class Keeping(EnginePart):
    """Engine's storing: needs its config, store, clock and write_failures; the helpers every
    other part uses to keep an answer and to speak of a call."""

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

    def _unstored(self, answer: Answer) -> Answer:
        """An answer the store could not keep: record mode refuses to pass on what it did not
        record (507); the other modes serve it, marked."""
        if self.config.mode is Mode.RECORD and answer.source is Source.UPSTREAM:
            response = error_object_response(
                "stbproxy record: this answer could not be stored, so it is not passed on as recorded "
                "(the store refused the write; see the proxy's log)", status=507)
            answer = replace(answer, source=Source.ERROR, response=marked(response, Source.ERROR, Source.ERROR))
        return replace(answer, response=answer.response.with_header(STORED_HEADER, "no"))

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
