"""The calling rules, against a real store and a real upstream on loopback: virtual, record and
replay modes, upstream failures, concurrent misses, passthrough hosts, redaction in the store,
bodies (capped, compressed, binary), stored simulations, and simulated answers refreshed once the
API is back."""

import asyncio
import json

import pytest

from stbproxy.models import Mode, Request, Source
from stbproxy.sim.faults import FaultPlan
from tests.engine.engine_helpers import DEAD, CountingSimulator, engine_run, store  # noqa: F401


def test_virtual_miss_goes_upstream_then_hits(store, upstream):
    url = upstream.url("/echo?b=2&a=1")

    async def scenario(engine):
        first = await engine.handle(Request("GET", url))
        second = await engine.handle(Request("GET", upstream.url("/echo?a=1&b=2")))
        return first, second

    first, second = engine_run(store, scenario)
    assert first.source is Source.UPSTREAM and second.source is Source.CACHE
    assert first.response.header("X-Stb-Source") == "upstream"
    assert second.response.header("X-Stb-Source") == "cache"
    assert second.response.body == first.response.body
    assert second.response.header("X-Demo") == "yes"
    assert upstream.hits["/echo"] == 1
    stored = store.get(first.key)
    assert stored.source is Source.UPSTREAM and stored.upstream_seconds > 0 and stored.meta["failure"] == "success"


def test_record_always_calls_upstream_and_overwrites(store, upstream):
    async def scenario(engine):
        return [await engine.handle(Request("GET", upstream.url("/echo"))) for _ in range(2)]

    answers = engine_run(store, scenario, mode=Mode.RECORD)
    assert [a.source for a in answers] == [Source.UPSTREAM, Source.UPSTREAM]
    assert upstream.hits["/echo"] == 2
    assert json.loads(store.get(answers[0].key).response.body)["calls"] == 2


def test_record_stores_error_statuses_but_virtual_does_not(store, upstream):
    async def scenario(engine):
        return await engine.handle(Request("GET", upstream.url("/status/503")))

    recorded = engine_run(store, scenario, mode=Mode.RECORD)
    assert recorded.response.status == 503 and store.get(recorded.key) is not None
    store.delete(recorded.key)
    virtual = engine_run(store, scenario)
    assert virtual.source is Source.UNAVAILABLE  # no simulator is on: named for what it is
    assert "HTTP 503" in json.loads(virtual.response.body)["error"]
    assert store.get(virtual.key) is None


def test_keep_status_keeps_a_listed_4xx_as_a_real_answer_in_virtual_mode(store, upstream):
    async def scenario(engine):
        return [await engine.handle(Request("GET", upstream.url(f"/status/{code}"))) for code in (404, 410, 404)]

    replaced, gone, _ = engine_run(store, scenario)  # by default a real 404 is replaced (no simulator: unavailable)
    assert replaced.source is gone.source is Source.UNAVAILABLE and store.get(replaced.key) is None
    kept, still_replaced, hit = engine_run(store, scenario, keep_status=frozenset({404}))
    assert kept.source is Source.UPSTREAM and kept.response.status == 404
    stored = store.get(kept.key)
    assert stored.source is Source.UPSTREAM and stored.response.status == 404 and stored.meta["failure"] == "not_found"
    assert hit.source is Source.CACHE and hit.response.status == 404 and hit.response.body == kept.response.body
    assert still_replaced.source is Source.UNAVAILABLE  # 410 was not listed
    assert upstream.hits["/status/404"] == 3  # twice unstored, then once: the kept one's repeat was a hit


