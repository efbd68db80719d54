"""Stored answers: a hit from memory (each decoded once), this process's store or a tier behind
it, and in replay mode a miss that explains itself (the closest stored request). A part of
Engine (calling_rules.py)."""

from __future__ import annotations

import json

from stbproxy.engine.answers import Answer
from stbproxy.engine.parts import EnginePart
from stbproxy.forensics.naming import shared_key
from stbproxy.misses import explain_miss
from stbproxy.models import Exchange, Mode, Response, Source
from stbproxy.provenance import marked
from stbproxy.traffic.seam import Call

HIT_CACHE_ENTRIES = 4096  # ready-made answers of recent hits (hits repeat in benchmark reruns)
HIT_CACHE_MAX_BODY = 64 * 1024
MAX_MISSES_KEPT = 10_000


class Hits(EnginePart):
    """Engine's hits: needs its config, store and kinds."""

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
