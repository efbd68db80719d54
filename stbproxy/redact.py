"""Secrets out of requests and responses before anything is stored, logged or exported.

Two passes: first the named places (secret headers, secret query/body fields) are
replaced by ``REDACTED``; then every secret *value* seen in the request is scrubbed from
whatever else is kept (URL, body, response headers and body), because upstreams echo
keys back and agents paste tokens into odd places.

A value is scrubbed in every form it may be echoed in, not only as it was decoded: each
character may appear as itself, percent-encoded (upper or lower hex, a space as ``+``,
escaped twice as ``%25XX``), JSON-escaped (``\\"``, ``\\\\``, ``\\/``, ``\\n``, ``\\uXXXX`` in
either case, surrogate pairs) or as an HTML character reference, in any mix; the raw text
the request carried (an undecoded query value, a form value) is a secret of its own. One
regular expression per set of secrets does it, built once and cached, whose first
characters let the scanner skip ahead (see _scrubber).
"""

from __future__ import annotations

import base64
import json
import re
import traceback
from dataclasses import replace
from functools import lru_cache
from urllib.parse import parse_qsl, unquote_plus, urlencode, urlsplit, urlunsplit

from stbproxy import jsonsafe
from stbproxy.keys import DEFAULT_RULES, KeyRules, is_form_type, is_json_type
from stbproxy.multipart import is_multipart_type, multipart_parts
from stbproxy.models import Headers, Request, Response

REDACTED = "REDACTED"
_MIN_SECRET_LEN = 4  # shorter values would scrub ordinary text ("1", "abc")
_RESPONSE_SECRET_HEADERS = frozenset({"set-cookie", "mcp-session-id"})


def secret_values(request: Request, rules: KeyRules = DEFAULT_RULES) -> frozenset[str]:
    """Every secret value the request carries: decoded, and as the raw text it was sent in
    where that differs (the scrubber derives the other encodings)."""
    found: set[str] = set()
    for name, value in request.headers:
        if name in rules.secret_headers:
            found.update(_header_secret_forms(value))
    query = _query_of(request.url)
    if query:
        found.update(_pairs_secret_values(query, rules.secret_fields))
    found.update(_body_secret_values(request, rules))
    return frozenset(v for v in found if len(v) >= _MIN_SECRET_LEN and v != REDACTED)


