"""A secret is kept nowhere in any form an upstream may echo it in: one form at a time, on
redact's functions.

Upstreams quote a caller's key back (a 401 body, an error message, a "you called" field),
and not always as it was decoded: percent-encoded in upper or lower hex, with a space as
``+``, JSON-escaped (``\\"``, ``\\\\``, ``\\/``, ``\\u0041``), or as the raw bytes the request
carried. These tests scrub each form of a query, header, JSON, form and multipart secret, and
check the default secret names, the names users add or take out, and that scrubbing stays
deterministic and linear.
"""

from __future__ import annotations

import json
from urllib.parse import quote, quote_plus

import pytest

from stbproxy import keys
from stbproxy.keys import KeyRules, canonical, request_key
from stbproxy.models import Request, Response
from stbproxy.multipart import multipart_parts
from stbproxy.redact import REDACTED, redact_request, redact_response, scrub, scrub_text, scrub_value, secret_values
from tests.keys.secret_forms_helpers import (
    FORM,
    JSON,
    _json_inner,
    _lower_hex,
    echo_forms,
    forbidden,
    leaks,
    multipart,
)

# -- unit tests: one form at a time ---------------------------------------------------------

# A secret with every character that has a form of its own: "/", "+", "=", a space, a quote,
# a backslash, a non-ASCII letter and one outside the BMP.
AWKWARD = 'Sk/ab+c=d e"f\\g\u00e9h\U0001F511i'


@pytest.mark.parametrize("form", sorted(echo_forms(AWKWARD)))
def test_an_echo_of_a_query_secret_in_any_form_is_scrubbed(form):
    request = Request("GET", "http://h/p?api_key=" + quote(AWKWARD, safe=""))
    secrets = secret_values(request)
    echoed = f'{{"error": "invalid key {echo_forms(AWKWARD)[form]}"}}'
    response = Response(401, (("X-You-Sent", echo_forms(AWKWARD)[form]),), echoed.encode())
    cleaned = redact_response(response, secrets)
    assert REDACTED.encode() in cleaned.body
    assert not leaks(cleaned.body, {AWKWARD: forbidden(AWKWARD)})
    assert not leaks(json.dumps(cleaned.headers), {AWKWARD: forbidden(AWKWARD)})


@pytest.mark.parametrize("sent,secret", [
    ("SECRET%2FSLASH026", "SECRET/SLASH026"),
    ("SECRET%2fSLASH026", "SECRET/SLASH026"),
    ("SECRET+PLUS027", "SECRET PLUS027"),
    ("SECRET%2BPLUS027", "SECRET+PLUS027"),
    ("long%2Bb64%3D%3D", "long+b64=="),
])
def test_the_raw_query_value_and_its_decoded_form_are_both_scrubbed(sent, secret):
    request = Request("GET", f"http://h/p?apikey={sent}&q=1")
    secrets = secret_values(request)
    for echo in (sent, secret, _lower_hex(sent), quote(secret, safe=""), quote_plus(secret)):
        assert scrub(f"you called /p?apikey={echo}&q=1".encode(), secrets) == b"you called /p?apikey=REDACTED&q=1"
    assert sent not in redact_request(request).url and secret not in redact_request(request).url


def test_a_json_body_secret_written_with_u_escapes_is_scrubbed_in_every_form():
    body = b'{"toolbench_key": "\\u0054B\\u002fescaped\\u005C\\"key", "q": 1}'
    request = Request("POST", "http://h/virtual", (JSON,), body)
    secret = 'TB/escaped\\"key'
    assert secret in secret_values(request)
    stored = redact_request(request)
    assert json.loads(stored.body) == {"toolbench_key": REDACTED, "q": 1}
    # the raw literal as the body held it, and as an upstream re-escapes it
    literal = body.split(b'"toolbench_key": "', 1)[1].split(b'key"', 1)[0].decode() + "key"
    assert literal == '\\u0054B\\u002fescaped\\u005C\\"key'
    for echo in (literal, _json_inner(secret), secret, quote(secret, safe="")):
        assert scrub_text(f"echo: {echo}.", secret_values(request)) == "echo: REDACTED.", echo


def test_mixed_case_hex_and_mixed_forms_in_one_echo_are_scrubbed():
    secrets = secret_values(Request("GET", "http://h/p?access_token=ab%2Fcd%2Bef%3D"))
    for echo in ("ab%2fcd%2Bef%3d", "ab\\u002Fcd\\u002bef=", "ab\\/cd+ef\\u003D", "ab%252Fcd%252Bef%253D",
                 "ab&#47;cd&#x2b;ef&#61;"):
        assert scrub_text(f"[{echo}]", secrets) == "[REDACTED]", echo


