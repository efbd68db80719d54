"""A small bounded memo for the hit path. Pure.

A cache hit repeats work whose result depends only on its input: the key of a request
seen before, the reply object of a stored answer, the response headers built for it.
``Recent`` keeps the latest results, up to a fixed count (the oldest go first), so a
repeated request skips that work and memory stays bounded whatever the traffic.
"""

from __future__ import annotations

from typing import Callable, Generic, Hashable, TypeVar

V = TypeVar("V")


class Recent(Generic[V]):
    def __init__(self, size: int) -> None:
        self.size = size
        self._items: dict[Hashable, V] = {}
        # the dict's own get: a hit asks about ten of these, and a method of ours would add a frame each
        self.get: Callable[[Hashable], V | None] = self._items.get

    def put(self, key: Hashable, value: V) -> V:
        items = self._items
        if key not in items and len(items) >= self.size:
            del items[next(iter(items))]  # the oldest: dicts keep insertion order
        items[key] = value
        return value

    def pop(self, key: Hashable) -> None:
        self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)