def test_replay_never_touches_the_network_and_explains_a_miss(store, upstream):
    async def record(engine):
        return await engine.handle(Request("GET", upstream.url("/echo?city=Paris&units=metric")))

    engine_run(store, record, mode=Mode.RECORD)
    upstream.stop()

    async def replay(engine):
        hit = await engine.handle(Request("GET", upstream.url("/echo?units=metric&city=Paris")))
        miss = await engine.handle(Request("GET", upstream.url("/echo?city=Rome&units=metric")))
        return hit, miss

    hit, miss = engine_run(store, replay, mode=Mode.REPLAY)
    assert hit.source is Source.CACHE and hit.response.status == 200
    assert miss.response.status == 404 and miss.response.header("X-Stb-Source") == "miss"
    explanation = json.loads(miss.response.body)
    assert explanation["closest"]["differences"] == [{"part": "query:city", "stored": "Paris", "got": "Rome"}]
    assert upstream.hits["/echo"] == 1


def test_replay_miss_with_empty_store_says_so(store):
    async def scenario(engine):
        return await engine.handle(Request("GET", DEAD))

    miss = engine_run(store, scenario, mode=Mode.REPLAY)
    assert miss.response.status == 404 and json.loads(miss.response.body)["closest"] is None


@pytest.mark.parametrize("path,kind", [("/slow?seconds=3", "timed out"), ("/reset", "garbage or reset"),
                                       ("/garbage", "garbage or reset")])
def test_upstream_failures_go_to_the_simulator_in_virtual_mode(store, upstream, path, kind):
    async def scenario(engine):
        return await engine.handle(Request("GET", upstream.url(path)))

    answer = engine_run(store, scenario, timeout=0.5)
    assert answer.source is Source.UNAVAILABLE and answer.response.status == 200
    document = json.loads(answer.response.body)
    assert kind in document["error"] and document["response"] == ""
    assert store.get(answer.key) is None


def test_unreachable_upstream_in_record_mode_answers_502(store):
    async def scenario(engine):
        return await engine.handle(Request("GET", DEAD))

    answer = engine_run(store, scenario, mode=Mode.RECORD)
    assert answer.response.status == 502 and "unreachable" in json.loads(answer.response.body)["error"]
    assert store.get(answer.key) is None


def test_identical_concurrent_misses_make_one_upstream_call(store, upstream):
    async def scenario(engine):
        requests = [Request("GET", upstream.url("/slow?seconds=0.5")) for _ in range(20)]
        return await asyncio.gather(*(engine.handle(r) for r in requests))

    answers = engine_run(store, scenario)
    assert upstream.hits["/slow"] == 1
    assert {a.response.body for a in answers} == {b'{"slow": true}'}


def test_distinct_concurrent_misses_run_in_parallel(store, upstream):
    async def scenario(engine):
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.gather(*(engine.handle(Request("GET", upstream.url(f"/slow?seconds=0.5&n={i}")))
                               for i in range(10)))
        return loop.time() - started

    elapsed = engine_run(store, scenario)
    assert upstream.hits["/slow"] == 10
    assert elapsed < 3.0  # ten 0.5 s calls one after another would take 5 s


def test_passthrough_hosts_are_forwarded_every_time_and_logged_redacted(store, upstream):
    async def scenario(engine):
        request = Request("GET", upstream.url("/echo"), (("Authorization", "Bearer sk-secret-value"),))
        return [await engine.handle(request) for _ in range(2)]

    answers = engine_run(store, scenario, passthrough=("127.0.0.1",))
    assert [a.source for a in answers] == [Source.PASSTHROUGH, Source.PASSTHROUGH]
    assert upstream.hits["/echo"] == 2
    logged = list(store.scan("log/passthrough/"))
    assert len(logged) == 2 and not list(store.keys("http/"))
    assert all(b"sk-secret-value" not in json.dumps(e.request.headers).encode() for e in logged)


def test_secrets_are_redacted_in_the_store_even_when_echoed(store, upstream):
    async def scenario(engine):
        return await engine.handle(Request("GET", upstream.url("/echoheader?api_key=qk-123456789"),
                                           (("X-RapidAPI-Key", "rk-abcdefgh"),)))

    answer = engine_run(store, scenario)
    assert b"rk-abcdefgh" in answer.response.body  # the client still gets the real answer
    stored = store.get(answer.key)
    everything = stored.request.url + json.dumps(stored.request.headers) + json.dumps(stored.response.headers)
    assert "rk-abcdefgh" not in everything and "qk-123456789" not in everything
    assert b"rk-abcdefgh" not in stored.response.body


