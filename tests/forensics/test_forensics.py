"""Run forensics, the pure parts: how sessions name trials and forks, how answers are
compared in verify mode, the drift report, and what a recorded session plays back."""

from __future__ import annotations

import base64
import json

import pytest

from stbproxy.errors import ConfigError
from stbproxy.forensics import drift
from stbproxy.forensics.drift_report import drift_by_api, render
from stbproxy.forensics.naming import Fork, SessionRef, completed, parse_fork, session_ref, session_spec, trial_key
from stbproxy.forensics.playback import Recordings, SessionPlayback
from stbproxy.keys import KeyRules
from stbproxy.models import Exchange, Request, Response, Source
from stbproxy.sessions import safe_session_name


def basic(user: str) -> tuple[tuple[str, str], ...]:
    return (("Proxy-Authorization", "Basic " + base64.b64encode(f"{user}:".encode()).decode()),)


# -- naming -------------------------------------------------------------------------------------


def test_a_session_names_its_trial_and_fork_in_every_place_a_session_is_named():
    assert session_spec("run-7;trial=2") == "run-7;trial=2"
    assert session_spec("run-7b;fork=run-7@12;trial=3") == "run-7b;trial=3;fork=run-7@12"
    assert session_spec(None, (("X-Stb-Trial", "4"),)) == ";trial=4"
    assert session_spec("x", (("X-Stb-Fork", "base@2"),)) == "x;fork=base@2"
    assert session_ref(session_spec("my run/2;trial=2")) == SessionRef(safe_session_name("my run/2"), 2)
    assert session_spec(None) is None


@pytest.mark.parametrize("raw", ["r;trial=0", "r;trial=x", "r;trial=", "r;fork=base", "r;fork=@3", "r;fork=b@0",
                                 "r;fork=../x@2"])
def test_malformed_parameters_are_left_out_never_refused(raw):
    assert session_ref(session_spec(raw)) == SessionRef("r")


def test_what_a_request_leaves_unsaid_comes_from_its_tunnel_or_the_run():
    assert completed(None, "serve-1") == "serve-1"
    assert completed(";trial=2", "tunnel;fork=b@3") == "tunnel;trial=2;fork=b@3"
    assert completed("own", "tunnel;trial=5") == "own;trial=5"
    assert completed("own;trial=1", "tunnel;trial=5") == "own;trial=1"


def test_fork_and_trial_texts_are_checked():
    assert parse_fork("base@12") == Fork("base", 12)
    for bad in ("base", "base@0", "@3", "a b@2"):
        with pytest.raises(ConfigError):
            parse_fork(bad)


def test_trial_keys():
    assert trial_key("http/h/POST/v1/chat/completions/abc", None) == "http/h/POST/v1/chat/completions/abc"
    assert trial_key("k", 1) == "k"  # trial 1 is a plain run's twin
    assert trial_key("k", 2) == "k~trial2" == trial_key("k~trial2", 2)  # once, even when applied twice
    assert trial_key("k", 12) != trial_key("k", 2)


# -- comparing answers ----------------------------------------------------------------------------


def resp(document, status: int = 200) -> Response:
    body = document if isinstance(document, bytes) else json.dumps(document).encode()
    return Response(status, (("Content-Type", "application/json"),), body)


RULES = drift.Rules.build()


@pytest.mark.parametrize("old, new, verdict, path", [
    ({"a": 1}, {"a": 1}, "same", ""),
    ({"a": 1, "b": [1, 2]}, {"a": 1, "b": [1, 2, 3]}, "values", "/b"),
    ({"a": 1}, {"a": "1"}, "shape", "/a"),
    ({"a": 1}, {"a": 1, "new": True}, "shape", "/new"),
    ({"a": {"b": 1}}, {"a": {"b": 2}}, "values", "/a/b"),
    ({"items": [{"x": 1}]}, {"items": [{"x": 1}, {"x": 2}]}, "values", "/items"),  # more items: the same shape
    ({"items": [{"x": 1}]}, {"items": [{"x": None}]}, "shape", "/items/0/x"),
    ({"a/b": 1}, {"a/b": 2}, "values", "/a~1b"),
])
def test_compare_finds_the_first_difference(old, new, verdict, path):
    found = drift.compare(resp(old), resp(new), RULES)
    assert (found.verdict, found.path) == (verdict, path)


