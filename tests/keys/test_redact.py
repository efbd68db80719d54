import base64
import json

import pytest

from stbproxy.keys import KeyRules
from stbproxy.models import Request, Response
from stbproxy.redact import REDACTED, redact_request, redact_response, secret_values

JSON = ("Content-Type", "application/json")


def everything(request: Request) -> bytes:
    """All bytes of a request, as they would be written anywhere."""
    return (request.method + request.url + json.dumps(request.headers)).encode() + request.body


@pytest.mark.parametrize("request_,secret", [
    (Request("GET", "http://h/p?q=1", (("X-RapidAPI-Key", "rk-123456"),)), "rk-123456"),
    (Request("GET", "http://h/p", (("Authorization", "Bearer sk-abcdef"),)), "sk-abcdef"),
    (Request("GET", "http://h/p", (("Cookie", "session=c00kie99; theme=dark"),)), "c00kie99"),
    (Request("GET", "http://h/p?api_key=qk-98765&x=1"), "qk-98765"),
    (Request("GET", "http://h/p?ACCESS_TOKEN=tok-55555"), "tok-55555"),
    (Request("POST", "http://h/virtual", (JSON,), b'{"toolbench_key": "tb-11111", "q": 1}'), "tb-11111"),
    (Request("POST", "http://h/p", (JSON,), b'{"outer": {"apikey": "deep-2222"}}'), "deep-2222"),
    (Request("POST", "http://h/p", (("Content-Type", "application/x-www-form-urlencoded"),),
             b"a=1&api_key=form-3333"), "form-3333"),
    # the declared type is not trusted alone: JSON with no type or a form type (curl -d,
    # requests' data=json.dumps(...)), and a form with no type
    (Request("POST", "http://h/p", (), b'{"toolbench_key": "tb-notype-1"}'), "tb-notype-1"),
    (Request("POST", "http://h/p", (("Content-Type", "application/x-www-form-urlencoded"),),
             b' {"q": "x", "api_key": "json-as-form-2"}'), "json-as-form-2"),
    (Request("POST", "http://h/p", (("Content-Type", "text/plain"),), b'[{"apikey": "json-as-text-3"}]'),
     "json-as-text-3"),
    (Request("POST", "http://h/p", (), b"q=1&access_token=form-notype-4"), "form-notype-4"),
    # a secret that reappears somewhere unnamed (in the path) is scrubbed too
    (Request("GET", "http://h/keys/rk-777777/info", (("X-RapidAPI-Key", "rk-777777"),)), "rk-777777"),
])
def test_secrets_never_survive_redaction(request_, secret):
    redacted = redact_request(request_)
    assert secret.encode() not in everything(redacted)
    assert REDACTED.encode() in everything(redacted)


def test_basic_auth_password_is_a_secret_and_the_user_name_is_not():
    token = base64.b64encode(b"alice:pa55word-long").decode()
    secrets = secret_values(Request("GET", "http://h/", (("Authorization", f"Basic {token}"),)))
    assert {"pa55word-long", token} <= secrets and "alice" not in secrets  # issue 38, item 9


def test_user_configured_secret_field():
    rules = KeyRules.build(secret_fields=["sig"])
    redacted = redact_request(Request("GET", "http://h/p?sig=my-sig-1"), rules)
    assert "my-sig-1" not in redacted.url
    # by default "sig" is an ordinary argument
    assert "my-sig-1" in redact_request(Request("GET", "http://h/p?sig=my-sig-1")).url


def test_a_default_secret_name_can_be_taken_out():
    request = Request("GET", "http://h/p?token=ETH-token-1&api_key=qk-kept-out", (("X-Api-Key", "xk-header-1"),))
    assert "ETH-token-1" not in redact_request(request).url  # "token" is secret by default
    rules = KeyRules.build(not_secret_fields=["TOKEN"], not_secret_headers=["x-api-key"])
    kept = redact_request(request, rules)
    assert "token=ETH-token-1" in kept.url and "qk-kept-out" not in kept.url
    assert ("X-Api-Key", "xk-header-1") in kept.headers


def test_json_body_without_secrets_keeps_its_exact_bytes():
    body = b'{"b": 1,   "a": 2}'
    assert redact_request(Request("POST", "http://h/p", (JSON,), body)).body == body


