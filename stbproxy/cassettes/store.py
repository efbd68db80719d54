"""One cassette served in place of the store: ``stbproxy serve --mode replay --cassette FILE``,
and in-process replay (inprocess.py), which may also play a store session this way.

It answers the engine's reads from the cassette's interactions, keyed exactly as the
proxy keys requests, and keeps every write in memory: the RocksDB store is never
touched. In ordered mode the n-th request with a key gets the n-th recorded answer (as
vcrpy plays repeated requests); otherwise every request gets the first. At shutdown it
reports what was played, what was never played and what was asked but not recorded.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Sequence

from stbproxy.cassettes.reading import imported_exchange, read_cassette
from stbproxy.cassettes.vcr_format import Interaction
from stbproxy.errors import InputError, StbError
from stbproxy.keys import KeyRules
from stbproxy.models import Exchange
from stbproxy.store.contract import OneTier


@dataclass
class PlaybackReport:
    cassette: str
    interactions: int
    played: int = 0
    unplayed: list[dict] = field(default_factory=list)  # {"index", "method", "url"}
    unmatched: list[dict] = field(default_factory=list)  # the replay-miss explanations
    problems: list[str] = field(default_factory=list)  # interactions that could not be read

    def to_dict(self) -> dict:
        return self.__dict__.copy()

    def summary(self) -> str:
        return (f"cassette {self.cassette}: {self.played} of {self.interactions} interactions played, "
                f"{len(self.unplayed)} never played, {len(self.unmatched)} requests not answered "
                "(not in the cassette, or already played)")


class CassetteStore(OneTier):
    readonly = False  # writes are accepted, and kept in memory only
    reads_cacheable = False  # every read counts: ordered playback and the played report

    def __init__(self, path: Path, *, catalog, rules: KeyRules, ordered: bool = False,
                 interactions: list[Interaction] | None = None, openapi=None) -> None:
        """Play the cassette at ``path``, or ``interactions`` (named ``path``) when given."""
        self.path = Path(path)
        problems: list = []
        if interactions is None:
            interactions, problems = read_cassette(self.path)
        if not interactions:
            raise InputError(f"{self.path}: no usable interaction to replay"
                             + (f" ({problems[0]})" if problems else ""))
        self.ordered = ordered
        self._order: list[tuple[int, Exchange]] = []
        self._by_key: dict[str, list[tuple[int, Exchange]]] = defaultdict(list)
        for interaction in interactions:
            exchange = imported_exchange(interaction.request, interaction.response, catalog=catalog,
                                         rules=rules, now=0.0, recorded_source=interaction.source,
                                         openapi=openapi)
            self._by_key[exchange.key].append((interaction.index, exchange))
            self._order.append((interaction.index, exchange))
        self._served: Counter[str] = Counter()
        self._asked: Counter[str] = Counter()  # requests per key, answered or not
        self._played: set[int] = set()
        self._memory: dict[str, Exchange] = {}  # what the engine writes (logs), never on disk
        self.report = PlaybackReport(str(self.path), len(interactions) + len(problems),
                                     problems=[str(p) for p in problems])

    # the engine's reads ------------------------------------------------------------------
    def get(self, key: str) -> Exchange | None:
        recorded = self._by_key.get(key)
        if not recorded:
            return self._memory.get(key)
        self._asked[key] += 1
        position = self._served[key] if self.ordered else 0
        if position >= len(recorded):
            return None  # ordered: every recorded answer for this request was played already
        self._served[key] += 1
        index, exchange = recorded[position]
        self._played.add(index)
        return exchange

    def miss_note(self, key: str) -> str | None:
        """Why a request the cassette does hold got no answer: ordered playback used up
        every recorded answer for it. None when the cassette does not hold it at all."""
        recorded = self._by_key.get(key)
        if not recorded:
            return None
        n = len(recorded)
        return (f"already played ({n} of {n}): this is request {self._asked[key]} of its kind and the "
                f"cassette recorded {n}")

    def scan(self, prefix: str) -> Iterator[Exchange]:
        for _index, exchange in self._order:
            if exchange.key.startswith(prefix):
                yield exchange

    def __contains__(self, key: str) -> bool:
        return key in self._by_key

    # writes stay in memory ----------------------------------------------------------------
    def put(self, exchange: Exchange) -> None:
        self._memory[exchange.key] = exchange

    def append_session(self, name: str, record: dict) -> int:
        return 0

    def session_records(self, name: str) -> Iterator[dict]:
        return iter(())  # a cassette played keeps no session log: nothing to fork from or replay in order

    # shutdown -------------------------------------------------------------------------------
    def close(self, misses: Sequence[dict] = ()) -> None:
        self.report.unmatched = list(misses)
        self.report.played = len(self._played)
        self.report.unplayed = [
            {"index": index, "method": exchange.request.method, "url": exchange.request.url}
            for index, exchange in self._order if index not in self._played
        ]

    def write_report(self, path: Path) -> None:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.report.to_dict(), indent=2))
        tmp.replace(path)


def describe_miss(miss: dict) -> list[str]:
    """A replay miss (the engine's explanation) as the lines a user reads: what was asked,
    and either that it was already played or the closest recorded request and how it differs."""
    request = miss["request"]
    asked = f"{request['method']} {request['url']}"
    if miss.get("already_played"):
        return [f"{miss['already_played']}: {asked}"]
    lines = [f"not in the cassette: {asked}"]
    closest = miss.get("closest")
    if closest:
        lines.append(f"  closest recorded: {closest['method']} {closest['url']}")
        lines.extend(f"    {d['part']}: recorded {d['stored']!r}, got {d['got']!r}" for d in closest["differences"])
    else:
        lines.append("  the cassette holds nothing close")
    return lines


def session_exchanges(db, name: str) -> tuple[list[Exchange], list[str]]:
    """The stored exchanges a session's log points at, in its order, and a line for each
    record whose answer is gone (forgotten), damaged, or that never had one (a call the
    proxy could not make: source ``error``; a server's event stream, carried live), all left out."""
    answered, skipped = session_answers(db, name)
    return [exchange for _record, exchange in answered], skipped


def session_answers(db, name: str) -> tuple[list[tuple[dict, Exchange]], list[str]]:
    """As session_exchanges, each exchange with the record that points at it."""
    out: list[tuple[dict, Exchange]] = []
    skipped: list[str] = []
    for record in db.session_records(name):
        key = record.get("key") or ""
        # A compact record names its request only through the stored exchange it points at.
        where = f"#{record.get('seq')} " + (f"{record['method']} {record['url']}" if record.get("url") else key)
        if record.get("source") == "error":
            skipped.append(f"{where}: no answer (the proxy could not reach the API: {record.get('error') or '?'})")
            continue
        try:
            exchange = db.get(key) if key else None
        except StbError as exc:
            skipped.append(f"{where}: {exc}")
            continue
        if exchange is None:
            skipped.append(f"{where}: its answer is not stored ({key or 'never kept'})")
            continue
        out.append((record, exchange))
    return out, skipped
