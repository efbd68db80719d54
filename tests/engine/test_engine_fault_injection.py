"""Fault injection in the engine, against a real store and a real upstream on loopback: faulted
calls go to the simulator in virtual mode and are never stored as real, reach the client in
record mode, apply before the store in replay, spare hosts outside their scope, and are logged
with their rule."""

import json

import pytest

from stbproxy.models import Mode, Request, Source
from stbproxy.sim.faults import FaultPlan
from tests.engine.engine_helpers import CountingSimulator, engine_run, store  # noqa: F401


def test_faulted_calls_go_to_the_simulator_in_virtual_mode_and_are_never_stored_as_real(store, upstream):
    simulator = CountingSimulator()

    async def scenario(engine):
        return await engine.handle(Request("GET", upstream.url("/echo?f=1")))

    answer = engine_run(store, scenario, extra={"simulator": simulator, "faults": FaultPlan.from_specs(["down=1"])})
    assert answer.source is Source.SIMULATED and upstream.hits["/echo"] == 0
    assert "injected fault down=1" in json.loads(answer.response.body)["response"] or simulator.calls == 1
    assert store.get(answer.key).source is Source.SIMULATED


@pytest.mark.parametrize("spec,status", [("status=503", 503), ("status=401", 401), ("timeout", 504), ("refuse", 502),
                                         ("empty", 200), ("malformed", 200)])
def test_faults_reach_the_client_in_record_mode(store, upstream, spec, status):
    async def scenario(engine):
        return await engine.handle(Request("GET", upstream.url("/echo")))

    answer = engine_run(store, scenario, mode=Mode.RECORD, extra={"faults": FaultPlan.from_specs([spec])})
    assert answer.source is Source.INJECTED and answer.response.status == status
    assert answer.response.header("X-Stb-Source") == "injected" and answer.response.header("X-Stb-Fault")
    assert upstream.hits["/echo"] == 0 and store.get(answer.key) is None


def test_faults_apply_before_the_store_in_replay(store, upstream):
    async def record(engine):
        return await engine.handle(Request("GET", upstream.url("/echo?r=1")))

    engine_run(store, record, mode=Mode.RECORD)

    async def replay(engine):
        return await engine.handle(Request("GET", upstream.url("/echo?r=1")))

    answer = engine_run(store, replay, mode=Mode.REPLAY, extra={"faults": FaultPlan.from_specs(["status=500"])})
    assert answer.source is Source.INJECTED and answer.response.status == 500
    clean = engine_run(store, replay, mode=Mode.REPLAY)
    assert clean.source is Source.CACHE


def test_scoped_fault_spares_other_hosts(store, upstream):
    async def scenario(engine):
        return await engine.handle(Request("GET", upstream.url("/echo?s=1")))

    answer = engine_run(store, scenario, mode=Mode.RECORD,
                        extra={"faults": FaultPlan.from_specs(["status=503,host=*.rapidapi.com"])})
    assert answer.source is Source.UPSTREAM and answer.response.status == 200



def test_injected_failures_are_marked_with_their_rule(store, upstream):
    async def scenario(engine):
        return await engine.handle(Request("GET", upstream.url("/echo?m=1")), "run")

    answer = engine_run(store, scenario, mode=Mode.RECORD, extra={"faults": FaultPlan.from_specs(["status=503"])})
    logged = [ex for ex in store.scan("log/injected/")]
    assert answer.source is Source.INJECTED and [ex.meta.get("fault") for ex in logged] == ["status=503"]
