"""What the simulator tests share: a documented API and a bare one, a catalog and a store
(optionally filled with real and simulated answers), a call with secrets in it, and an LLM
simulator pointed at the OpenAI-compatible fake."""

from __future__ import annotations

import asyncio
import json

import pytest

from stbproxy import keys
from stbproxy.models import Exchange, Request, Response, Source
from stbproxy.sim.config import SimulatorConfig
from stbproxy.sim.llm_simulator import LlmSimulator
from stbproxy.stb.catalog import ApiDoc, Catalog, Param
from stbproxy.store.embedded import Store
from stbproxy.synthesis.simulation import SimulationRequest
from tests.fakes.fake_openai import FakeOpenAI

WEATHER = ApiDoc(
    category="Weather", tool="Sky Cast", api="Current Conditions",
    url="https://sky-cast.p.rapidapi.com/current", method="GET",
    tool_description="Forecasts and live readings from 4,000 stations.",
    api_description="The latest observation for a city.",
    required_parameters=(Param("city", "STRING", "City name, e.g. Lisbon"),),
    optional_parameters=(Param("units", "STRING", "metric or imperial", "metric"),),
    template_response={"temperature": "float", "conditions": "str", "station": {"id": "str"}},
)
BARE = ApiDoc(category="Data", tool="Quotes", api="Random Quote", url="https://quotes.example/random",
              method="GET")
SECRET_KEY = "rk-TOP-SECRET-0042"
SECRET_FIELD = "qs-SECRET-VALUE-77"
GOOD = json.dumps({"error": "", "response": {"temperature": 17.5, "conditions": "light rain"}})


def run(coro):
    return asyncio.run(coro)


def weather_job(city: str = "Oslo") -> SimulationRequest:
    request = Request("GET", f"https://sky-cast.p.rapidapi.com/current?city={city}&api_key={SECRET_FIELD}",
                      (("X-RapidAPI-Key", SECRET_KEY), ("X-RapidAPI-Host", "sky-cast.p.rapidapi.com")))
    return SimulationRequest(request, keys.api_key(WEATHER.ref, {"city": city}), WEATHER.ref, "connection refused")


def put(store: Store, doc: ApiDoc, city: str, body, source: Source, status: int = 200) -> None:
    body = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = Request("GET", f"{doc.url}?city={city}")
    store.put(Exchange(keys.api_key(doc.ref, {"city": city}), request,
                       Response(status, (("Content-Type", "application/json"),), body), source, 0.0, api=doc.ref))


@pytest.fixture
def catalog() -> Catalog:
    return Catalog([WEATHER, BARE])


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store") as db:
        yield db


@pytest.fixture
def filled(store):
    """Seven stored answers of WEATHER: 3 upstream, 1 imported, 3 simulated; plus a 500."""
    for city in ("Lima", "Pune", "Quito"):
        put(store, WEATHER, city, {"temperature": 21.0, "conditions": f"real-{city}"}, Source.UPSTREAM)
    put(store, WEATHER, "Bergen", {"temperature": 4.0, "conditions": "real-Bergen"}, Source.IMPORTED)
    for city in ("Aaa", "Bbb", "Ccc"):
        put(store, WEATHER, city, {"temperature": 1.0, "conditions": f"sim-{city}"}, Source.SIMULATED)
    put(store, WEATHER, "Doha", {"message": "broken-Doha"}, Source.UPSTREAM, status=500)
    return store


def llm(server: FakeOpenAI, catalog, store, **config) -> LlmSimulator:
    config.setdefault("max_retries", 0)
    return LlmSimulator(SimulatorConfig(name="llm", model="sim-model", base_url=server.base_url,
                                        api_key="test-key", **config), catalog, store)


async def simulate(sim, *jobs):
    try:
        return await asyncio.gather(*(sim.simulate(j) for j in jobs))
    finally:
        await sim.aclose()


def user_prompt(request: dict) -> str:
    return next(m["content"] for m in request["messages"] if m["role"] == "user")
