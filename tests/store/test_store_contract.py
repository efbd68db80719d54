"""Every store the engine is given keeps the written contract (stbproxy/store/contract.py):
mypy checks each as an EngineStore, and a store that drops or changes a method fails here."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

HELD = textwrap.dedent("""
    from stbproxy.cassettes.store import CassetteStore
    from stbproxy.store.contract import EngineStore
    from stbproxy.store.embedded import Store
    from stbproxy.store.tiered import TieredStore
    from stbproxy.workers.reader_engine import ReaderStore


    def held(embedded: Store, tiered: TieredStore, reader: ReaderStore, cassette: CassetteStore) -> list[EngineStore]:
        return [embedded, tiered, reader, cassette]
""")

BROKEN = textwrap.dedent("""
    from typing import Iterator

    from stbproxy.models import Exchange
    from stbproxy.store.contract import EngineStore, OneTier


    class NoScan(OneTier):  # no scan, and a put of another shape
        def get(self, key: str) -> Exchange | None: return None
        def put(self, exchange: Exchange, extra: int) -> None: pass
        def append_session(self, name: str, record: dict) -> int: return 0
        def session_records(self, name: str) -> Iterator[dict]: return iter(())


    def held(store: NoScan) -> EngineStore:
        return store
""")


def mypy(tmp_path, source: str) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy", reason="mypy is one of the test extras (pip install -e '.[test]')")
    module = tmp_path / "held.py"
    module.write_text(source)
    return subprocess.run([sys.executable, "-m", "mypy", "--follow-imports=silent", "--ignore-missing-imports",
                           "--no-error-summary", "--cache-dir", str(tmp_path / "cache"), str(module)],
                          capture_output=True, text=True, timeout=300)


def test_every_store_the_engine_is_given_keeps_the_contract(tmp_path):
    done = mypy(tmp_path, HELD)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_store_that_breaks_the_contract_is_caught(tmp_path):
    done = mypy(tmp_path, BROKEN)
    assert done.returncode == 1 and "EngineStore" in done.stdout, done.stdout + done.stderr
    assert "missing following \"EngineStore\" protocol member" in done.stdout, done.stdout
    assert ("note:     scan" in done.stdout
            and "def put(self, exchange: Exchange, extra: int)" in done.stdout), done.stdout