def test_a_changed_status_comes_first():
    found = drift.compare(resp({"a": 1}), resp({"b": 1}, 503), RULES)
    assert found.to_dict() == {"verdict": "status", "path": "", "stored": "200", "live": "503"}


def test_default_rules_leave_out_timestamps_and_request_ids():
    old = {"temp": 21, "observed_at": "2026-01-01T10:00:00Z", "meta": {"request_id": "a1", "when": "2026-01-01 10:00"}}
    new = {"temp": 21, "observed_at": "2026-03-04T11:00:00+00:00",
           "meta": {"request_id": "b2", "when": "2026-02-02 12:30"}}
    assert drift.compare(resp(old), resp(new), RULES).verdict == "same"
    assert drift.compare(resp(old), resp(new), drift.Rules.build(defaults=False)).verdict == "values"
    assert drift.compare(resp({"a": 1}), resp({"a": 1, "request_id": "x"}), RULES).verdict == "same"


def test_rules_by_path_value_and_scope():
    rules = drift.Rules.build(["@api.example.com path:/etag", r"value:^[0-9a-f]{8}$"], defaults=False)
    old, new = {"etag": "v1", "sig": "deadbeef"}, {"etag": "v2", "sig": "cafebabe"}
    assert drift.compare(resp(old), resp(new), rules.for_call(("api.example.com", "http/x"))).verdict == "same"
    other = drift.compare(resp(old), resp(new), rules.for_call(("other.example.com", "http/x")))
    assert (other.verdict, other.path) == ("values", "/etag")


@pytest.mark.parametrize("text", ["nope", "path:", "value:(", "@ path:/x", "glob:/x"])
def test_bad_rules_are_named(text):
    with pytest.raises(ConfigError, match="drift rule"):
        drift.parse_rule(text)


def test_values_under_secret_names_are_masked_and_long_ones_shortened():
    rules = KeyRules.build(("session_token",))
    found = drift.compare(resp({"session_token": "s3cr3t-1"}), resp({"session_token": "s3cr3t-2"}), RULES,
                          rules.secret_fields)
    assert found.stored == found.live == "[redacted]"
    long = drift.compare(resp({"t": "x" * 500}), resp({"t": "y" * 500}), RULES)
    assert len(long.stored) == drift.SHOWN_CHARS and long.stored.endswith("…")


def test_bodies_that_are_not_json_are_compared_as_bytes():
    assert drift.compare(resp(b"<html>a</html>"), resp(b"<html>a</html>"), RULES).verdict == "same"
    assert drift.compare(resp(b"<html>a</html>"), resp(b"<html>b</html>"), RULES).verdict == "values"
    assert drift.compare(resp(b"<html>a</html>"), resp({"a": 1}), RULES).verdict == "shape"


# -- the drift report ------------------------------------------------------------------------------


def test_drift_report_counts_per_api_and_names_the_first_change():
    changed = {"verdict": "values", "api": "http/h/GET/weather", "path": "/temp", "stored": "21", "live": "25"}
    rows = drift_by_api([
        ("a", [{"seq": 1, "drift": {"verdict": "same", "api": "http/h/GET/weather"}}, {"seq": 2, "source": "cache"}]),
        ("b", [{"seq": 1, "drift": changed}, {"seq": 2, "drift": {"verdict": "new", "api": "http/h/GET/job"}}]),
    ])
    assert [row.to_dict() for row in rows] == [
        {"api": "http/h/GET/job", "checked": 1, "changed": 0, "counts": {"new": 1}, "first_change": None},
        {"api": "http/h/GET/weather", "checked": 2, "changed": 1, "counts": {"same": 1, "values": 1},
         "first_change": {"verdict": "values", "path": "/temp", "stored": "21", "live": "25", "origin": "",
                          "session": "b", "seq": 1}}]
    text = render(rows)
    assert "http/h/GET/weather: values changed at /temp: stored 21, now 25 (session b, call 1)" in text
    assert text.rstrip().endswith("1 of 3 verified calls changed, in 1 of 2 APIs")
    assert "no verified calls" in render([])
    simulated = drift_by_api([("c", [{"seq": 4, "drift": {**changed, "origin": "simulated"}}])])
    assert "(session c, call 4, the stored answer simulated)" in render(simulated)


