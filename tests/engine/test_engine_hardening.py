"""The calling rules under secrets they were not told about and stores that refuse writes:
real store, real upstream server on loopback."""

from __future__ import annotations

import asyncio
import json
import logging
import os
from dataclasses import replace

from stbproxy.engine import Engine, EngineConfig
from stbproxy.models import Mode, Request, Source
from stbproxy.stb.catalog import ApiDoc, Catalog, Param
from stbproxy.store.embedded import Store
from stbproxy.upstream import Upstream, UpstreamConfig
from tests.own_virtual import ask, virtual_engine

SECRET = "qk-query-secret-20251"
TOOLBENCH_KEY = "tbk-echoed-back-99412"
RAPIDAPI_KEY = "rk-from-the-environment-5521"


def store_bytes(path) -> bytes:
    return b"".join(open(os.path.join(r, f), "rb").read() for r, _, fs in os.walk(path) for f in fs)


def run(store, scenario, *, mode=Mode.VIRTUAL, catalog=None, **virtual):
    async def main():
        upstream = Upstream(UpstreamConfig(timeout=5.0))
        engine = virtual_engine(store, upstream, EngineConfig(mode=mode), catalog, **virtual)
        try:
            return await scenario(engine)
        finally:
            await upstream.aclose()

    return asyncio.run(main())


def test_upstream_errors_are_scrubbed_in_the_log_the_stored_reason_and_the_answer(tmp_path, caplog):
    url = f"http://127.0.0.1:9/gone?q=1&api_key={SECRET}"  # the discard port: refused

    async def scenario(engine):
        virtual = await engine.handle(Request("GET", url), "s1")
        engine.config = EngineConfig(mode=Mode.RECORD)
        recorded = await engine.handle(Request("GET", url), "s1")
        return virtual, recorded

    caplog.set_level(logging.INFO, logger="stbproxy")
    with Store(tmp_path / "s") as store:
        virtual, recorded = run(store, scenario)
        assert virtual.source is Source.UNAVAILABLE and recorded.response.status == 502
        assert recorded.source is Source.ERROR and SECRET not in recorded.meta["reason"]
        (logged,) = store.scan("log/unavailable/")
        reason = logged.meta["reason"]
        assert "upstream unreachable" in reason and "api_key=REDACTED" in reason and SECRET not in reason
        for answer in (virtual, recorded):
            assert SECRET.encode() not in answer.response.body
    assert "upstream failed for" in caplog.text and SECRET not in caplog.text
    assert SECRET.encode() not in store_bytes(tmp_path / "s")


def test_secrets_of_the_upstream_request_are_scrubbed_from_its_echo(tmp_path, upstream):
    """A /virtual call's toolbench_key goes only to --toolbench-url, and the RapidAPI key
    only to the real API: neither is in the stored form of the call, yet both are scrubbed
    when the server echoes them."""
    catalog = Catalog([ApiDoc(category="Data", tool="Echo Tool", api="Echo key", url=f"{upstream.base}/echoheader",
                              method="GET", required_parameters=(Param("q", "STRING"),))])

    def call(tool_input: str, tool="TheClique", api="Songkick concert", category="Data") -> bytes:
        return json.dumps({"category": category, "tool_name": tool, "api_name": api, "tool_input": tool_input,
                           "strip": "", "toolbench_key": TOOLBENCH_KEY}).encode()

    async def scenario(engine):
        echoed = await ask(engine, call('{"echo_key": true}'), "s1")
        quoted = await ask(engine, call('{"echo_key": "error"}'), "s1")  # invalid: logged, then simulated
        stb = engine.kinds.ordered[0]
        stb.virtual = replace(stb.virtual, toolbench_url=None)  # the catalog's URL, with the key from the environment
        rapidapi = await ask(engine, call('{"q": "x"}', tool="Echo Tool", api="Echo key"), "s1")
        return echoed, quoted, rapidapi

    with Store(tmp_path / "s") as store:
        echoed, quoted, rapidapi = run(store, scenario, catalog=catalog, toolbench_url=upstream.url("/virtual"),
                                       rapidapi_key=RAPIDAPI_KEY)
        assert upstream.toolbench_keys == [TOOLBENCH_KEY, TOOLBENCH_KEY]  # forwarded, as it must be
        assert (echoed.source, quoted.source, rapidapi.source) == ("upstream", "unavailable", "upstream")
        (entry,) = store.scan("api/Data/echo_tool_for_Data/")
        assert json.loads(entry.response.body) == {"your_key": "REDACTED"}
        (invalid,) = store.scan("log/invalid/")
        assert invalid.meta["error"] == "key REDACTED is over its quota"
    raw = store_bytes(tmp_path / "s")
    assert TOOLBENCH_KEY.encode() not in raw and RAPIDAPI_KEY.encode() not in raw


