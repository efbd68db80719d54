import os
import re
import subprocess
import sys
import textwrap
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stbproxy.errors import StoreError, StoreLockedError
from stbproxy.models import ApiRef, Exchange, Request, Response, Source
from stbproxy.store.embedded import Store
from stbproxy.store.record_format import RecordTemplate, decode_exchange, encode_exchange


def exchange(key="http/h/GET/p/1", body=b'{"ok": true}', source=Source.UPSTREAM, **meta) -> Exchange:
    return Exchange(
        key=key,
        request=Request("GET", "http://h/p?x=1", (("Accept", "*/*"),), b"\x00req"),
        response=Response(200, (("Content-Type", "application/json"),), body, "OK"),
        source=source,
        stored_at=1700000000.5,
        upstream_seconds=0.25,
        api=ApiRef("c", "t", "a") if meta.pop("with_api", False) else None,
        meta=meta,
    )


@pytest.mark.parametrize("body", [b"", b"plain", bytes(range(256)), "ünïcødé".encode()])
def test_record_encoding_round_trips(body):
    original = exchange(body=body, failure="success", with_api=True)
    assert decode_exchange(original.key, encode_exchange(original)) == original


@pytest.mark.parametrize("value", [b"", b"garbage", b"STB1\x00\x00\x00\xffshort", b"STB1\x00\x00\x00\x02{]"])
def test_damaged_records_raise_store_error_naming_the_key(value):
    with pytest.raises(StoreError, match="http/x"):
        decode_exchange("http/x", value)


def test_put_get_scan_and_prefixes(tmp_path):
    with Store(tmp_path / "s") as store:
        store.put(exchange("http/a/GET/x/1"))
        store.put(exchange("http/a/GET/y/2"))
        store.put(exchange("http/b/GET/x/3"))
        store.put(exchange("api/c/t/a/4", with_api=True))
        assert store.get("http/a/GET/x/1").response.body == b'{"ok": true}'
        assert store.get("missing") is None
        assert [e.key for e in store.scan("http/a/")] == ["http/a/GET/x/1", "http/a/GET/y/2"]
        assert list(store.keys("api/")) == ["api/c/t/a/4"]
        assert len(list(store.entries())) == 4


def table_properties(store: Store) -> dict[str, int]:
    text = store._db.property_value("rocksdb.aggregated-table-properties")
    pairs = (item.rsplit("=", 1) for item in text.split(";") if "=" in item)
    return {name.strip(): int(value) for name, value in pairs if value.strip().isdigit()}


def test_index_and_filters_are_partitioned_and_share_one_bounded_cache(tmp_path, monkeypatch):
    """What keeps RSS flat as a store grows: every process's RocksDB memory for tables is one
    LRU cache of the size set, which holds index and filter partitions as well as data."""
    monkeypatch.setenv("STBPROXY_STORE_CACHE_MB", "16")
    with Store(tmp_path / "s") as store:
        with store.bulk_load():  # flushed to table files on the way out
            store.put_encoded_many([(f"http/h/GET/p/{n:06d}", encode_exchange(exchange(f"http/h/GET/p/{n:06d}")))
                                    for n in range(20_000)])
    for opened in (Store(tmp_path / "s", readonly=True), Store(tmp_path / "s", secondary=True)):
        with opened as store:
            assert store._db.property_value("rocksdb.block-cache-capacity") == str(16 << 20)
            tables = table_properties(store)
            assert tables["# index partitions"] > 1 and tables["filter block size"] > 0
            assert tables["# entries for filter"] == 20_000
            assert store.get("http/h/GET/p/012345").key == "http/h/GET/p/012345"
            assert store.get("http/h/GET/p/missing") is None


