"""Which names of a request are secret (redacted, never keyed) or volatile (never keyed),
and how a StableToolBench call's arguments are keyed: KeyRules, read by keys and redact alike.

Pure. A secret name matches whatever its case and, for a field, in each of its spellings
(snake, kebab and camel case; ``api_key[]``, ``auth[password]``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

from stbcore.arguments import SECRET_FIELDS


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

EXACT, CANONICAL = "exact", "canonical"
STB_KEYS = (EXACT, CANONICAL)  # KeyRules.stb_keys


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
    # How a StableToolBench call's arguments are keyed (keys.stb_api_key): "exact", as that
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