def test_secret_names_match_whatever_their_case_in_json_bodies_and_keys():
    for name in ("API_KEY", "Toolbench_Key", "ApiKey", "PASSWORD", "Token"):
        a = Request("POST", "http://h/p", (JSON,), json.dumps({name: "first-secret-1", "q": 1}).encode())
        b = Request("POST", "http://h/p", (JSON,), json.dumps({name: "other-secret-2", "q": 1}).encode())
        assert request_key(a) == request_key(b), name
        assert "first-secret-1" not in canonical(a).body
        stored = redact_request(a)
        assert b"first-secret-1" not in stored.body and json.loads(stored.body)[name] == REDACTED
        assert "first-secret-1" in secret_values(a)


@pytest.mark.parametrize("name", ["password", "token", "Password", "TOKEN", "passwd", "client_secret",
                                  "refresh_token", "api-key"])
def test_password_and_token_fields_are_secret_by_default(name):
    for request in (Request("GET", f"http://h/p?{name}=pw-value-42&q=1"),
                    Request("POST", "http://h/p", (FORM,), f"{name}=pw-value-42&q=1".encode()),
                    Request("POST", "http://h/p", (JSON,), json.dumps({"auth": {name: "pw-value-42"}}).encode())):
        assert b"pw-value-42" not in redact_request(request).url.encode() + redact_request(request).body
        other = Request(request.method, request.url.replace("pw-value-42", "pw-value-99"), request.headers,
                        request.body.replace(b"pw-value-42", b"pw-value-99"))
        assert request_key(request) == request_key(other)


@pytest.mark.parametrize("header", ["X-Api-Key", "x-api-key", "Api-Key", "X-Auth-Token", "X-Access-Token"])
def test_api_key_headers_are_secret_by_default(header):
    request = Request("GET", "http://h/p", ((header, "hk/header+value="),))
    stored = redact_request(request)
    assert stored.headers == ((header, REDACTED),)
    echoed = redact_response(Response(401, (), b'{"key": "hk%2Fheader%2Bvalue%3D"}'), secret_values(request))
    assert b"hk" not in echoed.body


@pytest.mark.parametrize("query", [
    "api_key[]=arr-secret-1&api_key[]=arr-secret-2&q=1",
    "api_key%5B%5D=arr-secret-1&API_KEY%5B0%5D=arr-secret-2&q=1",
    "api_key[0]=arr-secret-1&auth[password]=arr-secret-2&q=1",
])
def test_query_arrays_of_a_secret_name_are_secret(query):
    request = Request("GET", "http://h/p?" + query)
    stored = redact_request(request)
    assert "arr-secret" not in stored.url and "q=1" in stored.url
    assert {"arr-secret-1", "arr-secret-2"} <= secret_values(request)
    other = Request("GET", "http://h/p?" + query.replace("arr-secret", "other-one"))
    assert request_key(request) == request_key(other)


def test_multipart_secret_fields_are_redacted_scrubbed_and_keyed_without_the_secret():
    content_type, body = multipart([("q", "hello", None), ("API_KEY", "mp/secret+1", None),
                                    ("Password", "mp-pass-2", None), ("file", b"\x00\xffdata", "a.bin")])
    request = Request("POST", "http://h/upload", (("Content-Type", content_type),), body)
    assert {"mp/secret+1", "mp-pass-2"} <= secret_values(request)
    stored = redact_request(request)
    assert b"mp/secret+1" not in stored.body and b"mp-pass-2" not in stored.body
    assert [stored.body[p.start:p.end] for p in multipart_parts(stored.body, content_type)] == [
        b"hello", REDACTED.encode(), REDACTED.encode(), b"\x00\xffdata"]
    # keyed by its fields: another boundary and other secrets are the same call
    content_type_2, body_2 = multipart([("q", "hello", None), ("API_KEY", "other-1", None),
                                        ("Password", "other-2", None), ("file", b"\x00\xffdata", "a.bin")], "zz")
    assert request_key(request) == request_key(Request("POST", "http://h/upload", (("Content-Type", content_type_2),),
                                                       body_2))
    content_type_3, body_3 = multipart([("q", "bye", None)])
    assert request_key(request) != request_key(Request("POST", "http://h/upload", (("Content-Type", content_type_3),),
                                                       body_3))


@pytest.mark.parametrize("content_type,body", [
    ("multipart/form-data", b"--x\r\nno boundary"),
    ("multipart/form-data; boundary=x", b"--x\r\nContent-Disposition: form-data; name=password\r\nsecret"),
    ("multipart/form-data; boundary=x", b"not multipart at all"),
    ("multipart/form-data; boundary=\"x\r\ny\"", b"--x\r\n\r\n"),
    ("multipart/form-data; boundary=x", b"--x\r\nContent-Disposition: form-data; name*=bad''%ff\r\n\r\nv\r\n--x--"),
    ("multipart/form-data; boundary=x", b"--x--\r\n"),
    ("multipart/form-data; boundary=" + "x" * 500, b"--x"),
])
def test_malformed_multipart_never_raises(content_type, body):
    request = Request("POST", "http://h/p", (("Content-Type", content_type),), body)
    redact_request(request)
    secret_values(request)
    request_key(request)


