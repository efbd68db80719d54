"""Validity by kind of traffic in the engine, against a real store and a real upstream on
loopback: plain HTTP answers are judged by their status, catalog-routed calls keep
StableToolBench's rules by default, and a validity setting forces one policy for all traffic."""

import pytest

from stbproxy.kinds import kinds_for
from stbproxy.models import Request, Source
from stbproxy.stb.catalog import ApiDoc, Catalog, Param
from tests.engine.engine_helpers import CountingSimulator, engine_run, store  # noqa: F401


def echo_catalog(base: str) -> Catalog:
    return Catalog([ApiDoc(category="Search", tool="Shop", api="Search products", url=f"{base}/echo/{{item}}",
                           method="GET", required_parameters=(Param("item", "STRING"),))])


def test_plain_http_answers_are_judged_by_status_so_a_200_mentioning_500_is_kept(store, upstream):
    simulator = CountingSimulator()

    async def scenario(engine):
        return await engine.handle(Request("GET", upstream.url("/echo?q=cost+500+usd+parameter")))

    answer = engine_run(store, scenario, extra={"simulator": simulator})
    assert answer.source is Source.UPSTREAM and simulator.calls == 0
    assert store.get(answer.key).source is Source.UPSTREAM


def test_catalog_routed_calls_keep_stabletoolbench_rules_by_default(store, upstream):
    simulator = CountingSimulator()

    async def scenario(engine):
        return await engine.handle(Request("GET", upstream.url("/echo/shoes?q=cost+500+usd")))

    answer = engine_run(store, scenario,
                        extra={"simulator": simulator, "kinds": kinds_for(echo_catalog(upstream.base))})
    assert answer.key.startswith("api/") and answer.source is Source.SIMULATED and simulator.calls == 1


@pytest.mark.parametrize("policy,source", [("stb", Source.SIMULATED), ("strict", Source.UPSTREAM)])
def test_a_validity_setting_forces_one_policy_for_all_traffic(store, upstream, policy, source):
    async def scenario(engine):
        return await engine.handle(Request("GET", upstream.url("/echo?q=cost+500+usd")))

    assert engine_run(store, scenario, validity=policy, extra={"simulator": CountingSimulator()}).source is source
