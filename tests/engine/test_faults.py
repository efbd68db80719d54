import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from stbproxy.errors import ConfigError, UpstreamError
from stbproxy.models import Response
from stbproxy.sim.faults import (
    ALLOWED_STATUSES,
    Fault,
    FaultPlan,
    FaultRule,
    Latency,
    parse_fault_spec,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
TOOLS = [f"tool_{i:03d}_for_demo" for i in range(400)]


# --- parsing -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("down=0.2", FaultRule(Fault.DOWN, fraction=0.2)),
        ("down=25%", FaultRule(Fault.DOWN, fraction=0.25)),
        ("down=0.5,tool=weather*", FaultRule(Fault.DOWN, fraction=0.5, tool="weather*")),
        ("status=503,p=0.1,tool=weather*", FaultRule(Fault.STATUS, status=503, p=0.1, tool="weather*")),
        ("timeout,api=*forecast*", FaultRule(Fault.TIMEOUT, api="*forecast*")),
        ("refuse,host=*.p.rapidapi.com,p=0.5", FaultRule(Fault.REFUSE, host="*.p.rapidapi.com", p=0.5)),
        ("latency=200ms", FaultRule(Fault.LATENCY, latency=Latency(0.2))),
        ("latency=1.5s", FaultRule(Fault.LATENCY, latency=Latency(1.5))),
        ("latency=lognormal:200ms:0.5", FaultRule(Fault.LATENCY, latency=Latency(0.2, 0.5))),
        ("malformed,p=0.05", FaultRule(Fault.MALFORMED, p=0.05)),
        ("empty", FaultRule(Fault.EMPTY)),
        ("  Status = 429 , P = 10% ", FaultRule(Fault.STATUS, status=429, p=0.1)),
    ],
)
def test_parse_good_specs(spec, expected):
    rule = parse_fault_spec(spec)
    assert rule == expected
    assert parse_fault_spec(str(rule)) == rule  # the canonical form round-trips


@pytest.mark.parametrize("code", ALLOWED_STATUSES)
def test_every_allowed_status_parses(code):
    assert parse_fault_spec(f"status={code}").status == code


@pytest.mark.parametrize(
    "spec, message_part",
    [
        ("", "empty fault spec"),
        ("   ", "empty fault spec"),
        ("explode", "'explode' is not a fault kind"),
        ("p=0.5", "'p=0.5' is a scope, not a fault kind"),
        ("tool=weather*", "'tool=weather*' is a scope, not a fault kind"),
        ("status=418", "'status=418' is not an allowed status code"),
        ("status=abc", "'status=abc' is not an allowed status code"),
        ("status", "'status' needs a value"),
        ("down", "'down' needs a value"),
        ("down=1.5", "must be between 0 and 1"),
        ("down=-0.1", "must be between 0 and 1"),
        ("down=half", "'down=half' is not a number"),
        ("down=0.2,p=0.5", "'p=0.5' does not apply to down"),
        ("down=0.2,api=x", "'api=x' does not apply to down"),
        ("timeout=5s", "'timeout=5s' takes no value"),
        ("empty=1", "'empty=1' takes no value"),
        ("latency=200", "like 200ms or 1.5s"),
        ("latency=fast", "like 200ms or 1.5s"),
        ("latency=5min", "like 200ms or 1.5s"),
        ("latency=600s", "longer than"),
        ("latency=lognormal:200ms", "lognormal:MEDIAN:SIGMA"),
        ("latency=lognormal:200ms:wide", "sigma that is not a number"),
        ("latency=lognormal:200ms:9", "sigma outside"),
        ("refuse,p=2", "'p=2' must be between 0 and 1"),
        ("refuse,p=nan", "'p=nan' must be between 0 and 1"),
        ("refuse,where=x", "'where=x' is not a scope"),
        ("refuse,host", "'host' is not a scope"),
        ("refuse,host=", "'host=' has an empty value"),
        ("refuse,,p=0.1", "empty part between commas"),
        ("refuse,tool=a,tool=b", "'tool=b' repeats a scope"),
    ],
)
def test_parse_malformed_specs(spec, message_part):
    with pytest.raises(ConfigError) as info:
        parse_fault_spec(spec)
    message = str(info.value)
    assert message_part in message
    assert "status=CODE" in message and "p=PROBABILITY" in message  # says what is allowed


