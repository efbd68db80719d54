"""A request's secrets: where it names them and their values (redact.py takes them out).

Named places are secret headers (a credential as sent, without its scheme, a Basic
password, each cookie's value) and the values of secret fields (KeyRules.secret_fields)
in the query and fragment, in a form, a JSON body at any depth, a multipart body's
fields and loose text (JSON a client broke, ``name=value`` pairs in plain text). A value
is found as decoded and as the raw text the request carried (an undecoded query or form
value, a JSON string literal as the body wrote it); scrubbing.py derives its other
forms. Only values that are hunted (scrubbing.hunted) are kept. Pure.
"""

from __future__ import annotations

import base64
import json
import re
from functools import lru_cache
from urllib.parse import unquote_plus

from stbproxy import jsonsafe
from stbproxy.content_types import is_form_type, is_json_type
from stbproxy.key_rules import DEFAULT_RULES, KeyRules
from stbproxy.models import Request
from stbproxy.multipart import is_multipart_type, multipart_parts
from stbproxy.scrubbing import hunted


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


def pair_spans(text: str, names: frozenset[str]) -> list[tuple[int, int]]:
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


def text_pair_spans(text: str, names: frozenset[str]) -> list[tuple[int, int]]:
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


def _pairs_secret_values(text: str, names: frozenset[str]) -> set[str]:
    """The values of secret names in a query string, a fragment or a form body: decoded, and as sent."""
    return _span_values(text, pair_spans(text, names))


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


def parsed_body(request: Request, read_json=jsonsafe.loads):
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
    kind, value = parsed_body(request, _json_members)
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
        found.update(_span_values(value, text_pair_spans(value, names)))
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
        if b"\\" in raw and loose_text(raw) in secrets:
            found.add(raw.decode("utf-8", "surrogateescape"))
    return found


# A "name": value member, found in text that is not valid JSON (a truncated body, a
# trailing comma, a template): its value is a secret when the name is one.
LOOSE_MEMBER = re.compile(rb'"((?:[^"\\\r\n]|\\.){1,100})"\s*:\s*("(?:[^"\\\r\n]|\\.)*"|[-+.\w]+)')


def _loose_secret_values(body: bytes, names: frozenset[str]) -> set[str]:
    found: set[str] = set()
    if not body or b'"' not in body:
        return found
    for match in LOOSE_MEMBER.finditer(body):
        name, value = loose_text(match.group(1)), match.group(2)
        if name in names:
            found.add(loose_text(value[1:-1]) if value[:1] == b'"' else value.decode("latin-1"))
            found.add(value.strip(b'"').decode("utf-8", "surrogateescape"))
    return found


def loose_text(raw: bytes) -> str:
    """A JSON string literal's text as the body wrote it (between the quotes), decoded; as it
    is when it is no valid literal."""
    try:
        decoded = json.loads(b'"' + raw + b'"')
    except (ValueError, UnicodeDecodeError):
        return raw.decode("utf-8", "surrogateescape")
    return decoded if isinstance(decoded, str) else raw.decode("utf-8", "surrogateescape")
