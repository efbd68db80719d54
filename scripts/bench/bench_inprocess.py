#!/usr/bin/env python3
"""Cassette tests in-process (the stb_replay fixture, requests-mock) against the same tests
through the proxy plugin (the stb_proxy fixture, one `stbproxy serve` per test).

In one run, on 127.0.0.1 only, in a temporary folder that is removed afterwards:

1. write a small pytest project holding the repository's two demo cassettes and two test
   files with N tests each (default 200), alternating between the cassettes; every test
   makes the cassette's requests with `requests` and checks the answers, one file through
   `stb_replay`, the other through `stb_proxy` (requests sent to the proxy it started);
2. run each file with `python -m pytest` as a real process and time the whole run (wall
   clock, start-up of pytest included): the in-process file 3 times, the proxy file once
   by default (it takes minutes; --proxy-repeats to change);
3. check that every test passed, and print the median wall time of each, the time per
   test, and the ratio proxy / in-process.

Baseline (measured in the same run): the in-process file; the proxy file is its ratio.

Exit status 1 means a test failed. Usage: python scripts/bench/bench_inprocess.py [--quick] [--tests N]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))  # run as a file: scripts.* from the repository root

from scripts.common import child_env  # noqa: E402

CASSETTES = ("weather_oslo", "weather_p_cities")

COMMON = '''
import pytest, requests

BASE = "http://127.0.0.1:18765"
CALLS = {
    "weather_oslo": [("os", ["Oslo"], 1)],
    "weather_p_cities": [("p", ["Paris", "Porto", "Prague"], 3)],
}

def agent(name, proxies=None):
    for prefix, cities, days in CALLS[name]:
        found = requests.post(f"{BASE}/v1/cities/search", json={"prefix": prefix, "limit": 3},
                              headers={"X-RapidAPI-Key": "bench-key"}, proxies=proxies, timeout=30)
        assert found.json()["results"] == cities, found.text
        for city in cities:
            forecast = requests.get(f"{BASE}/v1/forecast", params={"city": city, "days": days},
                                    proxies=proxies, timeout=30)
            assert forecast.status_code == 200 and forecast.headers["X-Stb-Source"] == "cache", forecast.text
            assert len(forecast.json()["days"]) == days
'''

TESTS = """
@pytest.mark.stb_cassette("weather_oslo")
@pytest.mark.parametrize("i", range({half}))
def test_oslo({fixture}, i):
    agent("weather_oslo"{proxies})

@pytest.mark.stb_cassette("weather_p_cities")
@pytest.mark.parametrize("i", range({rest}))
def test_p_cities({fixture}, i):
    agent("weather_p_cities"{proxies})
"""


def test_file(n: int, fixture: str) -> str:
    proxies = ', proxies={"http": stb_proxy.url, "https": stb_proxy.url}' if fixture == "stb_proxy" else ""
    return COMMON + TESTS.format(half=n // 2, rest=n - n // 2, fixture=fixture, proxies=proxies)


def run_pytest(project: Path, test_file: str, expected: int) -> float:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file],
                          cwd=project, capture_output=True, text=True, env=child_env(), timeout=3600)
    wall = time.perf_counter() - started
    passed = re.search(r"(\d+) passed", done.stdout)
    if done.returncode != 0 or not passed or int(passed.group(1)) != expected:
        print(done.stdout[-4000:], done.stderr[-2000:], sep="\n")
        sys.exit(f"{test_file}: not all {expected} tests passed")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tests", type=int, default=200, help="tests per file (default 200)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of the in-process file (median)")
    parser.add_argument("--proxy-repeats", type=int, default=1, help="runs of the proxy file (median)")
    parser.add_argument("--quick", action="store_true", help="2 tests per file, one run each (a smoke test)")
    args = parser.parse_args()
    if args.quick:
        args.tests, args.repeats, args.proxy_repeats = 2, 1, 1

    work = Path(tempfile.mkdtemp(prefix="stbproxy-bench-inprocess-"))
    try:
        (work / "cassettes").mkdir()
        for name in CASSETTES:
            shutil.copy(REPO / "cassettes" / f"{name}.yaml", work / "cassettes")
        (work / "pytest.ini").write_text("[pytest]\nstb_cassette_dir = cassettes\n")
        (work / "test_in_process.py").write_text(test_file(args.tests, "stb_replay"))
        (work / "test_through_proxy.py").write_text(test_file(args.tests, "stb_proxy"))

        print(f"{args.tests} cassette tests per file, half replaying each of {', '.join(CASSETTES)}")
        inproc = [run_pytest(work, "test_in_process.py", args.tests) for _ in range(args.repeats)]
        in_median = statistics.median(inproc)
        print(f"in-process (stb_replay, requests-mock): {in_median:.2f} s wall (median of {len(inproc)}), "
              f"{1000 * in_median / args.tests:.1f} ms per test")
        proxied = [run_pytest(work, "test_through_proxy.py", args.tests) for _ in range(args.proxy_repeats)]
        proxy_median = statistics.median(proxied)
        print(f"through the proxy (stb_proxy, stbproxy serve per test): {proxy_median:.2f} s wall "
              f"(median of {len(proxied)}), {1000 * proxy_median / args.tests:.1f} ms per test")
        print(f"ratio proxy / in-process: {proxy_median / in_median:.1f}x")
        print("all tests passed")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
