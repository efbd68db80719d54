"""Cassettes and flow files brought into a store (``stbproxy import cassette``): each usable
interaction keyed as the proxy keys its request, redacted and stored with source
'imported', in atomic batches; with a session, its calls logged there once however often
the same file is imported (import_file says how)."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, TypeAlias

from stbproxy.cassettes import reading
from stbproxy.errors import StbError
from stbproxy.models import Exchange, Request, Response
from stbproxy.redact import redact_request
from stbproxy.sessions import SessionRecord
from stbproxy.store.embedded import Store

# Interactions written to the store in one atomic batch (entries, session records and the mark).
BATCH = 1000

# The exchanges of a mitmproxy flow file, in order (the response None: the flow got no answer).
FlowReader: TypeAlias = Callable[[Path], Iterable[tuple[Request, Response | None]]]


class Stopper(Protocol):
    """Who says when to stop (a Ctrl-C pressed), and shields a write and its counts from it."""

    @property
    def requested(self) -> bool: ...

    def holding(self) -> AbstractContextManager[None]: ...


class Copies(Protocol):
    """What an import also sends elsewhere (the shared tier): each entry and session record stored."""

    def entry(self, exchange: Exchange) -> None: ...

    def session(self, name: str, record: dict[str, Any]) -> None: ...


class Counts:
    """What an import of cassettes did: entries stored and found stored, calls logged in the
    session and calls left out of it because an earlier import of the same cassette logged them."""

    def __init__(self) -> None:
        self.imported = self.duplicates = self.logged = self.logged_before = 0


def import_file(db: Store, copies: Copies, path: Path, session: str | None, keying: dict[str, Any],
                counts: Counts, problems: list[str], stopper: Stopper, read_flows: FlowReader) -> bool:
    """Import one cassette or flow file; True when every interaction of it is in. ``keying``
    holds imported_exchange's catalog, rules and openapi; ``read_flows`` reads a flow file.

    With a session, its calls are logged once however often the import runs: a cassette is
    known by the SHA-256 of its bytes, each session record says which cassette and which
    interaction it logs (``cassette``, ``interaction``), and a mark in the store
    (``meta/imports/<session>/<sha256>``) holds the last interaction logged and the sequence
    number of its record, written in the same atomic batch as the records. A later import of
    the same cassette into that session, whole or cut short by Ctrl-C or a crash, logs only
    the interactions after the mark (entries are stored only where their key is free anyway).
    A mark whose record is not in the log (a store put back from an older copy) counts for nothing.
    """
    now = time.time()
    digest = file_digest(path) if session is not None else None
    mark_name = f"imports/{session}/{digest}" if session is not None and digest is not None else None
    logged_through = (logged_through_mark(db, session, mark_name, digest)
                      if session is not None and mark_name is not None and digest is not None else -1)
    pending: list[tuple[Exchange, dict[str, Any] | None, int]] = []  # (exchange, its session record, its index)

    def write() -> None:
        if not pending:
            return
        records = [record for _ex, record, _index in pending if record is not None]
        last = max((index for _ex, record, index in pending if record is not None), default=None)
        mark = (mark_name, {"file": path.name, "interaction": last}) if mark_name is not None and last is not None \
            else None
        with stopper.holding():  # the entries, their session records, the mark and the counts together
            stored = db.put_imported([ex for ex, _record, _index in pending], session, records, mark)
            counts.imported += stored
            counts.duplicates += len(pending) - stored
            counts.logged += len(records)
        for exchange, _record, _index in pending:
            copies.entry(exchange)
        if session is not None:
            for record in records:
                copies.session(session, record)
        pending.clear()

    whole = False
    for pair in interactions_of(path, problems, read_flows):
        if stopper.requested:
            break
        if isinstance(pair, str):
            problems.append(f"{path}: {pair}")
            continue
        index, request, response, recorded_source = pair
        exchange = reading.imported_exchange(
            request, response, now=now, meta={"imported_from": path.name, "index": index},
            recorded_source=recorded_source, **keying)
        record = None
        if session is not None:
            if index <= logged_through:
                counts.logged_before += 1
            else:
                record = SessionRecord(0, now, exchange.request.method, exchange.request.url, response.status,
                                       exchange.source.value, exchange.key, 0.0,
                                       facts={"cassette": (digest or "")[:16], "interaction": index}).to_stored()
        pending.append((exchange, record, index))
        if len(pending) >= BATCH:
            write()
    else:
        whole = True
    write()
    return whole


def file_digest(path: Path) -> str | None:
    """The SHA-256 of a file's bytes (None when it cannot be read: the reader reports that)."""
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
    except OSError:
        return None
    return digest.hexdigest()


def logged_through_mark(db: Store, session: str, mark_name: str, digest: str) -> int:
    """The last interaction of this cassette that an earlier import logged in the session
    (-1: none), from the import mark, checked against the record it names."""
    mark = db.get_meta(mark_name)
    if not isinstance(mark, dict) or not isinstance(mark.get("seq"), int):
        return -1
    record = db.session_record(session, mark["seq"])
    if record is None or record.get("cassette") != digest[:16] or record.get("interaction") != mark.get("interaction"):
        return -1
    interaction = mark.get("interaction")
    return interaction if isinstance(interaction, int) else -1


# A usable interaction: its index, request, response and the origin it was recorded with.
Usable: TypeAlias = tuple[int, Request, Response, str | None]


def interactions_of(path: Path, problems: list[str], read_flows: FlowReader) -> Iterator[Usable | str]:
    """(index, request, response, the origin it was recorded with) per usable interaction of
    a cassette or flow file, and a text per unusable one; a file that cannot be read at all
    is one problem."""
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
    except OSError as exc:
        problems.append(f"{path}: cannot read: {exc.strerror or exc}")
        return
    try:
        if reading.is_flow_file(head):
            for index, (request, response) in enumerate(read_flows(path)):
                if response is None:
                    url = redact_request(request).url  # a flow file holds the secrets as sent
                    yield f"flow {index}: {request.method} {url}: no response was recorded"
                else:
                    yield index, request, response, None
            return
        interactions, bad = reading.read_cassette(path)
    except reading.NotACassette as exc:
        problems.append(exc.accepting("import cassette reads vcrpy cassettes (YAML or JSON, format version 1) "
                                      "and mitmproxy flow files (mitmdump -w)"))
        return
    except StbError as exc:
        problems.append(str(exc))
        return
    for item in interactions:
        yield item.index, item.request, item.response, item.source
    for problem in bad:
        yield str(problem)
