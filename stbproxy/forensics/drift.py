"""How a real answer differs from the stored one, for ``--mode verify`` and ``stbproxy
drift``. Pure.

Two answers are compared by status, then by the shape of their JSON bodies (member names
and value types), then by their values; the first difference found names the verdict:
``same``, ``status``, ``shape`` or ``values``. Bodies that are not JSON are compared as
bytes. Parts that change on every call (timestamps, request ids) are left out by rules:

    path:GLOB      a JSON pointer, matched as a glob (``*/updated_at``, ``/meta/*``)
    value:REGEX    a string value that matches on both sides (an ISO time, a UUID)
    @SCOPE RULE    the rule only for calls whose host or API name matches the glob SCOPE

DEFAULT_RULES covers the usual timestamp and request-id members; secrets never appear in
a difference (values under secret member names are masked, and the engine compares
answers already scrubbed of the call's secret values).
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from typing import Any, Iterable

from stbcore.volatile import ISO_TIME, REQUEST_ID_MEMBERS, TIME_MEMBERS
from stbproxy.errors import ConfigError
from stbproxy.keys import Names
from stbproxy.models import Response

SAME, STATUS, SHAPE, VALUES = "same", "status", "shape", "values"
SHOWN_CHARS = 80
# The usual timestamp and request-id members, and ISO times wherever they are (stbcore's list,
# which the evaluator's reports use too).
DEFAULT_RULES = (*(f"path:*/{name}" for name in (*TIME_MEMBERS, *REQUEST_ID_MEMBERS)), f"value:{ISO_TIME}")


@dataclass(frozen=True)
class Rule:
    scope: str  # a glob over the call's host and API name; "" for every call
    path: str = ""  # a JSON pointer glob
    value: re.Pattern | None = None

    def applies(self, where: Iterable[str]) -> bool:
        return not self.scope or any(fnmatch.fnmatchcase(w, self.scope) for w in where if w)


def parse_rule(text: str) -> Rule:
    """One ignore rule (see the module docstring); ConfigError names what is wrong."""
    scope, body = "", text.strip()
    if body.startswith("@"):
        scope, _, body = body[1:].partition(" ")
        body = body.strip()
        if not scope:
            raise ConfigError(f"drift rule {text!r}: '@' must be followed by a host or API glob")
    kind, colon, pattern = body.partition(":")
    if not colon or not pattern or kind not in ("path", "value"):
        raise ConfigError(f"drift rule {text!r} is not path:GLOB or value:REGEX (optionally after @SCOPE)")
    if kind == "path":
        return Rule(scope, path=pattern)
    try:
        return Rule(scope, value=re.compile(pattern))
    except re.error as exc:
        raise ConfigError(f"drift rule {text!r}: bad regular expression: {exc}") from None


@dataclass(frozen=True)
class Rules:
    rules: tuple[Rule, ...] = ()

    @classmethod
    def build(cls, extra: Iterable[str] = (), *, defaults: bool = True) -> Rules:
        texts = (*(DEFAULT_RULES if defaults else ()), *extra)
        return cls(tuple(parse_rule(text) for text in texts))

    def for_call(self, where: Iterable[str]) -> Rules:
        where = tuple(where)
        return Rules(tuple(rule for rule in self.rules if rule.applies(where)))

    def ignores_path(self, pointer: str) -> bool:
        return any(rule.path and fnmatch.fnmatchcase(pointer, rule.path) for rule in self.rules)

    def ignores_values(self, stored: Any, live: Any) -> bool:
        return (isinstance(stored, str) and isinstance(live, str)
                and any(rule.value is not None and rule.value.search(stored) and rule.value.search(live)
                        for rule in self.rules))


@dataclass(frozen=True)
class Difference:
    verdict: str
    path: str = ""  # a JSON pointer ("" for the whole body or the status)
    stored: str = ""  # both values shortened, secrets masked
    live: str = ""

    @property
    def changed(self) -> bool:
        return self.verdict != SAME

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "path": self.path, "stored": self.stored, "live": self.live} \
            if self.changed else {"verdict": SAME}


def compare(stored: Response, live: Response, rules: Rules = Rules(), secret_names: Names | None = None) -> Difference:
    """The first difference between a stored answer and a real one (``same`` when none)."""
    if stored.status != live.status:
        return Difference(STATUS, "", str(stored.status), str(live.status))
    old, new = _json(stored.body), _json(live.body)
    if old is _NOT_JSON or new is _NOT_JSON:
        if stored.body == live.body:
            return Difference(SAME)
        verdict = SHAPE if (old is _NOT_JSON) != (new is _NOT_JSON) else VALUES
        return Difference(verdict, "", _short_bytes(stored.body), _short_bytes(live.body))
    shape = _first(old, new, "", rules, shape_only=True)
    if shape is not None:
        return _shown(SHAPE, *shape, secret_names)
    values = _first(old, new, "", rules, shape_only=False)
    if values is not None:
        return _shown(VALUES, *values, secret_names)
    return Difference(SAME)


_NOT_JSON = object()


def _json(body: bytes) -> Any:
    try:
        return json.loads(body) if body.strip() else _NOT_JSON
    except (ValueError, RecursionError):
        return _NOT_JSON


def _kind(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return type(value).__name__
    if isinstance(value, (int, float)):
        return "number"
    return type(value).__name__


def _first(old: Any, new: Any, pointer: str, rules: Rules, *, shape_only: bool) -> tuple[str, Any, Any] | None:
    """The first place (pointer, stored, live) where the shapes (or the values) differ."""
    if pointer and rules.ignores_path(pointer):
        return None
    if _kind(old) != _kind(new):
        return pointer, old, new
    if isinstance(old, dict):
        for name in sorted(old.keys() | new.keys()):
            child = f"{pointer}/{_escape(name)}"
            if name not in old or name not in new:
                if not rules.ignores_path(child):
                    return child, old.get(name, _ABSENT), new.get(name, _ABSENT)
                continue
            found = _first(old[name], new[name], child, rules, shape_only=shape_only)
            if found is not None:
                return found
        return None
    if isinstance(old, list):
        for i, (a, b) in enumerate(zip(old, new)):
            found = _first(a, b, f"{pointer}/{i}", rules, shape_only=shape_only)
            if found is not None:
                return found
        # A list's shape is that of its items, whatever their number; its length is a value.
        if not shape_only and len(old) != len(new):
            return pointer, _Items(len(old)), _Items(len(new))
        return None
    if shape_only or old == new or rules.ignores_values(old, new):
        return None
    return pointer, old, new


class _Absent:
    """A member one side does not have."""


_ABSENT = _Absent()


class _Items(int):
    """A list's length, shown as such."""


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _shown(verdict: str, pointer: str, old: Any, new: Any, secret_names: Names | None) -> Difference:
    last = pointer.rsplit("/", 1)[-1].replace("~1", "/").replace("~0", "~")
    if secret_names is not None and last and last in secret_names:
        return Difference(verdict, pointer, "[redacted]", "[redacted]")
    return Difference(verdict, pointer, _short(old), _short(new))


def _short(value: Any) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = f"{int(value)} items" if isinstance(value, _Items) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"


def _short_bytes(body: bytes) -> str:
    text = body.decode("utf-8", "replace")
    return text if len(text) <= SHOWN_CHARS else text[:SHOWN_CHARS - 1] + "…"