def test_a_store_that_refuses_writes_is_never_silent(tmp_path, upstream, caplog):
    """Record mode answers 507 rather than pass on what it could not record; virtual mode
    serves and marks the answer; the log gets one line per interval with a count."""
    from stbproxy.store.write_failures import WriteFailures, read_status, status_path

    Store(tmp_path / "s").close()
    caplog.set_level(logging.INFO, logger="stbproxy")

    async def scenario(engine):
        recorded = [await engine.handle(Request("GET", upstream.url(f"/echo?n={i}")), "rec") for i in range(30)]
        engine.config = EngineConfig(mode=Mode.VIRTUAL)
        served = await engine.handle(Request("GET", upstream.url("/echo?n=virtual")), "virt")
        return recorded, served

    failures = WriteFailures(status_path(tmp_path / "s"))
    with Store(tmp_path / "s", readonly=True) as refusing:  # every write fails, as on a full disk
        async def main():
            client = Upstream(UpstreamConfig(timeout=5.0))
            engine = Engine(refusing, client, EngineConfig(mode=Mode.RECORD), write_failures=failures)
            try:
                return await scenario(engine)
            finally:
                await client.aclose()

        recorded, served = asyncio.run(main())
    failures.close()
    assert {a.response.status for a in recorded} == {507}
    assert all(a.response.header("X-Stb-Stored") == "no" for a in recorded)
    assert "could not be stored" in json.loads(recorded[0].response.body)["error"]
    assert served.response.status == 200 and served.source is Source.UPSTREAM
    assert served.response.header("X-Stb-Stored") == "no" and b"virtual" in served.response.body
    lines = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert 2 <= len(lines) <= 4, [r.getMessage() for r in lines]  # not one line per failure
    assert any("more writes failed" in r.getMessage() for r in lines)
    assert read_status(tmp_path / "s")["failed_writes"] == failures.count >= 31


def test_session_records_refer_to_the_stored_answer_instead_of_copying_it(tmp_path, upstream):
    url = upstream.url("/echo?city=Paris&units=metric&lang=en&page=1&limit=20&fields=temp,humidity,wind")

    async def record(engine):
        return await engine.handle(Request("GET", url), "rec")

    async def replay(engine):
        return [await engine.handle(Request("GET", url), "replayed") for _ in range(20)]

    with Store(tmp_path / "s") as store:
        run(store, record, mode=Mode.RECORD)
        hits = run(store, replay, mode=Mode.REPLAY)
        assert {h.source for h in hits} == {Source.CACHE}
        sizes = [len(value) for _key, value in store._items(b"session/replayed/")]
        records = list(store.session_records("replayed"))
        assert len(sizes) == 20 and max(sizes) <= 160, sizes
        assert [r["seq"] for r in records] == list(range(1, 21))
        assert all(r["key"] == hits[0].key and r["source"] == "cache" and r["url"] is None for r in records)
        # The reference is enough to show the request: it is the stored exchange's.
        assert store.get(records[0]["key"]).request.url == url
