"""The parts of a request its key is made of, in canonical form (keys.canonical puts them
together): its URL split into scheme, host (default port dropped) and path as the upstream
receives it, and its body by content type, without its secret and volatile fields and with
each secret value REDACTED wherever else it is. Pure; never raises, whatever the URL or body.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any, Callable, Iterable, TypeVar
from urllib.parse import parse_qsl, urlsplit

from stbproxy import jsonsafe
from stbproxy.content_types import is_form_type, is_json_type
from stbproxy.key_rules import DEFAULT_RULES, KeyRules
from stbproxy.multipart import Part, is_multipart_type, multipart_parts
from stbproxy.scrubbing import holds_secret, scrub, scrub_value

T = TypeVar("T")

DEFAULT_PORTS = {"http": 80, "https": 443}


# -- the URL --------------------------------------------------------------------------


def split_url(url: str) -> tuple[str, str, str, str]:
    """(scheme, host, path, query) of a URL: scheme and host lower-cased, the host with its
    port only when not the scheme's default, the path normalized (normalize_path), the
    query as written. A malformed URL is ("", "", the URL, "")."""
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


def sorted_by_name(pairs: Iterable[tuple[str, T]]) -> tuple[tuple[str, T], ...]:
    """Name-value pairs sorted by name; sorted() is stable: repeated names keep the order
    the client sent them in."""
    return tuple(sorted(pairs, key=lambda pair: pair[0]))


# -- the body -------------------------------------------------------------------------


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
                sorted_by_name(tuple(pair) for pair in v), ensure_ascii=False, separators=(",", ":")))
    return "bytes", hashlib.sha256(_scrub_bytes(body, secrets)).hexdigest()


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
    return json.dumps(sorted_by_name((name, [filename, value]) for name, filename, value in kept),
                      ensure_ascii=False, separators=(",", ":"))


def _without_secrets(value: Any, secrets: frozenset[str], text_of: Callable[[Any], str]) -> str:
    """``text_of(value)``, made again from the value with each secret REDACTED in its strings
    and member names when the text holds one (a scan of the text finds it in any form)."""
    text = text_of(value)
    if secrets and holds_secret(text, secrets):
        text = text_of(scrub_value(value, secrets))
    return text


def _scrubbed(value: Any, secrets: frozenset[str]) -> Any:
    return scrub_value(value, secrets) if secrets else value


def _scrub_bytes(data: bytes, secrets: frozenset[str]) -> bytes:
    return scrub(data, secrets) if secrets else data


def drop_fields(value: Any, names: frozenset[str]) -> Any:
    """A copy of a JSON value without object members named in ``names`` (at any depth)."""
    if isinstance(value, dict):
        return {k: drop_fields(v, names) for k, v in value.items() if k.lower() not in names}
    if isinstance(value, list):
        return [drop_fields(v, names) for v in value]
    return value