# -- playback from recorded sessions ---------------------------------------------------------------


class Recorded:
    """A store holding sessions: records, and the exchanges they point at."""

    def __init__(self) -> None:
        self.entries: dict[str, Exchange] = {}
        self.sessions: dict[str, list[dict]] = {}

    def add(self, session: str, url: str, body: dict, *, method: str = "GET", key: str | None = None,
            call: str = "", source: str = "upstream") -> None:
        key = key or f"log/upstream/{len(self.entries)}"
        self.entries[key] = Exchange(key, Request(method, url, (), b""), resp(body), Source.UPSTREAM, 0.0)
        records = self.sessions.setdefault(session, [])
        records.append({"seq": len(records) + 1, "source": source, "key": key, **({"call": call} if call else {})})

    def session_records(self, name):
        return iter(self.sessions.get(name, []))

    def get(self, key):
        return self.entries.get(key)


LLM_URL = "http://llm.test/v1/chat/completions"


def recorded_run() -> Recorded:
    store = Recorded()
    store.add("base", LLM_URL, {"turn": 1}, method="POST", call="llm-1")
    store.add("base", "http://api.test/job/1", {"state": "queued"}, call="job")
    store.add("base", "http://api.test/job/1", {"state": "done"}, call="job")
    store.sessions["base"].insert(1, {"seq": 9, "source": "error", "key": "", "error": "unreachable"})
    return store


def playback(store: Recorded, **options) -> SessionPlayback:
    return SessionPlayback(Recordings(store, lambda request: "recomputed"), **options)


def test_a_fork_plays_k_steps_of_the_same_kind_then_lets_go():
    play = playback(recorded_run(), fork=Fork("base", 2))
    me = SessionRef("me")
    first = play.answer(me, "any", Request("POST", "http://elsewhere.test/v1/chat/completions", (), b"{}"))
    second = play.answer(me, "any", Request("GET", "http://api.test/job/1?x=2", (), b""))
    assert first.record == {"forked": "base#1", "fork": {"from": "base", "at": 2}}
    assert second.record == {"forked": "base#2"}  # the error record was no step: it had no answer
    assert json.loads(second.exchange.response.body) == {"state": "queued"}
    assert play.answer(me, "any", Request("GET", "http://api.test/job/1", (), b"")) is None  # K done
    assert play.stop_note(me) == {}
    assert not play.involves(SessionRef("base"))  # the source never forks itself


def test_a_fork_stops_where_the_call_differs():
    play = playback(recorded_run(), fork=Fork("base", 3))
    me = SessionRef("me")
    assert play.answer(me, "k", Request("POST", LLM_URL, (), b"{}")) is not None
    assert play.answer(me, "k", Request("POST", "http://api.test/job/1", (), b"")) is None  # a write, not a read
    assert play.stop_note(me) == {"fork_stopped": "step 2: expected a tool call (read) to api.test, "
                                                  "got a tool call (write) to api.test"}
    assert play.stop_note(me) == {}  # said once
    assert play.answer(me, "k", Request("GET", "http://api.test/job/1", (), b"")) is None  # stopped for good


def test_ordered_playback_serves_the_nth_answer_then_the_last():
    play = playback(recorded_run(), ordered=True)
    base = SessionRef("base")
    served = [play.answer(base, "job", Request("GET", "http://api.test/job/1", (), b"")) for _ in range(3)]
    assert [json.loads(p.exchange.response.body)["state"] for p in served] == ["queued", "done", "done"]
    assert [p.record["ordered"] for p in served] == ["1 of 2", "2 of 2", "3 of 2"]
    assert play.answer(SessionRef("other"), "job", Request("GET", "http://api.test/job/1", (), b"")) is None
    assert play.answer(base, "unknown", Request("GET", "http://api.test/x", (), b"")) is None


def test_records_written_before_calls_were_named_find_their_key_again():
    store = Recorded()
    store.add("old", "http://api.test/a", {"n": 1})  # a log/ copy without "call"
    store.add("old", "http://api.test/b", {"n": 2}, key="http/api.test/GET/b/123")  # an entry: its own key
    keys = [step.call_key for step in Recordings(store, lambda request: "recomputed").steps("old")]
    assert keys == ["recomputed", "http/api.test/GET/b/123"]
