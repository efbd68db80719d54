"""Two engines ("proxies"), each with its own RocksDB store, sharing one real redis-server:
answers made by one are served by the other, identical misses make one real call, and the
shared tier failing never fails a request."""

import asyncio
import logging
import time

from stbproxy.engine import Engine, EngineConfig
from stbproxy.kinds import http_call
from stbproxy.models import Mode, Request, Source
from stbproxy.store.embedded import Store
from stbproxy.store.shared_bulk import SharedBulk
from stbproxy.store.shared_client import LEASE_PREFIX
from stbproxy.store.shared_tier import SharedTier
from stbproxy.store.shared_url import parse_shared_url
from stbproxy.store.tiered import TieredReader, TieredStore
from stbproxy.upstream import Upstream, UpstreamConfig


class Proxy:
    """One engine over a tiered store, as `stbproxy serve --shared URL` builds it."""

    def __init__(self, path, url: str, mode: Mode = Mode.VIRTUAL, wait_limit: float = 5.0) -> None:
        self.local = Store(path)
        self.store = TieredStore(self.local, SharedTier(parse_shared_url(url)), wait_limit=wait_limit)
        self.mode = mode

    async def __aenter__(self):
        self.upstream = Upstream(UpstreamConfig(timeout=5.0))
        self.engine = Engine(self.store, self.upstream, EngineConfig(mode=self.mode))
        self.store.shared.start()
        for _ in range(300):
            if self.store.shared.up:
                break
            await asyncio.sleep(0.01)
        return self

    async def __aexit__(self, *exc_info):
        await self.upstream.aclose()
        await self.store.aclose()

    async def get(self, url: str):
        return await self.engine.handle(Request("GET", url))


def key_of(proxy: Proxy, url: str) -> str:
    return http_call(Request("GET", url), None, proxy.engine.config.rules).key


def test_answers_made_by_one_proxy_are_served_by_another_with_identical_bytes(tmp_path, redis_server, upstream):
    urls = [upstream.url(f"/echo?item={i}") for i in range(20)]

    async def main():
        async with Proxy(tmp_path / "a", redis_server.url) as a:
            first = [await a.get(url) for url in urls]
        async with Proxy(tmp_path / "b", redis_server.url) as b:
            second = [await b.get(url) for url in urls]
            again = [await b.get(url) for url in urls]
            counters = b.store.shared.counters
        return first, second, again, counters

    first, second, again, counters = asyncio.run(main())
    assert {a.source for a in first} == {Source.UPSTREAM}
    assert {a.source for a in second} == {Source.CACHE} == {a.source for a in again}
    assert [a.response.body for a in second] == [a.response.body for a in first]
    assert upstream.hits["/echo"] == 20  # proxy B made no call
    assert counters["shared_hits"] == 20  # the repeats were answered by B's own local tier
    with Store(tmp_path / "a", readonly=True) as a, Store(tmp_path / "b", readonly=True) as b, \
            SharedBulk(parse_shared_url(redis_server.url)) as shared:
        records_a, records_b = dict(a.records("http/")), dict(b.records("http/"))
        assert records_a == records_b and len(records_a) == 20
        assert shared.get_many(list(records_a)) == list(records_a.values())


def test_identical_misses_on_two_proxies_make_one_real_call(tmp_path, redis_server, upstream):
    url = upstream.url("/slow?seconds=0.5")

    async def main():
        async with Proxy(tmp_path / "a", redis_server.url) as a, Proxy(tmp_path / "b", redis_server.url) as b:
            answers = await asyncio.gather(*(proxy.get(url) for _ in range(16) for proxy in (a, b)))
            return answers, a.store.shared.counters + b.store.shared.counters

    answers, counters = asyncio.run(main())
    assert upstream.hits["/slow"] == 1
    assert all(a.response.status == 200 and a.response.body == b'{"slow": true}' for a in answers)
    sources = [a.source for a in answers]
    assert sources.count(Source.UPSTREAM) == 16 and sources.count(Source.CACHE) == 16
    assert counters["calls_saved"] == 1  # one waiting proxy; its 16 requests shared its one wait


def test_an_expired_lease_lets_the_next_proxy_go(tmp_path, redis_server, upstream):
    url = upstream.url("/echo?orphan=1")

    async def main():
        async with Proxy(tmp_path / "a", redis_server.url) as a:
            key = key_of(a, url)
            # the proxy that held this lease died: only the key with its TTL is left
            redis_server.cli("set", LEASE_PREFIX + key, "dead-proxy", "nx", "px", "400")
            started = time.monotonic()
            answer = await a.get(url)
            return answer, time.monotonic() - started

    answer, waited = asyncio.run(main())
    assert answer.source is Source.UPSTREAM and upstream.hits["/echo"] == 1
    assert 0.3 <= waited < 3.0


