"""The OpenAPI specs of one store (``openapi.json`` in the store's folder, beside
``catalog.json``), and the operation a request calls (``match``): by host, then method, then
path template, a literal segment before a templated one as OpenAPI says."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from stbproxy.errors import InputError
from stbproxy.keys import normalize_path
from stbproxy.openapi.model import Operation, Spec

FILE_NAME = "openapi.json"
FORMAT = "stbproxy-openapi"
VERSION = 2  # 2: each spec's schemas shared once ("schemas"); 1's self-contained schemas still read
READ_VERSIONS = (1, 2)
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Match:
    operation: Operation
    path_args: Mapping[str, str]  # path parameters by name, percent-decoded


@dataclass(frozen=True, slots=True)
class _Route:
    operation: Operation
    pattern: re.Pattern
    names: tuple[str, ...]
    rank: tuple[int, int, int]  # more query pairs needed, then more literal characters, then more segments
    base: str = ""  # the server URL's path
    needs: tuple[tuple[str, str], ...] = ()  # query pairs the request must hold


class OpenApiCatalog:
    """Specs by name; several per store, and importing one again replaces it."""

    def __init__(self, specs: Mapping[str, Spec] | None = None) -> None:
        self.specs: dict[str, Spec] = dict(specs or {})
        self._routes: dict[tuple[str, str], list[_Route]] | None = None
        self._by_name: dict[str, Operation] | None = None

    def __len__(self) -> int:
        return len(self.specs)

    def __bool__(self) -> bool:
        return bool(self.specs)

    def operations(self) -> Iterator[Operation]:
        for spec in self.specs.values():
            yield from spec.operations

    def add(self, spec: Spec) -> Spec | None:
        """Add ``spec``; the spec of the same name it replaced, if any."""
        old = self.specs.get(spec.name)
        self.specs[spec.name] = spec
        self._routes = self._by_name = None
        return old

    def description(self) -> str:
        """What the ready line says of it: ``OpenAPI pet-shop (4 operations), warehouse (2 operations)``."""
        named = [f"{name} ({len(spec.operations)} operation{'s' * (len(spec.operations) != 1)})"
                 for name, spec in sorted(self.specs.items())]
        more = f" and {len(named) - 5} more specs" if len(named) > 5 else ""
        return f"OpenAPI {', '.join(named[:5])}{more}"

    def operation(self, name: str) -> Operation | None:
        """The operation named ``<spec>/<operationId>``."""
        if self._by_name is None:
            self._by_name = {op.name: op for op in self.operations()}
        return self._by_name.get(name)

    def secret_names(self) -> dict[str, frozenset[str]]:
        """The names that carry credentials in any spec, by place (query, header, cookie)."""
        found: dict[str, set[str]] = {}
        for spec in self.specs.values():
            for place, names in spec.secrets.items():
                found.setdefault(place, set()).update(names)
        return {place: frozenset(names) for place, names in found.items()}

    # -- matching requests -------------------------------------------------------------

    def match(self, method: str, url: str) -> Match | None:
        place = self._place(url)
        if place is None:
            return None
        host, path, parts = place
        routes = self._route_table().get((host, method.upper()))
        if not routes:
            return None
        query = None
        for route in routes:
            found = route.pattern.fullmatch(path)
            if found is not None and route.needs:
                query = parse_qsl(parts.query, keep_blank_values=True) if query is None else query
                found = found if all(pair in query for pair in route.needs) else None
            if found is not None:
                return Match(route.operation, {name: unquote(found.group(f"p{i}"))
                                               for i, name in enumerate(route.names)})
        return None

    def unmatched(self, method: str, url: str) -> tuple[str, tuple[str, ...]] | None:
        """For a request no operation takes, under a documented server's URL: the spec's name
        and the methods its path is an operation for (none: an unknown path); else None."""
        place = self._place(url)
        if place is None:
            return None
        host, path, _ = place
        spec = None
        allowed = set()
        for (route_host, route_method), routes in self._route_table().items():
            if route_host != host:
                continue
            for route in routes:
                if spec is None and (path + "/").startswith(route.base + "/"):
                    spec = route.operation.spec
                if route_method != method.upper() and route.pattern.fullmatch(path) is not None:
                    allowed.add(route_method)
                    spec = route.operation.spec
        return (spec, tuple(sorted(allowed))) if spec is not None else None

    def _route_table(self) -> dict:
        if self._routes is None:
            self._routes = _routes(self.operations())
        return self._routes

    @staticmethod
    def _place(url: str) -> tuple[str, str, SplitResult] | None:
        """A URL's host (as routes are keyed), normalized path and parts; None when it does not parse."""
        try:
            parts = urlsplit(url)
            host = _host(parts.scheme, parts.hostname, parts.port)
        except ValueError:
            return None
        path = normalize_path(parts.path or "/")
        return host, (path.rstrip("/") if len(path) > 1 else path), parts

    # -- the file ----------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Written atomically: a reader sees the old file or the new one."""
        data = {"format": FORMAT, "version": VERSION, "specs": [s.to_dict() for s in self.specs.values()]}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: Path) -> OpenApiCatalog:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            raise InputError(f"cannot read the OpenAPI catalog {path}: {exc}") from exc
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"{path} is not an stbproxy OpenAPI catalog")
        if data.get("version") not in READ_VERSIONS:
            raise InputError(f"{path}: unsupported OpenAPI catalog version {data.get('version')!r}")
        specs = {}
        for i, entry in enumerate(data.get("specs") or []):
            try:
                spec = Spec.from_dict(entry)
            except InputError as exc:
                raise InputError(f"{path}: specs[{i}]: {exc}") from exc
            specs[spec.name] = spec
        return cls(specs)


