"""A secret is kept nowhere in any form an upstream may echo it in (issue 24, items 1 and 2).

Upstreams quote a caller's key back (a 401 body, an error message, a "you called" field),
and not always as it was decoded: percent-encoded in upper or lower hex, with a space as
``+``, JSON-escaped (``\\"``, ``\\\\``, ``\\/``, ``\\u0041``), or as the raw bytes the request
carried. The unit tests check each form on redact's functions; the end-to-end test sends
every kind of secret through a real proxy (record mode, a Redis tier, then two workers) to
an upstream that echoes it in each form, and looks for every form of every secret in the
store's files, its decoded entries, the YAML export, every Redis key and value, and the
proxy's -v log.
"""

from __future__ import annotations

import base64
import html
import http.client
import json
import re
import socket
import subprocess
import sys
import threading
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit

import pytest

from stbproxy import keys
from stbproxy.keys import KeyRules, canonical, request_key
from stbproxy.models import Request, Response
from stbproxy.multipart import multipart_parts
from stbproxy.redact import REDACTED, redact_request, redact_response, scrub, scrub_text, scrub_value, secret_values
from stbproxy.serve_process import ServeProcess

JSON = ("Content-Type", "application/json")
FORM = ("Content-Type", "application/x-www-form-urlencoded")


# -- every form of a value, as the tests compute them (independently of redact) ---------------


def _lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)


def _json_inner(value: str, ensure_ascii: bool = True) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii)[1:-1]


def _utf16(value: str) -> list[int]:
    data = value.encode("utf-16-be", "surrogatepass")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def echo_forms(value: str) -> dict[str, str]:
    """The forms an upstream may write ``value`` in, by name."""
    forms = {
        "decoded": value,
        "pct": quote(value, safe=""),
        "pct-lower": _lower_hex(quote(value, safe="")),
        "pct-slash": quote(value, safe="/"),  # Python's default: "/" kept
        "plus": quote_plus(value, safe=""),
        "plus-lower": _lower_hex(quote_plus(value, safe="")),
        "json": _json_inner(value),
        "json-utf8": _json_inner(value, ensure_ascii=False),
        "json-slash": _json_inner(value).replace("/", "\\/"),  # PHP's json_encode
        "json-u": "".join(f"\\u{unit:04x}" for unit in _utf16(value)),
        "json-U": "".join(f"\\u{unit:04X}" for unit in _utf16(value)),
        "pct-all": "".join(f"%{b:02X}" for b in value.encode()),
        "html": html.escape(value).replace("/", "&#x2F;"),
        "html-dec": "".join(f"&#{ord(c)};" for c in value),  # letters and digits too (issue 38, item 5)
        "html-hex": "".join(f"&#x{ord(c):x};" for c in value),
        "json-twice": _json_inner(_json_inner(value)),  # a JSON text quoted in another
    }
    return forms


def forbidden(secret: str, *raw: str) -> set[str]:
    """Every form of ``secret`` that must never be kept, with the raw texts it was sent as."""
    return {form for form in [*echo_forms(secret).values(), *raw] if len(form) >= 4}


