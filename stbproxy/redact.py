"""Secrets out of requests and responses before anything is stored, logged or exported.

Two passes: first the named places (secret headers, secret query/body fields) are
replaced by ``REDACTED``; then every secret *value* seen in the request is scrubbed from
whatever else is kept (URL, body, response headers and body), because upstreams echo
keys back and agents paste tokens into odd places.

A value is scrubbed in every form it may be echoed in, not only as it was decoded: each
character may appear as itself, percent-encoded (upper or lower hex, a space as ``+``,
escaped twice as ``%25XX``), JSON-escaped (``\\"``, ``\\\\``, ``\\/``, ``\\n``, ``\\uXXXX`` in
either case, surrogate pairs; escaped again, as a JSON text quoted in another) or as an
HTML character reference (decimal, hex or named), in any mix; the raw text the request
carried (an undecoded query or form value, a JSON string literal as the body wrote it) is
a secret of its own. One regular expression per secret does it, built once and cached,
whose first characters let the scanner skip ahead (see _secret_pattern).

Only values that can be told from data are hunted so: one shorter than MIN_SECRET_CHARS,
one character repeated, or a placeholder (``password``, ``changeme``) would be found in
ordinary answers and corrupt them. A user name (Basic credentials) is no secret at all.
"""

from __future__ import annotations

import base64
import html.entities
import json
import re
import traceback
from dataclasses import replace
from functools import lru_cache
from urllib.parse import unquote_plus

from stbproxy import jsonsafe
from stbproxy.keys import DEFAULT_RULES, KeyRules, is_form_type, is_json_type
from stbproxy.models import Headers, Request, Response
from stbproxy.multipart import is_multipart_type, multipart_parts

REDACTED = "REDACTED"
# A value shorter than this is not hunted in what is kept (an answer, a path, a key): it
# could not be told from ordinary data ("Milo", "1234") and scrubbing it would corrupt that
# data. Where it is named (a secret header, a secret field) it is REDACTED all the same.
MIN_SECRET_CHARS = 8
# Values too common to be told from data either, whatever their length (compared lower-cased).
PLACEHOLDERS = frozenset({"password", "passwd", "changeme", "undefined", "anonymous", "12345678", "123456789",
                          "1234567890", "redacted"})
_RESPONSE_SECRET_HEADERS = frozenset({"set-cookie", "mcp-session-id"})


def hunted(value: str) -> bool:
    """Whether a secret value is scrubbed wherever it appears: long enough, and neither one
    character repeated nor a placeholder (see MIN_SECRET_CHARS)."""
    return len(value) >= MIN_SECRET_CHARS and value.lower() not in PLACEHOLDERS and bool(value.strip(value[0]))


def secret_values(request: Request, rules: KeyRules = DEFAULT_RULES) -> frozenset[str]:
    """Every secret value the request carries and that is hunted: decoded, and as the raw
    text it was sent in where that differs (the scrubber derives the other encodings)."""
    found: set[str] = set()
    for name, value in request.headers:
        if name in rules.secret_headers:
            found.update(_header_secret_forms(value))
    names = rules.secret_fields
    hints = _name_hints(names)
    query, fragment = _query_and_fragment(request.url)
    for pairs in (query, fragment):
        if pairs and _may_hold(pairs, hints and hints[0]):
            found.update(_pairs_secret_values(pairs, names))
    if request.body and _may_hold(request.body, hints and hints[1]):
        found.update(_body_secret_values(request, rules))
    return frozenset(v for v in found if hunted(v))


@lru_cache(maxsize=32)
def _name_hints(names: frozenset[str]) -> tuple[tuple[str, ...], tuple[bytes, ...]] | None:
    """What any place of a secret name shows, in lower case: the end of one of the names, or
    an escape a name may be written with (``%``, ``+``, ``\\``). A query or a body with none
    of them names no secret and is not searched (most do not, and every request is keyed).
    None, so that everything is searched, when a name is not ASCII."""
    if not all(name.isascii() for name in names):
        return None
    ends = {name[-4:] for name in names}
    return tuple(sorted(ends | {"%", "+"})), tuple(sorted({end.encode() for end in ends} | {b"%", b"+", b"\\"}))


def _may_hold(data, hints) -> bool:
    if not hints:
        return True
    return any(map(data.lower().__contains__, hints))


