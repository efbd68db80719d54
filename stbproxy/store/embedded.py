"""The embedded RocksDB store (the only importer of rocksdict).

Keys are readable byte strings (see keys.py): ``http/...`` and ``api/...`` hold cache
entries, ``log/...`` exchanges that are kept for the record but never served (passthrough
traffic), ``meta/...`` small JSON documents, ``session/<name>/<seq>`` session records. A
value is one record (record_format.py).

Each write is one RocksDB put (atomic, in the write-ahead log before it returns), so a
crash loses at most the requests in flight; bulk imports write unlogged and flush before
they report (Store.bulk_load).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, ParamSpec, Sequence, TypeVar
from urllib.parse import urlsplit

from rocksdict import (
    AccessType,
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    Options,
    Rdict,
    RdictIter,
    WriteBatch,
    WriteOptions,
)

from stbproxy.errors import StoreError, StoreLockedError
from stbproxy.models import Exchange
from stbproxy.private_files import private_dir
from stbproxy.sessions import expand_record
from stbproxy.store.contract import OneTier
from stbproxy.store.record_format import decode_exchange, decode_head, encode_exchange

# plain HTTP, catalog-routed APIs, MCP servers, operations of OpenAPI specs
ENTRY_PREFIXES = ("http/", "api/", "mcp/", "openapi/")
LOG_PREFIX = "log/"
META_PREFIX = "meta/"
SESSION_PREFIX = "session/"
DEFAULT_STORE = Path(".stbproxy") / "store"
AUTH_SALT_FILE = "auth-salt"  # beside RocksDB's files, which it ignores (as catalog.json)
_SESSION_JSON = json.JSONEncoder(separators=(",", ":"))  # ASCII: odd URLs round-trip
P = ParamSpec("P")
T = TypeVar("T")


def default_store_path() -> Path:
    return Path(os.environ.get("STBPROXY_STORE") or DEFAULT_STORE)


DEFAULT_CACHE_MB = 64
CACHE_MB_RANGE = (8, 1 << 20)  # up to 1 TiB: a larger number is a typo, not a cache
CACHE_MB_VARIABLE = "STBPROXY_STORE_CACHE_MB"


def cache_mb() -> int:
    """The block cache of each process that opens a store, in MiB (STBPROXY_STORE_CACHE_MB)."""
    raw = os.environ.get(CACHE_MB_VARIABLE, "").strip()
    if not raw:
        return DEFAULT_CACHE_MB
    low, high = CACHE_MB_RANGE
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise StoreError(f"{CACHE_MB_VARIABLE}={raw!r} is not a cache size: a whole number of MiB from {low} "
                         f"to {high}")
    return int(raw)


def _rocksdb_options() -> Options:
    """What keeps a process's memory flat as the store grows: index and filter blocks, which
    RocksDB otherwise holds for every table file (about 10 bytes per entry), share one
    bounded LRU cache with the data blocks. The index and filters are partitioned, so a
    lookup reads a few small partitions, never a table's whole index; their top levels,
    small, stay pinned. Nothing else is pinned: RocksDB's pinning of level-0 tables held
    every table's index and filter partitions that an import wrote (4.5 % of the data,
    beyond the cache's size: 220 MB at 5 GB), as RSS that grew with the import. Tables keep
    the layout they were written with: stores written before this setting hold whole-table
    indexes, which pass through the same cache."""
    table = BlockBasedOptions()
    table.set_block_cache(Cache(cache_mb() << 20))
    table.set_cache_index_and_filter_blocks(True)
    table.set_index_type(BlockBasedIndexType.two_level_index_search())
    table.set_bloom_filter(10, False)  # a miss (a first call) rarely reads a data block
    table.set_partition_filters(True)
    table.set_pin_top_level_index_and_filter(True)
    options = Options(raw_mode=True)
    options.set_block_based_table_factory(table)
    return options


@dataclass
class StoreStats:
    entries: int = 0
    damaged: int = 0
    size_bytes: int = 0
    by_source: Counter[str] = field(default_factory=Counter)
    by_host: Counter[str] = field(default_factory=Counter)
    logged: Counter[str] = field(default_factory=Counter)  # log/<kind>/...: kept, never served
    meta: dict[str, Counter[str]] = field(default_factory=dict)  # value counts of chosen meta keys
    failed_by_source: Counter[str] = field(default_factory=Counter)  # entries that are failed answers, by origin
    imported_failures: Counter[str] = field(default_factory=Counter)  # imported failed answers, by failure kind
    sums: Counter[str] = field(default_factory=Counter)  # totals of chosen numeric meta keys

    def to_dict(self) -> dict[str, Any]:
        return {
            "entries": self.entries,
            "damaged": self.damaged,
            "size_bytes": self.size_bytes,
            "by_source": dict(self.by_source.most_common()),
            "by_host": dict(self.by_host.most_common()),
            "logged": dict(self.logged.most_common()),
            "failed_by_source": dict(self.failed_by_source.most_common()),
            "imported_failures": dict(self.imported_failures.most_common()),
            **{name: dict(counter.most_common()) for name, counter in self.meta.items()},
            **dict(self.sums),
        }


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
        options = _rocksdb_options()
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
        for raw_key, value in self._items(prefix):
            yield raw_key.decode(), value

    def keys(self, prefix: str) -> Iterator[str]:
        for raw_key in self._keys(prefix):
            yield raw_key.decode()

    def scan(self, prefix: str) -> Iterator[Exchange]:
        for raw_key, value in self._items(prefix):
            yield decode_exchange(raw_key.decode(), value)

    def entries(self) -> Iterator[Exchange]:
        for prefix in ENTRY_PREFIXES:
            yield from self.scan(prefix)

    # small JSON documents ---------------------------------------------------------------
    def get_meta(self, name: str) -> Any:
        value = self._call(self._rdict.get, (META_PREFIX + name).encode())
        return None if value is None else json.loads(value)

    def put_meta(self, name: str, document: Any) -> None:
        self._writable()
        self._call(self._rdict.put, (META_PREFIX + name).encode(), json.dumps(document).encode())

    # sessions ---------------------------------------------------------------------------
    def append_session(self, name: str, record: dict[str, Any]) -> int:
        """Append a record to a session's log; returns its sequence number (from 1)."""
        self._writable()
        seq = self._session_seq.get(name)
        if seq is None:
            seq = self._last_session_seq(name)
        seq += 1
        self._call(self._rdict.put, f"{SESSION_PREFIX}{name}/{seq:012d}".encode(), _SESSION_JSON.encode(record).encode())
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
            batch.put(f"{SESSION_PREFIX}{name}/{seq:012d}".encode(), _SESSION_JSON.encode(record).encode())
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
                batch.put(f"{SESSION_PREFIX}{logged}/{seq:012d}".encode(), _SESSION_JSON.encode(record).encode())
        if mark is not None:
            name, document = mark
            batch.put((META_PREFIX + name).encode(), json.dumps({**document, "seq": seq}).encode())
        self._call(self._rdict.write, batch)
        if logged is not None and seq is not None:
            self._session_seq[logged] = seq  # only once written: a failed write leaves no gap
        return stored

    def session_record(self, name: str, seq: int) -> dict[str, Any] | None:
        """One record of a session's log, or None."""
        value = self._call(self._rdict.get, f"{SESSION_PREFIX}{name}/{seq:012d}".encode())
        return None if value is None else expand_record(json.loads(value), seq)

    def session_records(self, name: str) -> Iterator[dict[str, Any]]:
        """The session's records in order, each with its ``seq`` (see sessions.expand_record)."""
        prefix = f"{SESSION_PREFIX}{name}/"
        start = len(prefix.encode())
        for raw_key, value in self._items(prefix):
            yield expand_record(json.loads(value), int(raw_key[start:]))

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
        prefix = f"{SESSION_PREFIX}{name}/".encode()
        it = self._call(self._rdict.iter)
        it.seek_for_prev(prefix + b"\xff")
        if it.valid() and it.key().startswith(prefix):
            return int(it.key()[len(prefix):])
        return 0

    # reporting ------------------------------------------------------------------------
    def stats(self, *, meta_fields: tuple[str, ...] = (), sum_fields: tuple[str, ...] = ()) -> StoreStats:
        """Counts by source and host, logged records by kind, and chosen meta facts
        (``meta_fields``: counts of their values; ``sum_fields``: their totals), over both
        cache entries and logged records; imported entries' facts apart (failed answers by
        kind), since they are not this proxy's calls."""
        result = StoreStats(size_bytes=directory_size(self.path))
        result.meta = {name: Counter[str]() for name in meta_fields}
        result.sums = Counter({name: 0 for name in sum_fields})
        for prefix in (*ENTRY_PREFIXES, LOG_PREFIX):
            for raw_key, value in self._items(prefix):
                try:
                    head, _ = decode_head(value)
                except ValueError:
                    result.damaged += 1
                    continue
                if prefix == LOG_PREFIX:
                    result.logged[raw_key.decode().split("/", 2)[1]] += 1
                else:
                    result.entries += 1
                    result.by_source[head.get("source", "?")] += 1
                    result.by_host[_host_of(head["request"]["url"])] += 1
                meta = head.get("meta") or {}
                if prefix != LOG_PREFIX and meta.get("failure", "success") != "success":
                    result.failed_by_source[head.get("source", "?")] += 1
                if head.get("source") == "imported":
                    # Another system's answers (StableToolBench's cache): not this proxy's
                    # calls, so counted apart from its facts.
                    if "failure" in meta:
                        result.imported_failures[str(meta["failure"])] += 1
                    continue
                for name in meta_fields:
                    if name in meta:
                        result.meta[name][str(meta[name])] += 1
                for name in sum_fields:
                    if isinstance(meta.get(name), (int, float)):
                        result.sums[name] += meta[name]
        return result

    # internals ------------------------------------------------------------------------
    def _items(self, prefix: str) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) under ``prefix``, in key order."""
        it = self._call(self._rdict.iter)
        for key in self._walk(it, prefix.encode()):
            yield key, it.value()

    def _keys(self, prefix: str) -> Iterator[bytes]:
        """The keys under ``prefix``, in key order (no value is read)."""
        return self._walk(self._call(self._rdict.iter), prefix.encode())

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


def open_failure(path: Path, exc: Exception) -> StoreError:
    """Why a store cannot be opened, and what to do about it, in one line."""
    text = str(exc)
    # Classified by RocksDB's words, not the path's: a folder named "blocks" is no lock.
    detail = text.replace(str(path.absolute()), "<store>").replace(str(path), "<store>").lower()
    if "lock" in detail and not ("read-only" in detail or "permission denied" in detail):
        return StoreLockedError(
            f"the store at {path} is locked by another process ({path / 'LOCK'}): "
            "another stbproxy is writing to it; stop it, use another --store, "
            "or use a read-only command such as 'stbproxy stats'")
    absolute = path.absolute()
    if absolute.parts[1:2] in (("proc",), ("sys",)):
        return StoreError(f"cannot create the store at {path}: /{absolute.parts[1]} is the kernel's virtual "
                          "file system, where no store can live; choose another folder with --store")
    blocking = next((parent for parent in (absolute, *absolute.parents) if parent.exists()), None)
    if blocking is not None and not blocking.is_dir():
        return StoreError(f"cannot create the store at {path}: {blocking} is a file, not a folder; "
                          "choose another folder with --store")
    errno_text = getattr(exc, "strerror", None) or text
    if isinstance(exc, PermissionError) or "permission denied" in detail or "read-only" in detail:
        return StoreError(f"cannot create the store at {path}: {errno_text} ({blocking} is not writable); "
                          "choose a folder you can write to with --store")
    if "corruption" in detail or "invalid argument" in detail:
        return StoreError(f"the store at {path} cannot be read: {text}; it is not an stbproxy store or it "
                          "is damaged (choose another --store, or move this folder away)")
    return StoreError(f"cannot open the store at {path}: {errno_text}; choose another folder with --store")


def _host_of(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "?").lower()
    except ValueError:
        return "?"


def directory_size(path: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass  # RocksDB may delete an obsolete file while we walk
    return total


def ensure_auth_salt(path: Path) -> None:
    """Give the store its own random salt for digests of credentials (keys.KeyRules.auth_salt),
    written once, readable by its owner alone."""
    try:
        fd = os.open(path / AUTH_SALT_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise StoreError(f"cannot write {path / AUTH_SALT_FILE}: {exc}") from exc
    with os.fdopen(fd, "wb") as handle:
        handle.write(secrets.token_bytes(32))


def auth_salt(path: str | os.PathLike[str]) -> bytes:
    """The store's salt for digests of credentials; empty for a store that has none yet."""
    try:
        return (Path(path) / AUTH_SALT_FILE).read_bytes()
    except OSError:
        return b""
