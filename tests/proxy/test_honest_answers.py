"""Nothing false is stored, served as real, or counted as success: real proxies, a real
agent (requests through HTTP(S)_PROXY), real upstreams on loopback, and the commands a
user runs after (stats, sessions, export, import)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import yaml

from tests.servers import ProxyProcess, run_client

pytestmark = pytest.mark.integration

REFUSED = "http://127.0.0.1:9/gone"  # the discard port: nothing listens

# An agent that knows nothing of stbproxy and reports every X-Stb-* header it was sent.
AGENT = textwrap.dedent("""
    import json, sys, requests
    seen = []
    for url in json.loads(sys.argv[1]):
        r = requests.get(url, timeout=20)
        seen.append({"status": r.status_code, "body": r.text,
                     **{k.lower(): v for k, v in r.headers.items() if k.lower().startswith("x-stb-")}})
    print(json.dumps(seen))
""")


def agent(env: dict[str, str], urls: list[str]) -> list[dict]:
    return run_client(AGENT, urls, env)


def stbproxy(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stbproxy", *args], capture_output=True, text=True, timeout=120)


def test_record_mode_never_stores_or_exports_a_transport_failure(tmp_path, upstream):
    store = tmp_path / "store"
    with ProxyProcess(store, "--mode", "record", "--session", "rec") as proxy:
        failed, real = agent(proxy.client_env(), [REFUSED, upstream.url("/echo?city=Oslo")])
    assert (failed["status"], failed["x-stb-source"], failed["x-stb-origin"]) == (502, "error", "error")
    assert "upstream unreachable" in json.loads(failed["body"])["error"]
    assert real["x-stb-source"] == "upstream"

    cassette = tmp_path / "rec.yaml"
    exported = stbproxy("export", "--session", "rec", "-o", str(cassette), "--store", str(store))
    assert exported.returncode == 0, exported.stderr
    assert "GET http://127.0.0.1:9/gone: no answer (the proxy could not reach the API: unreachable)" in exported.stderr
    uris = [i["request"]["uri"] for i in yaml.safe_load(cassette.read_text())["interactions"]]
    assert uris == [upstream.url("/echo?city=Oslo")]

    errors = json.loads(stbproxy("stats", "--errors", "--json", "--store", str(store)).stdout)
    assert {row["kind"]: row["count"] for row in errors["real"]}["not_connected"] == 1
    sessions = json.loads(stbproxy("sessions", "--json", "--store", str(store)).stdout)
    assert sessions[0]["by_source"] == {"error": 1, "upstream": 1}


def test_an_untrusted_upstream_certificate_is_a_configuration_error(tmp_path, tls_upstream, test_ca):
    store = tmp_path / "store"
    url = tls_upstream.url("/echo?q=1")
    with ProxyProcess(store, "--session", "tls") as proxy:  # virtual mode, schema simulator on
        first, again = agent(proxy.client_env(), [url, url])
    for seen in (first, again):
        assert (seen["status"], seen["x-stb-source"]) == (502, "error")
        error = json.loads(seen["body"])["error"]
        assert f"127.0.0.1:{tls_upstream.port}" in error and "--upstream-ca" in error
    warnings = [line for line in proxy.output if "--upstream-ca" in line]
    assert len(warnings) == 1 and "cannot be verified" in warnings[0]  # in the log without -v, once
    assert tls_upstream.requests == []

    stats = json.loads(stbproxy("stats", "--json", "--store", str(store)).stdout)
    assert stats["entries"] == 0  # nothing simulated, nothing stored
    errors = json.loads(stbproxy("stats", "--errors", "--json", "--store", str(store)).stdout)
    assert errors["tls_errors"] == {"total": 2, "by_host": {f"127.0.0.1:{tls_upstream.port}": 2}}
    assert all(row["count"] == 0 for row in errors["real"])  # not a success, not an outage

    with ProxyProcess(store, "--upstream-ca", str(test_ca.ca_file)) as proxy:
        (fixed,) = agent(proxy.client_env(), [url])
    assert (fixed["status"], fixed["x-stb-source"], fixed["x-stb-origin"]) == (200, "upstream", "upstream")


def test_a_simulated_answer_never_passes_for_a_real_one_later(tmp_path, upstream):
    store, again_store = tmp_path / "store", tmp_path / "again"
    urls = [REFUSED, upstream.url("/echo?n=1")]
    with ProxyProcess(store, "--session", "first") as proxy:
        fresh = agent(proxy.client_env(), urls)
        hits = agent(proxy.client_env(), urls)
    assert [s["x-stb-source"] for s in fresh] == ["simulated", "upstream"]
    assert [(s["x-stb-source"], s["x-stb-origin"]) for s in hits] == [("cache", "simulated"), ("cache", "upstream")]
    assert hits[0]["x-stb-simulator"] == fresh[0]["x-stb-simulator"] == "schema"
    assert "x-stb-simulator" not in hits[1]

    sessions = json.loads(stbproxy("sessions", "--json", "--store", str(store)).stdout)
    assert sessions[0]["hits_by_origin"] == {"simulated": 1, "upstream": 1}
    stats = json.loads(stbproxy("stats", "--json", "--store", str(store)).stdout)
    assert stats["by_source"] == {"simulated": 1, "upstream": 1}
    assert stats["calls"]["hits_by_origin"] == {"simulated": 1, "upstream": 1}

    # Exported, imported elsewhere and replayed: still simulated.
    cassette = tmp_path / "first.yaml"
    exported = stbproxy("export", "--session", "first", "-o", str(cassette), "--store", str(store))
    assert "wrote 4 interactions" in exported.stdout and "(by origin: simulated 2, upstream 2)" in exported.stdout
    assert stbproxy("import", "cassette", str(cassette), "--store", str(again_store)).returncode == 0
    with ProxyProcess(again_store, "--mode", "replay") as proxy:
        replayed = agent(proxy.client_env(), urls)
    assert [(s["x-stb-source"], s["x-stb-origin"]) for s in replayed] == [("cache", "simulated"),
                                                                          ("cache", "imported")]
    with ProxyProcess(tmp_path / "unused", "--cassette", str(cassette)) as proxy:
        played = agent(proxy.client_env(), urls)
    assert [s["x-stb-origin"] for s in played] == ["simulated", "imported"]


OPENAI_AGENT = textwrap.dedent("""
    import json, openai, sys
    client = openai.OpenAI(base_url=json.loads(sys.argv[1]), api_key="sk-local-test", max_retries=0, timeout=20)
    try:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    except openai.NotFoundError as exc:  # what an agent's error handling reads
        print(json.dumps({"code": exc.code, "type": exc.type, "body": exc.body}))
""")


def test_a_replay_miss_reaches_the_openai_client_with_its_explanation(tmp_path, upstream):
    store = tmp_path / "store"
    with ProxyProcess(store, "--mode", "record") as proxy:
        agent(proxy.client_env(), [upstream.url("/echo")])  # something stored: replay is not refused
    with ProxyProcess(store, "--mode", "replay") as proxy:
        error = run_client(OPENAI_AGENT, "http://127.0.0.1:9/v1", proxy.client_env())
    assert (error["code"], error["type"]) == ("replay_miss", "stbproxy_replay_miss")
    assert error["body"]["message"].startswith("stbproxy replay: no stored answer for this request")
