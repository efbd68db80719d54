"""The simulators against a scripted OpenAI-compatible fake on loopback, a real store and
a catalog built here."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time

import pytest

from stbproxy import keys
from stbproxy.engine import Engine
from stbproxy.errors import ConfigError, UpstreamError
from stbproxy.kinds import kinds_for
from stbproxy.models import Exchange, Request, Response, Source
from stbproxy.sim.config import SimulatorConfig
from stbproxy.sim.llm_prompt import fit_examples, parse_reply
from stbproxy.sim.llm_simulator import MAX_ATTEMPTS, LlmSimulator
from stbproxy.sim.simulators import OffSimulator, SchemaSimulator, build_simulator
from stbproxy.stb import api_requests
from stbproxy.stb.catalog import ApiDoc, Catalog, Param
from stbproxy.store.embedded import Store
from stbproxy.synthesis.simulation import SimulationRequest
from tests.fakes.fake_openai import FakeOpenAI, HttpError, fake_openai  # noqa: F401

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


# -- a good reply and the prompt that asked for it ------------------------------------------------


def test_success_answers_the_response_value_and_counts_tokens(fake_openai, catalog, store):
    fake_openai.handler = lambda _r: GOOD
    [result] = run(simulate(llm(fake_openai, catalog, store), weather_job()))
    assert result.ok
    assert json.loads(result.response.body) == {"temperature": 17.5, "conditions": "light rain"}
    assert result.response.status == 200 and result.response.header("content-type") == "application/json"
    assert result.meta["simulator"] == "llm" and result.meta["model"] == "sim-model"
    assert result.meta["prompt_tokens"] > 0 and result.meta["completion_tokens"] > 0
    assert "error" not in result.meta


def test_prompt_carries_docs_params_template_and_the_call(fake_openai, catalog, store):
    fake_openai.handler = lambda _r: GOOD
    run(simulate(llm(fake_openai, catalog, store), weather_job("Oslo")))
    [request] = fake_openai.chat_requests()
    system = request["messages"][0]
    assert system["role"] == "system" and '"error"' in system["content"] and '"response"' in system["content"]
    prompt = user_prompt(request)
    for text in ("Sky Cast", "Forecasts and live readings", "Current Conditions", "The latest observation",
                 "city (STRING): City name", "units (STRING): metric or imperial [default: \"metric\"]",
                 '"conditions": "str"', '"station"', '{"city": "Oslo"}'):
        assert text in prompt, text
    assert request["model"] == "sim-model" and request["temperature"] == 0.0


def test_no_secret_reaches_the_backend(fake_openai, catalog, filled):
    fake_openai.handler = lambda _r: GOOD
    run(simulate(llm(fake_openai, catalog, filled), weather_job()))
    raw = fake_openai.requests[-1].body.decode()
    assert SECRET_KEY not in raw and SECRET_FIELD not in raw and "api_key" not in raw
    assert "X-RapidAPI" not in raw  # no headers at all


def test_examples_at_most_five_real_first(fake_openai, catalog, filled):
    fake_openai.handler = lambda _r: GOOD
    run(simulate(llm(fake_openai, catalog, filled), weather_job()))
    prompt = user_prompt(fake_openai.chat_requests()[0])
    assert prompt.count("arguments: {") == 5
    for city in ("Lima", "Pune", "Quito", "Bergen"):  # every real answer is shown...
        assert f"real-{city}" in prompt
    assert sum(f"sim-{c}" in prompt for c in ("Aaa", "Bbb", "Ccc")) == 1  # ...then one simulated
    assert "broken-Doha" not in prompt  # error answers are no examples


def test_examples_are_trimmed_to_the_budget(fake_openai, catalog, store):
    for i, city in enumerate(("Lima", "Pune", "Quito")):
        put(store, WEATHER, city, {"text": f"start-{city} " + "x" * 5000 * (i + 1)}, Source.UPSTREAM)
    fake_openai.handler = lambda _r: GOOD
    run(simulate(llm(fake_openai, catalog, store, example_budget=600), weather_job()))
    prompt = user_prompt(fake_openai.chat_requests()[0])
    examples = prompt.split("## Earlier calls and their answers")[1].split("## The new call")[0]
    assert all(f"start-{c}" in examples for c in ("Lima", "Pune", "Quito"))
    assert len(examples) < 600 + 3 * 40  # the budget plus the "Call n ..." labels


def test_fit_examples_keeps_short_ones_whole_and_stays_in_budget():
    examples = [("{}", "short"), ('{"q": "a"}', "y" * 3000), ("i" * 3000, "z" * 3000)]
    fitted = fit_examples(examples, 1000)
    assert fitted[0] == examples[0]
    assert sum(len(a) + len(b) for a, b in fitted) <= 1000
    assert fitted[1][0] == '{"q": "a"}' and fitted[1][1].endswith("...")
    assert fitted[2][1].startswith("z")  # a long input never crowds out the output
    assert fit_examples([], 100) == []


def test_unmapped_request_uses_method_url_and_body_as_docs(fake_openai, catalog, store):
    fake_openai.handler = lambda _r: json.dumps({"error": "", "response": "plain words"})
    request = Request("POST", "http://api.unknown.test/v2/orders?token_type=x",
                      (("Content-Type", "application/json"), ("Authorization", f"Bearer {SECRET_KEY}")),
                      json.dumps({"item": "lamp", "qty": 2, "apikey": SECRET_FIELD}).encode())
    job = SimulationRequest(request, keys.request_key(request), None, "timeout")
    [result] = run(simulate(llm(fake_openai, catalog, store), job))
    assert result.ok and result.response.body == b"plain words"
    assert result.response.header("content-type").startswith("text/plain")
    prompt = user_prompt(fake_openai.chat_requests()[0])
    assert "POST http://api.unknown.test/v2/orders?token_type=x" in prompt and '"item": "lamp"' in prompt
    raw = fake_openai.requests[-1].body.decode()
    assert SECRET_KEY not in raw and SECRET_FIELD not in raw and "Authorization" not in raw


def test_virtual_call_without_url_reads_args_from_the_stand_in(fake_openai, store):
    doc = ApiDoc(category="Data", tool="Quotes", api="Quote By Author", api_description="A quote by a person.",
                 required_parameters=(Param("author"),))
    request = api_requests.stored_request(doc.ref, doc, {"author": "Ana", "toolbench_key": SECRET_KEY})
    job = SimulationRequest(request, keys.api_key(doc.ref, {"author": "Ana"}), doc.ref, "no real API")
    fake_openai.handler = lambda _r: GOOD
    [result] = run(simulate(llm(fake_openai, Catalog([doc]), store), job))
    assert result.ok
    prompt = user_prompt(fake_openai.chat_requests()[0])
    assert "A quote by a person." in prompt and 'Arguments: {"author": "Ana"}' in prompt
    assert SECRET_KEY not in fake_openai.requests[-1].body.decode()


def test_model_error_text_goes_to_meta_and_body(fake_openai, catalog, store):
    fake_openai.handler = lambda _r: json.dumps({"error": "city is required", "response": ""})
    [result] = run(simulate(llm(fake_openai, catalog, store), weather_job()))
    assert result.ok and result.meta["error"] == "city is required"
    assert json.loads(result.response.body) == {"error": "city is required", "response": ""}


# -- bad replies ------------------------------------------------------------------------------------


@pytest.mark.parametrize("reply, reason", [
    ("", "empty reply"),
    ("I am sorry, I cannot help with that.", "not JSON"),
    (json.dumps({"result": {"temperature": 3}}), "'error' and 'response'"),
    (json.dumps([{"error": "", "response": 1}]), "'error' and 'response'"),
    (json.dumps({"error": "", "response": ""}), "neither a response nor an error"),
    (json.dumps({"error": "", "response": "x" * 200_000}), "cap"),
    ({"id": "x", "object": "chat.completion", "choices": []}, "no message content"),  # the whole HTTP body
])
def test_bad_replies_are_retried_then_fail(fake_openai, catalog, store, caplog, reply, reason):
    fake_openai.handler = lambda _r: reply
    with caplog.at_level(logging.WARNING, logger="stbproxy"):
        [result] = run(simulate(llm(fake_openai, catalog, store), weather_job()))
    assert not result.ok
    assert fake_openai.calls == MAX_ATTEMPTS
    body = json.loads(result.response.body)
    assert body["response"] == "" and body["error"].startswith("Failed to simulate Weather/")
    assert reason in body["error"]
    assert sum(reason in r.getMessage() for r in caplog.records) >= MAX_ATTEMPTS


def virtual_job(city: str = "Oslo") -> SimulationRequest:
    """weather_job as a /virtual call: the names its client wrote travel with it."""
    from dataclasses import replace

    return replace(weather_job(city), names={"category": "Weather", "tool_name": "Sky Cast", "api_name": "current"})


def test_a_virtual_call_without_a_usable_reply_gets_stabletoolbench_s_failure(fake_openai, catalog, store):
    """StableToolBench's server asks three times, then answers this object (its client sees
    nothing else); stbproxy's own words stay in its log."""
    fake_openai.handler = lambda _r: "I am sorry, I cannot help with that."
    [result] = run(simulate(llm(fake_openai, catalog, store), virtual_job()))
    assert not result.ok and fake_openai.calls == MAX_ATTEMPTS
    assert json.loads(result.response.body) == {"error": "Failed to generate fake response", "response": ""}


