"""A secret is kept nowhere in any form an upstream may echo it in: the forms and places a first
pass missed (HTML references, JSON escaped twice, duplicated names, secret pairs in text bodies,
bytes that are no UTF-8, an unclosed multipart body, semicolon pairs and the fragment, a
response header's name, the common spellings of tokens), and what is no secret (a Basic user
name, values too short or too common to hunt), with a stored request keyed as the live one."""

from __future__ import annotations

import base64
import html
import json
from urllib.parse import quote

import pytest

from stbproxy.keys import KeyRules, request_key
from stbproxy.models import Request, Response
from stbproxy.multipart import multipart_parts
from stbproxy.redact import REDACTED, redact_request, redact_response, scrub, scrub_text, secret_values
from tests.keys.secret_forms_helpers import (
    FORM,
    JSON,
    forbidden,
    leaks,
    multipart,
)

# -- forms and places still missed, and what is no secret ----------------------------


def _html_refs(value: str, style: str) -> str:
    """``value`` as HTML numeric references: every character decimal, hex, or every other one."""
    refs = {"decimal": lambda c: f"&#{ord(c)};", "hex": lambda c: f"&#x{ord(c):x};",
            "HEX": lambda c: f"&#X{ord(c):04X};"}
    if style == "mixed":
        return "".join(f"&#{ord(c)};" if i % 2 else c for i, c in enumerate(value))
    return "".join(refs[style](c) for c in value)


@pytest.mark.parametrize("style", ["decimal", "hex", "HEX", "mixed"])
def test_html_references_of_letters_and_digits_are_scrubbed(style):
    """Item 5: ``&#115;&#101;...`` and ``&#x73;...`` (html.escape leaves letters alone, others do not)."""
    secret = "sk-Live1234abcd"
    secrets = secret_values(Request("GET", "http://h/p", (("X-Api-Key", secret),)))
    echo = f"<p>you sent {_html_refs(secret, style)}</p>"
    assert html.unescape(echo) == f"<p>you sent {secret}</p>"
    assert scrub_text(echo, secrets) == "<p>you sent REDACTED</p>"


def test_html_named_references_are_scrubbed_in_any_mix():
    secrets = secret_values(Request("GET", "http://h/p?api_key=ab%2Fcd%3Def_gh"))
    assert scrub_text("[ab&sol;cd&equals;ef&lowbar;gh]", secrets) == "[REDACTED]"


def test_a_u_escaped_json_secret_echoed_json_escaped_again_is_scrubbed():
    """Item 6: the body's raw text quoted in a JSON string by the upstream: ``SECRET\\\\u0041...``."""
    body = b'{"api_key": "SECRET\\u0041\\u0042CDEF12", "q": 1}'
    request = Request("POST", "http://h/p", (JSON,), body)
    echo = json.dumps({"you_sent": body.decode()}).encode()  # the raw text JSON-escaped again
    assert b'SECRET\\\\u0041\\\\u0042CDEF12' in echo
    cleaned = redact_response(Response(200, (), echo), secret_values(request)).body
    assert json.loads(json.loads(cleaned)["you_sent"]) == {"api_key": REDACTED, "q": 1}
    # escaped three times; the literal percent-encoded; one character of it escaped twice
    for echo in ("SECRET\\\\\\u0041\\\\\\u0042CDEF12", "SECRET%5Cu0041%5Cu0042CDEF12", "SECRET\\\\u0041BCDEF12"):
        assert scrub_text(f"<{echo}>", secret_values(request)) == "<REDACTED>", echo


def test_every_member_of_a_duplicated_secret_name_is_a_secret():
    """Item 8: json.loads keeps the last ``api_key``; the upstream may read (and echo) the first."""
    body = b'{"api_key": "first-secret-1", "q": 1, "api_key": "second-secret-2", "t": {"token": "t-secret-3"},' \
           b' "t": {"token": "t-secret-4"}}'
    request = Request("POST", "http://h/p", (JSON,), body)
    assert {"first-secret-1", "second-secret-2", "t-secret-3", "t-secret-4"} <= secret_values(request)
    cleaned = redact_response(Response(200, (), b"first-secret-1 t-secret-3"), secret_values(request)).body
    assert cleaned == b"REDACTED REDACTED"
    assert b"secret" not in redact_request(request).body
    other = Request("POST", "http://h/p", (JSON,), body.replace(b"first-secret-1", b"other-secret-9"))
    assert request_key(request) == request_key(other)


