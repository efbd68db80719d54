"""eval exec's profiles, comparison and sums, against values worked out by hand (issue 44)."""

from __future__ import annotations

import json
import logging

import pytest

from stbeval.errors import InputError
from stbeval.exec_curl import parse_curl
from stbeval.exec_http import Reply, Sender, proxy_for_humans
from stbeval.exec_profiles import PROFILES
from stbeval.exec_run import (
    ANSWERED,
    FAILED,
    MISS,
    REFUSED,
    Allowed,
    Executed,
    Item,
    ItemResult,
    Keys,
    judge,
    load_items,
    score,
)
from stbeval.exec_score import Tally, best, compare, items_of

OW, CAT, GENERIC = PROFILES["openweather"], PROFILES["thecatapi"], PROFILES["generic"]


@pytest.mark.parametrize("url,prepared", [
    ("http://h/data/2.5/weather?q=New%20York",
     "http://h/data/2.5/weather?q=New+York&lang=en&units=standard&mode=json"),
    ("http://h/data/2.5/weather", "http://h/data/2.5/weather?lang=en&units=standard&mode=json"),
    ("http://h/data/2.5/forecast?q=Rome&units=metric&lang=fr",
     "http://h/data/2.5/forecast?q=Rome&units=metric&lang=fr&mode=json"),
    ("http://h/data/2.5/air_pollution?lat=1&lon=2", "http://h/data/2.5/air_pollution?lat=1&lon=2"),
    ("http://h/data/2.5/air_pollution/forecast?lat=1&lon=2", "http://h/data/2.5/air_pollution/forecast?lat=1&lon=2"),
    ("http://h/geo/1.0/direct?q=London%20Town", "http://h/geo/1.0/direct?q=London+Town"),
    ("http://h/geo/1.0/reverse?lat=1&lon=2", "http://h/geo/1.0/reverse?lat=1&lon=2&lang=en&units=standard&mode=json"),
])
def test_openweathers_defaults_and_plus_signs(url, prepared):
    assert OW.prepare(parse_curl(f"curl '{url}'")).url == prepared


@pytest.mark.parametrize("profile,answer,crashed", [
    (OW, {"cod": 200, "name": "x"}, None),
    (OW, {"cod": "200"}, None),
    (OW, {"cod": "404", "message": "city not found"}, "cod 404 (city not found)"),
    (OW, {"cod": 401}, "cod 401"),
    (OW, [{"name": "London"}], None),  # geocoding: a list, no cod
    (CAT, {"message": "SUCCESS", "id": 7}, None),
    (CAT, {"message": "NO_SUCH_FAVOURITE"}, "message 'NO_SUCH_FAVOURITE', not 'SUCCESS'"),
    (CAT, [{"id": "a"}], None),
    (GENERIC, {"cod": 500, "message": "anything"}, None),
])
def test_when_an_answer_counts_as_crashed(profile, answer, crashed):
    assert profile.failure(answer) == crashed


def test_items_lists_by_index_scalars_as_one_and_dropped_fields_out():
    assert items_of([{"a": 1}, 2]) == {"0": {"a": 1}, "1": 2}
    assert items_of("text") == {"(value)": "text"}
    assert items_of({"message": "SUCCESS", "id": 123}, CAT.dropped) == {"message": "SUCCESS"}


# Hand-worked: the prediction's items P, the label's L, the equal ones E:
# precision = |E| / |P|, recall = |E| / |L|, F1 = 2PR / (P + R).
@pytest.mark.parametrize("why,prediction,label,p,r,f1", [
    ("the same", {"a": 1, "b": [1, 2]}, {"b": [1, 2], "a": 1}, 1, 1, 1),
    ("one of six differs", dict(zip("abcdef", range(6))), {**dict(zip("abcdef", range(6))), "c": 9},
     5 / 6, 5 / 6, 5 / 6),
    ("a shorter list", {"0": "x", "1": "y"}, {"0": "x", "1": "y", "2": "z"}, 1, 2 / 3, 0.8),
    ("a longer one", {"0": "x", "1": "y", "2": "z", "3": "w"}, {"0": "x", "1": "y"}, 0.5, 1, 2 / 3),
    ("1 is not 1.0", {"a": 1}, {"a": 1.0}, 0, 0, 0),
    ("true is not 1", {"a": True}, {"a": 1}, 0, 0, 0),
    ("nested order does not count", {"a": {"x": 1, "y": 2}}, {"a": {"y": 2, "x": 1}}, 1, 1, 1),
    ("both empty", {}, {}, 1, 1, 1),
    ("an empty prediction", {}, {"a": 1}, 0, 0, 0),
])
def test_precision_recall_and_f1_over_top_level_items(why, prediction, label, p, r, f1):
    result = compare(prediction, label)
    assert (result.precision, result.recall, result.f1) == pytest.approx((p, r, f1)), why