def redact_request(request: Request, rules: KeyRules = DEFAULT_RULES) -> Request:
    secrets = secret_values(request, rules)
    headers = tuple(
        (scrub_text(name, secrets), REDACTED if name in rules.secret_headers else scrub_text(value, secrets))
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
    """The response with every secret scrubbed from its body and its header fields, names
    included (an upstream may echo a key as a header's name)."""
    headers: Headers = tuple(
        (scrub_text(name, secrets), REDACTED if name.lower() in _RESPONSE_SECRET_HEADERS else scrub_text(value, secrets))
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
    found = 0
    for pattern in _scrubbers(secrets):
        text, count = pattern.subn(REDACTED, text)
        found += count
    return text.encode("utf-8", "surrogateescape") if found else data


def scrub_text(text: str, secrets: frozenset[str]) -> str:
    if not secrets or not text:
        return text
    for pattern in _scrubbers(secrets):
        text = pattern.sub(REDACTED, text)
    return text


def holds_secret(text: str, secrets: frozenset[str]) -> bool:
    """Whether ``text`` holds any of ``secrets`` in any form (scans only, nothing built)."""
    return bool(secrets and text) and any(pattern.search(text) for pattern in _scrubbers(secrets))


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


LOGGED_URL_CHARS = 1024  # a URL in a log line or a reason: its first characters (a URL may take 64 KiB)


def bounded_url(url: str) -> str:
    """A (redacted) URL as a log line or a reason quotes it: its first LOGGED_URL_CHARS characters."""
    if len(url) <= LOGGED_URL_CHARS:
        return url
    return f"{url[:LOGGED_URL_CHARS]}... ({len(url) - LOGGED_URL_CHARS:,} more characters)"


def failure_text(request: Request, exc: BaseException, rules: KeyRules = DEFAULT_RULES) -> str:
    """An unexpected failure on a request, for the log: the request line and the error
    with the request's secrets scrubbed, then where it happened (a traceback without the
    messages of chained errors, which may quote the request). URLs are quoted bounded."""
    secrets = secret_values(request, rules)
    shown = bounded_url(redact_url(request, rules))
    message = scrub_text(str(exc).replace(request.url, shown), secrets)
    where = "".join(traceback.format_tb(exc.__traceback__)).rstrip()
    return f"{request.method} {shown}: {type(exc).__name__}: {message}\n{where}"


# -- helpers ----------------------------------------------------------------------------


@lru_cache(maxsize=128)
def _scrubbers(secrets: frozenset[str]) -> tuple[re.Pattern[str], ...]:
    """The patterns of a set of secrets, applied in turn, longest secret first."""
    return tuple(_secret_pattern(secret) for secret in _in_scrub_order(secrets))


@lru_cache(maxsize=1024)
def _secret_pattern(secret: str) -> re.Pattern[str]:
    """One secret in every form: a group per character, of that character's forms.

    The first group's forms each begin with one literal character, so the regex engine
    scans only where one of those characters is (its charset prefix), which keeps a large
    body fast to scrub. One pattern per secret, cached on its own, keeps the building
    (in Python: milliseconds per secret) to once per secret, whatever set it comes in."""
    return re.compile("".join(_char_pattern(c) for c in secret))


def _char_pattern(c: str) -> str:
    forms = _char_forms(c)
    return forms[0] if len(forms) == 1 else "(?:" + "|".join(forms) + ")"


# One backslash or more, written so that the pattern starts with a literal one (see _secret_pattern).
_BACKSLASHES = r"\\(?:\\)*"
_JSON_SHORT = {'"': '"', "\\": "\\", "/": "/", "\b": "b", "\f": "f", "\n": "n", "\r": "r", "\t": "t"}


def _html_names() -> dict[str, tuple[str, ...]]:
    """HTML's named character references of each character (``&sol;``, ``&eacute;``)."""
    names: dict[str, list[str]] = {}
    for name, text in html.entities.html5.items():
        if len(text) == 1 and name.endswith(";"):
            names.setdefault(text, []).append(name)
    return {c: tuple(sorted(found)) for c, found in names.items()}


_HTML_NAMED = _html_names()


@lru_cache(maxsize=4096)
def _char_forms(c: str) -> tuple[str, ...]:
    """The patterns of one character as an upstream may write it, each starting with a
    literal character: itself, percent-encoded (or twice), JSON-escaped (the backslash of
    the escape escaped again, any number of times: a JSON text quoted in another), an HTML
    reference (decimal, hex or named, letters and digits included)."""
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
        forms.append(_BACKSLASHES + "u" + _hex(high, 4) + _BACKSLASHES + "u" + _hex(low, 4))
    else:
        forms.append(_BACKSLASHES + "u" + _hex(code, 4))
    if c in _JSON_SHORT:
        forms.append(_BACKSLASHES + re.escape(_JSON_SHORT[c]))
    forms.append(f"&#(?:0*{code}|[xX]0*{_hex(code, 1)});")
    forms.extend(f"&{re.escape(name)}" for name in _HTML_NAMED.get(c, ()))
    return tuple(forms)


def _hex(number: int, width: int) -> str:
    """Hex digits of ``number`` (at least ``width``) as a pattern that takes either case."""
    return "".join(f"[{d.lower()}{d}]" if d.isalpha() else d for d in f"{number:0{width}X}")


# -- where secrets are: headers, queries, forms, JSON, text ------------------------------------


def _header_secret_forms(value: str) -> set[str]:
    forms = {value.strip()}
    scheme, _, credential = value.strip().partition(" ")
    if credential:
        forms.add(credential.strip())  # "Bearer sk-..." is echoed as "sk-..." too
        if scheme.lower() == "basic":
            try:
                _user, _, password = base64.b64decode(credential, validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                pass
            else:
                forms.add(password)  # the user name is no secret: an answer may well hold it
    for part in value.split(";"):  # Cookie: a=1; b=2 -> each value
        _, eq, cookie_value = part.partition("=")
        if eq:
            forms.add(cookie_value.strip())
    return forms


def _query_and_fragment(url: str) -> tuple[str, str]:
    """A URL's query and fragment, as written (a fragment never reaches the upstream, but a
    stored URL keeps it)."""
    head, _, fragment = url.partition("#")
    return head.partition("?")[2], fragment


_AMP_PIECES = re.compile(r"[^&]+")
_PIECES = re.compile(r"[^&;]+")


def _pair_spans(text: str, names: frozenset[str]) -> list[tuple[int, int]]:
    """Where the values of secret names lie in a query, a fragment or a form, merged where
    they overlap: pairs split at "&", and also at ";", an older separator some servers still
    read (so ``x=1;api_key=...`` carries a key, and ``api_key=a;b`` is the value ``a;b``)."""
    spans = []
    for pieces in (_AMP_PIECES, _PIECES) if ";" in text else (_AMP_PIECES,):
        for piece in pieces.finditer(text):
            name, eq, _ = piece.group().partition("=")
            if eq and _is_secret_name(name, names):
                spans.append((piece.start() + len(name) + 1, piece.end()))
    return _merged(spans)


# name=value in text that is no form (a text/plain body, a log line a client sends): the
# name stands alone, the value ends at a space, a separator, a quote or a bracket.
_TEXT_PAIR = re.compile(r"(?<![\w.\-\[\]%])([\w.\-\[\]%]+)=([^\s&;#\"'<>,)\]}]*)")


def _text_pair_spans(text: str, names: frozenset[str]) -> list[tuple[int, int]]:
    return _merged([match.span(2) for match in _TEXT_PAIR.finditer(text) if _is_secret_name(match.group(1), names)])


def _is_secret_name(raw: str, names: frozenset[str]) -> bool:
    return raw in names or (("%" in raw or "+" in raw) and unquote_plus(raw) in names)


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def _span_values(text: str, spans: list[tuple[int, int]]) -> set[str]:
    """Each value as sent and decoded, when the decoded value is hunted (its escapes are no
    more told from data than it is)."""
    found: set[str] = set()
    for start, end in spans:
        raw = text[start:end]
        decoded = unquote_plus(raw, errors="surrogateescape")
        if hunted(decoded):
            found.update((raw, decoded))
    return found


def _replaced(text: str, spans: list[tuple[int, int]]) -> str:
    for start, end in reversed(spans):  # from the end, so earlier offsets stay right
        text = text[:start] + REDACTED + text[end:]
    return text


def _pairs_secret_values(text: str, names: frozenset[str]) -> set[str]:
    """The values of secret names in a query string, a fragment or a form body: decoded, and as sent."""
    return _span_values(text, _pair_spans(text, names))


def _redact_url(url: str, names: frozenset[str]) -> str:
    """The URL as sent, each value of a secret name in its query or fragment REDACTED."""
    head, hash_, fragment = url.partition("#")
    path, mark, query = head.partition("?")
    if query:
        query = _replaced(query, _pair_spans(query, names))
    if fragment:
        fragment = _replaced(fragment, _pair_spans(fragment, names))
    return path + mark + query + hash_ + fragment


class _Members(list):
    """A JSON object read as its (name, value) members, duplicates kept."""

    __slots__ = ()


_MEMBERS = json.JSONDecoder(object_pairs_hook=_Members)


def _json_members(body: bytes):
    """The body as JSON with each object as its _Members: json.loads keeps the last of two
    members of one name, but an upstream may read (and echo) the first. ValueError when it
    is not JSON or nested too deep."""
    if jsonsafe.too_deep(body):
        raise jsonsafe.JsonTooDeep(jsonsafe.MAX_JSON_DEPTH)
    return _MEMBERS.decode(body.decode(json.detect_encoding(body), "surrogatepass"))


def _parsed_body(request: Request, read_json=jsonsafe.loads):
    """The body as ("json", value) (read by ``read_json``), ("form", text),
    ("multipart", parts), or ("text", text) when it is none of them (text decoded with
    surrogate escapes: each byte that is not UTF-8 stands for itself).

    The declared type does not decide alone: clients often send JSON with no Content-Type
    or with a form one (``curl -d``, ``requests.post(data=json.dumps(...))``), and a secret
    field must be found in it all the same. So a body that starts like JSON is read as
    JSON whatever its type, and one with no type at all may be a form."""
    body, content_type = request.body, request.header("content-type")
    if is_multipart_type(content_type):
        parts = multipart_parts(body, content_type)
        if parts is not None:
            return "multipart", parts
    elif is_json_type(content_type) or body.lstrip()[:1] in (b"{", b"["):
        try:
            return "json", read_json(body)
        except ValueError:  # not JSON (UnicodeDecodeError included): read as text
            pass
    text = body.decode("utf-8", "surrogateescape")
    return ("form" if is_form_type(content_type) or not content_type else "text"), text


def _body_secret_values(request: Request, rules: KeyRules) -> set[str]:
    names = rules.secret_fields
    kind, value = _parsed_body(request, _json_members)
    found: set[str] = set()
    if kind == "json":
        _collect_json_secrets(value, names, found)
        if found and b"\\" in request.body:
            found.update(_json_literals(request.body, found))
    elif kind == "multipart":
        for part in value:
            if part.name in names:
                raw = request.body[part.start:part.end].decode("utf-8", "surrogateescape")
                found.update((raw, raw.strip()))
    elif kind == "form":
        found.update(_pairs_secret_values(value, names))
    else:
        found.update(_loose_secret_values(request.body, names))
        found.update(_span_values(value, _text_pair_spans(value, names)))
    return found


def _collect_json_secrets(value, names: frozenset[str], found: set[str], secret: bool = False) -> None:
    """Every string under a secret name, at any depth (a secret name's object or array
    holds secrets throughout), and a number that is a secret name's value itself (numbers
    deeper down, such as an expiry, are not: they would be scrubbed from every answer).
    Objects are _Members: a name given twice counts twice."""
    if isinstance(value, _Members):
        for k, v in value:
            if k in names and isinstance(v, (int, float)) and not isinstance(v, bool):
                found.add(json.dumps(v))
            else:
                _collect_json_secrets(v, names, found, secret or k in names)
    elif isinstance(value, list):
        for v in value:
            _collect_json_secrets(v, names, found, secret)
    elif secret and isinstance(value, str):
        found.add(value)


_JSON_STRING = re.compile(rb'"((?:[^"\\]|\\.)*)"', re.DOTALL)


def _json_literals(body: bytes, secrets: set[str]) -> set[str]:
    """The string literals of a JSON body that hold a secret written with escapes
    (``"\\u0041..."``), as written: an upstream may echo that text itself, escaped again."""
    found: set[str] = set()
    for match in _JSON_STRING.finditer(body):
        raw = match.group(1)
        if b"\\" in raw and _loose_text(raw) in secrets:
            found.add(raw.decode("utf-8", "surrogateescape"))
    return found


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
    if not request.body:
        return request.body
    names = rules.secret_fields
    kind, value = _parsed_body(request)
    if kind == "multipart":
        body = request.body
        for part in reversed(value):  # from the end, so earlier offsets stay right
            if part.name in names:
                body = body[:part.start] + REDACTED.encode() + body[part.end:]
        return body
    if kind == "json":
        if not _json_has_field(value, names):
            return request.body  # keep the client's exact bytes when there is nothing to hide
        # surrogatepass: a body that held raw surrogate bytes (read that way) keeps them
        return json.dumps(_mask_json(value, names), ensure_ascii=False).encode("utf-8", "surrogatepass")
    if kind == "form":
        spans = _pair_spans(value, names)
        return _replaced(value, spans).encode("utf-8", "surrogateescape") if spans else request.body
    # text: the "secret": members of JSON a client broke, and name=value pairs; anything
    # else is kept as sent, bytes that are not UTF-8 included
    loose = _redact_loose(request.body, names)
    text = loose.decode("utf-8", "surrogateescape")
    spans = _text_pair_spans(text, names)
    return _replaced(text, spans).encode("utf-8", "surrogateescape") if spans else loose


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
