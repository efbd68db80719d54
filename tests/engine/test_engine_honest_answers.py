"""Honest answers from the engine, against a real store and real upstreams on loopback: transport
failures and untrusted certificates answered as errors (never simulated, never stored), where a
stored answer came from, and replay misses in the shape their client reads."""

import json

import pytest

from stbproxy.engine import Engine
from stbproxy.models import Mode, Request, Source
from stbproxy.upstream import Upstream, UpstreamConfig
from tests.engine.engine_helpers import DEAD, JSON, CountingSimulator, engine_run, run, store  # noqa: F401

# -- honest answers: transport failures, TLS set-up errors, origins ---------------------------


def test_record_mode_answers_a_transport_failure_as_an_error_and_stores_nothing(store):
    async def scenario(engine):
        return await engine.handle(Request("GET", DEAD), "rec")

    answer = engine_run(store, scenario, mode=Mode.RECORD)
    assert answer.source is Source.ERROR and answer.response.status == 502
    assert answer.response.header("X-Stb-Source") == "error" and answer.response.header("X-Stb-Origin") == "error"
    assert "upstream unreachable" in json.loads(answer.response.body)["error"]
    assert store.get(answer.key) is None and list(store.keys("log/")) == []  # nothing kept as an answer
    (record,) = store.session_records("rec")
    assert (record["source"], record["error"], record["key"], record["status"]) == ("error", "unreachable", "", 502)
    assert record["url"] == DEAD


def test_passthrough_failure_is_an_error_not_a_passthrough_answer(store):
    async def scenario(engine):
        return await engine.handle(Request("GET", DEAD), "s")

    answer = engine_run(store, scenario, passthrough=("127.0.0.1",))
    assert answer.source is Source.ERROR and answer.response.status == 502
    assert list(store.keys("log/")) == []


def test_an_untrusted_certificate_is_a_configuration_error_never_simulated(store, tls_upstream, caplog):
    simulator = CountingSimulator()

    async def scenario(engine):
        return [await engine.handle(Request("GET", tls_upstream.url("/echo")), "s") for _ in range(2)]

    caplog.set_level("WARNING", logger="stbproxy")
    answers = engine_run(store, scenario, extra={"simulator": simulator})
    assert simulator.calls == 0 and tls_upstream.requests == []
    for answer in answers:
        assert answer.source is Source.ERROR and answer.response.status == 502
        text = json.loads(answer.response.body)["error"]
        assert "127.0.0.1" in text and "--upstream-ca" in text and "--upstream-insecure" in text
    assert store.get(answers[0].key) is None and list(store.keys("log/")) == []
    assert [r["error"] for r in store.session_records("s")] == ["tls", "tls"]
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "--upstream-ca" in warnings[0].getMessage()  # once per host, without -v


def test_a_trusted_certificate_is_served_as_usual(store, tls_upstream, test_ca):
    async def main():
        upstream = Upstream(UpstreamConfig(ca_file=str(test_ca.ca_file)))
        try:
            return await Engine(store, upstream).handle(Request("GET", tls_upstream.url("/echo")))
        finally:
            await upstream.aclose()

    assert run(main()).source is Source.UPSTREAM


def test_a_hit_says_where_its_answer_came_from(store, upstream):
    simulator = CountingSimulator()

    async def scenario(engine):
        fresh = [await engine.handle(Request("GET", url)) for url in (DEAD, upstream.url("/echo"))]
        hits = [await engine.handle(Request("GET", url)) for url in (DEAD, upstream.url("/echo"))]
        return fresh, hits

    (simulated, real), (simulated_hit, real_hit) = engine_run(store, scenario, extra={"simulator": simulator})
    assert simulated.response.header("X-Stb-Origin") == "simulated" == simulated_hit.response.header("X-Stb-Origin")
    assert simulated_hit.response.header("X-Stb-Source") == "cache"
    assert simulated_hit.response.header("X-Stb-Simulator") == simulated.response.header("X-Stb-Simulator")
    assert real.response.header("X-Stb-Origin") == "upstream" == real_hit.response.header("X-Stb-Origin")
    assert real_hit.response.header("X-Stb-Simulator") is None


def test_hits_record_their_origin_in_the_session(store, upstream):
    simulator = CountingSimulator()

    async def scenario(engine):
        for _ in range(2):
            for url in (DEAD, upstream.url("/echo")):
                await engine.handle(Request("GET", url), "s")

    engine_run(store, scenario, extra={"simulator": simulator})
    records = store.session_records("s")
    assert [(r["source"], r.get("origin")) for r in records] == [
        ("simulated", None), ("upstream", None), ("cache", "simulated"), ("cache", "upstream")]


def test_simulator_off_names_the_call_unavailable_not_simulated_error(store):
    from stbproxy.sim.simulators import OffSimulator

    async def scenario(engine):
        return await engine.handle(Request("GET", DEAD))

    answer = engine_run(store, scenario, extra={"simulator": OffSimulator()})
    assert answer.source is Source.UNAVAILABLE and answer.response.header("X-Stb-Source") == "unavailable"
    assert list(store.keys("log/simulated-error/")) == [] and len(list(store.keys("log/unavailable/"))) == 1


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/chat/completions", "/v1/embeddings", "/v1/responses"])
def test_a_replay_miss_on_an_openai_endpoint_answers_in_the_openai_error_shape(store, path):
    async def scenario(engine):
        return await engine.handle(Request("POST", f"http://127.0.0.1:9{path}", JSON, b'{"model": "m"}'))

    miss = engine_run(store, scenario, mode=Mode.REPLAY)
    document = json.loads(miss.response.body)
    assert miss.response.status == 404 and set(document["error"]) >= {"message", "type", "code"}
    assert "no stored answer" in document["error"]["message"] and document["error"]["code"] == "replay_miss"


def test_a_replay_miss_elsewhere_keeps_its_own_shape(store):
    async def scenario(engine):
        return await engine.handle(Request("POST", "http://127.0.0.1:9/v1/tools/search", JSON, b"{}"))

    document = json.loads(engine_run(store, scenario, mode=Mode.REPLAY).response.body)
    assert document["error"].startswith("stbproxy replay") and "closest" in document
