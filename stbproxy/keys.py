"""Canonical request keys: equal for requests that mean the same call.

Pure functions only. The key of a request is built from its method, scheme, host
(default port dropped), normalized path, query parameters sorted by name and a body
canonicalized by content type. Secret and volatile fields never enter a key, so two
agents with different API keys share one cache entry. ``diff`` explains a miss.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Iterable
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from stbproxy import jsonsafe
from stbcore.arguments import SECRET_FIELDS, arg_text, arguments_digest  # noqa: F401  (re-exported)
from stbproxy.models import ApiRef, Request
from stbproxy.multipart import Part, is_multipart_type, multipart_parts


class Names(frozenset):
    """Lower-case field or header names, looked up as the proxy matches secret names:
    whatever the case (``API_KEY``, ``Toolbench_Key``), and with array and nested form
    spellings (``api_key[]``, ``api_key[0]``, ``auth[password]``) matching the name inside
    the brackets or before them."""

    __slots__ = ()

    def __contains__(self, name: object) -> bool:
        if frozenset.__contains__(self, name):
            return True
        if type(name) is not str:
            return False
        lower = name.lower()
        if lower != name and frozenset.__contains__(self, lower):
            return True
        if "[" not in lower:
            return False
        return any(frozenset.__contains__(self, part) for part in _BRACKETS.split(lower) if part)


_BRACKETS = re.compile(r"[\[\]]")

# Headers never part of a key and always redacted before storage.
# ToolBench's client sends its key as a "toolbench_key" header as well as in the body.
SECRET_HEADERS = Names({
    "x-rapidapi-key", "authorization", "proxy-authorization", "cookie", "toolbench_key",
    "x-api-key", "api-key", "x-auth-token", "x-access-token",
    "mcp-session-id",  # a live MCP session's id: never stored, never keyed
})
# Query, body and multipart fields secret by default: stbcore.arguments.SECRET_FIELDS (the
# names StableToolBench's own calls carry keys in, also left out by the evaluator) and the
# usual names of credentials on other HTTP APIs. "key" is not among them: it is a real
# argument of many APIs. Users add names with KeyRules.extra_secret_fields and take
# defaults out with KeyRules.not_secret_fields.
SECRET_FIELDS_DEFAULT = Names(SECRET_FIELDS | {
    "api-key", "x-api-key", "password", "passwd", "token", "auth_token", "client_secret", "refresh_token",
})

DEFAULT_PORTS = {"http": 80, "https": 443}
EXACT, CANONICAL = "exact", "canonical"
STB_KEYS = (EXACT, CANONICAL)  # KeyRules.stb_keys
EXACT_MARK = "="  # an exact key's digest starts so: it never equals a canonical one
HIDDEN_ARGUMENT = "<not keyed>"  # a secret or volatile value, in an exact key's text
KEY_PATH_CHARS = 120  # how much of the path the readable key prefix keeps


@dataclass(frozen=True)
class KeyRules:
    """Which names are secret (redacted, never keyed) or volatile (never keyed).

    The secret names are the defaults (SECRET_FIELDS_DEFAULT, SECRET_HEADERS) with the
    ``extra_`` names added and the ``not_secret_`` names taken out; all match whatever
    their case (see Names)."""

    extra_secret_fields: frozenset[str] = frozenset()
    extra_secret_headers: frozenset[str] = frozenset()
    volatile_fields: frozenset[str] = frozenset()
    not_secret_fields: frozenset[str] = frozenset()
    not_secret_headers: frozenset[str] = frozenset()
    # Mixed into digests of credentials (an MCP call's auth context), so that a digest in a
    # key tells nothing of the credential to anyone without the store's own salt.
    auth_salt: bytes = b""
    # How a StableToolBench call's arguments are keyed (stb_api_key): "exact", as that
    # benchmark's server looks them up, or "canonical", compared as text whatever their order.
    stb_keys: str = "exact"
    secret_fields: frozenset[str] = field(init=False)
    secret_headers: frozenset[str] = field(init=False)
    unkeyed_fields: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        if self.stb_keys not in STB_KEYS:
            raise ValueError(f"stb_keys must be one of {', '.join(STB_KEYS)}, not {self.stb_keys!r}")
        lower = lambda names: frozenset(n.lower() for n in names)  # noqa: E731
        fields = (SECRET_FIELDS_DEFAULT | lower(self.extra_secret_fields)) - lower(self.not_secret_fields)
        headers = (SECRET_HEADERS | lower(self.extra_secret_headers)) - lower(self.not_secret_headers)
        object.__setattr__(self, "secret_fields", Names(fields))
        object.__setattr__(self, "secret_headers", Names(headers))
        object.__setattr__(self, "unkeyed_fields", Names(fields | lower(self.volatile_fields)))

    @classmethod
    def build(
        cls,
        secret_fields: Iterable[str] = (),
        secret_headers: Iterable[str] = (),
        volatile_fields: Iterable[str] = (),
        not_secret_fields: Iterable[str] = (),
        not_secret_headers: Iterable[str] = (),
    ) -> KeyRules:
        return cls(frozenset(secret_fields), frozenset(secret_headers), frozenset(volatile_fields),
                   frozenset(not_secret_fields), frozenset(not_secret_headers))


DEFAULT_RULES = KeyRules()


@dataclass(frozen=True, slots=True)
class Canonical:
    """The parts of a request that decide its key, in normal form."""

    method: str
    scheme: str
    host: str  # lower-cased host, ":port" only when not the scheme's default
    path: str
    query: tuple[tuple[str, str], ...]
    body_kind: str  # "empty", "json", "form" or "bytes"
    body: str  # canonical text for json/form, sha256 hex for bytes

    def digest(self) -> str:
        material = json.dumps(
            [self.method, self.scheme, self.host, self.path, self.query, self.body_kind, self.body],
            ensure_ascii=False,
            separators=(",", ":"),
        )
        return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    def storage_key(self) -> str:
        """``http/<host>/<METHOD>/<path>/<digest>``: readable, and prefix-scannable by host."""
        path = self.path.strip("/")[:KEY_PATH_CHARS]
        return f"http/{self.host}/{self.method}/{path}/{self.digest()}"


def canonical(request: Request, rules: KeyRules = DEFAULT_RULES) -> Canonical:
    """Normalize a request; never raises, whatever the URL or body holds."""
    scheme, host, path, raw_query = _split_url(request.url)
    query = _sorted_by_name(
        (k, v) for k, v in parse_qsl(raw_query, keep_blank_values=True) if k.lower() not in rules.unkeyed_fields
    )
    body_kind, body = canonical_body(request.body, request.header("content-type"), rules)
    return Canonical(request.method.upper(), scheme, host, path, query, body_kind, body)


def request_key(request: Request, rules: KeyRules = DEFAULT_RULES) -> str:
    return canonical(request, rules).storage_key()


def api_key(api: ApiRef, args: dict[str, Any], rules: KeyRules = DEFAULT_RULES) -> str:
    """``api/<category>/<tool>/<api>/<digest>``: one key per API call, whatever the wire form.

    Argument values are compared as text (``1``, ``"1"`` and ``?page=1`` agree), because
    the same call arrives as a query string over HTTP and as typed JSON over /virtual.
    The rule is stbcore's, shared with the evaluator's call matching.
    """
    return f"{api_prefix(api)}{arguments_digest(args, rules.unkeyed_fields)}"


def stb_api_key(api: ApiRef, args: dict[str, Any], rules: KeyRules = DEFAULT_RULES) -> str:
    """The key of a StableToolBench call under ``rules.stb_keys``: exact_api_key of its
    arguments' text, or the canonical api_key."""
    if rules.stb_keys == EXACT:
        return exact_api_key(api, exact_arguments_text(args, rules))
    return api_key(api, args, rules)