def test_a_virtual_call_whose_model_cannot_be_reached_gets_stabletoolbench_s_500(catalog, store):
    from stbproxy.stb.bodies import VIRTUAL_STATUS

    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sim = LlmSimulator(SimulatorConfig(name="llm", base_url=f"http://127.0.0.1:{port}/v1", api_key="k",
                                       max_retries=0), catalog, store)
    [result] = run(simulate(sim, virtual_job()))
    assert not result.ok and result.meta[VIRTUAL_STATUS] == 500 and "cannot connect" in result.meta["cause"]
    assert (result.response.status, result.response.body) == (500, b"Internal Server Error")


def test_a_bad_reply_then_a_good_one_succeeds(fake_openai, catalog, store):
    replies = iter(["not json", "```json\n" + GOOD + "\n```"])  # code fences are stripped
    fake_openai.handler = lambda _r: next(replies)
    [result] = run(simulate(llm(fake_openai, catalog, store), weather_job()))
    assert result.ok and result.meta["attempts"] == 2 and fake_openai.calls == 2
    assert json.loads(result.response.body)["conditions"] == "light rain"


@pytest.mark.parametrize("text", [
    "```\n" + GOOD + "\n```", "Here you go:\n```json\n" + GOOD + "\n```\nEnjoy.", "Sure! " + GOOD])
