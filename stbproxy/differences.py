"""Explaining a miss: the parts in which two canonical requests (keys.Canonical) differ,
the query and a JSON or form body field by field. Pure; misses.py shows them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable

if TYPE_CHECKING:
    from stbproxy.keys import Canonical


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
