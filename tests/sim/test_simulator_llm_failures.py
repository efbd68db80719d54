"""How the LLM simulator fails, against a scripted OpenAI-compatible fake on loopback, a real
store and a catalog built here: bad replies retried then failed (as StableToolBench fails a
/virtual call), replies read through code fences, HTTP errors, refused connections and timeouts
of the model, and JSON mode asked for, dropped when refused and remembered."""

from __future__ import annotations

import json
import logging
import socket
import time

import pytest

from stbproxy.sim.config import SimulatorConfig
from stbproxy.sim.llm_prompt import parse_reply
from stbproxy.sim.llm_simulator import MAX_ATTEMPTS, LlmSimulator
from stbproxy.synthesis.simulation import SimulationRequest
from tests.fakes.fake_openai import HttpError, fake_openai  # noqa: F401
from tests.sim.simulator_helpers import GOOD, catalog, llm, run, simulate, store, weather_job  # noqa: F401

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


def _unreachable_llm(catalog, store) -> LlmSimulator:
    """An LLM simulator whose model sits on a port where nobody listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return LlmSimulator(SimulatorConfig(name="llm", base_url=f"http://127.0.0.1:{port}/v1", api_key="k",
                                        max_retries=0), catalog, store)


def test_a_virtual_call_whose_model_cannot_be_reached_gets_stabletoolbench_s_500(catalog, store):
    from stbproxy.stb.bodies import VIRTUAL_STATUS

    sim = _unreachable_llm(catalog, store)
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
    sim = _unreachable_llm(catalog, store)
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
