"""The embedded store (``Store``): one RocksDB database holding cache entries, logged
exchanges, small JSON documents and session logs, under the keys of key_layout.py; a value
is one record (record_format.py). RocksDB is opened with rocksdb_options.py's options; the
folder around it is folder.py's.

Each write is one RocksDB put (atomic, in the write-ahead log before it returns), so a
crash loses at most the requests in flight; bulk imports write unlogged and flush before
they report (Store.bulk_load).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, ParamSpec, Sequence, TypeVar

from rocksdict import AccessType, Rdict, RdictIter, WriteBatch, WriteOptions

from stbproxy.errors import StoreError
from stbproxy.models import Exchange
from stbproxy.private_files import private_dir
from stbproxy.sessions import expand_record
from stbproxy.store.contract import OneTier
from stbproxy.store.folder import ensure_auth_salt, open_failure
from stbproxy.store.key_layout import (
    ENTRY_PREFIXES,
    SESSION_PREFIX,
    encode_session_record,
    meta_key,
    session_key,
    session_log_prefix,
)
from stbproxy.store.record_format import decode_exchange, encode_exchange
from stbproxy.store.rocksdb_options import rocksdb_options
from stbproxy.store.stats import StoreStats, count_records

P = ParamSpec("P")
T = TypeVar("T")


class Store(OneTier):
    """One RocksDB database. Open read-write in one process only; readers open read-only, or as
    a secondary (``secondary=True``: a read-only view that follows the writer's changes each
    time ``catch_up`` is called; the reader workers of ``serve --workers``)."""

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False, secondary: bool = False,
                 scratch: Path | None = None) -> None:
        """``scratch``: where a secondary keeps its own info log (default: the temporary directory)."""
        self.path = Path(path)
        self.readonly = readonly or secondary
        self.secondary = secondary
        self._secondary_dir: str | None = None
        self._scratch = scratch
        self._session_seq: dict[str, int] = {}
        self._db: Rdict | None = self._open()

    def _open(self) -> Rdict:
        options = rocksdb_options()
        # an existing store's tables are read with these options only when its column
        # family is named with them (rocksdict would otherwise use the stored ones)
        families = {"default": options}
        try:
            if self.readonly:
                if not (self.path / "CURRENT").exists():
                    raise StoreError(f"no store at {self.path} (record something first, or pass --store)")
                if self.secondary:  # RocksDB keeps a secondary's own info log in a folder of its own
                    self._secondary_dir = tempfile.mkdtemp(prefix="stbproxy-secondary-", dir=self._scratch)
                    return Rdict(str(self.path), options, column_families=families,
                                 access_type=AccessType.secondary(self._secondary_dir))
                return Rdict(str(self.path), options, column_families=families, access_type=AccessType.read_only())
            private_dir(self.path)  # recorded traffic is for the owner only
            options.create_if_missing(True)
            db = Rdict(str(self.path), options, column_families=families)
            ensure_auth_salt(self.path)
            return db
        except StoreError:
            raise
        except Exception as exc:  # rocksdict raises bare Exception with RocksDB's text
            raise open_failure(self.path, exc) from exc

    # context manager ------------------------------------------------------------------
    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def catch_up(self) -> None:
        """A secondary: see what the writer stored since the last call (RocksDB replays its log)."""
        self._call(self._rdict.try_catch_up_with_primary)

    def close(self) -> None:
        """Flush and close; StoreError when the store could not be flushed or closed."""
        if self._db is None:
            return
        db, self._db = self._db, None
        try:
            if not self.readonly:
                db.flush()
        except Exception as exc:  # rocksdict raises bare Exception with RocksDB's text
            with contextlib.suppress(Exception):
                db.close()  # releases the lock all the same
            raise StoreError(f"could not flush the store at {self.path} on closing: {exc}") from exc
        try:
            db.close()
        except Exception as exc:
            raise StoreError(f"could not close the store at {self.path}: {exc}") from exc
        finally:
            if self._secondary_dir is not None:
                shutil.rmtree(self._secondary_dir, ignore_errors=True)

    # entries --------------------------------------------------------------------------
    def get(self, key: str) -> Exchange | None:
        value = self._call(self._rdict.get, key.encode())
        return None if value is None else decode_exchange(key, value)

    def __contains__(self, key: str) -> bool:
        return self._call(self._rdict.get, key.encode()) is not None

    def put(self, exchange: Exchange) -> None:
        self._writable()
        self._call(self._rdict.put, exchange.key.encode(), encode_exchange(exchange))

    def put_new(self, exchange: Exchange) -> bool:
        """Store unless the key is taken; True when stored (for idempotent imports)."""
        if exchange.key in self:
            return False
        self.put(exchange)
        return True

    def put_many(self, exchanges: list[Exchange]) -> None:
        """Write several entries atomically: all or none."""
        self._writable()
        batch = WriteBatch(raw_mode=True)
        for ex in exchanges:
            batch.put(ex.key.encode(), encode_exchange(ex))
        self._call(self._rdict.write, batch)

    def put_encoded_many(self, records: list[tuple[str, bytes]]) -> None:
        """Write records already encoded by encode_exchange, atomically (bulk imports)."""
        self._writable()
        batch = WriteBatch(raw_mode=True)
        for key, value in records:
            batch.put(key.encode(), value)
        self._call(self._rdict.write, batch)

    @contextlib.contextmanager
    def bulk_load(self) -> Iterator[Store]:
        """Writes of a bulk import, without RocksDB's write-ahead log (its write then costs
        about half). Leaving flushes the memtable to table files, which RocksDB syncs, and
        waits for it: once this has returned, what was written is as durable as a logged
        write, and a failed flush is raised as StoreError. A crash inside loses only this
        load's own writes, which a re-run of the import makes again."""
        self._writable()
        unlogged = WriteOptions()
        unlogged.disable_wal = True  # type: ignore[method-assign,assignment]  # a property; rocksdict's stub says method
        self._call(self._rdict.set_write_options, unlogged)
        try:
            yield self
        except BaseException:
            with contextlib.suppress(StoreError):  # keep what was written; the first error is the one to report
                self._end_bulk_load()
            raise
        self._end_bulk_load()

    def _end_bulk_load(self) -> None:
        self._call(self._rdict.set_write_options, WriteOptions())
        try:
            self._rdict.flush(True)
        except Exception as exc:  # rocksdict raises bare Exception with RocksDB's text
            raise StoreError(f"could not flush the store at {self.path} after a bulk write: {exc}") from exc

    def existing(self, keys: list[str]) -> set[str]:
        """Which of ``keys`` are stored, in one multi-get."""
        if not keys:
            return set()
        # rocksdict's stub types get's answer "one value or None"; a list of keys gets a list
        values: list[bytes | None] = self._call(self._rdict.get, [k.encode() for k in keys])  # type: ignore[arg-type]
        return {k for k, v in zip(keys, values) if v is not None}

    def delete(self, key: str) -> None:
        self._writable()
        self._call(self._rdict.delete, key.encode())

    def delete_many(self, keys: list[str]) -> None:
        """Delete several entries atomically: all or none (``stbproxy forget``)."""
        self._writable()
        batch = WriteBatch(raw_mode=True)
        for key in keys:
            batch.delete(key.encode())
        self._call(self._rdict.write, batch)

    def records(self, prefix: str) -> Iterator[tuple[str, bytes]]:
        """(key, stored bytes) under a prefix, undecoded (bulk copies between tiers)."""
        for raw_key, value in self._items(prefix.encode()):
            yield raw_key.decode(), value

    def keys(self, prefix: str) -> Iterator[str]:
        for raw_key in self._keys(prefix.encode()):
            yield raw_key.decode()

    def scan(self, prefix: str) -> Iterator[Exchange]:
        for raw_key, value in self._items(prefix.encode()):
            yield decode_exchange(raw_key.decode(), value)

    def entries(self) -> Iterator[Exchange]:
        for prefix in ENTRY_PREFIXES:
            yield from self.scan(prefix)

    # small JSON documents ---------------------------------------------------------------
    def get_meta(self, name: str) -> Any:
        value = self._call(self._rdict.get, meta_key(name))
        return None if value is None else json.loads(value)

    def put_meta(self, name: str, document: Any) -> None:
        self._writable()
        self._call(self._rdict.put, meta_key(name), json.dumps(document).encode())

    # sessions ---------------------------------------------------------------------------
    def append_session(self, name: str, record: dict[str, Any]) -> int:
        """Append a record to a session's log; returns its sequence number (from 1)."""
        self._writable()
        seq = self._session_seq.get(name)
        if seq is None:
            seq = self._last_session_seq(name)
        seq += 1
        self._call(self._rdict.put, session_key(name, seq), encode_session_record(record))
        self._session_seq[name] = seq  # only once written: a failed write leaves no gap
        return seq

    def append_sessions(self, records: list[tuple[str, dict[str, Any]]]) -> None:
        """Append several records (to one or more sessions' logs, in order) in one atomic write."""
        self._writable()
        batch = WriteBatch(raw_mode=True)
        seqs: dict[str, int] = {}
        for name, record in records:
            seq = seqs.get(name)
            if seq is None:
                seq = self._session_seq.get(name)
                if seq is None:
                    seq = self._last_session_seq(name)
            seqs[name] = seq = seq + 1
            batch.put(session_key(name, seq), encode_session_record(record))
        self._call(self._rdict.write, batch)
        self._session_seq.update(seqs)  # only once written: a failed write leaves no gap

    def put_imported(self, exchanges: list[Exchange], session: str | None = None,
                     records: Sequence[dict[str, Any]] = (), mark: tuple[str, dict[str, Any]] | None = None) -> int:
        """One batch of an import in one atomic write: the exchanges whose key is not stored
        yet (the first of a key wins), ``records`` appended to ``session``'s log in order, and
        ``mark``, a meta document (name, document) that gets the sequence number of the last
        record as its ``seq``: all or nothing, so a mark never says more than the log holds.
        Returns how many exchanges were stored."""
        self._writable()
        batch = WriteBatch(raw_mode=True)
        taken = self.existing([ex.key for ex in exchanges])
        stored = 0
        for ex in exchanges:
            if ex.key not in taken:
                taken.add(ex.key)
                batch.put(ex.key.encode(), encode_exchange(ex))
                stored += 1
        logged = session if records else None  # the session whose log grows
        seq = None
        if logged is not None:
            seq = self._session_seq.get(logged)
            if seq is None:
                seq = self._last_session_seq(logged)
            for record in records:
                seq += 1
                batch.put(session_key(logged, seq), encode_session_record(record))
        if mark is not None:
            name, document = mark
            batch.put(meta_key(name), json.dumps({**document, "seq": seq}).encode())
        self._call(self._rdict.write, batch)
        if logged is not None and seq is not None:
            self._session_seq[logged] = seq  # only once written: a failed write leaves no gap
        return stored

    def session_record(self, name: str, seq: int) -> dict[str, Any] | None:
        """One record of a session's log, or None."""
        value = self._call(self._rdict.get, session_key(name, seq))
        return None if value is None else expand_record(json.loads(value), seq)

    def session_records(self, name: str) -> Iterator[dict[str, Any]]:
        """The session's records in order, each with its ``seq`` (see sessions.expand_record)."""
        prefix = session_log_prefix(name)
        for raw_key, value in self._items(prefix):
            yield expand_record(json.loads(value), int(raw_key[len(prefix):]))

    def session_names(self) -> list[str]:
        """Every session with a log, in name order."""
        names: list[str] = []
        prefix = SESSION_PREFIX.encode()
        it = self._call(self._rdict.iter)
        it.seek(prefix)
        while it.valid() and it.key().startswith(prefix):
            name = it.key()[len(prefix):].split(b"/", 1)[0]
            names.append(name.decode())
            it.seek(prefix + name + b"/\xff")  # skip to the next session
        return names

    def _last_session_seq(self, name: str) -> int:
        prefix = session_log_prefix(name)
        it = self._call(self._rdict.iter)
        it.seek_for_prev(prefix + b"\xff")
        if it.valid() and it.key().startswith(prefix):
            return int(it.key()[len(prefix):])
        return 0

    # reporting ------------------------------------------------------------------------
    def stats(self, *, meta_fields: tuple[str, ...] = (), sum_fields: tuple[str, ...] = ()) -> StoreStats:
        """What ``stbproxy stats`` reports of this store (stats.count_records)."""
        return count_records(self.path, self.records, meta_fields=meta_fields, sum_fields=sum_fields)

    # internals ------------------------------------------------------------------------
    def _items(self, raw_prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) under ``raw_prefix``, in key order."""
        it = self._call(self._rdict.iter)
        for key in self._walk(it, raw_prefix):
            yield key, it.value()

    def _keys(self, raw_prefix: bytes) -> Iterator[bytes]:
        """The keys under ``raw_prefix``, in key order (no value is read)."""
        return self._walk(self._call(self._rdict.iter), raw_prefix)

    @staticmethod
    def _walk(it: RdictIter, raw_prefix: bytes) -> Iterator[bytes]:
        """Each key under ``raw_prefix``, with ``it`` standing on it."""
        it.seek(raw_prefix)
        while it.valid():
            key: bytes = it.key()
            if not key.startswith(raw_prefix):
                break
            yield key
            it.next()

    def _writable(self) -> None:
        if self.readonly:
            raise StoreError(f"the store at {self.path} is open read-only")

    @property
    def _rdict(self) -> Rdict:
        if self._db is None:
            raise StoreError(f"the store at {self.path} is closed")
        return self._db

    def _call(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise StoreError(f"store operation failed at {self.path}: {exc}") from exc

