"""Secrets out of requests and responses before anything is stored, logged or exported.

Two passes: first the named places (secret headers, secret query/body fields) are
replaced by ``REDACTED``; then every secret *value* seen in the request is scrubbed from
whatever else is kept (URL, body, response headers and body), because upstreams echo
keys back and agents paste tokens into odd places.
"""

from __future__ import annotations

import base64
import json
import traceback
from dataclasses import replace
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from stbproxy import jsonsafe
from stbproxy.keys import DEFAULT_RULES, KeyRules, is_form_type, is_json_type
from stbproxy.models import Headers, Request, Response

REDACTED = "REDACTED"
_MIN_SECRET_LEN = 4  # shorter values would scrub ordinary text ("1", "abc")
_RESPONSE_SECRET_HEADERS = frozenset({"set-cookie"})


def secret_values(request: Request, rules: KeyRules = DEFAULT_RULES) -> frozenset[str]:
    """Every secret value the request carries, in the forms it may be echoed in."""
    found: set[str] = set()
    for name, value in request.headers:
        if name.lower() in rules.secret_headers:
            found.update(_header_secret_forms(value))
    for name, value in parse_qsl(_query_of(request.url), keep_blank_values=True):
        if name.lower() in rules.secret_fields:
            found.add(value)
    found.update(_body_secret_values(request, rules))
    return frozenset(v for v in found if len(v) >= _MIN_SECRET_LEN and v != REDACTED)


def redact_request(request: Request, rules: KeyRules = DEFAULT_RULES) -> Request:
    secrets = secret_values(request, rules)
    headers = tuple(
        (name, REDACTED if name.lower() in rules.secret_headers else scrub_text(value, secrets))
        for name, value in request.headers
    )
    url = scrub_text(_redact_url(request.url, rules.secret_fields), secrets)
    body = scrub(_redact_body(request, rules), secrets)
    return replace(request, url=url, headers=headers, body=body)


def redact_url(request: Request, rules: KeyRules = DEFAULT_RULES) -> str:
    """The request's URL as redact_request would keep it, without redacting the rest
    (for log lines and session records, which hold only the URL)."""
    return scrub_text(_redact_url(request.url, rules.secret_fields), secret_values(request, rules))


def redact_response(response: Response, secrets: frozenset[str]) -> Response:
    headers: Headers = tuple(
        (name, REDACTED if name.lower() in _RESPONSE_SECRET_HEADERS else scrub_text(value, secrets))
        for name, value in response.headers
    )
    return replace(response, headers=headers, body=scrub(response.body, secrets))


def _in_scrub_order(secrets: frozenset[str]) -> list[str]:
    # Longest first, so "Bearer sk-1" goes whole before "sk-1"; sorted, so that the
    # result does not depend on set iteration order (and a rerun stores the same bytes).
    return sorted(secrets, key=lambda s: (-len(s), s))


def scrub(data: bytes, secrets: frozenset[str]) -> bytes:
    for secret in _in_scrub_order(secrets):
        raw = secret.encode("utf-8", "surrogatepass")
        if raw in data:
            data = data.replace(raw, REDACTED.encode())
    return data


def scrub_text(text: str, secrets: frozenset[str]) -> str:
    for secret in _in_scrub_order(secrets):
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