def test_bodies_over_the_cap_are_forwarded_not_stored(store, upstream):
    async def scenario(engine):
        return await engine.handle(Request("GET", upstream.url("/big?bytes=5000")))

    answer = engine_run(store, scenario, max_body_bytes=1000)
    assert len(answer.response.body) == 5000 and answer.source is Source.UPSTREAM
    assert store.get(answer.key) is None


def test_compressed_upstream_bodies_are_stored_decoded(store, upstream):
    async def scenario(engine):
        return await engine.handle(Request("GET", upstream.url("/gzip")))

    answer = engine_run(store, scenario)
    assert answer.response.body == b'{"compressed": true}'
    assert answer.response.header("Content-Encoding") is None


def test_binary_and_non_utf8_bodies_round_trip(store, upstream):
    async def scenario(engine):
        first = await engine.handle(Request("POST", upstream.url("/binary"), (), b"\xff\xfe\x00"))
        second = await engine.handle(Request("POST", upstream.url("/binary"), (), b"\xff\xfe\x00"))
        return first, second

    first, second = engine_run(store, scenario)
    assert second.source is Source.CACHE and second.response.body == bytes(range(256)) * 4 == first.response.body


def test_successful_simulations_are_stored_as_simulated_and_shared(store):
    simulator = CountingSimulator()

    async def scenario(engine):
        answers = await asyncio.gather(*(engine.handle(Request("GET", DEAD)) for _ in range(5)))
        again = await engine.handle(Request("GET", DEAD))
        return answers, again

    answers, again = engine_run(store, scenario, extra={"simulator": simulator})
    assert simulator.calls == 1
    assert {a.source for a in answers} == {Source.SIMULATED} and again.source is Source.CACHE
    stored = store.get(again.key)
    assert stored.source is Source.SIMULATED and stored.meta == {"model": "test", "failure": "not_connected"}


# -- simulated answers do not hide real ones for good -------------------------------------------------
def test_refresh_simulated_replaces_a_simulated_answer_once_the_api_is_back(store, upstream):
    url = upstream.url("/echo?r=back")

    async def outage(engine):
        return await engine.handle(Request("GET", url))

    # The API "is down": the call is faulted, so the simulator answers and it is stored.
    down = engine_run(store, outage,
                      extra={"simulator": CountingSimulator(), "faults": FaultPlan.from_specs(["down=1"])})
    assert down.source is Source.SIMULATED and store.get(down.key).meta["fault"] == "down=1"
    # Without --refresh-simulated the simulated answer is served for good.
    assert engine_run(store, outage).source is Source.CACHE and upstream.hits["/echo"] == 0
    back = engine_run(store, outage, refresh_simulated=True)
    assert back.source is Source.UPSTREAM and upstream.hits["/echo"] == 1
    stored = store.get(down.key)
    assert stored.source is Source.UPSTREAM and stored.meta["replaced"] == "simulated"
    assert engine_run(store, outage, refresh_simulated=True).source is Source.CACHE and upstream.hits["/echo"] == 1


def test_refresh_simulated_keeps_the_simulated_answer_when_the_real_one_is_invalid(store, upstream):
    url = upstream.url("/status/503")

    async def call(engine):
        return await engine.handle(Request("GET", url))

    first = engine_run(store, call, extra={"simulator": CountingSimulator()})
    assert first.source is Source.SIMULATED and upstream.hits["/status/503"] == 1

    async def twice(engine):
        return [await engine.handle(Request("GET", url)) for _ in range(2)]

    answers = engine_run(store, twice, refresh_simulated=True)
    # Asked again once (the second hit falls within the retry interval), still invalid: kept.
    assert [a.source for a in answers] == [Source.CACHE, Source.CACHE] and upstream.hits["/status/503"] == 2
    assert store.get(first.key).source is Source.SIMULATED
