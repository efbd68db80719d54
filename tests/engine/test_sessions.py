import base64
import json
import subprocess
import sys
import threading

import pytest

from stbproxy.sessions import default_session_name, proxy_user, safe_session_name, session_from_headers
from tests.proxy.test_integration_proxy import agent
from tests.servers import ProxyProcess


def basic(user: str, password: str = "") -> tuple[str, str]:
    return ("Proxy-Authorization", "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode())


@pytest.mark.parametrize("raw,safe", [
    ("run-42", "run-42"), ("G1.query_588", "G1.query_588"),
])
def test_plain_names_are_kept(raw, safe):
    assert safe_session_name(raw) == safe


@pytest.mark.parametrize("raw", ["../../etc/passwd", "has space", "ünïcode-名前", "a/b", "", "...", "x" * 300,
                                 "a\x00b"])
def test_odd_names_become_safe_and_stay_distinct(raw):
    name = safe_session_name(raw)
    assert name and len(name) <= 120 and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)
    assert not name.startswith(".") and "/" not in name
    assert safe_session_name(raw + "!") != name


def test_session_from_headers_prefers_the_header_then_the_proxy_user():
    assert session_from_headers((("X-Stb-Session", "from-header"), basic("from-url"))) == "from-header"
    assert session_from_headers((basic("run-42"),)) == "run-42"
    assert session_from_headers((("Proxy-Authorization", "Bearer x"),)) is None
    assert proxy_user((("Proxy-Authorization", "Basic !!!"),)) is None
    assert default_session_name(0).startswith("serve-19700101-")


@pytest.mark.integration
def test_concurrent_sessions_stay_apart_over_http_and_https(tmp_path, upstream, tls_upstream, test_ca):
    store = tmp_path / "stb" / "store"
    with ProxyProcess(store, "--mode", "record", "--upstream-ca", str(test_ca.ca_file)) as proxy:
        def run(name: str, base: str, count: int, results: dict):
            env = proxy.client_env(session=name)  # http://NAME:@host:port, for HTTP and HTTPS
            results[name] = agent(env, [{"method": "GET", "url": f"{base}/echo?who={name}&n={i}"}
                                        for i in range(count)])

        results: dict = {}
        threads = [threading.Thread(target=run, args=("alice", upstream.base, 6, results)),
                   threading.Thread(target=run, args=("bob", tls_upstream.base, 4, results))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # A header names a session too, and never travels on to the upstream.
        agent(proxy.client_env(), [{"method": "GET", "url": upstream.url("/echo?who=carol"),
                                    "headers": {"X-Stb-Session": "carol"}}])
        listed = subprocess.run([sys.executable, "-m", "stbproxy", "sessions", "--json", "--store", str(store)],
                                capture_output=True, text=True, timeout=60)
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["alice"]["calls"] == 6 and rows["bob"]["calls"] == 4 and rows["carol"]["calls"] == 1
    assert rows["alice"]["by_source"] == {"upstream": 6} and rows["alice"]["hit_rate"] == 0.0
    for name in ("alice", "bob", "carol"):
        assert name in str(results.get(name, name))  # sanity: each agent saw its own calls
    forwarded = [headers for _m, _p, headers, _b in upstream.requests + tls_upstream.requests]
    assert not any("X-Stb-Session" in h or "Proxy-Authorization" in h for h in forwarded)


@pytest.mark.integration
def test_curl_style_user_without_password_names_the_session_too(tmp_path, upstream):
    import shutil

    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    store = tmp_path / "stb" / "store"
    with ProxyProcess(store) as proxy:
        out = subprocess.run(["curl", "-s", "-x", f"http://run-42@127.0.0.1:{proxy.port}", upstream.url("/echo?c=1")],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and '"calls"' in out.stdout
        listed = subprocess.run([sys.executable, "-m", "stbproxy", "sessions", "--json", "--store", str(store)],
                                capture_output=True, text=True, timeout=60)
    assert [row["name"] for row in json.loads(listed.stdout)] == ["run-42"]


@pytest.mark.integration
def test_sessions_table_shows_hit_rate(tmp_path, upstream):
    store = tmp_path / "stb" / "store"
    with ProxyProcess(store, "--session", "rerun") as proxy:
        calls = [{"method": "GET", "url": upstream.url(f"/echo?n={i % 2}")} for i in range(4)]
        agent(proxy.client_env(), calls)
    table = subprocess.run([sys.executable, "-m", "stbproxy", "sessions", "--store", str(store)],
                           capture_output=True, text=True, timeout=60).stdout
    row = next(line for line in table.splitlines() if line.startswith("rerun"))
    assert row.split()[1] == "4" and row.endswith("50.0%  upstream 2")  # both hits served real answers


@pytest.mark.parametrize("sent", [
    "caf\udce9-run",  # Latin-1 bytes (as requests sends them), decoded by the proxy with surrogate escapes
    "café-run",  # UTF-8 bytes, decoded cleanly
])
def test_non_ascii_session_header_maps_to_the_name_the_user_typed(sent):
    assert session_from_headers((("X-Stb-Session", sent),)) == safe_session_name("café-run")


@pytest.mark.integration
def test_non_ascii_session_header_through_the_proxy_is_exported_by_that_name(tmp_path, upstream):
    store = tmp_path / "stb" / "store"
    with ProxyProcess(store) as proxy:
        agent(proxy.client_env(), [{"method": "GET", "url": upstream.url("/echo?u=1"),
                                    "headers": {"X-Stb-Session": "café-run"}}])
    exported = subprocess.run([sys.executable, "-m", "stbproxy", "export", "--session", "café-run",
                               "-o", str(tmp_path / "out.yaml"), "--store", str(store)],
                              capture_output=True, text=True, timeout=60)
    assert exported.returncode == 0, exported.stderr
    assert "/echo?u=1" in (tmp_path / "out.yaml").read_text()