def test_a_secret_member_of_invalid_json_is_redacted_too():
    body = b'{"q": 1, "api_key": "loose-secret-1", }'
    request = Request("POST", "http://h/p", (JSON,), body)
    assert "loose-secret-1" in secret_values(request)
    assert redact_request(request).body == b'{"q": 1, "api_key": "REDACTED", }'


def test_users_add_and_take_out_names():
    rules = KeyRules.build(secret_fields=["Sig"], secret_headers=["X-Custom"], not_secret_fields=["token"],
                           not_secret_headers=["cookie"])
    request = Request("GET", "http://h/p?sig=sig-secret-1&token=ETH&TOKEN=BTC", (("X-Custom", "custom-1"),
                                                                                  ("Cookie", "a=b")))
    stored = redact_request(request, rules)
    assert "sig-secret-1" not in stored.url and "token=ETH" in stored.url and "TOKEN=BTC" in stored.url
    assert stored.headers == (("X-Custom", REDACTED), ("Cookie", "a=b"))
    assert request_key(request, rules) != request_key(Request("GET", "http://h/p?sig=x&token=SOL"), rules)


def test_scrubbing_is_deterministic_and_longest_first():
    secrets = frozenset({"sk-1234", "Bearer sk-1234", "sk-12"})
    assert scrub_text("Bearer sk-1234 and sk-1234", secrets) == "REDACTED and REDACTED"
    assert scrub_value({"k sk-1234": ["Bearer%20sk-1234"]}, secrets) == {"k REDACTED": ["REDACTED"]}
    assert scrub(b"\xff sk-1234 \xfe", secrets) == b"\xff REDACTED \xfe"  # bytes that are not UTF-8 kept


def test_everything_under_a_secret_name_is_secret_but_numbers_deeper_down():
    request = Request("POST", "http://h/p", (JSON,), json.dumps(
        {"token": {"value": "nested-secret-1", "scopes": ["scope-secret-2"], "expires_in": 36000000},
         "api_key": 9876543210, "q": "visible"}).encode())
    found = secret_values(request)
    assert {"nested-secret-1", "scope-secret-2", "9876543210"} <= found and "36000000" not in found
    assert json.loads(redact_request(request).body) == {"token": REDACTED, "api_key": REDACTED, "q": "visible"}


def test_scrubbing_a_large_body_with_many_secrets_stays_linear():
    import time

    secrets = frozenset(f"sk-{i:02d}/Secret+Value=" for i in range(20))
    body = json.dumps([{"name": f"Some text {i} with sk- and %2F and \\u0041", "n": i} for i in range(20000)])
    body = body.encode() + b" sk-07%2FSecret%2BValue%3D"
    started = time.perf_counter()
    cleaned = scrub(body, secrets)
    assert time.perf_counter() - started < 5  # about 0.05 s; a quadratic scrub would take minutes
    assert cleaned.endswith(b" REDACTED") and len(body) > 1_000_000


def test_the_default_names_and_stbcore_names():
    from stbcore.arguments import SECRET_FIELDS

    # StableToolBench's names stay stbcore's (the evaluator's comparison); the proxy's
    # defaults add the usual credential names of other APIs.
    assert SECRET_FIELDS == {"api_key", "apikey", "access_token", "toolbench_key"}
    assert SECRET_FIELDS | {"password", "token", "api-key"} <= keys.DEFAULT_RULES.secret_fields
    assert {"x-api-key", "authorization", "cookie"} <= keys.DEFAULT_RULES.secret_headers
    assert "key" not in keys.DEFAULT_RULES.secret_fields


def test_the_addon_options_add_and_take_out_names(tmp_path):
    from mitmproxy.test import taddons

    from stbproxy.mitm import StbAddon

    addon = StbAddon()
    with taddons.context(addon) as tctx:
        tctx.configure(addon, stb_store=str(tmp_path / "s"), stb_secret_fields=["sig"],
                       stb_not_secret_fields=["Token"], stb_not_secret_headers=["X-Api-Key"])
        rules = addon.settings.key_rules()
    assert "sig" in rules.secret_fields and "token" not in rules.secret_fields and "password" in rules.secret_fields
    assert "x-api-key" not in rules.secret_headers and "authorization" in rules.secret_headers


def test_serve_has_the_options_to_take_out_a_default_name():
    from click.testing import CliRunner

    from stbproxy.cli import main

    text = CliRunner().invoke(main, ["serve", "--help"]).output
    assert "--not-secret-field" in text and "--not-secret-header" in text