def test_a_json_secret_sent_without_a_json_type_is_scrubbed_from_the_answer_too():
    request = Request("POST", "http://h/p", (("Content-Type", "application/x-www-form-urlencoded"),),
                      b'{"toolbench_key": "tb-echoed-77", "q": "[[[["}')
    echoed = Response(200, (("X-Echo", "tb-echoed-77"),), b'{"you sent": "tb-echoed-77"}')
    answer = redact_response(echoed, secret_values(request))
    assert b"tb-echoed-77" not in answer.body and "tb-echoed-77" not in json.dumps(answer.headers)
    assert json.loads(redact_request(request).body) == {"toolbench_key": REDACTED, "q": "[[[["}


def test_text_bodies_that_are_neither_json_nor_a_form_are_kept_as_sent_but_for_secret_pairs():
    text = (("Content-Type", "text/plain"),)
    for content_type, body in ((text, b"{not json, key=x12345"), ((), b"plain words"), (text, b"caf\xe9 \xff"),
                               ((), b"a=\xff")):
        assert redact_request(Request("POST", "http://h/p", content_type, body)).body == body
    # a name=value pair of a secret name is a named place, even in text (issue 38, item 8)
    body = b"{not json, api_key=x12345"
    assert redact_request(Request("POST", "http://h/p", (("Content-Type", "text/plain"),), body)).body == (
        b"{not json, api_key=REDACTED")


def test_invalid_json_and_binary_bodies_are_left_alone_but_scrubbed():
    req = Request("POST", "http://h/p", (JSON, ("X-RapidAPI-Key", "rk-424242")), b"{broken rk-424242 \xff")
    assert redact_request(req).body == b"{broken REDACTED \xff"


def test_response_scrubbed_of_request_secrets_and_cookies():
    secrets = secret_values(Request("GET", "http://h/", (("X-RapidAPI-Key", "rk-999999"),)))
    response = Response(200, (("X-Echo", "rk-999999"), ("Set-Cookie", "sid=abc123")), b'{"key": "rk-999999"}')
    cleaned = redact_response(response, secrets)
    assert b"rk-999999" not in cleaned.body and "rk-999999" not in json.dumps(cleaned.headers)
    assert ("Set-Cookie", REDACTED) in cleaned.headers


def test_short_values_are_not_scrubbed_everywhere():
    # A one-character "secret" would otherwise wreck every body that contains the letter.
    secrets = secret_values(Request("GET", "http://h/p?api_key=a"))
    assert secrets == frozenset()


def test_redact_url_matches_the_url_redact_request_keeps():
    from stbproxy.redact import redact_url

    request = Request("GET", "http://h/keys/rk-777777?api_key=qk-1234&q=1", (("X-RapidAPI-Key", "rk-777777"),))
    assert redact_url(request) == redact_request(request).url
    assert "rk-777777" not in redact_url(request) and "qk-1234" not in redact_url(request)


def test_an_unexpected_failure_is_logged_with_the_request_redacted():
    from stbproxy.redact import failure_text

    request = Request("POST", "http://h/p?api_key=qk-failing-42&q=1", (("Authorization", "Bearer tk-failing-43"),))
    try:  # a message that quotes the request, as some errors do
        raise KeyError(f"no route for {request.url} with {request.header('authorization')}")
    except KeyError as exc:
        text = failure_text(request, exc)
    assert "qk-failing-42" not in text and "tk-failing-43" not in text
    assert text.startswith("POST http://h/p?api_key=REDACTED&q=1: KeyError:") and "test_redact.py" in text


def test_a_failure_s_log_text_quotes_a_long_url_bounded_and_without_its_secrets():
    from stbproxy.redact import LOGGED_URL_CHARS, failure_text

    url = "http://api.example.test/q?api_key=sk-live-0123456789abcdef&pad=" + "x" * 100_000
    request = Request("GET", url)
    text = failure_text(request, ValueError(f"broken: {url}"))
    assert "sk-live-0123456789abcdef" not in text and len(text) < 3 * LOGGED_URL_CHARS + 2000
    assert "more characters" in text
