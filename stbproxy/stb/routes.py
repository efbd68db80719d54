"""The catalog's URL routing table: which API an HTTP request calls, by the method, host
and path of the documented URLs (``{name}`` segments are path parameters), else by the
X-RapidAPI-Host header."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping
from urllib.parse import urlsplit

from stbproxy.models import Headers, header_value
from stbproxy.stb.api_doc import ApiDoc, norm_path, url_parts


@dataclass(frozen=True, slots=True)
class RouteMatch:
    doc: ApiDoc
    path_params: Mapping[str, str]


_TEMPLATE_PARAM = re.compile(r"\{([^{}/]*)\}")


@dataclass(slots=True)
class _Templated:
    pattern: re.Pattern[str]
    names: tuple[str, ...]
    doc: ApiDoc
    literal_chars: int


@dataclass(slots=True)
class _Routes:
    """Routes for one (host, method): exact paths first, then templates."""

    literal: dict[str, ApiDoc] = field(default_factory=dict)
    templated: list[_Templated] = field(default_factory=list)

    def match(self, path: str) -> RouteMatch | None:
        doc = self.literal.get(path)
        if doc is not None:
            return RouteMatch(doc, {})
        for t in self.templated:
            m = t.pattern.fullmatch(path)
            if m:
                return RouteMatch(t.doc, dict(zip(t.names, m.groups())))
        return None


class RouteTable:
    """Routes of a set of docs, built once; a doc without a URL host or a method has none."""

    __slots__ = ("_routes",)

    def __init__(self, docs: Iterable[ApiDoc]) -> None:
        self._routes = _build_routes(docs)

    def match(self, method: str, url: str,
              headers: Headers | Mapping[str, str] | None = None) -> RouteMatch | None:
        """The API a request calls, by URL host, else by X-RapidAPI-Host; None if unmapped."""
        try:
            parts = urlsplit(url)
            host = parts.hostname or ""
        except ValueError:
            return None
        method = method.upper()
        path = norm_path(parts.path)
        routes = self._routes.get((host, method))
        found = routes.match(path) if routes else None
        if found is None and headers:
            rapid_host = _rapidapi_host(headers)
            if rapid_host and rapid_host != host:
                routes = self._routes.get((rapid_host, method))
                found = routes.match(path) if routes else None
        return found


def _build_routes(docs: Iterable[ApiDoc]) -> dict[tuple[str, str], _Routes]:
    table: dict[tuple[str, str], _Routes] = {}
    for doc in docs:
        parts = url_parts(doc.url) if doc.url else None
        if parts is None or not doc.method:
            continue
        host, path = parts
        routes = table.setdefault((host, doc.method), _Routes())
        pieces = _TEMPLATE_PARAM.split(path)
        if len(pieces) == 1:
            routes.literal.setdefault(path, doc)  # the first doc to claim a path keeps it
            continue
        literals = pieces[0::2]
        regex = "([^/]+)".join(re.escape(lit) for lit in literals)
        routes.templated.append(_Templated(re.compile(regex), tuple(pieces[1::2]), doc,
                                           sum(map(len, literals))))
    for routes in table.values():
        # The most specific template wins: more fixed text, then fewer parameters.
        routes.templated.sort(key=lambda t: (-t.literal_chars, len(t.names)))
    return table


def _rapidapi_host(headers: Headers | Mapping[str, str]) -> str:
    if isinstance(headers, Mapping):
        value = next((v for k, v in headers.items() if k.lower() == "x-rapidapi-host"), None)
    else:
        value = header_value(headers, "x-rapidapi-host")
    # A host header may carry a port; the doc URLs are matched by host name only.
    return value.strip().lower().rsplit(":", 1)[0] if value else ""
