"""End to end: `stbproxy serve` as a real process, a real upstream on loopback, and an
unmodified `requests` client in its own process configured only through environment
variables (HTTP_PROXY / HTTPS_PROXY / REQUESTS_CA_BUNDLE)."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import textwrap

import pytest

from tests.servers import ProxyProcess, run_client

pytestmark = pytest.mark.integration

# The agent: a plain script that knows nothing of stbproxy. It makes the calls it is given
# and prints what it saw, so the test compares what an agent sees, not what we stored.
AGENT = textwrap.dedent("""
    import json, sys, requests
    seen = []
    for call in json.loads(sys.argv[1]):
        r = requests.request(call["method"], call["url"], headers=call.get("headers"),
                             data=call.get("data"), timeout=20)
        seen.append({"status": r.status_code, "source": r.headers.get("X-Stb-Source"),
                     "content_type": r.headers.get("Content-Type"), "x_demo": r.headers.get("X-Demo"),
                     "body": r.content.decode("latin-1")})
    print(json.dumps(seen))
""")


def agent(env: dict[str, str], calls: list[dict]) -> list[dict]:
    return run_client(AGENT, calls, env)


SECRET = "rk-integration-secret-0042"


def calls_for(base: str) -> list[dict]:
    return [
        {"method": "GET", "url": f"{base}/echo?city=Paris&units=metric",
         "headers": {"X-RapidAPI-Key": SECRET, "X-RapidAPI-Host": "weather.p.rapidapi.com"}},
        {"method": "POST", "url": f"{base}/echo", "headers": {"Content-Type": "application/json",
                                                             "Authorization": f"Bearer {SECRET}"},
         "data": json.dumps({"query": "pizza", "limit": 3, "api_key": SECRET})},
        {"method": "GET", "url": f"{base}/binary"},
        {"method": "GET", "url": f"{base}/echoheader", "headers": {"X-RapidAPI-Key": SECRET}},
    ]


def reordered(base: str) -> list[dict]:
    """The same calls as an agent might make them on a rerun: other order, other key."""
    return [
        {"method": "GET", "url": f"{base}/echo?units=metric&city=Paris", "headers": {"X-RapidAPI-Key": "other"}},
        {"method": "POST", "url": f"{base}/echo", "headers": {"Content-Type": "application/json"},
         "data": '{"limit":3,   "query":"pizza"}'},
        {"method": "GET", "url": f"{base}/binary"},
        {"method": "GET", "url": f"{base}/echoheader", "headers": {"X-RapidAPI-Key": "another-key"}},
    ]


def scrubbed(body: str) -> str:
    """What the store keeps of a body that echoed the secret back (whole values first)."""
    return body.replace(f"Bearer {SECRET}", "REDACTED").replace(SECRET, "REDACTED")


def assert_store_has_no_secret(store_dir):
    for root, _dirs, files in os.walk(store_dir):
        for name in files:
            with open(os.path.join(root, name), "rb") as handle:
                assert SECRET.encode() not in handle.read(), f"secret found in {name}"


def record_then_replay(tmp_path, upstream, extra_env=None, proxy_args=()):
    store = tmp_path / "stb" / "store"
    with ProxyProcess(store, "--mode", "record", *proxy_args) as proxy:
        env = {**proxy.client_env(), **(extra_env or {})}
        recorded = agent(env, calls_for(upstream.base))
    upstream.stop()  # the network is gone from here on
    with ProxyProcess(store, "--mode", "replay", *proxy_args) as proxy:
        env = {**proxy.client_env(), **(extra_env or {})}
        replayed = agent(env, reordered(upstream.base))
    return store, recorded, replayed


def test_http_record_then_replay_is_identical_with_network_gone(tmp_path, upstream):
    store, recorded, replayed = record_then_replay(tmp_path, upstream)
    assert [r["source"] for r in recorded] == ["upstream"] * 4
    assert [r["source"] for r in replayed] == ["cache"] * 4
    for before, after in zip(recorded, replayed):
        assert (after["status"], after["content_type"], after["x_demo"]) == (
            before["status"], before["content_type"], before["x_demo"])
        # Byte for byte, except that a secret the upstream echoed back is scrubbed in the store.
        assert after["body"] == scrubbed(before["body"])
    assert SECRET in recorded[3]["body"] and json.loads(replayed[3]["body"]) == {"your_key": "REDACTED"}
    assert_store_has_no_secret(store)


def test_https_record_then_replay_through_the_interception_ca(tmp_path, tls_upstream, test_ca):
    store, recorded, replayed = record_then_replay(
        tmp_path, tls_upstream, proxy_args=("--upstream-ca", str(test_ca.ca_file)))
    assert [r["status"] for r in recorded] == [200] * 4
    assert [r["source"] for r in replayed] == ["cache"] * 4
    assert [r["body"] for r in replayed] == [scrubbed(r["body"]) for r in recorded]
    assert_store_has_no_secret(store)
    ca_key = store.parent / "certs" / "mitmproxy-ca.pem"
    assert stat.S_IMODE(ca_key.stat().st_mode) & 0o077 == 0, "the CA private key must be owner-only"


def test_proxy_keeps_serving_after_bad_upstreams(tmp_path, upstream):
    store = tmp_path / "stb" / "store"
    with ProxyProcess(store, "--upstream-timeout", "0.5", "--simulator", "off") as proxy:
        env = proxy.client_env()
        seen = agent(env, [
            {"method": "GET", "url": upstream.url("/reset")},
            {"method": "GET", "url": upstream.url("/garbage")},
            {"method": "GET", "url": upstream.url("/slow?seconds=2")},
            {"method": "GET", "url": "http://127.0.0.1:9/refused"},
            {"method": "POST", "url": upstream.url("/echo"), "headers": {"Content-Type": "application/json"},
             "data": "{not json"},
            {"method": "GET", "url": upstream.url("/echo?after=errors")},
        ])
        assert proxy.process.poll() is None
    assert [s["source"] for s in seen[:4]] == ["unavailable"] * 4  # nothing simulated: the simulator is off
    assert all(json.loads(s["body"])["response"] == "" for s in seen[:4])
    assert seen[4]["status"] == 200 and json.loads(seen[4]["body"])["body"] == "{not json"
    assert seen[5]["status"] == 200 and seen[5]["source"] == "upstream"


def test_default_offline_simulator_answers_when_the_api_is_gone(tmp_path):
    store = tmp_path / "stb" / "store"
    with ProxyProcess(store) as proxy:
        first, again = agent(proxy.client_env(), [{"method": "GET", "url": "http://127.0.0.1:9/gone?q=1"}] * 2)
    assert (first["status"], first["source"]) == (200, "simulated")
    assert again["source"] == "cache" and again["body"] == first["body"]


def test_stats_reads_the_store_while_the_proxy_holds_it(tmp_path, upstream):
    store = tmp_path / "stb" / "store"
    with ProxyProcess(store, "--mode", "record") as proxy:
        agent(proxy.client_env(), [{"method": "GET", "url": upstream.url("/echo?n=1")}])
        stats = subprocess.run([sys.executable, "-m", "stbproxy", "stats", "--json", "--store", str(store)],
                               capture_output=True, text=True, timeout=60)
        second = subprocess.run([sys.executable, "-m", "stbproxy", "serve", "--store", str(store), "--port", "0"],
                                capture_output=True, text=True, timeout=60)
    assert stats.returncode == 0, stats.stderr
    assert json.loads(stats.stdout)["by_source"] == {"upstream": 1}
    assert second.returncode != 0 and "locked" in second.stdout + second.stderr


def test_sigterm_stops_cleanly_and_flushes(tmp_path, upstream):
    store = tmp_path / "stb" / "store"
    proxy = ProxyProcess(store, "--mode", "record").start()
    try:
        agent(proxy.client_env(), [{"method": "GET", "url": upstream.url(f"/echo?n={i}")} for i in range(5)])
    finally:
        code = proxy.stop()
    assert code == 0
    assert "stopped" in "".join(proxy.output)
    stats = subprocess.run([sys.executable, "-m", "stbproxy", "stats", "--json", "--store", str(store)],
                           capture_output=True, text=True, timeout=60)
    assert json.loads(stats.stdout)["entries"] == 5


def test_refuses_non_loopback_address_without_auth(tmp_path):
    result = subprocess.run([sys.executable, "-m", "stbproxy", "serve", "--host", "0.0.0.0", "--port", "0",
                             "--store", str(tmp_path / "s")], capture_output=True, text=True, timeout=60)
    assert result.returncode != 0 and "--proxy-auth" in result.stderr


def test_an_answer_to_head_has_no_body_and_the_connection_stays_usable(tmp_path, upstream):
    # The upstream does not implement HEAD (501): the simulator answers it, with a body that
    # must not be sent, or the next answer on the connection would start with it.
    target = upstream.url("/echo/h").encode()
    with ProxyProcess(tmp_path / "store", "--simulator", "schema") as proxy, \
            socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as sock:
        received = b""
        for method in (b"HEAD", b"GET"):
            sock.sendall(b"%s %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % (method, target, upstream.port))
            while received.count(b"\r\n\r\n") < (1 if method == b"HEAD" else 2):
                received += sock.recv(65536)
    head, _, rest = received.partition(b"\r\n\r\n")
    assert b"X-Stb-Source: simulated" in head and b"content-length: 0" not in head.lower()
    assert rest.startswith(b"HTTP/1.1 200 OK\r\n"), rest[:200]  # not the HEAD answer's body
