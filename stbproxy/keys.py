"""Canonical request keys: equal for requests that mean the same call.

Pure functions only. The key of a request is built from its method, scheme, host
(default port dropped), its path as the upstream receives it, query parameters sorted by
name and a body canonicalized by content type (canonical_parts.py). Secret and volatile
fields (KeyRules, key_rules.py) never enter a key, nor does a secret value anywhere else
in the request (a key in the path, echoed in a query): two agents with different API keys
share one cache entry, and no key holds a secret in any form. How two requests differ,
to explain a miss: differences.py. The names of those modules that keys' users import
from here (KeyRules, normalize_path, canonical_body, diff...) are re-exported.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Iterable
from urllib.parse import parse_qsl

from stbcore.arguments import SECRET_FIELDS, arg_text, arguments_digest  # noqa: F401  (re-exported)
from stbproxy.canonical_parts import canonical_body as canonical_body
from stbproxy.canonical_parts import normalize_path as normalize_path
from stbproxy.canonical_parts import sorted_by_name, split_url
from stbproxy.content_types import is_form_type as is_form_type
from stbproxy.content_types import is_json_type as is_json_type
from stbproxy.differences import Difference as Difference
from stbproxy.differences import diff as diff
from stbproxy.key_rules import CANONICAL as CANONICAL
from stbproxy.key_rules import DEFAULT_RULES as DEFAULT_RULES
from stbproxy.key_rules import EXACT as EXACT
from stbproxy.key_rules import SECRET_FIELDS_DEFAULT as SECRET_FIELDS_DEFAULT
from stbproxy.key_rules import SECRET_HEADERS as SECRET_HEADERS
from stbproxy.key_rules import STB_KEYS as STB_KEYS
from stbproxy.key_rules import KeyRules as KeyRules
from stbproxy.key_rules import Names as Names
from stbproxy.models import ApiRef, Request
from stbproxy.request_secrets import secret_values
from stbproxy.scrubbing import REDACTED, holds_secret, scrub_text

EXACT_MARK = "="  # an exact key's digest starts so: it never equals a canonical one
HIDDEN_ARGUMENT = "<not keyed>"  # a secret or volatile value, in an exact key's text
KEY_PATH_CHARS = 120  # how much of the path the readable key prefix keeps


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

    A secret value of the request (request_secrets.secret_values) found in any other part
    of it (a key in the path, a token echoed in a query value or a body) is replaced by
    REDACTED there, as the stored request has it: no key holds a secret, even as its
    digest's input, and the stored request is keyed as the live one was."""
    secrets = secret_values(request, rules)
    scheme, host, path, raw_query = split_url(request.url)
    pairs = ((k, v) for k, v in parse_qsl(raw_query, keep_blank_values=True) if k.lower() not in rules.unkeyed_fields)
    if secrets:
        host = host_without(host, secrets)
        if holds_secret(f"{path}?{raw_query}", secrets):  # one scan, for most requests the only one
            path = scrub_text(path, secrets)
            pairs = ((scrub_text(k, secrets), scrub_text(v, secrets)) for k, v in pairs)
    body_kind, body = canonical_body(request.body, request.header("content-type"), rules, secrets)
    return Canonical(request.method.upper(), scheme, host, path, sorted_by_name(pairs), body_kind, body)


def host_without(host: str, secrets: frozenset[str]) -> str:
    """The (lower-cased) host with any secret in it, in either case, REDACTED."""
    for secret in secrets:
        lower = secret.lower()
        if lower in host:
            host = host.replace(lower, REDACTED)
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
