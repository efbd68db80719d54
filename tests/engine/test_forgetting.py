"""What `stbproxy forget` selects: every given criterion holds, values of one are alternatives."""

import pytest

from stbproxy.errors import ConfigError
from stbproxy.forgetting import Selection, parse_age
from stbproxy.models import ApiRef, Exchange, Request, Response, Source

NOW = 1_000_000.0


def entry(key="http/api.example.com/GET/x/1", source=Source.SIMULATED, url="http://api.example.com/x", api=None,
          age=60.0, meta=None):
    return Exchange(key, Request("GET", url), Response(200), source, NOW - age, api=api, meta=meta or {})


WEATHER = ApiRef("Weather", "open_weather_for_weather", "forecast_for_open_weather")


@pytest.mark.parametrize("selection,item,chosen", [
    (Selection(sources=("simulated",)), entry(), True),
    (Selection(sources=("simulated",)), entry(source=Source.UPSTREAM), False),
    (Selection(sources=("upstream", "imported")), entry(source=Source.IMPORTED), True),
    (Selection(faulted=True), entry(meta={"fault": "down=0.2"}), True),
    (Selection(faulted=True), entry(), False),
    (Selection(hosts=("*.example.com",)), entry(), True),
    (Selection(hosts=("API.EXAMPLE.COM",)), entry(), True),
    (Selection(hosts=("other.org",)), entry(), False),
    (Selection(apis=("Weather/open_weather_for_weather",)), entry(api=WEATHER), True),
    (Selection(apis=("Weather/open_weather_for_weather",)), entry(), False),
    (Selection(apis=("*/forecast_*",)), entry(api=WEATHER), True),
    (Selection(apis=("Finance",)), entry(api=WEATHER), False),
    (Selection(keys=("http/api.example.com/",)), entry(), True),
    (Selection(keys=("api/",)), entry(), False),
    (Selection(keys=("http/*/GET/*",)), entry(), True),
    (Selection(older_than=3600), entry(age=7200), True),
    (Selection(older_than=3600), entry(age=60), False),
    (Selection(newer_than=3600), entry(age=60), True),
    (Selection(session_keys=frozenset({"http/api.example.com/GET/x/1"})), entry(), True),
    (Selection(session_keys=frozenset()), entry(), False),
    # every criterion must hold
    (Selection(sources=("simulated",), hosts=("other.org",)), entry(), False),
    (Selection(sources=("simulated",), faulted=True), entry(meta={"fault": "timeout"}), True),
])
def test_selection(selection, item, chosen):
    assert selection.matches(item, NOW) is chosen


def test_an_empty_selection_is_empty_and_any_criterion_is_not():
    assert Selection().is_empty()
    assert not Selection(faulted=True).is_empty() and not Selection(session_keys=frozenset()).is_empty()


@pytest.mark.parametrize("text,seconds", [("90", 90), ("30s", 30), ("15m", 900), ("2h", 7200), ("7d", 604800),
                                          ("1w", 604800), ("1.5h", 5400)])
def test_ages(text, seconds):
    assert parse_age(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "5y", "-3d"])
def test_bad_ages_name_the_value(text):
    with pytest.raises(ConfigError, match="is not an age"):
        parse_age(text)
