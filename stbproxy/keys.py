"""Canonical request keys: equal for requests that mean the same call.

Pure functions only. The key of a request is built from its method, scheme, host
(default port dropped), its path as the upstream receives it, query parameters sorted by
name and a body canonicalized by content type. Secret and volatile fields never enter a
key, nor does a secret value anywhere else in the request (a key in the path, echoed in a
query): two agents with different API keys share one cache entry, and no key holds a
secret in any form. ``diff`` explains a miss.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, TypeVar
from urllib.parse import parse_qsl, urlsplit

from stbcore.arguments import SECRET_FIELDS, arg_text, arguments_digest  # noqa: F401  (re-exported)
from stbproxy import jsonsafe
from stbproxy.models import ApiRef, Request
from stbproxy.multipart import Part, is_multipart_type, multipart_parts

T = TypeVar("T")


def _lower(names: Iterable[str]) -> frozenset[str]:
    return frozenset(name.lower() for name in names)


class Names(frozenset[str]):
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
        # Every header and field name of every request is looked up: remembered (bounded).
        found = _VERDICTS.get((self, name))
        if found is None:
            if len(_VERDICTS) >= MAX_VERDICTS:
                _VERDICTS.clear()
            found = _VERDICTS[self, name] = self._matches(name)
        return found

    def _matches(self, name: str) -> bool:
        lower = name.lower()
        if lower != name and frozenset.__contains__(self, lower):
            return True
        if "[" not in lower:
            return False
        return any(frozenset.__contains__(self, part) for part in _BRACKETS.split(lower) if part)


_BRACKETS = re.compile(r"[\[\]]")
_VERDICTS: dict[tuple[Names, str], bool] = {}
MAX_VERDICTS = 8192

# Headers never part of a key and always redacted before storage.
# ToolBench's client sends its key as a "toolbench_key" header as well as in the body.
SECRET_HEADERS = Names({
    "x-rapidapi-key", "authorization", "proxy-authorization", "cookie", "toolbench_key",
    "x-api-key", "api-key", "x-auth-token", "x-access-token",
    "mcp-session-id",  # a live MCP session's id: never stored, never keyed
})

_WORD_SEPARATOR = re.compile(r"(?<=[a-z0-9])[-_](?=[a-z0-9])")


def spellings(name: str) -> frozenset[str]:
    """A field name in lower case as snake, kebab and camel case write it (``client_secret``,
    ``client-secret``, ``clientSecret``, looked up lower-cased): a secret name is one in all
    of them. Only separators between letters or digits count (``_ts`` stays itself)."""
    lower = name.lower()
    return frozenset({lower, _WORD_SEPARATOR.sub("_", lower), _WORD_SEPARATOR.sub("-", lower),
                      _WORD_SEPARATOR.sub("", lower)})


def _all_spellings(names: Iterable[str]) -> frozenset[str]:
    return frozenset(spelling for name in names for spelling in spellings(name))


# Query, body and multipart fields secret by default, in every spelling: stbcore.arguments.SECRET_FIELDS
# (the names StableToolBench's own calls carry keys in, also left out by the evaluator) and the
# usual names of credentials, tokens and client secrets on other HTTP APIs. "key" is not among
# them: it is a real argument of many APIs. Users add names with KeyRules.extra_secret_fields
# and take defaults out with KeyRules.not_secret_fields.
SECRET_FIELDS_DEFAULT = Names(_all_spellings(SECRET_FIELDS | {
    "api_key", "x_api_key", "password", "passwd", "token", "auth_token", "refresh_token", "id_token",
    "api_token", "session_token", "client_secret", "app_secret", "consumer_secret",
    "appid",  # OpenWeather's key (ToolBench's execution-scored tasks send it in the query)
}))

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
    their case (see Names), and a field name in each of its spellings (see spellings)."""

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
        fields = (SECRET_FIELDS_DEFAULT | _all_spellings(self.extra_secret_fields)) - _all_spellings(
            self.not_secret_fields)
        headers = (SECRET_HEADERS | _lower(self.extra_secret_headers)) - _lower(self.not_secret_headers)
        object.__setattr__(self, "secret_fields", Names(fields))
        object.__setattr__(self, "secret_headers", Names(headers))
        object.__setattr__(self, "unkeyed_fields", Names(fields | _lower(self.volatile_fields)))

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
    """Normalize a request; never raises, whatever the URL or body holds.

    A secret value of the request (redact.secret_values) found in any other part of it (a
    key in the path, a token echoed in a query value or a body) is replaced by REDACTED
    there, as the stored request has it: no key holds a secret, even as its digest's
    input, and the stored request is keyed as the live one was."""
    secrets = redact.secret_values(request, rules)
    scheme, host, path, raw_query = _split_url(request.url)
    pairs = ((k, v) for k, v in parse_qsl(raw_query, keep_blank_values=True) if k.lower() not in rules.unkeyed_fields)
    if secrets:
        host = host_without(host, secrets)
        if redact.holds_secret(f"{path}?{raw_query}", secrets):  # one scan, for most requests the only one
            scrub = redact.scrub_text
            path = scrub(path, secrets)
            pairs = ((scrub(k, secrets), scrub(v, secrets)) for k, v in pairs)
    body_kind, body = canonical_body(request.body, request.header("content-type"), rules, secrets)
    return Canonical(request.method.upper(), scheme, host, path, _sorted_by_name(pairs), body_kind, body)


