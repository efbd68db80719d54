"""The reusable OpenAI-compatible fake: replies of every kind, recording, latency, clean shutdown."""

from __future__ import annotations

import json
import threading
import time

import httpx
import openai
import pytest

from tests.fakes.fake_openai import FakeOpenAI, HttpError, RawBody, ToolCall, tokens


def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0, timeout=5)


def test_content_tool_calls_and_usage(fake_openai):
    fake_openai.handler = lambda req: ToolCall("pick", {"n": 1}) if req.get("tools") else "hello"
    with client(fake_openai) as c:
        plain = c.chat.completions.create(model="m1", messages=[{"role": "user", "content": "hi"}])
        forced = c.chat.completions.create(model="m2", messages=[{"role": "user", "content": "pick"}],
                                           tools=[{"type": "function", "function": {"name": "pick", "parameters": {}}}])
    assert plain.choices[0].message.content == "hello" and plain.model == "m1"
    call = forced.choices[0].message.tool_calls[0]
    assert call.function.name == "pick" and json.loads(call.function.arguments) == {"n": 1}
    assert forced.choices[0].finish_reason == "tool_calls"
    assert plain.usage.prompt_tokens == tokens(json.dumps([{"role": "user", "content": "hi"}])) + tokens("[]")
    assert plain.usage.completion_tokens == tokens("hello" + "[]")
    assert fake_openai.calls == 2
    assert [r["model"] for r in fake_openai.chat_requests()] == ["m1", "m2"]


def test_errors_and_raw_bodies(fake_openai):
    replies = iter([HttpError(429, "slow down"), RawBody(b"{broken"), HttpError(401)])
    fake_openai.handler = lambda _req: next(replies)
    with client(fake_openai) as c:
        with pytest.raises(openai.RateLimitError, match="slow down"):
            c.chat.completions.create(model="m", messages=[])
        raw = c.chat.completions.with_raw_response.create(model="m", messages=[])
        assert raw.http_response.text == "{broken"
        with pytest.raises(openai.AuthenticationError):
            c.chat.completions.create(model="m", messages=[])


def test_both_paths_models_and_unknown_routes(fake_openai):
    body = {"model": "m", "messages": []}
    assert httpx.post(f"{fake_openai.url}/chat/completions", json=body).status_code == 200
    assert httpx.post(f"{fake_openai.url}/v1/chat/completions", json=body).status_code == 200
    assert httpx.get(f"{fake_openai.url}/v1/models").json()["data"][0]["id"] == "fake-model"
    assert httpx.post(f"{fake_openai.url}/v1/embeddings", json={}).status_code == 404
    assert httpx.post(f"{fake_openai.url}/v1/chat/completions", content=b"nope").status_code == 400
    assert fake_openai.calls == 3  # the bad body was still received and counted
    assert len(fake_openai.requests) == 5


def test_handler_exceptions_become_500_and_are_kept(fake_openai):
    def boom(_req):
        raise ValueError("scripted bug")

    fake_openai.handler = boom
    assert httpx.post(f"{fake_openai.url}/v1/chat/completions", json={"messages": []}).status_code == 500
    assert "scripted bug" in fake_openai.errors[0]


def test_streaming_reply(fake_openai):
    fake_openai.handler = lambda _req: "streamed text"
    with client(fake_openai) as c:
        chunks = list(c.chat.completions.create(model="m", messages=[], stream=True))
    assert "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices) == "streamed text"


def test_latency_runs_concurrently(fake_openai):
    fake_openai.latency = 0.3
    with client(fake_openai) as c:
        started = time.monotonic()
        threads = [threading.Thread(target=c.chat.completions.create, kwargs={"model": "m", "messages": []})
                   for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    elapsed = time.monotonic() - started
    assert fake_openai.calls == 8 and 0.3 <= elapsed < 1.5


def test_stops_its_threads_even_with_open_keepalive_connections():
    before = set(threading.enumerate())
    with FakeOpenAI(lambda _req: "x") as server:
        keep = httpx.Client()  # left open on purpose: a keep-alive connection
        keep.post(f"{server.base_url}/chat/completions", json={"messages": []})
        assert len(set(threading.enumerate()) - before) >= 2
    deadline = time.monotonic() + 3
    while set(threading.enumerate()) - before and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not set(threading.enumerate()) - before
    keep.close()
    with pytest.raises(RuntimeError):
        server.port  # noqa: B018