def redact_request(request: Request, rules: KeyRules = DEFAULT_RULES) -> Request:
    secrets = secret_values(request, rules)
    headers = tuple(
        (name, REDACTED if name in rules.secret_headers else scrub_text(value, secrets))
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
    """``data`` with every secret, in every form it may be echoed in, replaced by REDACTED."""
    if not secrets or not data:
        return data
    # Bytes are scanned as text: each byte that is not UTF-8 stands for itself
    # (surrogateescape) and comes back unchanged.
    text = data.decode("utf-8", "surrogateescape")
    scrubbed, count = _scrubber(secrets).subn(REDACTED, text)
    return scrubbed.encode("utf-8", "surrogateescape") if count else data


def scrub_text(text: str, secrets: frozenset[str]) -> str:
    if not secrets or not text:
        return text
    return _scrubber(secrets).sub(REDACTED, text)


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


@lru_cache(maxsize=128)
def _scrubber(secrets: frozenset[str]) -> re.Pattern[str]:
    """One pattern matching every secret in every form (longest secret first).

    Each secret's pattern is split on the forms of its first character, so that every
    alternative of the whole begins with one literal character: the regex engine then
    scans only where one of those characters is (its charset prefix), which keeps a large
    body fast to scrub whatever the number of secrets."""
    alternatives: list[str] = []
    for secret in _in_scrub_order(secrets):
        groups = [_char_pattern(c) for c in secret]
        rest = "".join(groups[1:])
        alternatives.extend(first + rest for first in _char_forms(secret[0]))
    return re.compile("|".join(alternatives))


def _char_pattern(c: str) -> str:
    forms = _char_forms(c)
    return forms[0] if len(forms) == 1 else "(?:" + "|".join(forms) + ")"


_JSON_SHORT = {'"': '"', "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}
_HTML_NAMED = {"&": "amp", "<": "lt", ">": "gt", '"': "quot", "'": "(?:apos|#39)"}


@lru_cache(maxsize=4096)
def _char_forms(c: str) -> tuple[str, ...]:
    """The patterns of one character as an upstream may write it, each starting with a
    literal character: itself, percent-encoded, JSON-escaped, an HTML reference."""
    code = ord(c)
    utf8 = c.encode("utf-8", "surrogatepass")
    forms = [re.escape(c)]
    if 0xD800 <= code <= 0xDFFF:  # a lone surrogate (from a JSON escape): its bytes as scrub reads them
        forms.append(re.escape(utf8.decode("utf-8", "surrogateescape")))
    forms.append("".join("%(?:25)?" + _hex(byte, 2) for byte in utf8))
    if c == " ":
        forms.append(r"\+")
    if code > 0xFFFF:
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        forms.append(r"\\u" + _hex(high, 4) + r"\\u" + _hex(low, 4))
    else:
        forms.append(r"\\u" + _hex(code, 4))
    if c in _JSON_SHORT:
        forms.append(re.escape("\\" + _JSON_SHORT[c]))
    if not c.isalnum():
        forms.append(f"&#(?:0*{code}|[xX]0*{_hex(code, 1)});")
        if c in _HTML_NAMED:
            forms.append(f"&{_HTML_NAMED[c]};")
    return tuple(forms)


def _hex(number: int, width: int) -> str:
    """Hex digits of ``number`` (at least ``width``) as a pattern that takes either case."""
    return "".join(f"[{d.lower()}{d}]" if d.isalpha() else d for d in f"{number:0{width}X}")


def _pairs_secret_values(text: str, names: frozenset[str]) -> set[str]:
    """The values of secret names in a query string or form body: decoded, and as sent."""
    found: set[str] = set()
    for pair in text.split("&"):
        raw_name, eq, raw_value = pair.partition("=")
        if not eq or not raw_value:
            continue
        if unquote_plus(raw_name) in names or raw_name in names:
            found.add(raw_value)
            found.add(unquote_plus(raw_value))
    return found


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
    if not any(k in names for k, _ in pairs):
        return url
    redacted = [(k, REDACTED if k in names else v) for k, v in pairs]
    return urlunsplit(parts._replace(query=urlencode(redacted)))


def _parsed_body(request: Request):
    """The body as ("json", value), ("form", pairs) or ("multipart", parts), or None when
    it is none of them.

    The declared type does not decide alone: clients often send JSON with no Content-Type
    or with a form one (``curl -d``, ``requests.post(data=json.dumps(...))``), and a secret
    field must be found in it all the same. So a body that starts like JSON is read as
    JSON whatever its type, and one with no type at all may be a form."""
    body, content_type = request.body, request.header("content-type")
    if not body:
        return None
    if is_multipart_type(content_type):
        parts = multipart_parts(body, content_type)
        return ("multipart", parts) if parts is not None else None
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
        found.update(_loose_secret_values(request.body, rules.secret_fields))
        return found
    kind, value = parsed
    if kind == "json":
        _collect_json_secrets(value, rules.secret_fields, found)
    elif kind == "multipart":
        for part in value:
            if part.name in rules.secret_fields:
                raw = request.body[part.start:part.end]
                found.add(raw.decode("utf-8", "surrogateescape").strip())
                found.add(raw.decode("utf-8", "surrogateescape"))
    else:
        found.update(v for k, v in value if k in rules.secret_fields)
        try:
            found.update(_pairs_secret_values(request.body.decode("utf-8"), rules.secret_fields))
        except UnicodeDecodeError:
            pass
    return found


def _collect_json_secrets(value, names: frozenset[str], found: set[str], secret: bool = False) -> None:
    """Every string under a secret name, at any depth (a secret name's object or array
    holds secrets throughout), and a number that is a secret name's value itself (numbers
    deeper down, such as an expiry, are not: they would be scrubbed from every answer)."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k in names and isinstance(v, (int, float)) and not isinstance(v, bool):
                found.add(json.dumps(v))
            else:
                _collect_json_secrets(v, names, found, secret or k in names)
    elif isinstance(value, list):
        for v in value:
            _collect_json_secrets(v, names, found, secret)
    elif secret and isinstance(value, str):
        found.add(value)


# A "name": value member, found in text that is not valid JSON (a truncated body, a
# trailing comma, a template): its value is a secret when the name is one.
_LOOSE_MEMBER = re.compile(rb'"((?:[^"\\\r\n]|\\.){1,100})"\s*:\s*("(?:[^"\\\r\n]|\\.)*"|[-+.\w]+)')


def _loose_secret_values(body: bytes, names: frozenset[str]) -> set[str]:
    found: set[str] = set()
    if not body or b'"' not in body:
        return found
    for match in _LOOSE_MEMBER.finditer(body):
        name, value = _loose_text(match.group(1)), match.group(2)
        if name in names:
            found.add(_loose_text(value[1:-1]) if value[:1] == b'"' else value.decode("latin-1"))
            found.add(value.strip(b'"').decode("utf-8", "surrogateescape"))
    return found


def _loose_text(raw: bytes) -> str:
    try:
        decoded = json.loads(b'"' + raw + b'"')
    except (ValueError, UnicodeDecodeError):
        return raw.decode("utf-8", "surrogateescape")
    return decoded if isinstance(decoded, str) else raw.decode("utf-8", "surrogateescape")


def _redact_body(request: Request, rules: KeyRules) -> bytes:
    parsed = _parsed_body(request)
    if parsed is None:
        return _redact_loose(request.body, rules.secret_fields)
    kind, value = parsed
    if kind == "multipart":
        body = request.body
        for part in reversed(value):  # from the end, so earlier offsets stay right
            if part.name in rules.secret_fields:
                body = body[:part.start] + REDACTED.encode() + body[part.end:]
        return body
    if kind == "json":
        if not _json_has_field(value, rules.secret_fields):
            return request.body  # keep the client's exact bytes when there is nothing to hide
        # surrogatepass: a body that held raw surrogate bytes (read that way) keeps them
        return json.dumps(_mask_json(value, rules.secret_fields), ensure_ascii=False).encode("utf-8", "surrogatepass")
    if not any(k in rules.secret_fields for k, _ in value):
        return request.body
    return urlencode([(k, REDACTED if k in rules.secret_fields else v) for k, v in value]).encode()


def _redact_loose(body: bytes, names: frozenset[str]) -> bytes:
    """A body that is neither JSON nor a form, with the value of every "secret": member
    replaced (it may be JSON a client broke); anything else is kept as sent."""
    if not body or b'"' not in body:
        return body

    def masked(match: re.Match) -> bytes:
        if _loose_text(match.group(1)) not in names:
            return match.group(0)
        value_at = match.start(2) - match.start(0)
        return match.group(0)[:value_at] + b'"' + REDACTED.encode() + b'"'

    return _LOOSE_MEMBER.sub(masked, body)


def _json_has_field(value, names: frozenset[str]) -> bool:
    if isinstance(value, dict):
        return any(k in names or _json_has_field(v, names) for k, v in value.items())
    if isinstance(value, list):
        return any(_json_has_field(v, names) for v in value)
    return False


def _mask_json(value, names: frozenset[str]):
    if isinstance(value, dict):
        return {k: REDACTED if k in names else _mask_json(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask_json(v, names) for v in value]
    return value