def exact_arguments_text(args: dict[str, Any], rules: KeyRules = DEFAULT_RULES) -> str:
    """The text StableToolBench's server looks a call up by: ``str()`` of the arguments as
    parsed from the call's JSON, so their order and types count (``{'id': 294}`` is not
    ``{'id': '294'}``). A secret or volatile value is replaced by HIDDEN_ARGUMENT, so that it
    enters no key (its name and place still do)."""
    hidden = [name for name in args if type(name) is str and name in rules.unkeyed_fields]
    if hidden:
        args = {**args, **dict.fromkeys(hidden, HIDDEN_ARGUMENT)}
    return str(dict(args))


def exact_api_key(api: ApiRef, text: str) -> str:
    """``api/<category>/<tool>/<api>/=<digest>``: one key per arguments text
    (exact_arguments_text, or a cache file's own key)."""
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"{api_prefix(api)}{EXACT_MARK}{digest}"


def stb_keys_of(key: str) -> str | None:
    """Which StableToolBench keys an ``api/`` key is (EXACT or CANONICAL); None for another key."""
    if not key.startswith("api/"):
        return None
    return EXACT if key.rpartition("/")[2].startswith(EXACT_MARK) else CANONICAL


def api_prefix(api: ApiRef) -> str:
    return f"api/{api.category}/{api.tool}/{api.api}/"