def test_parse_reply_accepts_fenced_or_wrapped_json(text):
    assert parse_reply(text) == ("", {"temperature": 17.5, "conditions": "light rain"})


# -- LLM errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize("status, words", [(401, "credentials"), (429, "HTTP 429"), (500, "HTTP 500")])
def test_llm_http_errors_end_quickly_as_failed(fake_openai, catalog, store, caplog, status, words):
    fake_openai.handler = lambda _r: HttpError(status, "nope, key sk-abc...xyz")
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="stbproxy"):
        [result] = run(simulate(llm(fake_openai, catalog, store), weather_job()))
    assert time.monotonic() - started < 3
    assert not result.ok and fake_openai.calls == 1  # max_retries=0, and no loop of our own
    error = json.loads(result.response.body)["error"]
    assert words in error and any(words in r.getMessage() for r in caplog.records)
    if status == 401:
        assert "sk-abc" not in error and "sk-abc" not in caplog.text


def test_client_retries_are_the_configured_ones(fake_openai, catalog, store):
    fake_openai.handler = lambda _r: HttpError(500)
    [result] = run(simulate(llm(fake_openai, catalog, store, max_retries=1), weather_job()))
    assert not result.ok and fake_openai.calls == 2


def test_refused_connection_ends_as_failed(catalog, store):
    with socket.socket() as s:  # a port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sim = LlmSimulator(SimulatorConfig(name="llm", base_url=f"http://127.0.0.1:{port}/v1", api_key="k",
                                       max_retries=0), catalog, store)
    started = time.monotonic()
    [result] = run(simulate(sim, weather_job()))
    assert time.monotonic() - started < 3
    assert not result.ok and "cannot connect" in json.loads(result.response.body)["error"]


def test_slow_backend_times_out(fake_openai, catalog, store):
    fake_openai.handler = lambda _r: GOOD
    fake_openai.latency = 1.5
    started = time.monotonic()
    [result] = run(simulate(llm(fake_openai, catalog, store, timeout=0.3), weather_job()))
    assert time.monotonic() - started < 1.4
    assert not result.ok and "did not answer within 0.3 s" in json.loads(result.response.body)["error"]


