"""The LLM simulator against a scripted OpenAI-compatible fake on loopback, a real store and a
catalog built here: a good reply and the prompt that asked for it (docs, examples, no secrets),
simulations running together up to the cap, and an engine storing good simulations only."""

from __future__ import annotations

import asyncio
import json
import threading
import time

from stbproxy import keys
from stbproxy.engine import Engine
from stbproxy.errors import UpstreamError
from stbproxy.kinds import kinds_for
from stbproxy.models import Request, Source
from stbproxy.sim.llm_prompt import fit_examples
from stbproxy.stb import api_requests
from stbproxy.stb.catalog import ApiDoc, Catalog, Param
from stbproxy.synthesis.simulation import SimulationRequest
from tests.fakes.fake_openai import fake_openai  # noqa: F401
from tests.sim.simulator_helpers import (  # noqa: F401
    GOOD,
    SECRET_FIELD,
    SECRET_KEY,
    WEATHER,
    catalog,
    filled,
    llm,
    put,
    run,
    simulate,
    store,
    user_prompt,
    weather_job,
)

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