# -- parts -------------------------------------------------------------------------


def _split_url(url: str) -> tuple[str, str, str, str]:
    try:
        parts = urlsplit(url)
        port = parts.port
        hostname = parts.hostname or ""
    except ValueError:
        # A malformed URL (bad port, stray brackets) still gets a stable key: the raw text.
        return "", "", url, ""
    scheme = parts.scheme.lower()
    host = hostname.lower()
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    if port is not None and port != DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    return scheme, host, normalize_path(parts.path), parts.query


# A path of these characters, without "//" or dot segments, is already in normal form.
_NORMAL_PATH = re.compile(r"/[A-Za-z0-9\-_~!$&'()*+,;=:@.]+(?:/[A-Za-z0-9\-_~!$&'()*+,;=:@.]+)*/?|/")
_DOT_SEGMENT = re.compile(r"/\.\.?(?:/|$)")


def normalize_path(path: str) -> str:
    """Resolve dot segments, collapse repeated slashes, normalize percent-escapes; keep a trailing slash."""
    if not path:
        return "/"
    if _NORMAL_PATH.fullmatch(path) and not _DOT_SEGMENT.search(path):
        return path
    # Decode then re-encode so "%7E", "~" and "%7e" agree; "/" and "%2F" stay distinct.
    # surrogatepass: a lone surrogate (a byte that was no UTF-8, read back from a cassette)
    # is escaped like any other character, never an error.
    segments = [quote(unquote(seg), safe="!$&'()*+,;=:@~", errors="surrogatepass") for seg in path.split("/")]
    normal = posixpath.normpath("/".join(segments) or "/")
    if normal.startswith("//"):  # posixpath keeps a leading double slash; URLs do not need it
        normal = "/" + normal.lstrip("/")
    if path.endswith("/") and not normal.endswith("/"):
        normal += "/"
    return normal


