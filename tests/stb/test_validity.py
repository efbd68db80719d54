import json
import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stbproxy.errors import ConfigError, InputError
from stbproxy.stb import validity
from stbproxy.stb.validity import (
    NOT_AVAILABLE_KINDS,
    FailureKind,
    TaxonomyRow,
    Verdict,
    check_result,
    classify,
    judge,
    judge_object,
    taxonomy_table,
)

F = FailureKind


def ok(response):
    return {"error": "", "response": response}


# --- check_result: StableToolBench's rules, quirks included ---------------------------

@pytest.mark.parametrize(
    "obj, valid",
    [
        # real answers
        (ok({"date": "2022-10-01", "name": "The Lumineers", "venue_name": "Aware Super Theatre"}), True),
        (ok("<html><body>Thumbnail ready</body></html>"), True),
        (ok([{"symbol": "BTC", "price": 27123.4}]), True),
        # rule 1: error set, or a field missing
        ({"error": "request invalid, data error. status_code=500", "response": ""}, False),
        ({"error": "Failed to generate fake response", "response": ""}, False),
        ({"error": None, "response": {"a": 1}}, False),
        ({"response": {"a": 1}}, False),
        ({"error": ""}, False),
        ("not a dict", False),
        # rule 2 comes before every failure marker, even "parameter" and "404"
        (ok("songkick_concert() got an unexpected keyword argument 'id' (parameter 404)"), True),
        (ok("TypeError: Got An Unexpected Keyword Argument 'q'"), True),
        # rule 3: not available
        (ok({"message": "You have exceeded the rate limit per second for your plan, BASIC"}), False),
        (ok({"message": "The request timed out"}), False),
        (ok('{\'message\': "API doesn\'t exists"}'), False),
        (ok({"status": 500, "message": "Internal Server Error"}), False),
        (ok({"error": "Service Not Found"}), False),
        (ok({"phone": "+1 404 555 0100"}), False),  # substring rule: a false alarm, kept
        (ok("service not found"), True),  # that marker is case-sensitive
        # rule 4: not authorised
        (ok({"message": "You are not authorized to access this resource"}), False),
        (ok({"message": "This endpoint is disabled for your subscription"}), False),
        (ok({"message": "Invalid consumer key"}), False),
        (ok({"result": "Your account is blocked"}), False),
        (ok({"code": "ACCESS_DENIED"}), False),
        (ok({"code": "access_denied"}), True),  # case-sensitive too
        (ok({"message": "You are not subscribed to this API."}), True),  # no rule names it
        # rule 5: parameters
        (ok({"message": "Missing required parameter: city"}), False),
        (ok("JSON parse error: unexpected token"), False),
        (ok("name 'requests' is not defined"), False),
        # rule 6
        (ok(""), False),
        (ok("upstream said status_code=503"), False),
        (ok("upstream said status_code=429"), False),
        # str() of the response is what is tested: these are not empty
        (ok([]), True),
        (ok({}), True),
        (ok(None), True),
    ],
)
def test_check_result(obj, valid):
    assert check_result(obj) is valid


@pytest.mark.parametrize("response, valid", [
    # StableToolBench looks for "API doesn't exists" in the lower-cased text, where it can
    # never be: a text saying so is an answer there ...
    ("API doesn't exists", True),
    ("this API doesn't exists, they say", True),
    # ... and only RapidAPI's own answer, as str() writes it, is a failure
    ({"message": "API doesn't exists"}, False),
    ("{'message': \"API doesn't exists\"}", False),
    ({"message": "API doesn't exists", "more": 1}, True),
])
def test_api_doesnt_exists_as_stabletoolbench_reads_it(response, valid):
    assert check_result(ok(response)) is valid


@pytest.mark.parametrize(
    "obj, rule",
    [
        (ok("got an unexpected keyword argument 'x'"), "rule 2"),
        (ok("rate limit"), "rule 3"),
        (ok("401"), "rule 4"),
        (ok("parameter"), "rule 5"),
        (ok(""), "rule 6"),
        (ok("fine"), "rule 7"),
        ({"error": "boom", "response": ""}, "rule 1"),
    ],
)
def test_judge_object_stb_names_the_deciding_rule(obj, rule):
    verdict = judge_object(obj, "stb")
    assert verdict.valid is check_result(obj)
    assert rule in verdict.reason


# --- judging HTTP answers ---------------------------------------------------------------

JSON = "application/json"