@pytest.mark.parametrize("content_type", ["text/plain", "text/plain; charset=utf-8", "application/octet-stream"])
def test_a_secret_pair_in_a_text_body_is_found_redacted_and_scrubbed(content_type):
    """Item 8: ``api_key=`` in a text/plain body."""
    body = b"call me with api_key=text-secret-77&x=1 or access_token=text-token-78, thanks"
    request = Request("POST", "http://h/p", (("Content-Type", content_type),), body)
    assert {"text-secret-77", "text-token-78"} <= secret_values(request)
    assert redact_request(request).body == b"call me with api_key=REDACTED&x=1 or access_token=REDACTED, thanks"
    other = Request("POST", "http://h/p", request.headers, body.replace(b"text-secret-77", b"text-secret-99"))
    assert request_key(request) == request_key(other)


def test_a_form_body_with_a_byte_that_is_no_utf8_still_has_its_secret_found():
    """Item 8: one non-UTF-8 byte used to make the whole form unreadable, its secret included."""
    body = b"city=S\xe3o+Paulo&api_key=form%2Fsecret+88&q=1"
    request = Request("POST", "http://h/p", (FORM,), body)
    assert {"form%2Fsecret+88", "form/secret 88"} <= secret_values(request)
    assert redact_request(request).body == b"city=S\xe3o+Paulo&api_key=REDACTED&q=1"  # the other bytes as sent
    scrubbed = scrub(b'{"key": "form/secret 88", "x": "\xe3"}', secret_values(request))
    assert scrubbed == b'{"key": "REDACTED", "x": "\xe3"}'


def test_the_last_part_of_a_multipart_body_without_its_closing_delimiter_is_read():
    """Item 8: a body cut short keeps its last part, which an upstream may read and echo."""
    content_type, body = multipart([("q", "hello", None), ("api_key", "Mp-Unclosed-Secret-5", None)])
    body = body[:body.rindex(b"--b0undary-XyZ--")]
    request = Request("POST", "http://h/upload", (("Content-Type", content_type),), body)
    assert "Mp-Unclosed-Secret-5" in secret_values(request)
    assert b"Mp-Unclosed" not in redact_request(request).body
    assert [(p.name, body[p.start:p.end]) for p in multipart_parts(body, content_type)] == [
        ("q", b"hello"), ("api_key", b"Mp-Unclosed-Secret-5")]
    other = Request("POST", "http://h/upload", request.headers, body.replace(b"Unclosed", b"Different"))
    assert request_key(request) == request_key(other)


@pytest.mark.parametrize("url,secret", [
    ("http://h/p?x=1;api_key=semi%2Fsecret-61&q=2", "semi/secret-61"),
    ("http://h/p?q=2#api_key=frag-secret-62&x=1", "frag-secret-62"),
    ("http://h/p?q=2&api_key=with;semicolon-63", "with;semicolon-63"),
])
def test_semicolon_pairs_and_the_fragment_are_searched_for_secrets(url, secret):
    """Item 8: ``?x=1;api_key=...`` (a separator some servers read) and ``#api_key=...``."""
    request = Request("GET", url)
    assert secret in secret_values(request)
    stored = redact_request(request).url
    assert "api_key=REDACTED" in stored and not leaks(stored, {secret: forbidden(secret)})
    assert stored.startswith("http://h/p?") and "q=2" in stored
    assert secret not in request_key(request) and request_key(request) == request_key(
        Request("GET", url.replace(quote(secret, safe="/;"), "other-secret-00")))


def test_a_secret_echoed_as_a_response_header_name_is_scrubbed():
    secrets = secret_values(Request("GET", "http://h/p", (("X-Api-Key", "HeaderNameKey99"),)))
    cleaned = redact_response(Response(200, (("X-HeaderNameKey99", "1"), ("X-Ok", "HeaderNameKey99")), b""), secrets)
    assert cleaned.headers == (("X-REDACTED", "1"), ("X-Ok", "REDACTED"))


