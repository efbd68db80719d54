"""Hostile input from a seeded generator (scripts/reliability/fuzzkit.py) against a
running proxy's proxy path, its /virtual endpoint and its own address, bounded in time.

Whatever comes in, the proxy answers 4xx (or a normal answer), never 5xx or an internal
error, prints no traceback, and keeps answering ordinary requests. The proxy may reach
nothing but the upstream on loopback (--deny-host '*' --allow-host 127.0.0.1).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import pytest
import requests

from scripts.reliability import fuzzkit
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration

SEED = 10
SECONDS = 10.0  # the bound: as many cases as fit, at most MAX_CASES
MAX_CASES = 3000


@pytest.mark.timeout(120)
def test_hostile_input_never_gets_a_5xx_or_a_traceback(tmp_path, upstream):
    args = ("--simulator", "schema", "--deny-host", "*", "--allow-host", "127.0.0.1", "--upstream-timeout", "5")
    with ProxyProcess(tmp_path / "store", *args) as proxy:
        generated = fuzzkit.cases(SEED, proxy.port, upstream.port)
        lock = threading.Lock()
        deadline = time.monotonic() + SECONDS
        results = []

        def worker() -> None:
            while time.monotonic() < deadline:
                with lock:
                    if len(results) >= MAX_CASES:
                        return
                    case = next(generated)
                status, answer = fuzzkit.send(proxy.port, case.raw, timeout=30)
                with lock:
                    results.append((case, status, answer))

        workers = [threading.Thread(target=worker) for _ in range(4)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        client = requests.Session()
        client.trust_env = False
        client.proxies = {"http": proxy.url}
        after = client.get(upstream.url("/echo?after=fuzz"), timeout=10)
        virtual = requests.post(f"{proxy.url}/virtual", timeout=10, json={
            "category": "Data", "tool_name": "After", "api_name": "fuzz", "tool_input": "{}"})
    output = "".join(proxy.output)
    by_kind = Counter((case.kind, status) for case, status, _ in results)
    failed = [(case.kind, status, case.raw[:160], answer[:200]) for case, status, answer in results
              if status is None or status >= 500]
    assert len(results) >= 300, by_kind  # enough cases ran within the bound
    assert {kind for kind, _ in by_kind} == {"proxy", "virtual", "own"}
    assert not failed, failed[:5]
    assert "Traceback" not in output and "internal error" not in output, output[-3000:]
    assert after.status_code == 200 and after.headers["X-Stb-Source"] == "upstream"
    assert virtual.status_code == 200 and virtual.json()["error"] == ""