def test_from_specs_accepts_repeats_semicolons_and_a_single_string():
    plan = FaultPlan.from_specs(["down=0.1", "latency=10ms; status=500,p=0.5"], seed=4)
    assert [r.fault for r in plan.rules] == [Fault.DOWN, Fault.LATENCY, Fault.STATUS]
    assert FaultPlan.from_specs("timeout").rules == (FaultRule(Fault.TIMEOUT),)
    assert not FaultPlan.from_specs(None) and not FaultPlan.from_specs([])
    with pytest.raises(ConfigError, match="'status=999' is not an allowed"):
        FaultPlan.from_specs(["down=0.1", "status=999"])


@pytest.mark.parametrize("specs, message_part", [
    ([""], "empty fault spec ''"),
    (["down=0.1", "  "], "empty fault spec '  '"),
    ([";"], "bad fault spec ';': it has an empty rule between semicolons"),
    (["status=503;"], "bad fault spec 'status=503;': it has an empty rule"),
    (["timeout; ;latency=10ms"], "empty rule between semicolons"),
])
def test_from_specs_refuses_a_spec_that_names_no_failure(specs, message_part):
    with pytest.raises(ConfigError) as info:
        FaultPlan.from_specs(specs)
    assert message_part in str(info.value) and "status=CODE" in str(info.value)


def test_describe_lists_rules_and_seed():
    plan = FaultPlan.from_specs(["down=0.2", "status=503,tool=weather*,p=0.1"], seed=9)
    assert plan.describe() == "faults (seed 9): down=0.2; status=503,tool=weather*,p=0.1"
    assert FaultPlan().describe() == "faults: none"


# --- scoping ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, host, tool, api, hit",
    [
        ("timeout,host=*.p.rapidapi.com", "weather.p.rapidapi.com", "w", "a", True),
        ("timeout,host=*.p.rapidapi.com", "WEATHER.P.RAPIDAPI.COM", "w", "a", True),
        ("timeout,host=*.p.rapidapi.com", "example.org", "w", "a", False),
        ("timeout,tool=weather*", "h", "Weather_API_for_Data", "a", True),
        ("timeout,tool=weather*", "h", "news_for_data", "a", False),
        ("timeout,tool=weather*", "weather.example", None, None, False),  # unmapped
        ("timeout,api=*forecast*", "h", "w", "get_Forecast_daily", True),
        ("timeout,api=*forecast*", "h", "w", None, False),
        ("timeout,host=*.example,tool=w*", "a.example", "wind", "x", True),
        ("timeout,host=*.example,tool=w*", "a.example", "rain", "x", False),
        ("timeout", None, None, None, True),
    ],
)
def test_scopes_use_case_insensitive_globs(spec, host, tool, api, hit):
    decision = FaultPlan.from_specs(spec).decide(host, tool, api, "key")
    assert decision.failed is hit
    assert decision.fault is (Fault.TIMEOUT if hit else None)


def test_first_matching_failure_wins_and_latencies_add_up():
    plan = FaultPlan.from_specs(
        ["latency=100ms", "status=429,tool=other", "status=503", "timeout", "latency=50ms"]
    )
    decision = plan.decide("h", "tool", "api", "key")
    assert (decision.fault, decision.status) == (Fault.STATUS, 503)
    assert decision.rule == "status=503"
    assert decision.latency == pytest.approx(0.15)


def test_no_rules_means_no_fault():
    decision = FaultPlan().decide("h", "t", "a", "k")
    assert not decision.failed and decision.latency == 0.0
    assert decision.make_response() is None and decision.upstream_error() is None


# --- probabilities -------------------------------------------------------------------