@pytest.mark.parametrize("name", ["accessToken", "AccessToken", "access-token", "ACCESS_TOKEN", "clientSecret",
                                  "client-secret", "refreshToken", "authToken", "idToken", "id_token", "apiToken",
                                  "sessionToken", "appSecret", "consumer_secret", "apiKey", "x_api_key"])
def test_the_common_spellings_of_tokens_and_client_secrets_are_secret_by_default(name):
    """Item 8: camelCase, kebab-case and snake_case alike."""
    for request in (Request("GET", f"http://h/p?{name}=spelled-secret-1&q=1"),
                    Request("POST", "http://h/p", (FORM,), f"{name}=spelled-secret-1&q=1".encode()),
                    Request("POST", "http://h/p", (JSON,), json.dumps({name: "spelled-secret-1", "q": 1}).encode())):
        stored = redact_request(request)
        assert b"spelled-secret-1" not in stored.url.encode() + stored.body, (name, request)
        other = Request(request.method, request.url.replace("-1", "-2"), request.headers,
                        request.body.replace(b"-1", b"-2"))
        assert request_key(request) == request_key(other)


def test_a_name_taken_out_is_taken_out_in_every_spelling():
    rules = KeyRules.build(not_secret_fields=["access_token"], secret_fields=["sig_value"])
    request = Request("GET", "http://h/p?accessToken=kept-value-1&sigValue=hidden-value-2")
    stored = redact_request(request, rules).url
    assert "accessToken=kept-value-1" in stored and "sigValue=REDACTED" in stored


def test_a_basic_user_name_is_no_secret():
    """Item 9: ``Milo`` replayed as ``{"name":"REDACTED","tag":"REDACTEDs"}``."""
    token = base64.b64encode(b"Milo:pa55word-long").decode()
    secrets = secret_values(Request("GET", "http://h/", (("Authorization", f"Basic {token}"),)))
    assert "Milo" not in secrets and {"pa55word-long", token} <= secrets
    body = b'{"name":"Milo","tag":"Milos","p":"pa55word-long"}'
    assert redact_response(Response(200, (), body), secrets).body == b'{"name":"Milo","tag":"Milos","p":"REDACTED"}'


@pytest.mark.parametrize("value", ["abc1234", "active", "1234", "xxxxxxxxxxxx", "********", "password", "Changeme",
                                   "12345678"])
def test_values_too_short_or_too_common_are_redacted_where_named_but_not_hunted(value):
    request = Request("GET", f"http://h/p?api_key={quote(value)}&status={quote(value)}", (("X-Api-Key", value),))
    assert secret_values(request) == frozenset()
    stored = redact_request(request)
    assert stored.headers == (("X-Api-Key", REDACTED),)
    assert f"api_key={REDACTED}&status={quote(value)}" in stored.url
    answer = redact_response(Response(200, (), f'{{"state": "{value}"}}'.encode()), frozenset())
    assert REDACTED not in answer.body.decode()


def test_a_stored_request_is_keyed_as_the_live_one():
    """The key scrubs a secret wherever redaction does, so that an exported and re-imported
    request (a cassette) is found under the key the live one was stored under."""
    requests = [
        Request("GET", "http://h/echo/user/sk-in-the-path-1/x?q=1", (("X-Api-Key", "sk-in-the-path-1"),)),
        Request("GET", "http://h/p?x=1;api_key=semi-secret-62&note=semi-secret-62"),
        Request("POST", "http://h/p", (JSON, ("Authorization", "Bearer sk-bearer-0001")),
                json.dumps({"q": "sk-bearer-0001 again", "api_key": "json-secret-1"}).encode()),
        Request("POST", "http://h/p", (("Content-Type", "text/plain"),), b"x api_key=text-secret-77 y text-secret-77"),
        Request("POST", "http://h/p", (FORM,), b"a=S\xe3o&token=form-secret-88&b=form-secret-88"),
    ]
    for request in requests:
        assert request_key(redact_request(request)) == request_key(request), request
