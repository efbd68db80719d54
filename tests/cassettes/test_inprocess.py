"""In-process replay through requests-mock: the proxy's rules and explanations, no proxy process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from stbproxy.cassettes.inprocess import ReplayMismatch, replay
from stbproxy.store.embedded import Store
from tests.proxy.test_integration_proxy import agent
from tests.servers import ProxyProcess

CASSETTE = Path(__file__).resolve().parents[2] / "cassettes" / "weather_oslo.yaml"
SEARCH = "http://127.0.0.1:18765/v1/cities/search"
FORECAST = "http://127.0.0.1:18765/v1/forecast"
SECRET = "sk-inprocess-secret-9931"


def test_recorded_calls_are_answered_in_order_and_the_report_says_so():
    with replay(CASSETTE) as player:
        found = requests.post(SEARCH, json={"limit": 3, "prefix": "os"}, headers={"X-RapidAPI-Key": SECRET})
        days = requests.get(FORECAST, params={"days": "1", "city": "Oslo"})
    assert found.json() == {"results": ["Oslo"]} and found.headers["X-Stb-Source"] == "cache"
    assert days.status_code == 200 and days.json()["city"] == "Oslo"
    player.check()  # nothing missed
    assert player.report.played == 2 and player.report.unplayed == []


def test_outside_the_block_requests_are_not_intercepted():
    with replay(CASSETTE):
        pass
    with pytest.raises(requests.ConnectionError):
        requests.get("http://127.0.0.1:9/nothing", timeout=2)


@pytest.mark.integration
def test_a_miss_is_explained_exactly_as_the_proxy_explains_it(tmp_path):
    asked = f"{FORECAST}?city=Oslo&days=2&api_key={SECRET}"
    with replay(CASSETTE) as player:
        in_process = requests.get(asked)
    with ProxyProcess(tmp_path / "store", "--cassette", str(CASSETTE), "--ordered") as proxy:
        through_proxy = agent(proxy.client_env(), [{"method": "GET", "url": asked}])[0]
    assert in_process.status_code == through_proxy["status"] == 404
    assert in_process.headers["X-Stb-Source"] == through_proxy["source"] == "miss"
    assert in_process.json() == json.loads(through_proxy["body"])
    explained = in_process.json()
    assert explained["request"]["url"] == f"{FORECAST}?city=Oslo&days=2&api_key=REDACTED"
    assert explained["closest"]["differences"] == [{"part": "query:days", "stored": "1", "got": "2"}]
    assert SECRET not in in_process.text and SECRET not in player.explain()
    with pytest.raises(ReplayMismatch, match=r"query:days: recorded '1', got '2'"):
        player.check()


def test_ordered_replay_says_already_played_and_json_misses_name_fields():
    with replay(CASSETTE) as player:
        assert requests.post(SEARCH, json={"prefix": "os", "limit": 3}).status_code == 200
        again = requests.post(SEARCH, json={"prefix": "os", "limit": 3})
        other = requests.post(SEARCH, json={"prefix": "oslo", "limit": 3})
    assert again.json()["already_played"].startswith("already played (1 of 1)")
    assert other.json()["closest"]["differences"] == [{"part": "json:prefix", "stored": "os", "got": "oslo"}]
    assert player.explain().splitlines()[0].startswith("already played (1 of 1)")


def test_a_store_session_replays_in_process(tmp_path, upstream):
    store = tmp_path / "store"
    calls = [{"method": "GET", "url": upstream.url("/echo?city=Rome"), "headers": {"X-RapidAPI-Key": SECRET}},
             {"method": "POST", "url": upstream.url("/echo"), "headers": {"Content-Type": "application/json"},
              "data": json.dumps({"q": "pizza"})}]
    with ProxyProcess(store, "--mode", "record") as proxy:
        recorded = agent(proxy.client_env("run-7"), calls)
    with replay(store=store, session="run-7") as player:
        rome = requests.get(upstream.url("/echo?city=Rome"), headers={"X-RapidAPI-Key": "another-key"})
        pizza = requests.post(upstream.url("/echo"), json={"q": "pizza"})
    player.check()
    # The upstream echoed the key; the store kept (and the replay gives) it redacted.
    assert SECRET in recorded[0]["body"] and SECRET not in rome.text
    assert rome.content.decode("latin-1") == recorded[0]["body"].replace(SECRET, "REDACTED")
    assert pizza.content.decode("latin-1") == recorded[1]["body"]
    assert upstream.hits["/echo"] == 2  # the recording only: the replay never reached the network


def test_passthrough_hosts_reach_the_real_network(upstream):
    with replay(CASSETTE, passthrough=["localhost"]) as player:
        real = requests.get(f"http://localhost:{upstream.port}/echo?llm=1")
        recorded = requests.get(FORECAST, params={"city": "Oslo", "days": 1})
    assert real.status_code == 200 and "X-Stb-Source" not in real.headers
    assert recorded.headers["X-Stb-Source"] == "cache" and not player.misses


def test_bad_arguments_name_the_problem(tmp_path):
    with pytest.raises(Exception, match="either a cassette or a store session"):
        with replay():
            pass
    with Store(tmp_path / "s"):
        pass
    with pytest.raises(Exception, match="needs the session"):
        with replay(store=tmp_path / "s"):
            pass
