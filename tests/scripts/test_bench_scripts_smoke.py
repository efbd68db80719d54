"""The benchmark scripts still run: each with --quick, as a real process."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts" / "bench"


def run_script(name: str, timeout: float) -> str:
    done = subprocess.run([sys.executable, str(SCRIPTS / name), "--quick"],
                          capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{name} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_bench_import_quick():
    out = run_script("bench_import.py", timeout=80)
    assert re.search(r"import \(median of 3\): [\d.]+s for \d+ entries: [\d,]+ entries/s", out), out
    assert re.search(r"ratio import time / parse time: [\d.]+", out), out
    assert "imported 0 (idempotent)" in out, out
    assert "all checks passed" in out, out


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_bench_virtual_quick():
    out = run_script("bench_virtual.py", timeout=110)
    for per_api in (50, 5000):
        assert re.search(rf"{per_api} entries per API: +\d+ req/s, p50 [\d.]+ ms, p99 [\d.]+ ms", out), out
    assert re.search(r"throughput ratio 5000 / 50: [\d.]+", out), out
    assert "requests failed: 0" in out, out
    assert "all answers checked" in out, out


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_bench_inprocess_quick():
    # Two pytest runs as real processes (one starts a proxy per test): slow, but it keeps the
    # script that measures in-process replay against the proxy plugin runnable.
    out = run_script("bench_inprocess.py", timeout=140)
    assert re.search(r"in-process \(stb_replay, requests-mock\): [\d.]+ s wall \(median of 1\)", out), out
    assert re.search(r"through the proxy \(stb_proxy, stbproxy serve per test\): [\d.]+ s wall", out), out
    assert re.search(r"ratio proxy / in-process: [\d.]+x", out) and "all tests passed" in out, out


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_bench_mcp_quick():
    out = run_script("bench_mcp.py", timeout=80)
    assert re.search(r"CPU per hit at concurrency 16: MCP tools/call [\d.]+ ms, /virtual [\d.]+ ms: [\d.]+", out), out
    assert "all answers checked" in out, out


@pytest.mark.integration
@pytest.mark.timeout(90)
def test_bench_openapi_quick():
    out = run_script("bench_openapi.py", timeout=80)
    assert "as 'bench-tools': 1 operation" in out, out
    assert re.search(r"CPU per hit at concurrency 16: OpenAPI operation [\d.]+ ms, "
                     r"plain HTTP [\d.]+ ms: [\d.]+", out), out
    assert "all answers checked" in out, out


@pytest.mark.integration
@pytest.mark.timeout(90)
@pytest.mark.skipif(not Path("/usr/bin/chromium").exists(),
                    reason="needs Debian's chromium package (apt-get install chromium)")
def test_bench_report_quick():
    pytest.importorskip("playwright.sync_api", reason="needs Playwright for Python (pip install playwright)",
                        exc_type=ImportError)
    out = run_script("bench_report.py", timeout=80)
    assert re.search(r"page size: [\d.]+ MB \(target < 5 MB: met\)", out), out
    assert re.search(r"time to interactive \(median of 2\): report \d+ ms, baseline \(parse only\) \d+ ms: "
                     r"ratio [\d.]+", out), out
    assert re.search(r"target < 2 s: (met|MISSED)", out), out
    assert "all loads checked" in out, out


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_bench_scale_quick():
    out = run_script("bench_scale.py", timeout=110)
    assert re.search(r"20,000 vs 2,000 entries \(10x\), 2,000 random hits each: entries/s [\d.]+x, "
                     r"import peak RSS [\d.]+x, disk per entry [\d.]+x, req/s [\d.]+x", out), out
    assert "failed requests: 0" in out, out


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_bench_tls_quick():
    out = run_script("bench_tls.py", timeout=110)
    for server in ("stbproxy", "mitmdump \\+ dict"):
        assert re.search(rf"{server} +resumed +\d+ +[\d.]+ +[\d.]+ +[\d.]+ +100%", out), out
    assert re.search(r"stbproxy: a full handshake costs [\d.]+x a resumed one", out), out
    assert re.search(r"stbproxy: with a Python client, an HTTPS keep-alive request costs [\d.]+x a plain keep-alive "
                     r"one in server CPU", out), out
    assert "failed requests: 0" in out, out


def test_bench_stb_server_skips_without_a_checkout():
    env = {key: value for key, value in os.environ.items() if key != "STB_CHECKOUT"}
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_stb_server.py")], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert "skipped: no StableToolBench checkout named" in done.stdout, done.stdout


@pytest.mark.integration
@pytest.mark.timeout(240)
@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk (Debian's package) is not installed")
def test_bench_stb_server_quick_with_a_checkout():
    checkout, python = os.environ.get("STB_CHECKOUT"), os.environ.get("STB_PYTHON")
    if not checkout or not python:
        pytest.skip("set STB_CHECKOUT (a StableToolBench checkout) and STB_PYTHON (its server's interpreter)")
    done = subprocess.run([sys.executable, str(SCRIPTS / "bench_stb_server.py"), "--quick", "--stb-checkout", checkout,
                           "--python", python], capture_output=True, text=True, timeout=230)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    for concurrency in (1, 16, 32):
        assert re.search(rf"concurrency {concurrency}: stbproxy answers [\d.]+x StableToolBench's server's",
                         done.stdout)
    assert "all answers checked" in done.stdout, done.stdout



@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.skipif(shutil.which("wrk") is None, reason="wrk (Debian's package) is not installed")
def test_bench_wrk_quick():
    out = run_script("bench_wrk.py", timeout=110)
    for path in ("plain", "virtual"):
        assert re.search(rf"^{path} +stbproxy +16 +\d+ +[\d.]+ +[\d.]+ +[\d.]+$", out, re.M), out
    assert re.search(r"concurrency 16: CPU per hit plain [\d.]+ ms, /virtual [\d.]+ ms: plain / virtual [\d.]+",
                     out), out
    assert "all answers checked" in out, out