def host_without(host: str, secrets: frozenset[str]) -> str:
    """The (lower-cased) host with any secret in it, in either case, REDACTED."""
    for secret in secrets:
        lower = secret.lower()
        if lower in host:
            host = host.replace(lower, redact.REDACTED)
    return host


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


# Header fields that are the proxy's own or a live session's, never a caller's credential.
NOT_CREDENTIALS = frozenset({"proxy-authorization", "mcp-session-id"})


def credentials_digest(headers: Iterable[tuple[str, str]], rules: KeyRules = DEFAULT_RULES) -> str:
    """A digest of the credentials a request carries (its secret header fields), salted
    with the store's own salt (``rules.auth_salt``); empty when it carries none. Calls with
    other credentials get another digest, and the values themselves are never kept."""
    values = sorted((name.lower(), value) for name, value in headers
                    if name.lower() not in NOT_CREDENTIALS and name in rules.secret_headers)
    if not values:
        return ""
    material = json.dumps(values).encode("utf-8", "surrogatepass")
    return hashlib.sha256(rules.auth_salt + material).hexdigest()[:24]


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


# The characters httpx sends in a path as they are: RFC 3986's unreserved and sub-delims,
# ":@/", "%" (an escape is sent as written) and the few more WHATWG's path set leaves alone.
_WIRE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~!$&'()*+,;=:@/%[]\\^|")
_WIRE_PATH = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/%\[\]\\^|]*")


def normalize_path(path: str) -> str:
    """The path as the upstream receives it, since that is what chose the answer: its
    literal "." and ".." segments resolved and each character that cannot travel as it is
    percent-encoded, as httpx sends it, and nothing else. "%7e", "%7E" and "~", "//" and
    "/", "%2e%2e" and "..", which an upstream may tell apart, stay apart: keying them as one
    would serve one path's answer for another (a poisoned cache)."""
    if not path:
        return "/"
    if "." in path:
        path = _without_dot_segments(path) or "/"
    if not _WIRE_PATH.fullmatch(path):
        # surrogatepass: a lone surrogate (a byte that was no UTF-8, read back from a
        # cassette) is escaped like any other character, never an error.
        path = "".join(c if c in _WIRE_CHARS else "".join(f"%{b:02X}" for b in c.encode("utf-8", "surrogatepass"))
                       for c in path)
    return path


def _without_dot_segments(path: str) -> str:
    """RFC 3986's remove_dot_segments as httpx applies it: segments that are exactly "." or
    ".." (not "%2e"), a trailing one leaving no slash."""
    segments = path.split("/")
    if "." not in segments and ".." not in segments:
        return path
    kept: list[str] = []
    for segment in segments:
        if segment == "..":
            if kept and kept != [""]:
                kept.pop()
        elif segment != ".":
            kept.append(segment)
    return "/".join(kept)


def _sorted_by_name(pairs: Iterable[tuple[str, T]]) -> tuple[tuple[str, T], ...]:
    # sorted() is stable: repeated names keep the order the client sent them in.
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


