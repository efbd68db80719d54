"""The pytest plugin seen from a user's test suite (pytest's own pytester runs it)."""

import shutil
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
CASSETTES = Path(__file__).resolve().parent.parent / "cassettes"

USER_TEST = '''
import json, os, subprocess, sys
import pytest

AGENT = """
import requests, sys
r = requests.get(sys.argv[1], headers={"X-RapidAPI-Key": "k"}, timeout=10)
print(r.status_code)
"""

@pytest.mark.stb_cassette("weather_oslo")
def test_unrecorded_call(stb_proxy):
    out = subprocess.run([sys.executable, "-c", AGENT, "http://127.0.0.1:18765/v1/forecast?city=Oslo&days=2"],
                         env={**os.environ, **stb_proxy.env}, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "404"

@pytest.mark.stb_cassette("no_such_cassette")
def test_missing_cassette(stb_proxy):
    pass
'''


@pytest.mark.integration
def test_unrecorded_request_fails_the_test_with_the_closest_and_its_diff(pytester):
    shutil.copytree(CASSETTES, pytester.path / "cassettes")
    pytester.makepyfile(test_user=USER_TEST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=120)
    output = result.stdout.str()
    assert "not in the cassette: GET http://127.0.0.1:18765/v1/forecast?city=Oslo&days=2" in output
    assert "closest recorded: GET http://127.0.0.1:18765/v1/forecast?city=Oslo&days=1" in output
    assert "query:days: recorded '1', got '2'" in output
    assert "no cassette" in output and "--stb-record" in output
    # the first test body passes and its fixture then fails it; the second fails in setup
    result.assert_outcomes(passed=1, errors=2)