@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_fault_rate_is_close_to_p(p):
    plan = FaultPlan.from_specs(f"status=500,p={p}", seed=1)
    n = 4000
    hits = sum(plan.decide("h", "t", "a", f"GET /x?q={i}").failed for i in range(n))
    # Five standard deviations of a binomial: a real bug lands far outside.
    assert abs(hits / n - p) <= 5 * math.sqrt(p * (1 - p) / n) + 1e-9


def test_per_request_draws_are_repeatable_and_depend_on_key_seed_and_occurrence():
    plan = FaultPlan.from_specs("refuse,p=0.5", seed=3)
    keys = [f"key-{i}" for i in range(300)]

    def pattern(plan, occurrence=0):
        return [plan.decide("h", "t", "a", k, occurrence).failed for k in keys]

    assert pattern(plan) == pattern(FaultPlan.from_specs("refuse,p=0.5", seed=3))
    assert pattern(plan) != pattern(plan, occurrence=1)
    assert pattern(plan) != pattern(FaultPlan.from_specs("refuse,p=0.5", seed=4))


def test_rules_draw_independently():
    # Two rules with the same p must not fire on exactly the same requests.
    plan = FaultPlan.from_specs(["latency=10ms,p=0.5", "latency=20ms,p=0.5"])
    latencies = {round(plan.decide("h", "t", "a", f"k{i}").latency, 3) for i in range(200)}
    assert latencies == {0.0, 0.01, 0.02, 0.03}


# --- down tools ----------------------------------------------------------------------


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.2, 0.5, 1.0])
def test_down_fraction_of_tools(fraction):
    down = FaultPlan.from_specs(f"down={fraction}", seed=0).down_tools(TOOLS)
    assert abs(len(down) / len(TOOLS) - fraction) <= 0.08
    assert down == [t for t in TOOLS if t in set(down)]  # input order kept


def test_down_set_grows_monotonically_with_fraction():
    previous: set[str] = set()
    for fraction in (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.0):
        down = set(FaultPlan.from_specs(f"down={fraction}", seed=11).down_tools(TOOLS))
        assert previous <= down
        previous = down
    assert previous == set(TOOLS)


def test_down_choice_depends_on_seed():
    a = FaultPlan.from_specs("down=0.3", seed=1).down_tools(TOOLS)
    b = FaultPlan.from_specs("down=0.3", seed=2).down_tools(TOOLS)
    assert a != b


def test_down_decides_every_request_of_a_down_tool_the_same_way():
    plan = FaultPlan.from_specs("down=0.3", seed=5)
    down = set(plan.down_tools(TOOLS))
    for tool in TOOLS[:60]:
        faults = {plan.decide("h", tool, f"api{i}", f"k{i}").fault for i in range(5)}
        assert faults == ({Fault.DOWN} if tool in down else {None})
    # Tool identity ignores case: standardized and display names agree.
    name = sorted(down)[0]
    assert plan.decide("h", name.upper(), None, "k").fault is Fault.DOWN


def test_unmapped_requests_use_the_host_as_tool_identity():
    plan = FaultPlan.from_specs("down=0.5", seed=0)
    hosts = [f"api{i}.example.com" for i in range(100)]
    down_hosts = set(plan.down_tools(hosts))
    assert 0 < len(down_hosts) < len(hosts)
    for host in hosts:
        assert plan.decide(host, None, None, "k").failed is (host in down_hosts)


def test_scoped_down_only_touches_matching_tools():
    plan = FaultPlan.from_specs("down=1.0,tool=weather*")
    assert plan.down_tools(["weather_now", "news", "Weather_x"]) == ["weather_now", "Weather_x"]
    assert not plan.decide("h", None, None, "k").failed  # a tool scope needs a tool


_CHILD = """
import json, sys
from stbproxy.sim.faults import FaultPlan
tools = json.loads(sys.argv[1])
print(json.dumps({f: FaultPlan.from_specs(f"down={f}", seed=42).down_tools(tools) for f in ("0.1", "0.5")}))
"""


