"""What the engine's tests share: a store in a temporary folder, an engine run against a real
upstream client, and a simulator that counts its calls."""

import asyncio
import json

import pytest

from stbproxy.engine import Engine, EngineConfig
from stbproxy.models import Mode, Response
from stbproxy.store.embedded import Store
from stbproxy.synthesis.simulation import Simulation
from stbproxy.upstream import Upstream, UpstreamConfig

JSON = (("Content-Type", "application/json"),)
DEAD = "http://127.0.0.1:9/nothing-listens-here"  # the discard port: connection refused


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store") as db:
        yield db


def run(coro):
    return asyncio.run(coro)


def engine_run(store, scenario, mode=Mode.VIRTUAL, extra=None, **config):
    async def main():
        upstream = Upstream(UpstreamConfig(timeout=config.pop("timeout", 5.0)))
        engine = Engine(store, upstream, EngineConfig(mode=mode, **config), **(extra or {}))
        try:
            return await scenario(engine)
        finally:
            await upstream.aclose()

    return run(main())


class CountingSimulator:
    def __init__(self):
        self.calls = 0

    async def simulate(self, job):
        self.calls += 1
        await asyncio.sleep(0.2)
        body = json.dumps({"error": "", "response": f"simulated for {job.reason[:20]}"}).encode()
        return Simulation(Response(200, JSON, body), ok=True, meta={"model": "test"})