def scrub_value(value, secrets: frozenset[str]):
    """A JSON-like value (an entry's meta: error texts, reasons) with every secret scrubbed
    from its strings, keys included."""
    if not secrets:
        return value
    if isinstance(value, str):
        return scrub_text(value, secrets)
    if isinstance(value, dict):
        return {scrub_text(str(k), secrets): scrub_value(v, secrets) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [scrub_value(v, secrets) for v in value]
    return value


def failure_text(request: Request, exc: BaseException, rules: KeyRules = DEFAULT_RULES) -> str:
    """An unexpected failure on a request, for the log: the request line and the error
    with the request's secrets scrubbed, then where it happened (a traceback without the
    messages of chained errors, which may quote the request)."""
    secrets = secret_values(request, rules)
    message = scrub_text(str(exc).replace(request.url, redact_url(request, rules)), secrets)
    where = "".join(traceback.format_tb(exc.__traceback__)).rstrip()
    return f"{request.method} {redact_url(request, rules)}: {type(exc).__name__}: {message}\n{where}"


# -- helpers ----------------------------------------------------------------------------


def _header_secret_forms(value: str) -> set[str]:
    forms = {value.strip()}
    scheme, _, credential = value.strip().partition(" ")
    if credential:
        forms.add(credential.strip())  # "Bearer sk-..." is echoed as "sk-..." too
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(credential, validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                pass
            else:
                forms.update({user, password})
    for part in value.split(";"):  # Cookie: a=1; b=2 -> each value
        _, eq, cookie_value = part.partition("=")
        if eq:
            forms.add(cookie_value.strip())
    return forms


def _query_of(url: str) -> str:
    try:
        return urlsplit(url).query
    except ValueError:
        return ""


def _redact_url(url: str, names: frozenset[str]) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.query:
        return url
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    if not any(k.lower() in names for k, _ in pairs):
        return url
    redacted = [(k, REDACTED if k.lower() in names else v) for k, v in pairs]
    return urlunsplit(parts._replace(query=urlencode(redacted)))


def _parsed_body(request: Request):
    """The body as ("json", value) or ("form", pairs), or None when it is neither.

    The declared type does not decide alone: clients often send JSON with no Content-Type
    or with a form one (``curl -d``, ``requests.post(data=json.dumps(...))``), and a secret
    field must be found in it all the same. So a body that starts like JSON is read as
    JSON whatever its type, and one with no type at all may be a form."""
    body, content_type = request.body, request.header("content-type")
    if not body:
        return None
    if is_json_type(content_type) or body.lstrip()[:1] in (b"{", b"["):
        try:
            return "json", jsonsafe.loads(body)
        except (ValueError, UnicodeDecodeError):
            if is_json_type(content_type):
                return None  # invalid JSON under a JSON type: kept as bytes (and scrubbed)
    if is_form_type(content_type) or not content_type:
        try:
            return "form", parse_qsl(body.decode("utf-8"), keep_blank_values=True)
        except UnicodeDecodeError:
            return None
    return None


def _body_secret_values(request: Request, rules: KeyRules) -> set[str]:
    found: set[str] = set()
    parsed = _parsed_body(request)
    if parsed is None:
        return found
    kind, value = parsed
    if kind == "json":
        _collect_json_secrets(value, rules.secret_fields, found)
    else:
        found.update(v for k, v in value if k.lower() in rules.secret_fields)
    return found


def _collect_json_secrets(value, names: frozenset[str], found: set[str]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if k.lower() in names and isinstance(v, (str, int)):
                found.add(str(v))
            else:
                _collect_json_secrets(v, names, found)
    elif isinstance(value, list):
        for v in value:
            _collect_json_secrets(v, names, found)


def _redact_body(request: Request, rules: KeyRules) -> bytes:
    parsed = _parsed_body(request)
    if parsed is None:
        return request.body
    kind, value = parsed
    if kind == "json":
        if not _json_has_field(value, rules.secret_fields):
            return request.body  # keep the client's exact bytes when there is nothing to hide
        # surrogatepass: a body that held raw surrogate bytes (read that way) keeps them
        return json.dumps(_mask_json(value, rules.secret_fields), ensure_ascii=False).encode("utf-8", "surrogatepass")
    if not any(k.lower() in rules.secret_fields for k, _ in value):
        return request.body
    return urlencode([(k, REDACTED if k.lower() in rules.secret_fields else v) for k, v in value]).encode()


def _json_has_field(value, names: frozenset[str]) -> bool:
    if isinstance(value, dict):
        return any(k.lower() in names or _json_has_field(v, names) for k, v in value.items())
    if isinstance(value, list):
        return any(_json_has_field(v, names) for v in value)
    return False


def _mask_json(value, names: frozenset[str]):
    if isinstance(value, dict):
        return {k: REDACTED if k.lower() in names else _mask_json(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_json(v, names) for v in value]
    return value