def test_down_tools_are_the_same_in_another_process():
    tools = TOOLS[:120]
    here = {f: FaultPlan.from_specs(f"down={f}", seed=42).down_tools(tools) for f in ("0.1", "0.5")}
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    if os.environ.get("PYTHONHASHSEED") == "12345":
        env["PYTHONHASHSEED"] = "54321"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps(tools)],
        env=env, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert json.loads(out.stdout) == here
    assert here["0.1"] and set(here["0.1"]) < set(here["0.5"])


# --- latency -------------------------------------------------------------------------


def test_fixed_latency_lets_the_call_proceed():
    decision = FaultPlan.from_specs("latency=250ms").decide("h", "t", "a", "k")
    assert decision.latency == pytest.approx(0.25)
    assert not decision.failed and decision.make_response() is None


def test_lognormal_latency_is_seeded_and_centred_on_the_median():
    plan = FaultPlan.from_specs("latency=lognormal:200ms:0.5", seed=8)
    draws = [plan.decide("h", "t", "a", f"k{i}").latency for i in range(2000)]
    assert draws == [plan.decide("h", "t", "a", f"k{i}").latency for i in range(2000)]
    assert statistics.median(draws) == pytest.approx(0.2, rel=0.1)
    sigma = statistics.stdev(math.log(d) for d in draws)
    assert sigma == pytest.approx(0.5, rel=0.1)
    other_seed = FaultPlan.from_specs("latency=lognormal:200ms:0.5", seed=9)
    assert other_seed.decide("h", "t", "a", "k0").latency != draws[0]


def test_latency_probability_applies():
    plan = FaultPlan.from_specs("latency=1s,p=0.25", seed=2)
    delayed = sum(plan.decide("h", "t", "a", f"k{i}").latency == 1.0 for i in range(2000))
    assert 400 <= delayed <= 600


# --- answers -------------------------------------------------------------------------


@pytest.mark.parametrize("code", ALLOWED_STATUSES)
def test_status_fault_answers_with_a_json_error(code):
    decision = FaultPlan.from_specs(f"status={code}").decide("h", "t", "a", "k")
    response = decision.make_response()
    assert isinstance(response, Response)
    assert response.status == code and response.reason
    payload = json.loads(response.body)
    assert payload["status"] == code and payload["message"]
    assert response.header("x-stb-source") == "injected"
    assert response.header("content-length") == str(len(response.body))
    assert decision.upstream_error() is None


def test_malformed_fault_answers_200_with_broken_json():
    response = FaultPlan.from_specs("malformed").decide("h", "t", "a", "k").make_response()
    assert response is not None and response.status == 200 and response.body
    with pytest.raises(ValueError):
        json.loads(response.body)


def test_empty_fault_answers_200_with_no_body():
    response = FaultPlan.from_specs("empty").decide("h", "t", "a", "k").make_response()
    assert response is not None and (response.status, response.body) == (200, b"")


@pytest.mark.parametrize(
    "spec, error_kind",
    [("refuse", "unreachable"), ("timeout", "timeout"), ("down=1", "unreachable")],
)
def test_no_answer_kinds_become_upstream_errors(spec, error_kind):
    decision = FaultPlan.from_specs(spec).decide("h", "t", "a", "k")
    assert decision.failed and not decision.answers
    assert decision.make_response() is None
    error = decision.upstream_error()
    assert isinstance(error, UpstreamError) and error.failure == error_kind
    assert "injected" in str(error)


@pytest.mark.parametrize("code", ALLOWED_STATUSES)
@pytest.mark.parametrize("policy", ["stb", "strict"])
def test_injected_status_answers_are_judged_failures(code, policy):
    from stbproxy.stb.validity import judge

    response = FaultPlan.from_specs(f"status={code}").decide("h", "t", "a", "k").make_response()
    assert response is not None
    assert not judge(response.status, response.body, "application/json", policy=policy).valid