@pytest.mark.parametrize(
    "status, body, valid, failure, reason_part",
    [
        (200, b'{"date": "2022-10-01", "name": "x"}', True, F.SUCCESS, "rule 7"),
        (201, b"created", True, F.SUCCESS, "rule 7"),
        (200, b"", False, F.OTHER, "rule 6"),
        (200, b'{"message": "You have exceeded the rate limit per minute"}', False, F.NOT_CONNECTED, "rate limit"),
        (200, b'{"price": 500}', False, F.OTHER, "'500'"),
        (404, b'{"message": "Not Found"}', False, F.NOT_FOUND, "404"),
        (429, b'{"message": "Too many requests"}', False, F.NOT_CONNECTED, "429"),
        (500, b"oops", False, F.NOT_FOUND, "HTTP 500 Internal Server Error"),
        (503, b"", False, F.NOT_CONNECTED, "503"),
        (403, b'{"message": "You are not subscribed to this API."}', False, F.NOT_AUTHORISED, "403"),
        (302, b"moved", False, F.OTHER, "302"),  # the stb policy wants a 2xx
    ],
)
def test_judge_stb(status, body, valid, failure, reason_part):
    verdict = judge(status, body, JSON, "stb")
    assert verdict == Verdict(valid, verdict.reason, failure)
    assert reason_part in verdict.reason


def test_judge_stb_is_check_result_on_the_virtual_servers_object():
    body = json.dumps({"items": ["a", "b"], "note": "blocked"}).encode()
    parsed = {"items": ["a", "b"], "note": "blocked"}
    assert judge(200, body, JSON, "stb").valid is check_result(ok(parsed)) is False
    # a body that is not JSON is judged as text
    assert judge(200, b"plain words", "text/plain", "stb").valid is check_result(ok("plain words"))


def test_judge_decodes_the_declared_charset():
    body = "réponse: connexion établie".encode("latin-1")
    assert judge(200, body, "text/plain; charset=latin-1", "strict").valid
    assert judge(200, body, "text/plain; charset=no-such-codec", "stb").valid


@pytest.mark.parametrize(
    "status, body, valid, failure, reason_part",
    [
        # status first: a 2xx body mentioning 500 or "blocked" is content
        (200, b'{"price": 500, "status": "blocked user list"}', True, F.SUCCESS, "200"),
        (302, b"redirecting", True, F.SUCCESS, "302"),
        (200, b"  ", False, F.OTHER, "empty body"),
        (204, b"", False, F.OTHER, "empty body"),
        (400, b'{"message": "bad"}', False, F.PARAMETER_CHANGE, "HTTP 400"),
        (401, b"", False, F.NOT_AUTHORISED, "HTTP 401"),
        (403, b"{}", False, F.NOT_AUTHORISED, "HTTP 403"),
        (404, b"{}", False, F.NOT_FOUND, "HTTP 404"),
        (429, b'{"message": "slow down"}', False, F.NOT_CONNECTED, "HTTP 429"),
        (500, b"{}", False, F.NOT_FOUND, "HTTP 500"),
        (504, b"", False, F.NOT_CONNECTED, "HTTP 504"),
        (418, b"teapot", False, F.OTHER, "HTTP 418"),
        # unambiguous gateway messages in short 2xx bodies
        (200, b'{"message": "You are not subscribed to this API."}', False, F.NOT_AUTHORISED, "subscribed"),
        (200, b'{"message": "API doesn\'t exists"}', False, F.NOT_FOUND, "API doesn't exists"),
        (200, b'{"message": "You have exceeded the MONTHLY quota"}', False, F.NOT_CONNECTED, "exceeded"),
        # ... but a long body quoting one is content
        (200, json.dumps({"text": "Service Not Found " + "lorem " * 300}).encode(), True, F.SUCCESS, "200"),
    ],
)
def test_judge_strict(status, body, valid, failure, reason_part):
    verdict = judge(status, body, JSON, "strict")
    assert (verdict.valid, verdict.failure) == (valid, failure)
    assert reason_part in verdict.reason


@pytest.mark.parametrize(
    "obj, valid, failure",
    [
        (ok({"price": 500}), True, F.SUCCESS),
        (ok("got an unexpected keyword argument 'x'"), True, F.SUCCESS),
        ({"error": "request invalid, data error. status_code=503", "response": ""}, False, F.OTHER),
        ({"error": "HTTPSConnectionPool: Max retries exceeded (connection refused)", "response": ""},
         False, F.NOT_CONNECTED),
        (ok(""), False, F.OTHER),
        (ok(None), False, F.OTHER),
        (ok({"message": "Invalid API key. Go to https://docs.rapidapi.com/docs/keys"}), False, F.NOT_AUTHORISED),
        ({"response": "x"}, False, F.OTHER),
    ],
)
def test_judge_object_strict(obj, valid, failure):
    verdict = judge_object(obj, "strict")
    assert (verdict.valid, verdict.failure) == (valid, failure)


