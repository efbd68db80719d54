"""A real `stbproxy serve` under hostile requests, wrong passwords, a store that cannot be
written and a strict umask; clients on 127.0.0.1 only."""

from __future__ import annotations

import json
import os
import resource
import stat
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests

from scripts.reliability import fuzzkit  # raw requests, as hostile clients send them
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration

SECRET = "qk-log-secret-70707"


def session_through(proxy: ProxyProcess, auth: str = "") -> requests.Session:
    client = requests.Session()
    client.trust_env = False  # only the proxy given here
    url = f"http://{auth + '@' if auth else ''}127.0.0.1:{proxy.port}"
    client.proxies = {"http": url, "https": url}
    return client


def stats(store: Path) -> dict:
    done = subprocess.run([sys.executable, "-m", "stbproxy", "stats", "--json", "--store", str(store)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_cache_hit_beside_a_request_with_thousands_of_headers_is_answered_at_once(tmp_path, upstream):
    with ProxyProcess(tmp_path / "store") as proxy:
        client = session_through(proxy)
        url = upstream.url("/echo?hit=1")
        assert client.get(url, timeout=10).headers["X-Stb-Source"] == "upstream"

        def hit_seconds() -> float:
            started = time.perf_counter()
            reply = client.get(url, timeout=60)
            assert reply.headers["X-Stb-Source"] == "cache"
            return time.perf_counter() - started

        usual = statistics.median(hit_seconds() for _ in range(20))
        hostile = (f"GET {upstream.url('/echo?hostile=1')} HTTP/1.1\r\nHost: 127.0.0.1:{upstream.port}\r\n".encode()
                   + b"".join(b"X-Filler-%d: %d\r\n" % (i, i) for i in range(20_000)) + b"\r\n")
        answers: list[bytes] = []
        attackers = [threading.Thread(target=lambda: answers.append(fuzzkit.send(proxy.port, hostile)[1]))
                     for _ in range(4)]
        for thread in attackers:
            thread.start()
        beside = [hit_seconds() for _ in range(40)]
        for thread in attackers:
            thread.join(timeout=60)
    # Before, the upstream client's cookie handling held the loop for seconds per request.
    assert max(beside) < max(1.0, 50 * usual), (usual, sorted(beside)[-3:])
    assert len(answers) == 4 and all(a.startswith(b"HTTP/1.1 431 ") for a in answers), answers[:1]
    assert b"more than the limit of 100 (--max-headers)" in answers[0]


def test_upstream_errors_leave_no_secret_in_the_log_or_the_store(tmp_path, upstream):
    store = tmp_path / "store"
    with ProxyProcess(store, "-vv", "--simulator", "off", "--upstream-timeout", "3") as proxy:
        client = session_through(proxy)
        gone = client.get(f"http://127.0.0.1:9/gone?q=1&api_key={SECRET}", timeout=30)
        real = client.get(upstream.url(f"/status/404?api_key={SECRET}"), timeout=30)
    output = "".join(proxy.output)
    assert gone.headers["X-Stb-Source"] == real.headers["X-Stb-Source"] == "unavailable"  # simulator off
    assert "upstream failed for" in output and "api_key=REDACTED" in output  # -v logs the miss ...
    assert SECRET not in output  # ... without the key
    for root, _dirs, files in os.walk(store):
        for name in files:
            assert SECRET.encode() not in Path(root, name).read_bytes(), name


def test_the_proxy_addressed_as_itself_answers_508_at_once_and_stores_nothing(tmp_path):
    store = tmp_path / "store"
    spellings = ["127.1", "2130706433", "0.0.0.0", "[::1]", "0x7f.0.0.1", "127.0.0.2"]
    with ProxyProcess(store, "--upstream-timeout", "8") as proxy:
        client = session_through(proxy)
        seen = {}
        for spelling in spellings:
            started = time.perf_counter()
            reply = client.get(f"http://{spelling}:{proxy.port}/tools/search?q=1", timeout=30)
            seen[spelling] = (reply.status_code, time.perf_counter() - started, reply.json()["error"])
        virtual = requests.post(f"http://127.0.0.1:{proxy.port}/virtual", json={"x": 1}, timeout=10)
    assert all(status == 508 and seconds < 3 for status, seconds, _ in seen.values()), seen
    assert all("addressed to this proxy itself" in error for _, _, error in seen.values())
    assert virtual.status_code == 422  # the proxy's own endpoint still answers directly
    found = stats(store)
    assert found["entries"] == 0 and found["logged"] == {}


def test_wrong_proxy_passwords_are_slowed_down_per_address(tmp_path, upstream):
    with ProxyProcess(tmp_path / "store", "--proxy-auth", "agent:right-password") as proxy:
        wrong = session_through(proxy, "agent:guess")
        timings = []
        for n in range(6):
            started = time.perf_counter()
            assert wrong.get(upstream.url(f"/echo?n={n}"), timeout=30).status_code == 407
            timings.append(time.perf_counter() - started)
        right = session_through(proxy, "agent:right-password").get(upstream.url("/echo?ok=1"), timeout=30)
        again = session_through(proxy, "agent:right-password").get(upstream.url("/echo?ok=2"), timeout=30)
    assert right.status_code == 200 and again.status_code == 200
    assert max(timings[:3]) < 0.2 and timings[3] >= 0.25 and timings[4] >= 0.5 and timings[5] >= 1.0, timings


def test_store_certs_and_their_files_are_private_whatever_the_umask(tmp_path, upstream):
    store = tmp_path / "stb" / "store"
    old = os.umask(0)  # the child inherits the most permissive umask there is
    try:
        proxy = ProxyProcess(store, "--mode", "record", "--report", str(tmp_path / "unused.json")).launch()
    finally:
        os.umask(old)
    try:
        proxy.wait_ready()
        session_through(proxy).get(upstream.url("/echo?n=1"), timeout=10)
    finally:
        assert proxy.stop() == 0
    for folder in (store, store.parent / "certs"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
        for item in folder.iterdir():
            assert stat.S_IMODE(item.stat().st_mode) & 0o077 == 0, item


def test_a_store_that_cannot_be_written_fails_loudly(tmp_path, upstream):
    """RocksDB on a file-size limit fails as on a full disk: record mode then answers 507,
    every answer acknowledged with 200 is stored, the log is not flooded, stats counts the
    failures, and the failed flush at shutdown is an error exit."""
    store = tmp_path / "store"
    proxy = ProxyProcess(store, "--mode", "record").start()
    try:
        resource.prlimit(proxy.process.pid, resource.RLIMIT_FSIZE, (300_000, 300_000))
        client = session_through(proxy)
        replies = [client.get(upstream.url(f"/big?bytes=20000&n={n}"), timeout=30) for n in range(40)]
        counted = stats(store)  # read-only, while the proxy still runs
    finally:
        code = proxy.stop()
    acknowledged = [r for r in replies if r.status_code == 200]
    refused = [r for r in replies if r.status_code == 507]
    assert acknowledged and refused and len(acknowledged) + len(refused) == 40
    assert all(r.headers["X-Stb-Stored"] == "no" for r in refused)
    assert "could not be stored" in refused[0].json()["error"]
    output = "".join(proxy.output)
    assert output.count("could not store") <= 3, output[-2000:]
    assert counted["failed_writes"] >= len(refused)
    assert code != 0 and "could not flush the store" in output and "store flushed" not in output
    assert "Traceback" not in output
    # Reopened without the limit: every acknowledged answer is there, whole.
    from stbproxy.store.embedded import Store

    with Store(store, readonly=True) as db:
        kept = {ex.request.url: ex.response.body for ex in db.entries()}
    for reply in acknowledged:
        assert kept[reply.url] == reply.content
