"""serve --cassette: one cassette replayed in place of the store, optionally in order."""

import json
import subprocess
import sys

import pytest

from tests.proxy.test_integration_proxy import agent
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration


def record_cassette(tmp_path, upstream, calls, name="rec"):
    store = tmp_path / "rec" / "store"
    with ProxyProcess(store, "--mode", "record", "--session", name) as proxy:
        recorded = agent(proxy.client_env(), calls)
    cassette = tmp_path / f"{name}.yaml"
    exported = subprocess.run([sys.executable, "-m", "stbproxy", "export", "--session", name, "-o", str(cassette),
                               "--store", str(store)], capture_output=True, text=True, timeout=60)
    assert exported.returncode == 0, exported.stderr
    return cassette, recorded


def test_cassette_replay_serves_recorded_answers_in_order_and_reports(tmp_path, upstream):
    calls = [{"method": "GET", "url": upstream.url("/echo?same=1")}] * 3 + [
        {"method": "GET", "url": upstream.url("/echo?other=1")}]
    cassette, recorded = record_cassette(tmp_path, upstream, calls)
    upstream.stop()
    untouched = tmp_path / "replay" / "store"
    report = tmp_path / "report.json"
    with ProxyProcess(untouched, "--cassette", str(cassette), "--ordered", "--report", str(report)) as proxy:
        replayed = agent(proxy.client_env(), [calls[0], calls[0], calls[0], calls[0],
                                              {"method": "GET", "url": upstream.url("/echo?same=2")}])
    # in order: the n-th identical request gets the n-th recorded answer ("calls" counts 1, 2, 3)
    assert [json.loads(r["body"])["calls"] for r in replayed[:3]] == [1, 2, 3]
    assert [r["body"] for r in replayed[:3]] == [r["body"] for r in recorded[:3]]
    assert replayed[3]["status"] == 404 and replayed[4]["status"] == 404  # used up; never recorded
    assert "query:same" in replayed[4]["body"]  # the miss names the closest recorded request's difference
    result = json.loads(report.read_text())
    assert result["played"] == 3 and result["interactions"] == 4
    assert [u["url"] for u in result["unplayed"]] == [upstream.url("/echo?other=1")]
    assert len(result["unmatched"]) == 2
    assert not untouched.exists(), "a cassette replay must not create or touch the store"
    output = "".join(proxy.output)
    assert "3 of 4 interactions played" in output and "not in the cassette" in output


def test_unordered_cassette_replay_repeats_the_first_answer(tmp_path, upstream):
    cassette, recorded = record_cassette(tmp_path, upstream, [{"method": "GET", "url": upstream.url("/echo?r=1")}] * 2)
    upstream.stop()
    with ProxyProcess(tmp_path / "replay" / "store", "--cassette", str(cassette)) as proxy:
        replayed = agent(proxy.client_env(), [{"method": "GET", "url": upstream.url("/echo?r=1")}] * 3)
    assert [r["source"] for r in replayed] == ["cache"] * 3
    assert {r["body"] for r in replayed} == {recorded[0]["body"]}


def test_cassette_needs_replay_mode(tmp_path, upstream):
    cassette, _ = record_cassette(tmp_path, upstream, [{"method": "GET", "url": upstream.url("/echo")}])
    result = subprocess.run([sys.executable, "-m", "stbproxy", "serve", "--mode", "record", "--cassette", str(cassette),
                             "--port", "0", "--store", str(tmp_path / "s")], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "replay" in result.stdout + result.stderr