def leaks(text: str | bytes, secrets: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(secret, form) for each form of each secret found in ``text``."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "surrogateescape")
    return [(secret, form) for secret, forms in secrets.items() for form in forms if form in text]


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


def multipart(fields: list[tuple[str, str | bytes, str | None]], boundary: str = "b0undary-XyZ") -> tuple[str, bytes]:
    lines = []
    for name, value, filename in fields:
        disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
        lines.append(f"--{boundary}\r\nContent-Disposition: {disposition}\r\n\r\n".encode()
                     + (value if isinstance(value, bytes) else value.encode()) + b"\r\n")
    return f"multipart/form-data; boundary={boundary}", b"".join(lines) + f"--{boundary}--\r\n".encode()


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


# -- issue 38: forms and places still missed, and what is no secret ----------------------------


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


# -- end to end: a real proxy, an upstream that echoes, every place something is kept ------------

# "raw" is answered 401 (an upstream's refusal quoting the request); the others 200.
ECHO_FORMS = ("raw", "decoded", "pct", "pct-lower", "plus", "json", "json-slash", "json-u", "json-U", "pct-all",
              "html", "html-dec", "html-hex", "json-twice", "raw-json")


class _EchoHandler(BaseHTTPRequestHandler):
    """An upstream that answers 401 quoting everything it was sent in the form its path
    names (/echo/<form>/...): the request target and body as they came (raw), or each value
    (query, header, JSON string, form and multipart field) written in that form."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        form = urlsplit(self.path).path.split("/")[2]
        if form == "raw":
            text = f"you called {self.path} with {body.decode('utf-8', 'surrogateescape')}"
        elif form == "raw-json":  # the request's text quoted in a JSON string: its escapes escaped again
            text = _json_inner(f"you called {self.path} with {body.decode('utf-8', 'surrogateescape')}")
        else:
            text = " | ".join(echo_forms(v)[form] for v in self._values(body))
        payload = json.dumps({"error": "", "note": "you called with"})[:-1] + f', "you_sent": "{text}"}}'
        data = payload.encode("utf-8", "surrogateescape")
        self.send_response(401 if form == "raw" else 200)  # a 401 is logged, a 200 kept as an answer
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-You-Sent", quote(text, safe="")[:2000])
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = _serve

    def _values(self, body: bytes) -> list[str]:
        values = [v for _, v in parse_qsl(urlsplit(self.path).query)]
        values += [v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")]
        content_type = self.headers.get("Content-Type", "")
        if "json" in content_type:
            try:
                values += _strings(json.loads(body))
            except ValueError:
                values.append(body.decode("utf-8", "replace"))
        elif "multipart" in content_type:
            head = b"Content-Type: " + content_type.encode() + b"\r\n\r\n"
            message = BytesParser(policy=HTTP).parsebytes(head + body)
            values += [part.get_content() for part in message.iter_parts()]
        elif body:  # a form, or text with name=value pairs in it
            values += [v for _, v in parse_qsl(body.decode("utf-8", "surrogateescape").replace(" ", "&"))]
        return [v for v in values if _is_text(v)]  # a byte that was no UTF-8 (form-not-utf8) is echoed by none


def _is_text(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _strings(value) -> list[str]:
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def _case(name, method, target, headers, body, *secrets):
    return name, method, target, headers, body, secrets


def secret_cases() -> list[tuple]:
    """(name, method, path and query, headers, body, (secret, raw text sent)...) for each way
    a secret is sent; every secret is a string no other case holds."""
    mp_type, mp_body = multipart([("q", "hello", None), ("password", "Mp/Field+Pw01=", None),
                                  ("Api_Key", "Mp\"Quote\\Key02", None)])
    return [
        _case("pct-upper", "GET", "/p?apikey=SECRET%2FSLASH026&q=1", {}, b"", ("SECRET/SLASH026", "SECRET%2FSLASH026")),
        _case("pct-lower", "GET", "/p?apikey=LoWeR%2fHex%3d031&q=1", {}, b"", ("LoWeR/Hex=031", "LoWeR%2fHex%3d031")),
        _case("plus", "GET", "/p?api_key=SECRET+PLUS027&q=1", {}, b"", ("SECRET PLUS027", "SECRET+PLUS027")),
        _case("plus-sign", "GET", "/p?access_token=B64%2BPlus%2Fkey%3D%3D", {}, b"",
              ("B64+Plus/key==", "B64%2BPlus%2Fkey%3D%3D")),
        _case("json-quote-backslash", "POST", "/p", {"Content-Type": "application/json"},
              json.dumps({"api_key": 'Qu"ote\\Back032', "q": 1}).encode(), ('Qu"ote\\Back032', 'Qu\\"ote\\\\Back032')),
        _case("json-u-escapes", "POST", "/p", {"Content-Type": "application/json"},
              b'{"toolbench_key": "\\u0055Esc\\u0041ped\\u002fTb033", "q": 2}',
              ("UEscAped/Tb033", "\\u0055Esc\\u0041ped\\u002fTb033")),
        _case("x-api-key", "GET", "/p?q=3", {"X-Api-Key": "XaK/Header+034="}, b"", ("XaK/Header+034=",)),
        _case("password-token", "POST", "/p", {"Content-Type": "application/x-www-form-urlencoded"},
              b"user=bob&password=Pa%24%24w0rd+035&token=Tok%2Fen036", ("Pa$$w0rd 035", "Pa%24%24w0rd+035"),
              ("Tok/en036", "Tok%2Fen036")),
        _case("api-key-array", "GET", "/p?api_key[]=Arr%2FOne037&api_key[]=Arr+Two038&q=4", {}, b"",
              ("Arr/One037", "Arr%2FOne037"), ("Arr Two038", "Arr+Two038")),
        _case("multipart", "POST", "/p", {"Content-Type": mp_type}, mp_body, ("Mp/Field+Pw01=",),
              ('Mp"Quote\\Key02',)),
        _case("json-names-case", "POST", "/p", {"Content-Type": "application/json"},
              json.dumps({"API_KEY": "UpperCase/Key039", "Toolbench_Key": "Mixed+Case040", "q": 5}).encode(),
              ("UpperCase/Key039",), ("Mixed+Case040",)),
        # issue 38: a key in the path (item 4), and the places of item 8
        _case("path-secret", "GET", "/user/PathKey-044/x?q=6", {"X-Api-Key": "PathKey-044"}, b"", ("PathKey-044",)),
        _case("json-duplicate", "POST", "/p", {"Content-Type": "application/json"},
              b'{"api_key": "First/Dup-045", "q": 7, "api_key": "Second/Dup-046"}', ("First/Dup-045",),
              ("Second/Dup-046",)),
        _case("text-plain", "POST", "/p", {"Content-Type": "text/plain"}, b"use api_key=Text/Plain-047 please",
              ("Text/Plain-047",)),
        _case("form-not-utf8", "POST", "/p", {"Content-Type": "application/x-www-form-urlencoded"},
              b"city=S\xe3o&api_key=NotUtf8%2FForm-048", ("NotUtf8/Form-048", "NotUtf8%2FForm-048")),
        _case("multipart-unclosed", "POST", "/p", {"Content-Type": mp_type},
              mp_body[:mp_body.rindex(b"--b0undary")].replace(b"Mp/Field+Pw01=", b"Mp/Unclosed-049"),
              ("Mp/Unclosed-049",), ('Mp"Quote\\Key02',)),
        _case("semicolon-query", "GET", "/p?x=1;api_key=Semi%2FColon-050&q=8", {}, b"",
              ("Semi/Colon-050", "Semi%2FColon-050")),
        _case("camel-case", "POST", "/p", {"Content-Type": "application/json"},
              json.dumps({"accessToken": "Camel/Token-051", "clientSecret": "Client+Secret052", "q": 9}).encode(),
              ("Camel/Token-051",), ("Client+Secret052",)),
    ]


def _send(proxy: ServeProcess, upstream_port: int, method: str, target: str, headers: dict, body: bytes) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    try:
        # absolute form: the proxy is the client's HTTP proxy; the target's bytes go as written
        connection.putrequest(method, f"http://127.0.0.1:{upstream_port}{target}", skip_accept_encoding=True)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def _send_all(proxy: ServeProcess, upstream_port: int) -> None:
    """Every case, echoed in every form; then once to a port where nothing listens (an
    upstream failure the -v log reports with the request's URL)."""
    for name, method, target, headers, body, _ in secret_cases():
        path, _, query = target.partition("?")
        for form in ECHO_FORMS:
            echo_target = f"/echo/{form}/{name}{path}" + (f"?{query}" if query else "")
            status = _send(proxy, upstream_port, method, echo_target, headers, body)
            assert form == "raw" or status == 200, (name, form, status)
        _send(proxy, _closed_port(), method, target, headers, body)


# Sent on both runs: "passwd" and X-Auth-Token are secret by default, "sig" is not; the
# workers run is told otherwise (--not-secret-field passwd --not-secret-header X-Auth-Token
# --secret-field sig), through its command line to both worker processes.
OPTIONS_TARGET = "/echo/decoded/options?passwd=Passwd-Value-043&sig=Sig-Value-041"
OPTIONS_HEADERS = {"X-Auth-Token": "Header-Value-042"}


def _send_options_case(proxy: ServeProcess, upstream_port: int) -> None:
    assert _send(proxy, upstream_port, "GET", OPTIONS_TARGET, OPTIONS_HEADERS, b"") == 200


def _decoded_store_text(store: Path) -> str:
    from stbproxy.store.embedded import Store

    with Store(store, readonly=True) as db:
        return json.dumps([[e.request.url, e.request.headers, e.response.body.decode("utf-8", "replace")]
                           for e in db.entries()])


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _all_secrets() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for *_, secrets in secret_cases():
        for secret, *raw in secrets:
            found[secret] = forbidden(secret, *raw)
    return found


def _store_leaks(store: Path, secrets: dict[str, set[str]]) -> list:
    """Leaks in the store's files read raw; since RocksDB compresses its tables (Snappy:
    some text stays readable, not all), in every record as RocksDB gives it back; and in
    every record decoded (a request body is kept in base64)."""
    from rocksdict import AccessType, Options, Rdict

    from stbproxy.store.record_format import decode_exchange

    found = []
    for path in store.rglob("*"):  # tables, the write-ahead log, RocksDB's LOG, stbproxy's own files
        if path.is_file():
            found += [(path.name, *leak) for leak in leaks(path.read_bytes(), secrets)]
    db = Rdict(str(store), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        records = list(db.items())
    finally:
        db.close()
    assert sum(value.count(b"you called with") for _, value in records) >= len(secret_cases()) * len(ECHO_FORMS)
    for raw_key, value in records:
        key = raw_key.decode("utf-8", "surrogateescape")
        found += [(key, *leak) for leak in leaks(key, secrets) + leaks(value, secrets)]
        try:
            exchange = decode_exchange(key, value)
        except Exception:  # a session or meta record: its bytes are all there is
            continue
        request, response = exchange.request, exchange.response
        text = json.dumps([request.method, request.url, request.headers, response.headers, exchange.meta])
        for part in (text, request.body, response.body):
            found += [(key, *leak) for leak in leaks(part, secrets)]
    return found


def _export_leaks(store: Path, tmp_path: Path, secrets: dict[str, set[str]]) -> list:
    """Leaks in the YAML exports of every stored answer and of the session (which holds
    the logged 401s too)."""
    import yaml

    found = []
    for name, selection in (("all", ["--all", "*"]), ("session", ["--session", "secrets"])):
        out = tmp_path / f"{store.name}-{name}.yaml"
        done = subprocess.run([sys.executable, "-m", "stbproxy", "export", *selection, "-o", str(out),
                               "--store", str(store)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        text = out.read_text(encoding="utf-8", errors="surrogateescape")
        assert text.count("you called with") >= len(secret_cases()) * (len(ECHO_FORMS) - 1)
        document = yaml.safe_load(text)  # and decoded, so that an escape of YAML's own hides nothing
        found += leaks(text, secrets) + leaks(json.dumps(document, ensure_ascii=False, default=repr), secrets)
        found += leaks(done.stdout + done.stderr, secrets)
    return found


def _redis_leaks(redis_url: str, secrets: dict[str, set[str]]) -> list:
    import redis

    client = redis.Redis.from_url(redis_url)
    try:
        found, keys_seen = [], 0
        for key in client.scan_iter(count=1000):
            keys_seen += 1
            kind = client.type(key).decode()
            if kind == "string":
                values = [client.get(key)]
            elif kind == "hash":
                values = [b for pair in client.hgetall(key).items() for b in pair]
            elif kind == "list":
                values = client.lrange(key, 0, -1)
            elif kind == "set":
                values = list(client.smembers(key))
            elif kind == "zset":
                values = [m for m, _ in client.zrange(key, 0, -1, withscores=True)]
            else:
                values = [client.dump(key)]
            for value in [key, *values]:
                found += [(key, *leak) for leak in leaks(value or b"", secrets)]
        assert keys_seen >= len(secret_cases()) * len(ECHO_FORMS)
        return found
    finally:
        client.close()


def test_no_secret_in_any_form_reaches_store_export_redis_workers_or_log(tmp_path, redis_server):
    cases = _all_secrets()
    secrets = {**cases, "Passwd-Value-043": forbidden("Passwd-Value-043"),
               "Header-Value-042": forbidden("Header-Value-042")}
    workers_secrets = {**cases, "Sig-Value-041": forbidden("Sig-Value-041")}
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        upstream_port = server.server_address[1]
        # virtual mode: 200s are stored as real answers, the 401 and the failures logged
        # (-v) and kept as records; no simulator, so that nothing else answers
        options = ("--mode", "virtual", "--simulator", "off", "-v", "--session", "secrets")
        # one process, the fast lane, a Redis tier
        store = tmp_path / "store"
        with ServeProcess(store, *options, "--shared", redis_server.url) as proxy:
            _send_all(proxy, upstream_port)
            _send_options_case(proxy, upstream_port)
        single_log = "".join(proxy.output)
        # two workers, every request through mitmproxy
        workers_store = tmp_path / "workers-store"
        workers = ServeProcess(workers_store, *options, "--workers", "2", "--no-fast-lane",
                               "--not-secret-field", "passwd", "--not-secret-header", "X-Auth-Token",
                               "--secret-field", "sig").start(120)
        try:
            _send_all(workers, upstream_port)
            _send_options_case(workers, upstream_port)
        finally:
            workers.stop()
        workers_log = "".join(workers.output)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
    for log in (single_log, workers_log):  # -v logged the 401s and the failures, with their URLs
        assert "invalid upstream answer for GET http://127.0.0.1" in log
        assert "upstream failed for POST http://127.0.0.1" in log
    assert leaks(single_log, secrets) == []
    assert leaks(workers_log, workers_secrets) == []
    assert _store_leaks(store, secrets) == []
    assert _store_leaks(workers_store, workers_secrets) == []
    assert _export_leaks(store, tmp_path, secrets) == []
    assert _export_leaks(workers_store, tmp_path, workers_secrets) == []
    assert _redis_leaks(redis_server.url, secrets) == []
    # what the options took out of the defaults is kept as sent; what they added is not
    assert "Sig-Value-041" in _decoded_store_text(store)
    assert "Passwd-Value-043" in _decoded_store_text(workers_store)
    assert "Header-Value-042" in _decoded_store_text(workers_store)