def _sorted_by_name(pairs: Iterable[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    # sorted() is stable: repeated names keep the order the client sent them in.
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


def is_json_type(content_type: str | None) -> bool:
    if not content_type:
        return False
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime.endswith("/json") or mime.endswith("+json")


def is_form_type(content_type: str | None) -> bool:
    return bool(content_type) and content_type.split(";", 1)[0].strip().lower() == (
        "application/x-www-form-urlencoded"
    )


def _multipart_canonical(body: bytes, parts: list[Part], rules: KeyRules) -> str:
    kept = []
    for part in parts:
        if part.name in rules.unkeyed_fields:
            continue
        value = body[part.start:part.end]
        try:
            text = "text:" + value.decode("utf-8") if part.filename is None else None
        except UnicodeDecodeError:
            text = None
        kept.append((part.name, part.filename or "", text or "sha256:" + hashlib.sha256(value).hexdigest()))
    return json.dumps(_sorted_by_name((name, [filename, value]) for name, filename, value in kept),
                      ensure_ascii=False, separators=(",", ":"))


def canonical_body(body: bytes, content_type: str | None, rules: KeyRules = DEFAULT_RULES) -> tuple[str, str]:
    if not body:
        return "empty", ""
    if is_multipart_type(content_type):
        # Keyed by its fields, not its bytes: clients draw a new boundary for every request.
        parts = multipart_parts(body, content_type)
        if parts is not None:
            return "multipart", _multipart_canonical(body, parts, rules)
    if is_json_type(content_type):
        try:
            value = jsonsafe.loads(body)
        except (ValueError, UnicodeDecodeError):
            pass  # invalid JSON under a JSON type: keyed by its exact bytes below
        else:
            value = drop_fields(value, rules.unkeyed_fields)
            return "json", json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    if is_form_type(content_type):
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            pairs = parse_qsl(text, keep_blank_values=True)
            kept = _sorted_by_name((k, v) for k, v in pairs if k.lower() not in rules.unkeyed_fields)
            return "form", json.dumps(kept, ensure_ascii=False, separators=(",", ":"))
    return "bytes", hashlib.sha256(body).hexdigest()


def drop_fields(value: Any, names: frozenset[str]) -> Any:
    """A copy of a JSON value without object members named in ``names`` (at any depth)."""
    if isinstance(value, dict):
        return {k: drop_fields(v, names) for k, v in value.items() if k.lower() not in names}
    if isinstance(value, list):
        return [drop_fields(v, names) for v in value]
    return value


# -- explaining a miss ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Difference:
    part: str  # "method", "scheme", "host", "path", "query:<name>", "json:<field.path>", "form:<name>", "body"
    expected: str  # the stored request's value
    actual: str  # the incoming request's value

    def __str__(self) -> str:
        return f"{self.part}: stored {self.expected!r}, got {self.actual!r}"


def diff(stored: Canonical, incoming: Canonical) -> list[Difference]:
    """The parts in which two canonical requests differ; empty when their keys agree."""
    found = [
        Difference(part, str(getattr(stored, part)), str(getattr(incoming, part)))
        for part in ("method", "scheme", "host", "path")
        if getattr(stored, part) != getattr(incoming, part)
    ]
    found.extend(_query_differences(stored.query, incoming.query))
    if (stored.body_kind, stored.body) != (incoming.body_kind, incoming.body):
        found.extend(_body_differences(stored, incoming))
    return found


MAX_FIELD_DIFFERENCES = 20


def _body_differences(stored: Canonical, incoming: Canonical) -> list[Difference]:
    """JSON and form bodies by field (``json:filters.max``, ``form:city``); others whole."""
    if stored.body_kind == incoming.body_kind == "json":
        found: list[Difference] = []
        _json_differences(json.loads(stored.body), json.loads(incoming.body), "", found)
        if found:
            return found[:MAX_FIELD_DIFFERENCES]
    if stored.body_kind == incoming.body_kind == "form":
        left, right = _group(json.loads(stored.body)), _group(json.loads(incoming.body))
        return [Difference(f"form:{name}", _join(left.get(name)), _join(right.get(name)))
                for name in sorted(left.keys() | right.keys()) if left.get(name) != right.get(name)]
    return [Difference("body", _preview(stored), _preview(incoming))]


_ABSENT = object()


def _json_differences(stored: Any, incoming: Any, path: str, found: list[Difference]) -> None:
    if len(found) >= MAX_FIELD_DIFFERENCES:
        return
    if isinstance(stored, dict) and isinstance(incoming, dict):
        for name in sorted(stored.keys() | incoming.keys()):
            _json_differences(stored.get(name, _ABSENT), incoming.get(name, _ABSENT),
                              f"{path}.{name}" if path else name, found)
    elif isinstance(stored, list) and isinstance(incoming, list) and len(stored) == len(incoming):
        for index, (left, right) in enumerate(zip(stored, incoming)):
            _json_differences(left, right, f"{path}[{index}]", found)
    elif stored != incoming:
        found.append(Difference(f"json:{path}" if path else "json", _json_text(stored), _json_text(incoming)))


def _json_text(value: Any, limit: int = 200) -> str:
    if value is _ABSENT:
        return "<absent>"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= limit else text[:limit] + "..."


def _query_differences(stored, incoming) -> list[Difference]:
    left, right = _group(stored), _group(incoming)
    return [
        Difference(f"query:{name}", _join(left.get(name)), _join(right.get(name)))
        for name in sorted(left.keys() | right.keys())
        if left.get(name) != right.get(name)
    ]


def _group(pairs) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for name, value in pairs:
        grouped.setdefault(name, []).append(value)
    return grouped


def _join(values: list[str] | None) -> str:
    return "<absent>" if values is None else "&".join(values)


def _preview(c: Canonical, limit: int = 200) -> str:
    text = f"{c.body_kind}:{c.body}"
    return text if len(text) <= limit else text[:limit] + "..."