def test_the_best_label_counts_and_labels_without_an_answer_are_skipped():
    index, comparison = best({"a": 1, "b": 2}, [None, {"a": 1, "b": 0}, {"a": 1, "b": 2}, {"a": 1, "b": 2}])
    assert index == 2 and comparison.f1 == 1.0  # the first of the two equal best
    assert best({"a": 1}, [None, None]) == (None, None)


def _reply(body, status=200, **headers):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return Reply(status, {k.replace("_", "-"): v for k, v in headers.items()}, data)


KEYS = Keys({"openweather": "OW_KEY"}, {"openweather": "k3y/+1"})


@pytest.mark.parametrize("why,line,reply,status,reason", [
    ("JSON", "curl http://h/", _reply({"cod": 200, "a": 1}), ANSWERED, ""),
    ("not JSON", "curl http://h/", _reply(b"<xml/>"), FAILED, "not JSON (HTTP 200, 6 bytes)"),
    ("cod 404", "curl http://h/", _reply({"cod": "404", "message": "city not found"}), FAILED,
     "cod 404 (city not found)"),
    ("-f on a 404", "curl -f http://h/", _reply({"cod": 200}, 404), FAILED, "curl -f fails on HTTP 404"),
    ("-i prints the head", "curl -i http://h/", _reply({"cod": 200}), FAILED, "not JSON: -i and -I print"),
    ("a replay miss, explained", "curl http://h/", _reply(
        {"error": "no stored answer", "closest": {"url": "http://h/?q=London",
                                                  "differences": [{"part": "query:q", "stored": "London",
                                                                   "got": "Paris"}]}}, 404, x_stb_source="miss"),
     MISS, "the closest stored one differs in query:q (stored 'London', got 'Paris')"),
    ("the proxy could not reach the API", "curl http://h/", _reply({"error": "refused"}, 502, x_stb_source="error"),
     FAILED, "the proxy got no answer from the API (X-Stb-Source: error, HTTP 502)"),
    ("a transport failure", "curl http://h/", Reply(error="no answer within 30 s"), FAILED, "no answer within 30 s"),
    ("the key echoed back is taken out", "curl http://h/",
     _reply({"cod": 401, "message": "Invalid API key k3y/+1 (k3y%2F%2B1)"}, 401), FAILED,
     "cod 401 (Invalid API key [redacted] ([redacted]))"),
])
def test_what_a_reply_counts_as(why, line, reply, status, reason):
    done = judge(line, parse_curl(line), reply, OW, KEYS)
    assert done.status == status and reason in done.reason, why
    assert "k3y" not in done.text + done.reason


def test_an_item_scores_against_its_best_answered_label():
    def label(items, status=ANSWERED):
        return Executed("curl x", status, items=items)

    item = Item("1", "generic", "q", "curl x", ("curl a", "curl b"))
    result = ItemResult(item, [label(None, MISS), label({"a": 1, "b": 2, "c": 3})],
                        Executed("curl x", ANSWERED, items={"a": 1, "b": 2, "c": 0}))
    score(result)
    assert (result.status, result.best_label, result.f1) == ("differs", 1, pytest.approx(2 / 3))
    assert result.record()["differing"] == [{"item": "c", "prediction": "0", "label": "3"}]
    refused = ItemResult(item, [label({"a": 1})], Executed(None, REFUSED, "no line of the generation begins with curl"))
    score(refused)
    assert (refused.status, refused.f1) == ("not_executable", 0.0)
    unscored = ItemResult(item, [label(None, FAILED)], Executed("curl x", ANSWERED, items={}))
    score(unscored)
    assert unscored.status == "unscored" and "no label has an answer" in unscored.reason