def test_unknown_policy_is_a_config_error():
    with pytest.raises(ConfigError, match="stb, strict"):
        judge(200, b"{}", JSON, "lenient")
    with pytest.raises(ConfigError):
        judge_object(ok("x"), "lenient")


@pytest.mark.parametrize("policy", ["stb", "strict"])
@pytest.mark.parametrize("status", [200, 204, 301, 400, 401, 404, 429, 500, 503])
@pytest.mark.parametrize("body", [b"", b'{"ok": true}', b"rate limit", b"Service Not Found"])
def test_a_verdict_is_success_exactly_when_valid(policy, status, body):
    verdict = judge(status, body, None, policy)
    assert (verdict.failure is F.SUCCESS) == verdict.valid
    assert verdict.reason


# --- the failure taxonomy --------------------------------------------------------------

FUNC_ERR = "Function executing from my_tools.Data.theclique.api import songkick_concert error...\n"


@pytest.mark.parametrize(
    "error, response, kind",
    [
        # not connected
        ("HTTP error 503", "", F.NOT_CONNECTED),
        ("", "HTTPSConnectionPool(host='x.p.rapidapi.com', port=443): Max retries exceeded "
             "(Caused by NewConnectionError('Failed to establish a new connection'))", F.NOT_CONNECTED),
        ("", "{'message': 'You have exceeded the rate limit per minute for your plan'}", F.NOT_CONNECTED),
        ("", "Request timed out", F.NOT_CONNECTED),
        ("", "upstream time out", F.NOT_CONNECTED),
        # not found
        ("", "{'message': \"API doesn't exists\"}", F.NOT_FOUND),
        ("", "404 page", F.NOT_FOUND),
        ("", "Service Not Found", F.NOT_FOUND),
        ("", "{'message': 'This service is not available'}", F.NOT_FOUND),
        ("", "{'message': 'Internal error'}", F.NOT_FOUND),
        ("", "Endpoint '/v2/foo' not found", F.NOT_FOUND),
        # parameter change
        ("", "Missing required parameter: city", F.PARAMETER_CHANGE),
        ("", "JSON parse error", F.PARAMETER_CHANGE),
        (FUNC_ERR + "name 'requests' is not defined", "", F.PARAMETER_CHANGE),
        # parsing error: the function failed, for no reason named above
        (FUNC_ERR + "Expecting value: line 1 column 1 (char 0)", "", F.PARSING_ERROR),
        (FUNC_ERR + "songkick_concert() got an unexpected keyword argument 'x'", "", F.PARSING_ERROR),
        # the module path names tools; "parse" and "connection" there mean nothing
        ("Function executing from my_tools.Tools.parse_connection.api import parse error...\n"
         "list index out of range", "", F.PARSING_ERROR),
        # not authorised
        ("", "{'message': 'You are not authorized'}", F.NOT_AUTHORISED),
        ("", "Unauthorised request", F.NOT_AUTHORISED),
        ("", "{'message': 'This endpoint is disabled for your subscription'}", F.NOT_AUTHORISED),
        ("", "{'code': 'ACCESS_DENIED'}", F.NOT_AUTHORISED),
        ("", "Error 403", F.NOT_AUTHORISED),
        ("", "Your credentials are invalid", F.NOT_AUTHORISED),
        ("", "blocked user", F.NOT_AUTHORISED),
        # other, success
        ("Failed to generate fake response", "", F.OTHER),
        ("", "{'temperature': 21.5, 'city': 'Paris'}", F.SUCCESS),
        ("", "", F.SUCCESS),
    ],
)
def test_classify(error, response, kind):
    assert classify(error, response) is kind


def test_classify_takes_the_first_listed_kind():
    # "timed out" (not connected) beats "404" (not found) beats "parameter"
    assert classify("", "404: timed out") is F.NOT_CONNECTED
    assert classify("", "parameter q: 404") is F.NOT_FOUND
    assert classify("", "parameter 401") is F.PARAMETER_CHANGE


