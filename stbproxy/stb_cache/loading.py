"""The encoded cache files written into a store (``stbproxy import stb-cache``): one atomic
write per file, entries already stored counted as duplicates, every record offered to the
shared tier too when there is one; a stop asked for (Ctrl-C) ends the loop between two files."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Protocol

from stbproxy.stb_cache.importer import EncodedFile, ImportSummary
from stbproxy.store.embedded import Store


class Stopper(Protocol):
    """Who says when to stop (a Ctrl-C pressed), and shields a write and its counts from it."""

    @property
    def requested(self) -> bool: ...

    def holding(self) -> AbstractContextManager[None]: ...


class SharedWriter(Protocol):
    """The shared tier's writer during an import (``writer`` None: there is no shared tier)."""

    writer: object | None

    def put(self, records: list[tuple[str, bytes]]) -> None: ...


def load_files(db: Store, encoded_files: Iterable[EncodedFile], summary: ImportSummary, stopper: Stopper,
               shared: SharedWriter | None = None, on_file: Callable[[], None] = lambda: None) -> None:
    """Write each encoded file into ``db`` and count it in ``summary``; ``on_file`` is called
    after each. Stops between two files once ``stopper`` says so."""
    for encoded in encoded_files:
        with stopper.holding():
            load_file(db, encoded, summary, shared)
        on_file()
        if stopper.requested:
            break


def load_file(db: Store, encoded: EncodedFile, summary: ImportSummary, shared: SharedWriter | None = None) -> None:
    """One file's records in one atomic batch: those stored already (or twice in the file) are
    duplicates; the shared tier is offered every record, as it may lack the ones stored here."""
    summary.entries += encoded.entries
    summary.failures += encoded.failures
    summary.skipped += encoded.skipped
    summary.add_problems(encoded.unparseable, encoded.problems)
    fresh: dict[str, bytes] = {}
    stored = db.existing([key for key, _ in encoded.records])
    for key, value in encoded.records:
        if key in stored or key in fresh:
            summary.duplicates += 1
        else:
            fresh[key] = value
    db.put_encoded_many(list(fresh.items()))
    summary.imported += len(fresh)
    summary.files_done += 1
    if shared is not None and shared.writer is not None:
        shared.put(encoded.records)
        summary.shared_sent += len(encoded.records)