def is_json_type(content_type: str | None) -> bool:
    if not content_type:
        return False
    mime = content_type.split(";", 1)[0].strip().lower()
    return mime.endswith("/json") or mime.endswith("+json")


def is_form_type(content_type: str | None) -> bool:
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "application/x-www-form-urlencoded"


def _multipart_canonical(body: bytes, parts: list[Part], rules: KeyRules, secrets: frozenset[str]) -> str:
    kept = []
    for part in parts:
        if part.name in rules.unkeyed_fields:
            continue
        value = _scrub_bytes(body[part.start:part.end], secrets)
        try:
            text = "text:" + value.decode("utf-8") if part.filename is None else None
        except UnicodeDecodeError:
            text = None
        kept.append((_scrubbed(part.name, secrets), _scrubbed(part.filename or "", secrets),
                     text or "sha256:" + hashlib.sha256(value).hexdigest()))
    return json.dumps(_sorted_by_name((name, [filename, value]) for name, filename, value in kept),
                      ensure_ascii=False, separators=(",", ":"))


def canonical_body(body: bytes, content_type: str | None, rules: KeyRules = DEFAULT_RULES,
                   secrets: frozenset[str] = frozenset()) -> tuple[str, str]:
    """(kind, canonical text) of a body: its kind by its declared type, its secret and
    volatile fields left out, and each of ``secrets`` REDACTED wherever else it is."""
    if not body:
        return "empty", ""
    if is_multipart_type(content_type):
        # Keyed by its fields, not its bytes: clients draw a new boundary for every request.
        parts = multipart_parts(body, content_type)
        if parts is not None:
            return "multipart", _multipart_canonical(body, parts, rules, secrets)
    if is_json_type(content_type):
        try:
            value = jsonsafe.loads(body)
        except (ValueError, UnicodeDecodeError):
            pass  # invalid JSON under a JSON type: keyed by its exact bytes below
        else:
            value = drop_fields(value, rules.unkeyed_fields)
            return "json", _without_secrets(value, secrets, lambda v: json.dumps(
                v, sort_keys=True, ensure_ascii=False, separators=(",", ":")))
    if is_form_type(content_type):
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            pass
        else:
            pairs = parse_qsl(text, keep_blank_values=True)
            kept = [(k, v) for k, v in pairs if k.lower() not in rules.unkeyed_fields]
            return "form", _without_secrets(kept, secrets, lambda v: json.dumps(
                _sorted_by_name(tuple(pair) for pair in v), ensure_ascii=False, separators=(",", ":")))
    return "bytes", hashlib.sha256(_scrub_bytes(body, secrets)).hexdigest()


def _without_secrets(value: Any, secrets: frozenset[str], text_of: Callable[[Any], str]) -> str:
    """``text_of(value)``, made again from the value with each secret REDACTED in its strings
    and member names when the text holds one (a scan of the text finds it in any form)."""
    text = text_of(value)
    if secrets and redact.holds_secret(text, secrets):
        text = text_of(redact.scrub_value(value, secrets))
    return text


def _scrubbed(value: Any, secrets: frozenset[str]) -> Any:
    return redact.scrub_value(value, secrets) if secrets else value


def _scrub_bytes(data: bytes, secrets: frozenset[str]) -> bytes:
    return redact.scrub(data, secrets) if secrets else data


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


def _query_differences(stored: Iterable[tuple[str, str]], incoming: Iterable[tuple[str, str]]) -> list[Difference]:
    left, right = _group(stored), _group(incoming)
    return [
        Difference(f"query:{name}", _join(left.get(name)), _join(right.get(name)))
        for name in sorted(left.keys() | right.keys())
        if left.get(name) != right.get(name)
    ]


def _group(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    grouped: dict[str, list[str]] = {}
    for name, value in pairs:
        grouped.setdefault(name, []).append(value)
    return grouped


def _join(values: list[str] | None) -> str:
    return "<absent>" if values is None else "&".join(values)


def _preview(c: Canonical, limit: int = 200) -> str:
    text = f"{c.body_kind}:{c.body}"
    return text if len(text) <= limit else text[:limit] + "..."


# redact.py builds on this module's names (KeyRules, the body types): imported last, so that
# either module may be imported first.
from stbproxy import redact  # noqa: E402