def test_waiting_on_a_live_holder_is_bounded(tmp_path, redis_server, upstream):
    url = upstream.url("/echo?stuck=1")

    async def main():
        async with Proxy(tmp_path / "a", redis_server.url, wait_limit=0.5) as a:
            key = key_of(a, url)
            redis_server.cli("set", LEASE_PREFIX + key, "slow-proxy", "nx", "ex", "60")
            started = time.monotonic()
            answer = await a.get(url)
            return answer, time.monotonic() - started, a.store.shared.counters

    answer, waited, counters = asyncio.run(main())
    assert answer.source is Source.UPSTREAM and 0.5 <= waited < 10  # not the lease's 60 s
    assert counters["lease_waits_timed_out"] == 1


def test_a_value_that_does_not_decode_is_a_miss_reported_and_replaced(tmp_path, redis_server, upstream, caplog):
    caplog.set_level(logging.WARNING, logger="stbproxy")
    url = upstream.url("/echo?damaged=1")

    async def main():
        async with Proxy(tmp_path / "a", redis_server.url) as a:
            key = key_of(a, url)
            redis_server.cli("set", key, "not an stbproxy record")
            answer = await a.get(url)
            await a.store.shared.flushed()
            return key, answer, a.store.shared.counters

    key, answer, counters = asyncio.run(main())
    assert answer.source is Source.UPSTREAM and counters["undecodable"] >= 1
    assert "is damaged" in caplog.text and "treated as a miss" in caplog.text
    assert redis_server.cli("get", key).startswith("STB1")


def test_requests_keep_being_answered_while_the_shared_tier_is_down(tmp_path, redis_server, upstream):
    async def main():
        async with Proxy(tmp_path / "a", redis_server.url) as a:
            await a.get(upstream.url("/echo?before=1"))
            redis_server.kill()
            during = [await a.get(upstream.url(f"/echo?during={i}")) for i in range(10)]
            repeat = await a.get(upstream.url("/echo?during=3"))
            redis_server.start()
            for _ in range(500):
                if a.store.shared.up:
                    break
                await asyncio.sleep(0.01)
            assert await a.store.shared.flushed(timeout=5)
            return during, repeat

    during, repeat = asyncio.run(main())
    assert all(a.response.status == 200 and a.source is Source.UPSTREAM for a in during)
    assert repeat.source is Source.CACHE  # the local tier kept it
    with SharedBulk(parse_shared_url(redis_server.url)) as shared:
        assert len(list(shared.keys(["http/"]))) == 10  # written while away, pushed on return


def test_replay_mode_reads_the_shared_tier_too(tmp_path, redis_server, upstream):
    url = upstream.url("/echo?replayed=1")

    async def main():
        async with Proxy(tmp_path / "a", redis_server.url) as a:
            await a.get(url)
        async with Proxy(tmp_path / "b", redis_server.url, mode=Mode.REPLAY) as b:
            return await b.get(url), await b.get(upstream.url("/echo?never=1"))

    hit, miss = asyncio.run(main())
    assert hit.source is Source.CACHE and miss.source is Source.MISS


def test_the_commands_view_reads_both_tiers(tmp_path, redis_server, upstream):
    async def main():
        async with Proxy(tmp_path / "a", redis_server.url) as a:
            await a.engine.handle(Request("GET", upstream.url("/echo?seen=a")), session="fleet-run")
        async with Proxy(tmp_path / "b", redis_server.url) as b:
            await b.engine.handle(Request("GET", upstream.url("/echo?seen=b")), session="fleet-run")

    asyncio.run(main())
    redis_server.cli("set", "http/h/GET/broken/1", "garbage")
    with TieredReader(Store(tmp_path / "a", readonly=True), SharedBulk(parse_shared_url(redis_server.url))) as view:
        assert view.session_names() == ["fleet-run"]
        records = list(view.session_records("fleet-run"))
        # Compact records name their request through the stored answer; b's comes from the shared tier.
        assert [view.get(r["key"]).request.url.rsplit("=", 1)[1] for r in records] == ["a", "b"]
        assert [r["seq"] for r in records] == [1, 1]  # each proxy numbers its own records
        entries = list(view.entries())
        assert sorted(e.request.url.rsplit("=", 1)[1] for e in entries) == ["a", "b"]
        assert len(view.damaged) == 1 and "broken" in view.damaged[0]