def catalog_file(store: Path) -> Path:
    return Path(store) / FILE_NAME


def load_for_store(store: Path) -> OpenApiCatalog | None:
    """The store's OpenAPI catalog, or None when nothing was imported into it."""
    path = catalog_file(store)
    return OpenApiCatalog.load(path) if path.is_file() else None


def openapi_secret_names(store: Path) -> dict[str, frozenset[str]]:
    """The credential names of the store's specs by place; {} when it has none or cannot be read
    (the proxy then fails on the catalog itself, with its reason)."""
    path = catalog_file(store)
    try:
        stamp = path.stat().st_mtime_ns
    except OSError:
        return {}
    cached = _SECRETS.get(path)
    if cached is None or cached[0] != stamp:
        try:
            names = OpenApiCatalog.load(path).secret_names()
        except InputError:
            names = {}
        cached = _SECRETS[path] = (stamp, names)
    return cached[1]


_SECRETS: dict[Path, tuple[int, dict[str, frozenset[str]]]] = {}


def _host(scheme: str, hostname: str | None, port: int | None) -> str:
    host = (hostname or "").lower()
    return host if port is None or port == _DEFAULT_PORTS.get(scheme) else f"{host}:{port}"


def _routes(operations) -> dict[tuple[str, str], list[_Route]]:
    table: dict[tuple[str, str], list[_Route]] = {}
    for op in operations:
        for server in op.servers:
            parts = urlsplit(server)
            host = _host(parts.scheme, parts.hostname, parts.port)
            base = parts.path.rstrip("/")
            # A "#Action=X" after the path (AWS's documents) names query pairs the request holds.
            path, _, fragment = op.path.partition("#")
            template = base + path  # as written: normalizing would escape its braces
            if len(template) > 1:
                template = template.rstrip("/")
            pattern, names, literal = _compile(template)
            needs = tuple(parse_qsl(fragment, keep_blank_values=True))
            route = _Route(op, pattern, names, (-len(needs), -literal, -template.count("/")), base, needs)
            table.setdefault((host, op.method), []).append(route)
    for routes in table.values():
        routes.sort(key=lambda r: r.rank)
    return table


def _compile(template: str) -> tuple[re.Pattern, tuple[str, ...], int]:
    """A template's pattern (each ``{name}`` one path segment or part of one), its parameter
    names in order, and how many literal characters it has."""
    names: list[str] = []
    regex, literal, last = [], 0, 0
    for found in re.finditer(r"{([^}/]+)}", template):
        text = template[last:found.start()]
        regex.append(re.escape(text))
        literal += len(text)
        regex.append(f"(?P<p{len(names)}>[^/]+)")
        names.append(found.group(1))
        last = found.end()
    regex.append(re.escape(template[last:]))
    literal += len(template) - last
    return re.compile("".join(regex)), tuple(names), literal