def test_taxonomy_table_matches_the_papers_grouping():
    # Counts shaped like the paper's published shares over ToolBench's APIs.
    counts = Counter({F.SUCCESS: 444, F.NOT_AUTHORISED: 64, F.NOT_CONNECTED: 150, F.NOT_FOUND: 36,
                      F.PARAMETER_CHANGE: 36, F.PARSING_ERROR: 259, F.OTHER: 11})
    rows = taxonomy_table(counts)
    assert all(isinstance(r, TaxonomyRow) for r in rows)
    assert [r.kind for r in rows] == ["success", "not_available", "not_authorised",
                                      "not_connected", "not_found", "parameter_change",
                                      "parsing_error", "other"]
    table = {r.kind: (r.count, r.share) for r in rows}
    assert table["success"] == (444, pytest.approx(0.444))
    assert table["not_available"] == (492, pytest.approx(0.492))
    assert table["not_authorised"] == (64, pytest.approx(0.064))
    # the sub-kinds are shares of the not-available answers
    assert table["parsing_error"] == (259, pytest.approx(259 / 492))
    assert table["not_connected"][1] == pytest.approx(0.305, abs=0.001)
    assert sum(r.share for r in rows[3:]) == pytest.approx(1.0)
    assert {r.kind for r in rows[3:]} == {k.value for k in NOT_AVAILABLE_KINDS}


def test_taxonomy_table_accepts_names_and_survives_zero():
    rows = taxonomy_table({"success": 3, "other": 1})
    table = {r.kind: (r.count, r.share) for r in rows}
    assert table["success"] == (3, 0.75)
    assert table["other"] == (1, 1.0)
    assert all(r.count == 0 and r.share == 0.0 for r in taxonomy_table({}))
    with pytest.raises(InputError, match="unknown failure kind"):
        taxonomy_table({"exploded": 1})



# --- the one-pass search for failure marks decides as the plain rule loop ---------------



def rule_loop(obj) -> tuple[bool, str]:
    """check_result's rules as plain substring tests, one mark after another."""
    text = str(obj["response"])
    lowered = text.lower()
    if "got an unexpected keyword argument" in lowered:
        return True, "rule 2: unexpected keyword argument"
    for mark, rule, exact in validity._STB_MARKS:
        if mark in (text if exact else lowered):
            return False, f"rule {rule}: response contains {mark!r}"
    return (False, "rule 6: empty response") if not text else (True, "rule 7: no failure marker")


marks = [mark for mark, _, _ in validity._STB_MARKS] + ["got an unexpected keyword argument"]
pieces = st.one_of(
    st.text(max_size=12),
    st.sampled_from(marks),
    st.sampled_from(marks).map(str.upper),
    st.sampled_from(marks).map(str.title),
    st.sampled_from(["\u212a", "\u0130", "BLOC\u212aED", "\u03a3", "Ünïcødé"]),  # lower() maps some to ASCII
)
answers = st.one_of(st.lists(pieces, max_size=6).map("".join),
                    st.dictionaries(st.text(max_size=6), st.lists(pieces, max_size=3).map("".join), max_size=3))


@settings(max_examples=500, deadline=None)
@given(answers)
def test_the_one_pass_mark_search_decides_as_the_rule_loop(answer):
    assert validity._stb_rules(ok(answer)) == rule_loop(ok(answer))


def test_the_characters_that_lower_case_to_ascii_are_all_known():
    """The byte-wise lower-casing is exact only if no other character lower-cases to ASCII."""
    import sys

    found = [chr(c) for c in range(0x80, sys.maxunicode + 1) if any(x.isascii() for x in chr(c).lower())]
    assert set(found) == set(validity._LOWER_TO_ASCII)


# -- --keep-status and what virtual mode replaces ------------------------------------------------------


@pytest.mark.parametrize("values, codes", [
    ([], ()), (["404"], (404,)), (["404,410"], (404, 410)), (["410", "404, 404"], (404, 410)), ("451", (451,)),
])
def test_keep_status_takes_4xx_comma_separated_and_repeated(values, codes):
    assert validity.parse_keep_status(values) == codes


@pytest.mark.parametrize("value, says", [
    ("500", "'500' is not a 4xx status"), ("200", "'200' is not a 4xx status"), ("4O4", "'4O4' is not a 4xx"),
    ("429", "429 says the call should be made again later"), ("408", "408 says the call should be made again"),
])
def test_keep_status_refuses_what_is_no_lasting_client_error(value, says):
    with pytest.raises(ConfigError, match=re.escape(says)):
        validity.parse_keep_status([value])


def test_what_virtual_mode_replaces_in_a_few_words():
    assert validity.replaced_answers("auto") == ("real 4xx/5xx answers (StableToolBench calls: check_result "
                                                 "failures; kept: 4xx an OpenAPI document lists)")
    assert validity.replaced_answers("strict", (404, 410)) == ("real 4xx/5xx answers and error pages (kept: 4xx an "
                                                               "OpenAPI document lists, 404, 410)")
    assert "check_result" in validity.replaced_answers("stb") and "drift" not in validity.replaced_answers("auto")
    assert "break their schema" in validity.replaced_answers("schema")