def test_tally_rates_are_over_the_scored_items():
    # Hand-worked: 4 items, 1 unscored; of the 3 scored: success (F1 1), differs (P 1, R 0.5, F1 2/3),
    # crashed (0). success = 1/3, crash = 1/3, precision = (1 + 1 + 0)/3, recall = (1 + 0.5)/3, F1 = (1 + 2/3)/3.
    tally = Tally("t")
    tally.add("success", 1, 1, 1)
    tally.add("differs", 1, 0.5, 2 / 3)
    tally.add("crashed")
    tally.add("unscored")
    row = tally.as_dict()
    assert (row["items"], row["scored"]) == (4, 3)
    assert row["success_rate"] == pytest.approx(100 / 3) and row["crash_rate"] == pytest.approx(100 / 3)
    assert row["precision"] == pytest.approx(200 / 3) and row["recall"] == pytest.approx(50)
    assert row["f1"] == pytest.approx(100 * (5 / 3) / 3)
    assert Tally("empty").as_dict()["success_rate"] is None


def test_allowed_hosts_are_the_profiles_and_the_options():
    allowed = Allowed(OW, ["127.0.0.1:5000", "localhost"])
    assert allowed("api.openweathermap.org") is None and allowed("127.0.0.1:5000") is None
    assert allowed("localhost:9") is None
    assert "127.0.0.1:5001 is not allowed for the task openweather" in allowed("127.0.0.1:5001")


def test_keys_come_from_the_named_variables_and_never_show():
    keys = Keys.read(["openweather", "thecatapi", "generic"], {"thecatapi": "MY_CAT"},
                     {"OPENWEATHER_API_KEY": "ow-1", "MY_CAT": "cat-2", "THECATAPI_API_KEY": "ignored"})
    assert keys.values == {"openweather": "ow-1", "thecatapi": "cat-2"}
    assert keys.described() == {"openweather": {"env": "OPENWEATHER_API_KEY", "set": True},
                                "thecatapi": {"env": "MY_CAT", "set": True}, "generic": {"env": None, "set": False}}
    assert keys.scrub("a ow-1 b cat-2") == "a [redacted] b [redacted]"


@pytest.mark.parametrize("text,problem", [
    ("", "no items"),
    ('{"id": 1, "labels": ["curl x"]}\nnot json\n', "line 2 is not JSON"),
    ('[{"id": 1, "labels": []}]', "item 1: 'labels' must be one curl command or a non-empty list"),
    ('[{"labels": ["curl x"]}]', "'id' must be a string or an integer"),
    ('[{"id": 1, "labels": "curl x", "task": "weather"}]', "unknown task 'weather'"),
    ('[{"id": 1, "labels": "curl x"}, {"id": "1", "labels": "curl y"}]', "the id '1' is given twice"),
    ('[{"id": 1, "labels": "curl x", "generation": 5}]', "'generation' must be a string"),
])
def test_a_bad_items_file_is_one_line_naming_the_problem(tmp_path, text, problem):
    path = tmp_path / "items.json"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        load_items(path, "generic")
    assert problem in str(caught.value) and str(path) in str(caught.value)


def test_items_files_in_both_forms(tmp_path):
    rows = [{"id": 1, "query": "q", "generation": "curl a", "labels": "curl b", "task": "thecatapi"},
            {"id": "two", "labels": ["curl c", "curl d"]}]
    (tmp_path / "a.json").write_text(json.dumps({"items": rows}))
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for name in ("a.json", "a.jsonl"):
        items = load_items(tmp_path / name, "openweather")
        assert [(i.id, i.task, i.labels) for i in items] == [("1", "thecatapi", ("curl b",)),
                                                            ("two", "openweather", ("curl c", "curl d"))]


def test_httpx_log_records_lose_the_key_while_a_sender_is_open(caplog):
    with caplog.at_level(logging.DEBUG):
        with Sender("http://127.0.0.1:9", ca=None, timeout=1, scrub=KEYS.scrub):
            logging.getLogger("httpx").info("HTTP Request: GET %s", "http://h/?appid=k3y/+1")
        logging.getLogger("httpx").info("after: %s", "plain")
    assert "k3y" not in caplog.text and "[redacted]" in caplog.text and "after: plain" in caplog.text


def test_the_proxy_is_named_without_its_user_part():
    assert proxy_for_humans("http://my-run:@127.0.0.1:8080") == "http://127.0.0.1:8080"
