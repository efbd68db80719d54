"""Cassette-based regression tests: the demo agent against recorded traffic, network off.

Replays use the cassettes in cassettes/. `pytest --stb-record tests/cassettes/test_regression_cassettes.py`
records them again from the demo upstream (tests/demo/weather_api.py).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.demo.weather_api import WeatherApi, forecast

AGENT = Path(__file__).resolve().parents[1] / "demo" / "agent.py"
SECRET = "demo-secret-key-123"


@pytest.fixture
def weather_api(request):
    """The real demo API, only while recording: replays must not need it."""
    if request.config.getoption("--stb-record"):
        with WeatherApi():
            yield
    else:
        yield


def run_agent(stb_proxy, *args: str) -> dict:
    env = {**os.environ, **stb_proxy.env, "WEATHER_API_KEY": SECRET}
    result = subprocess.run([sys.executable, str(AGENT), *args], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.stb_cassette("weather_p_cities")
def test_agent_finds_the_warmest_p_city(weather_api, stb_proxy):
    result = run_agent(stb_proxy, "p", "3")
    assert result["cities"] == ["Paris", "Porto", "Prague"]
    expected = {city: max(day["high"] for day in forecast(city, 3)["days"]) for city in result["cities"]}
    assert result["highs"] == expected
    assert result["warmest"] == max(expected, key=expected.get)


@pytest.mark.stb_cassette("weather_oslo")
def test_agent_single_city(weather_api, stb_proxy):
    result = run_agent(stb_proxy, "os", "1")
    assert result == {"cities": ["Oslo"], "highs": {"Oslo": forecast("Oslo", 1)["days"][0]["high"]}, "warmest": "Oslo"}


@pytest.mark.parametrize("name", ["weather_p_cities", "weather_oslo"])
def test_committed_cassettes_hold_no_secret_and_say_where_answers_came_from(name):
    text = (Path(__file__).resolve().parents[2] / "cassettes" / f"{name}.yaml").read_text()
    assert SECRET not in text and "X-Stb-Source" in text
