"""The offline simulators and the choice of simulator: the schema simulator following a
template or a real answer's shape deterministically, the off simulator's clear error, which
simulator a configuration and its environment choose, and bad configurations refused."""

from __future__ import annotations

import json

import pytest

from stbproxy import keys
from stbproxy.errors import ConfigError
from stbproxy.models import Request, Source
from stbproxy.sim.config import SimulatorConfig
from stbproxy.sim.llm_simulator import LlmSimulator
from stbproxy.sim.simulators import OffSimulator, SchemaSimulator, build_simulator
from stbproxy.synthesis.simulation import SimulationRequest
from tests.sim.simulator_helpers import BARE, catalog, put, run, store, weather_job  # noqa: F401

# -- offline simulators -----------------------------------------------------------------------------


def test_schema_simulator_follows_the_template_deterministically(catalog, store):
    first = run(SchemaSimulator(catalog, store).simulate(weather_job("Oslo")))
    again = run(SchemaSimulator(catalog, store).simulate(weather_job("Oslo")))
    other = run(SchemaSimulator(catalog, store).simulate(weather_job("Rome")))
    assert first.ok and first.meta == {"simulator": "schema"}
    assert first.response.body == again.response.body
    answer = json.loads(first.response.body)
    assert set(answer) == {"temperature", "conditions", "station"} and set(answer["station"]) == {"id"}
    assert isinstance(answer["temperature"], float)
    assert other.response.body != first.response.body


def test_schema_simulator_borrows_the_shape_of_a_real_answer(catalog, store):
    put(store, BARE, "x", {"quote": "Be kind", "author": "Ana"}, Source.UPSTREAM)
    job = SimulationRequest(Request("GET", "https://quotes.example/random?city=y"),
                            keys.api_key(BARE.ref, {"city": "y"}), BARE.ref, "down")
    result = run(SchemaSimulator(catalog, store).simulate(job))
    assert result.ok and set(json.loads(result.response.body)) == {"quote", "author"}


def test_schema_simulator_without_docs_or_examples_answers_small_json(store):
    request = Request("GET", "http://nowhere.test/thing")
    job = SimulationRequest(request, keys.request_key(request), None, "refused")
    result = run(SchemaSimulator(None, store).simulate(job))
    assert result.ok and isinstance(json.loads(result.response.body), dict)


def test_off_simulator_answers_a_clear_error():
    result = run(OffSimulator().simulate(weather_job()))
    assert not result.ok and result.meta == {"simulator": "off"}
    assert "simulation is off" in json.loads(result.response.body)["error"]


# -- configuration ----------------------------------------------------------------------------------


@pytest.mark.parametrize("config, env, kind", [
    (SimulatorConfig(), {}, "schema"),
    (SimulatorConfig(), {"OPENAI_API_KEY": "k"}, "llm"),
    (SimulatorConfig(), {"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}, "llm"),
    (SimulatorConfig(model="m"), {}, "llm"),
    (SimulatorConfig(name="off"), {"OPENAI_API_KEY": "k"}, "off"),
    (SimulatorConfig(name="schema", model="m"), {}, "schema"),
])
def test_chosen_simulator(config, env, kind):
    assert config.chosen(env) == kind


@pytest.mark.parametrize("bad", [dict(name="gpt"), dict(concurrency=0), dict(temperature=3.0),
                                 dict(timeout=0), dict(max_tokens=0)])
def test_bad_config_is_refused(bad):
    with pytest.raises(ConfigError):
        SimulatorConfig(**bad)


def test_build_simulator(catalog, store, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert isinstance(build_simulator(SimulatorConfig(), catalog, store), SchemaSimulator)
    assert isinstance(build_simulator(SimulatorConfig(name="off"), catalog, store), OffSimulator)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        build_simulator(SimulatorConfig(name="llm"), catalog, store)
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")  # keyless self-hosted backend
    sim = build_simulator(SimulatorConfig(), catalog, store)
    assert isinstance(sim, LlmSimulator)
    run(sim.aclose())