def test_tables_a_writer_makes_do_not_pin_their_index_and_filters_beyond_the_cache(tmp_path, monkeypatch):
    """RocksDB's pinning of level-0 tables kept the index and filter partitions of every
    table an import wrote, out of the cache's reach: an importing process's RSS grew by
    4.5 % of what it wrote (220 MB at 5 GB). Only the top levels may stay pinned."""
    monkeypatch.setenv("STBPROXY_STORE_CACHE_MB", "8")
    with Store(tmp_path / "s") as store:
        for batch in range(6):  # a table file each, as an import's memtable flushes make them
            keys = [f"http/h/GET/p/{batch}-{n:06d}" for n in range(15_000)]
            store.put_encoded_many([(key, encode_exchange(exchange(key))) for key in keys])
            store._db.flush(True)
            assert store.get(keys[7]).key == keys[7]  # tables are read, as the import's duplicate checks do
        tables = table_properties(store)
        index = next(size for name, size in tables.items() if name.startswith("index block size"))
        written = index + tables["filter block size"]
        pinned = int(store._db.property_value("rocksdb.block-cache-pinned-usage"))
        assert written > 100_000
        assert pinned < written / 10, (pinned, written)


@pytest.mark.parametrize("size", ["lots", "0", "7", "-64", "1.5", "99999999"])
def test_a_block_cache_size_that_is_no_size_is_one_clear_error(tmp_path, monkeypatch, size):
    monkeypatch.setenv("STBPROXY_STORE_CACHE_MB", size)
    said = rf"STBPROXY_STORE_CACHE_MB='{re.escape(size)}' is not a cache size: a whole number of MiB from 8 to 1048576"
    with pytest.raises(StoreError, match=said):
        Store(tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_put_new_is_idempotent(tmp_path):
    with Store(tmp_path / "s") as store:
        assert store.put_new(exchange(body=b"first"))
        assert not store.put_new(exchange(body=b"second"))
        assert store.get(exchange().key).response.body == b"first"


def test_put_many_is_all_or_nothing(tmp_path):
    with Store(tmp_path / "s") as store:
        store.put_many([exchange(f"http/h/GET/p/{i}") for i in range(10)])
        assert len(list(store.keys("http/"))) == 10


def test_data_survives_reopen(tmp_path):
    with Store(tmp_path / "s") as store:
        store.put(exchange())
        store.put_meta("catalog", {"apis": 3})
    with Store(tmp_path / "s", readonly=True) as store:
        assert store.get(exchange().key) == exchange()
        assert store.get_meta("catalog") == {"apis": 3}


def test_a_closed_store_says_so(tmp_path):
    store = Store(tmp_path / "s")
    store.close()
    store.close()  # a second close is no error
    for use in (lambda: store.get(exchange().key), lambda: store.put(exchange()), lambda: list(store.keys("http/")),
                lambda: store.session_names()):
        with pytest.raises(StoreError, match=r"the store at .* is closed"):
            use()


def test_second_writer_gets_a_clear_lock_error_and_readers_still_work(tmp_path):
    with Store(tmp_path / "s") as writer:
        writer.put(exchange())
        code = textwrap.dedent(f"""
            from stbproxy.store.embedded import Store
            from stbproxy.errors import StoreLockedError
            try:
                Store({str(tmp_path / 's')!r})
            except StoreLockedError as exc:
                print("LOCKED", exc)
            with Store({str(tmp_path / 's')!r}, readonly=True) as reader:
                print("READ", reader.get({exchange().key!r}).response.body)
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60).stdout
        assert "LOCKED" in out and "LOCK" in out.split("LOCKED", 1)[1]
        assert "READ b'{\"ok\": true}'" in out


def test_in_process_second_writer_is_refused(tmp_path):
    with Store(tmp_path / "s"):
        with pytest.raises(StoreLockedError, match="locked"):
            Store(tmp_path / "s")


def test_readonly_store_refuses_writes_and_missing_store_is_named(tmp_path):
    with pytest.raises(StoreError, match="no store at"):
        Store(tmp_path / "absent", readonly=True)
    Store(tmp_path / "s").close()
    with Store(tmp_path / "s", readonly=True) as store, pytest.raises(StoreError, match="read-only"):
        store.put(exchange())


def test_kill_9_loses_nothing_already_acknowledged(tmp_path):
    # A writer that stores entries, says so, then dies without closing.
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.getcwd()!r})
        from tests.store.test_store import exchange
        from stbproxy.store.embedded import Store
        store = Store({str(tmp_path / 's')!r})
        for i in range(200):
            store.put(exchange(f"http/h/GET/p/{{i}}"))
        print("stored", flush=True)
        os.kill(os.getpid(), 9)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "stored" in result.stdout and result.returncode == -9
    with Store(tmp_path / "s") as store:
        assert len(list(store.keys("http/"))) == 200


def _writer_killed(tmp_path, body: str) -> subprocess.CompletedProcess:
    """Run ``body`` with ``store`` open for writing, then die by SIGKILL without closing it."""
    code = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.getcwd()!r})
        from tests.store.test_store import exchange
        from stbproxy.store.embedded import Store
        from stbproxy.store.record_format import encode_exchange
        store = Store({str(tmp_path / 's')!r})
    """) + textwrap.dedent(body) + "\nos.kill(os.getpid(), 9)\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == -9, result.stderr
    return result


def test_a_bulk_load_is_on_disk_once_it_returns(tmp_path):
    """Bulk writes skip the write-ahead log; leaving bulk_load flushes them, so a writer
    killed right after it loses nothing, and what was stored before is kept either way."""
    result = _writer_killed(tmp_path, """
        store.put(exchange("http/h/GET/before/1"))
        with store.bulk_load():
            store.put_encoded_many([(f"http/h/GET/p/{i}", encode_exchange(exchange(f"http/h/GET/p/{i}")))
                                    for i in range(300)])
        print("imported", flush=True)
    """)
    assert "imported" in result.stdout
    with Store(tmp_path / "s", readonly=True) as store:
        assert len(list(store.keys("http/h/GET/p/"))) == 300
        assert store.get("http/h/GET/p/7") == exchange("http/h/GET/p/7")
        assert store.get("http/h/GET/before/1") is not None


def test_a_writer_killed_inside_a_bulk_load_keeps_what_was_stored_before(tmp_path):
    _writer_killed(tmp_path, """
        store.put(exchange("http/h/GET/before/1"))
        with store.bulk_load():
            store.put_encoded_many([("http/h/GET/p/1", encode_exchange(exchange("http/h/GET/p/1")))])
            os.kill(os.getpid(), 9)
    """)
    with Store(tmp_path / "s") as store:
        assert store.get("http/h/GET/before/1") == exchange("http/h/GET/before/1")
        assert store.get("http/h/GET/p/1") is None  # unlogged and not flushed: the import is re-run


def test_writes_after_a_bulk_load_are_logged_again(tmp_path):
    _writer_killed(tmp_path, """
        try:
            with store.bulk_load():
                store.put_encoded_many([("http/h/GET/p/1", encode_exchange(exchange("http/h/GET/p/1")))])
                raise RuntimeError("the import failed")
        except RuntimeError:
            pass
        store.put(exchange("http/h/GET/after/1"))
    """)
    with Store(tmp_path / "s") as store:
        assert store.get("http/h/GET/p/1") is not None  # flushed on the way out of the failed load
        assert store.get("http/h/GET/after/1") is not None  # in the log again


def test_a_bulk_load_on_a_read_only_store_is_refused(tmp_path):
    Store(tmp_path / "s").close()
    with Store(tmp_path / "s", readonly=True) as store, pytest.raises(StoreError, match="read-only"):
        with store.bulk_load():
            pass


# -- record templates: encode_exchange's bytes, made cheaply ---------------------------------------


texts = st.text(max_size=20)
headers = st.lists(st.tuples(texts, texts), max_size=3).map(tuple)
meta_values = st.one_of(texts, st.integers(), st.floats(allow_nan=False), st.booleans(), st.none(),
                        st.lists(st.integers(), max_size=3))
exchanges = st.builds(
    Exchange, key=st.just("api/c/t/a/x"),
    request=st.builds(Request, method=st.sampled_from(["GET", "POST"]), url=texts, headers=headers,
                      body=st.binary(max_size=40)),
    response=st.builds(Response, status=st.integers(100, 599), headers=headers, body=st.binary(max_size=40),
                       reason=texts),
    source=st.sampled_from(list(Source)), stored_at=st.floats(allow_nan=False, allow_infinity=False),
    upstream_seconds=st.none() | st.floats(0, 100), api=st.none() | st.builds(ApiRef, texts, texts, texts),
    meta=st.dictionaries(texts, meta_values, max_size=3))


@settings(max_examples=300, deadline=None)
@given(exchanges, st.binary(max_size=60), st.binary(max_size=60))
def test_a_record_template_makes_encode_exchanges_bytes(sample, request_body, response_body):
    expected = replace(sample, request=replace(sample.request, body=request_body),
                       response=replace(sample.response, body=response_body))
    assert RecordTemplate(sample).record(request_body, response_body) == encode_exchange(expected)


@pytest.mark.parametrize("url", ["\x00request body\x00", "http://h/\x00request body\x00", "\\u0000request body"])
def test_a_record_template_is_right_whatever_the_head_holds(url):
    """A head value that is the template's marker itself is encoded the plain way."""
    sample = replace(exchange(), request=replace(exchange().request, url=url))
    assert RecordTemplate(sample).record(b"args", b"answer") == encode_exchange(
        replace(sample, request=replace(sample.request, body=b"args"),
                response=replace(sample.response, body=b"answer")))


def test_stats_counts_by_source_and_host(tmp_path):
    with Store(tmp_path / "s") as store:
        store.put(exchange("http/h/GET/p/1"))
        store.put(exchange("http/h/GET/p/2", source=Source.SIMULATED))
        store.put(exchange("log/passthrough/h/1", source=Source.PASSTHROUGH))
        result = store.stats()
    assert result.entries == 2 and result.logged == {"passthrough": 1}
    assert result.by_source == {"upstream": 1, "simulated": 1}
    assert result.by_host == {"h": 2}
    assert result.size_bytes > 0


def test_session_records_appended_one_by_one_and_in_batches_share_one_sequence(tmp_path):
    with Store(tmp_path / "s") as store:
        assert store.append_session("a", {"n": 1}) == 1
        store.append_sessions([("a", {"n": 2}), ("b", {"n": 1}), ("a", {"n": 3})])
        assert store.append_session("a", {"n": 4}) == 4
    with Store(tmp_path / "s") as store:  # numbering goes on from what is stored
        store.append_sessions([("b", {"n": 2})])
        assert [(r["seq"], r["n"]) for r in store.session_records("a")] == [(1, 1), (2, 2), (3, 3), (4, 4)]
        assert [(r["seq"], r["n"]) for r in store.session_records("b")] == [(1, 1), (2, 2)]
        assert store.session_names() == ["a", "b"]
        assert store.session_record("a", 3)["n"] == 3 and store.session_record("a", 5) is None


def test_a_secondary_sees_the_writers_entries_after_catching_up(tmp_path):
    with Store(tmp_path / "s") as writer:
        writer.put(exchange("http/h/GET/p/1"))
        reader = Store(tmp_path / "s", secondary=True)
        try:
            assert reader.get("http/h/GET/p/1") is not None
            writer.put(exchange("http/h/GET/p/2"))
            assert reader.get("http/h/GET/p/2") is None
            reader.catch_up()
            assert reader.get("http/h/GET/p/2").response.body == b'{"ok": true}'
            with pytest.raises(StoreError, match="read-only"):
                reader.put(exchange("http/h/GET/p/3"))
        finally:
            reader.close()


def test_a_path_that_mentions_lock_is_not_taken_for_a_held_lock(tmp_path):
    from stbproxy.store.folder import open_failure

    path = tmp_path / "blocks" / "store"
    read_only = open_failure(path, Exception(f"IO error: While mkdir if missing: {path}: Read-only file system"))
    assert not isinstance(read_only, StoreLockedError) and "not writable" in str(read_only)
    held = open_failure(path, Exception(f"IO error: While lock file: {path}/LOCK: Resource temporarily unavailable"))
    assert isinstance(held, StoreLockedError)
