"""Keys are what the upstream saw, and hold no secret (issue 38, items 3, 4 and 9), through the
engine with a real store and a real upstream on loopback.

3. A stored answer is served for another request only when the upstream would receive that
   request alike: ``/p1/a/%2e%2e/%2E%2E/secret`` is not ``/secret``, ``/p3//admin`` is not
   ``/p3/admin``; ``/x/.`` is ``/x`` (httpx sends ``/x`` for both, checked here too).
4. A secret found anywhere in a request (a key in its path) is in no key, no session record,
   no stored request, in any form; a rotated key still hits.
9. What is no secret is kept as it came: a Basic credential's user name, a value too short
   to be told from data.
"""

from __future__ import annotations

import asyncio
import base64
import json
from urllib.parse import quote

import pytest

from stbproxy.engine import Engine, EngineConfig
from stbproxy.models import Mode, Request, Source
from stbproxy.store.embedded import Store
from stbproxy.upstream import Upstream, UpstreamConfig


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "store") as db:
        yield db


def answers(store, requests, session=None, mode=Mode.VIRTUAL):
    """The engine's answers to ``requests``, in order, on one store."""
    async def main():
        upstream = Upstream(UpstreamConfig(timeout=5.0))
        engine = Engine(store, upstream, EngineConfig(mode=mode))
        try:
            return [await engine.handle(request, session) for request in requests]
        finally:
            await upstream.aclose()

    return asyncio.run(main())


@pytest.mark.parametrize("first,second", [
    ("/p1/a/%2e%2e/%2E%2E/secret", "/secret"),
    ("/p3//admin", "/p3/admin"),
    ("/%7Euser/x", "/~user/x"),
    ("/%7euser/x", "/%7Euser/x"),
])
def test_an_answer_is_never_served_for_a_path_the_upstream_did_not_receive(store, upstream, first, second):
    one, two = answers(store, [Request("GET", upstream.url(first)), Request("GET", upstream.url(second))])
    assert one.source is Source.UPSTREAM and two.source is Source.UPSTREAM, (first, second)
    assert one.key != two.key
    assert json.loads(one.response.body)["path"] == first  # what the upstream received, as written
    assert json.loads(two.response.body)["path"] == second


@pytest.mark.parametrize("first,second", [("/x/.", "/x"), ("/a/./b/../c", "/a/c"), ("/sp ace", "/sp%20ace")])
def test_paths_the_upstream_receives_alike_share_an_answer(store, upstream, first, second):
    one, two = answers(store, [Request("GET", upstream.url(first)), Request("GET", upstream.url(second))])
    assert (one.source, two.source) == (Source.UPSTREAM, Source.CACHE) and one.key == two.key
    assert json.loads(one.response.body)["path"] == second  # httpx sent the normal form itself
    assert [path for _, path, _, _ in upstream.requests] == [second]


SECRET = "sk-Path/Key+0042="


def _every_form(secret: str) -> list[str]:
    return [secret, quote(secret, safe=""), quote(secret, safe="/"), quote(secret, safe="").lower(),
            json.dumps(secret)[1:-1]]


def _store_text(store) -> str:
    """Every key and value of the store, as text (session records and meta included)."""
    return "\n".join(key + " " + value.decode("utf-8", "surrogateescape") for key, value in store.records(""))


def test_a_secret_in_the_path_is_in_no_key_no_session_record_and_no_stored_request(store, upstream):
    rotated = "sk-Rotated/Key+0043="
    requests = [Request("GET", upstream.url(f"/echo/user/{quote(secret, safe='')}/x?q=1"), (("X-Api-Key", secret),))
                for secret in (SECRET, rotated)]
    one, two = answers(store, requests, session="path-secret")
    assert (one.source, two.source) == (Source.UPSTREAM, Source.CACHE)  # a rotated key still hits
    assert one.key == two.key == "http/" + one.key.split("/", 2)[1] + "/GET/echo/user/REDACTED/x/" + one.key[-32:]
    text = _store_text(store)
    assert "session/path-secret/" in text and "/echo/user/REDACTED/x" in text
    for form in _every_form(SECRET) + _every_form(rotated):
        assert form not in text, form
    assert [k for k in store.keys("") if "REDACTED" not in k and k.startswith("http/")] == []


def test_a_secret_echoed_into_a_query_or_a_body_is_in_no_key(store, upstream):
    def request(secret: str) -> Request:
        body = json.dumps({"note": f"my key is {secret}", "n": 1}).encode()
        return Request("POST", upstream.url(f"/echo/a?callback=https://x/{quote(secret, safe='')}"),
                       (("Authorization", f"Bearer {secret}"), ("Content-Type", "application/json")), body)

    one, two = answers(store, [request(SECRET), request("sk-Other/Key+0044=")])
    assert two.source is Source.CACHE and one.key == two.key
    assert not any(form in _store_text(store) for form in _every_form(SECRET))


def test_a_basic_user_name_is_no_secret_and_is_kept_in_answers(store, upstream):
    credential = base64.b64encode(b"Milo:long-password-7").decode()
    [answer] = answers(store, [Request("GET", upstream.url("/echo/Milo/Milos?name=Milo"),
                                       (("Authorization", f"Basic {credential}"),))])
    stored = json.loads(store.get(answer.key).response.body)
    assert stored["path"] == "/echo/Milo/Milos" and stored["query"] == {"name": "Milo"}
    assert "/echo/Milo/Milos" in answer.key
    assert "long-password-7" not in _store_text(store)


def test_a_value_too_short_to_be_told_from_data_is_redacted_where_named_but_not_hunted(store, upstream):
    [answer] = answers(store, [Request("GET", upstream.url("/echo/abc123/x?api_key=abc123&q=abc123"))])
    stored = store.get(answer.key)
    assert "api_key=REDACTED" in stored.request.url and "q=abc123" in stored.request.url
    assert json.loads(stored.response.body)["path"] == "/echo/abc123/x"


def test_a_secret_in_the_host_is_in_no_key_log_keys_included(store):
    request = Request("GET", "http://SK-Host-Secret-1.example.com/p?q=1", (("X-Api-Key", "SK-Host-Secret-1"),))
    engine = Engine(store, Upstream(UpstreamConfig(timeout=5.0)), EngineConfig())
    call = engine.http_call(request)
    for key in (call.key, engine._log_key("passthrough", call)):
        assert "sk-host-secret-1" not in key.lower() and "REDACTED.example.com" in key, key