# -- JSON mode ----------------------------------------------------------------------------------------


def test_json_mode_is_asked_for(fake_openai, catalog, store):
    fake_openai.handler = lambda _r: GOOD
    run(simulate(llm(fake_openai, catalog, store), weather_job()))
    assert fake_openai.chat_requests()[0]["response_format"] == {"type": "json_object"}


def test_json_mode_rejection_falls_back_and_is_remembered(fake_openai, catalog, store):
    def handler(request):
        if "response_format" in request:
            return HttpError(400, "response_format is not supported by this model")
        return GOOD

    fake_openai.handler = handler

    async def twice(sim):
        try:
            first = await sim.simulate(weather_job("Oslo"))
            second = await sim.simulate(weather_job("Rome"))
            return first, second
        finally:
            await sim.aclose()

    first, second = run(twice(llm(fake_openai, catalog, store)))
    assert first.ok and second.ok
    sent = fake_openai.chat_requests()
    assert ["response_format" in r for r in sent] == [True, False, False]


def test_a_400_not_about_json_mode_fails_and_keeps_json_mode(fake_openai, catalog, store):
    fake_openai.handler = lambda _r: HttpError(400, "context length exceeded")
    sim = llm(fake_openai, catalog, store)
    [result] = run(simulate(sim, weather_job()))
    assert not result.ok and "context length exceeded" in json.loads(result.response.body)["error"]
    assert sim._json_mode


# -- concurrency ------------------------------------------------------------------------------------


class InFlight:
    """A handler that takes ``seconds`` and counts how many calls overlap."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.now = self.peak = 0
        self.lock = threading.Lock()

    def __call__(self, _request):
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        time.sleep(self.seconds)
        with self.lock:
            self.now -= 1
        return GOOD


def test_distinct_simulations_run_together(fake_openai, catalog, store):
    fake_openai.handler = counter = InFlight(0.5)
    sim = llm(fake_openai, catalog, store, concurrency=8)

    async def timed():
        # Open the connections first: the client's first call is slow, and the fake's small
        # listen backlog can delay a burst of new connections by a SYN retry (1 s).
        await asyncio.gather(*(sim.simulate(weather_job(f"warm-up{i}")) for i in range(8)))
        counter.peak = 0
        started = time.monotonic()
        results = await simulate(sim, *(weather_job(f"city{i}") for i in range(8)))
        return results, time.monotonic() - started

    results, seconds = run(timed())
    assert seconds < 2.0  # one after another would take 4 s
    assert all(r.ok for r in results) and counter.peak == 8


def test_concurrency_is_capped(fake_openai, catalog, store):
    fake_openai.handler = counter = InFlight(0.3)
    jobs = [weather_job(f"city{i}") for i in range(7)]
    started = time.monotonic()
    results = run(simulate(llm(fake_openai, catalog, store, concurrency=3), *jobs))
    assert time.monotonic() - started >= 0.9  # three waves of at most three
    assert all(r.ok for r in results) and counter.peak == 3


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


# -- through the engine -------------------------------------------------------------------------------


class RefusingUpstream:
    async def send(self, request):
        raise UpstreamError("connection refused")


def test_engine_stores_good_simulations_with_tokens_and_never_failed_ones(fake_openai, catalog, store):
    replies = iter([GOOD, "no JSON here"] + ["still none"] * 2)
    fake_openai.handler = lambda _r: next(replies)
    sim = llm(fake_openai, catalog, store)

    async def two_calls():
        engine = Engine(store, RefusingUpstream(), simulator=sim, kinds=kinds_for(catalog))
        try:
            good = await engine.handle(weather_job("Oslo").request)
            bad = await engine.handle(weather_job("Rome").request)
            return good, bad
        finally:
            await sim.aclose()

    good, bad = run(two_calls())
    assert good.response.header("X-Stb-Source") == "simulated"
    assert bad.response.header("X-Stb-Source") == "simulated-error"
    stored = list(store.scan("api/"))
    assert [ex.key for ex in stored] == [good.key]
    assert stored[0].meta["model"] == "sim-model" and stored[0].meta["prompt_tokens"] > 0
    assert SECRET_KEY not in repr(stored[0].request) and SECRET_FIELD not in repr(stored[0].request)
    assert store.get(bad.key) is None  # the next request tries again
