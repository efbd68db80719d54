"""JSON parsing with a bound on nesting depth. Pure.

``json.loads`` recurses once per level: a body nested 100,000 deep raises RecursionError
(not ValueError), and a document just under the interpreter's limit makes every recursive
walk over it fail later. Everything that parses bodies from clients, upstreams or an LLM
goes through ``loads``, which refuses documents deeper than MAX_JSON_DEPTH with
JsonTooDeep, a ValueError, so callers that treat invalid JSON as text do the same here.
"""

from __future__ import annotations

import json
from typing import Any, Iterable

MAX_JSON_DEPTH = 100  # real API payloads stay far below this; recursion stays far from Python's limit


class JsonTooDeep(ValueError):
    """A JSON document nested deeper than the limit."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"JSON nested deeper than {limit} levels")
        self.limit = limit


def loads(data: str | bytes | bytearray, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads``, raising JsonTooDeep for documents nested deeper than ``max_depth``."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise JsonTooDeep(max_depth) from None
    # No document has more levels than brackets: counting them (in C) spares the walk
    # for almost every body.
    if _brackets(data) > max_depth and deeper_than(value, max_depth):
        raise JsonTooDeep(max_depth)
    return value


def too_deep(data: str | bytes | bytearray, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """True when ``data`` is JSON nested deeper than ``max_depth``; False for shallow or
    invalid JSON."""
    if _brackets(data) <= max_depth:
        return False
    try:
        loads(data, max_depth)
    except JsonTooDeep:
        return True
    except ValueError:
        return False
    return False


def deeper_than(value: Any, limit: int) -> bool:
    """Whether a parsed value has more than ``limit`` levels of arrays and objects (iterative)."""
    stack = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(node, dict):
            children = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))
    return False


def _brackets(data: str | bytes | bytearray) -> int:
    if isinstance(data, str):
        return data.count("[") + data.count("{")
    return data.count(b"[") + data.count(b"{")
