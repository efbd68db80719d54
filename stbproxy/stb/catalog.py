"""Tool docs, ToolBench name standardization, and routing a request to its API.

The catalog knows every API by its standardized keys (an ApiRef), which is what the
store and StableToolBench's cache use, and by its original names, which is what
/virtual clients and query files use. It reads ToolBench doc folders and query files
and saves itself as one JSON file; beyond those files it does no I/O.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping
from urllib.parse import unquote, urlsplit

from stbproxy.errors import InputError
from stbproxy.models import ApiRef, Headers, header_value

# --- names (STB_FORMATS.md section 1) ------------------------------------------------

# Kept: ASCII letters and digits, "_", CJK ideographs, and "^" (ToolBench wrote "^"
# inside a character class as if it were a separator, so it survives).
_REPLACED = re.compile(r"[^\u4e00-\u9fa5^a-zA-Z0-9_]")
_UNDERSCORE_RUN = re.compile(r"__+")
_RESERVED = frozenset({"from", "class", "return", "false", "true", "id", "and"})


def standardize(s: str) -> str:
    """ToolBench's standardized form of a tool or API name."""
    s = _UNDERSCORE_RUN.sub("_", _REPLACED.sub("_", s)).lower().strip("_")
    if s[:1].isdigit():
        s = "get_" + s
    return s


def change_name(s: str) -> str:
    """Prefix names that are Python keywords or builtins ToolBench avoided."""
    return "is_" + s if s in _RESERVED else s


def api_key_name(api_name: str) -> str:
    return change_name(standardize(api_name))


def category_key(category: str) -> str:
    # One pass of "__" -> "_", as ToolBench does: "a / b" ends as "a__b", not "a_b".
    for ch in " ,/":
        category = category.replace(ch, "_")
    return category.replace("__", "_")


def tool_key(tool_name: str, category: str) -> str:
    """``<standardized tool>_for_<category key>``; accepts a name that already ends so."""
    return _tool_key(tool_name, category_key(category))


def _tool_key(tool_name: str, cat_key: str) -> str:
    return _tool_std(tool_name, cat_key) + "_for_" + cat_key


def _tool_std(tool_name: str, cat_key: str) -> str:
    """The standardized tool name alone (what agents' function names end with)."""
    suffix = "_for_" + cat_key
    if tool_name.endswith(suffix):
        tool_name = tool_name[: -len(suffix)]
    return standardize(tool_name)


def called_api_key(api_name: str, tool_name: str, category: str) -> str:
    """The API key StableToolBench's server reads from a /virtual call's ``api_name``.

    Standardized, and cut before ``_for_<tool>``: agents often send the whole function
    name they were shown (``songkick_concert_for_theclique``) instead of the API's name.
    """
    return _called_api_key(api_name, _tool_std(tool_name, category_key(category)))


def _called_api_key(api_name: str, tool_std: str) -> str:
    key = api_key_name(api_name)
    if not tool_std:
        return key
    return key.split(f"_for_{tool_std}")[0] or key


def function_name(api_name: str, tool_name: str) -> str:
    """The function name agents see; OpenAI limits those to 64 characters."""
    return f"{api_key_name(api_name)}_for_{standardize(tool_name)}"[-64:]


# --- API docs ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    type: str = "STRING"
    description: str = ""
    default: Any = None

    @classmethod
    def from_dict(cls, d: Any) -> Param:
        if not isinstance(d, Mapping) or not isinstance(d.get("name"), str) or not d["name"]:
            raise InputError(f"parameter without a name: {d!r:.80}")
        return cls(
            name=d["name"],
            type=str(d.get("type") or "STRING"),
            description=str(d.get("description") or ""),
            default=d.get("default"),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "description": self.description,
                "default": self.default}


def _params(value: Any, what: str) -> tuple[Param, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InputError(f"{what} is not a list")
    return tuple(Param.from_dict(p) for p in value)


def _param_fields(d: Mapping[str, Any]) -> dict[str, tuple[Param, ...]]:
    """The two parameter lists of a doc, query entry or saved doc, as ApiDoc fields."""
    return {name: _params(d.get(name), name)
            for name in ("required_parameters", "optional_parameters")}


@dataclass(frozen=True, slots=True)
class ApiDoc:
    """What the catalog knows about one API; ``ref`` is derived from the names."""

    category: str
    tool: str
    api: str
    url: str | None = None
    method: str = ""
    tool_description: str = ""
    api_description: str = ""
    required_parameters: tuple[Param, ...] = ()
    optional_parameters: tuple[Param, ...] = ()
    template_response: Any = None
    ref: ApiRef = field(init=False, compare=False)
    # Documented parameter name <-> the standardized one agents see in the function
    # schema (ToolBench renames ``id`` to ``is_id``, ``playerId`` to ``playerid``, ...).
    key_names: Mapping[str, str] = field(init=False, compare=False, repr=False)
    wire_names: Mapping[str, str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        cat = category_key(self.category)
        object.__setattr__(self, "ref", ApiRef(cat, _tool_key(self.tool, cat),
                                               api_key_name(self.api)))
        object.__setattr__(self, "method", self.method.upper())
        key_names: dict[str, str] = {}
        wire_names: dict[str, str] = {}
        for param in self.required_parameters + self.optional_parameters:
            standard = api_key_name(param.name)
            if standard != param.name:
                key_names.setdefault(param.name, standard)
                wire_names.setdefault(standard, param.name)  # the first one listed wins
        object.__setattr__(self, "key_names", key_names)
        object.__setattr__(self, "wire_names", wire_names)

    @property
    def host(self) -> str:
        """The lower-case host of the API's URL; '' when it has none."""
        parts = _url_parts(self.url or "")
        return parts[0] if parts else ""

    def key_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments under their standardized names, as keys and StableToolBench's cache
        use them; a name the doc does not list is kept as given."""
        if not self.key_names:
            return dict(args)
        out: dict[str, Any] = {}
        for name, value in args.items():
            target = self.key_names.get(name, name)
            if target not in out or target == name:  # the standardized spelling wins a clash
                out[target] = value
        return out

    def wire_args(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Arguments under the names the real API documents; unlisted names kept as given."""
        if not self.wire_names:
            return dict(args)
        return {self.wire_names.get(name, name): value for name, value in args.items()}

    @property
    def function_name(self) -> str:
        return function_name(self.api, self.tool)

    def merged(self, other: ApiDoc) -> ApiDoc:
        """This doc with its empty fields filled from ``other`` (same API)."""
        updates = {}
        for f in fields(self):
            if f.init and _is_empty(getattr(self, f.name)) and not _is_empty(getattr(other, f.name)):
                updates[f.name] = getattr(other, f.name)
        return replace(self, **updates) if updates else self

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category,
            "tool": self.tool,
            "api": self.api,
            # Derived, written for readers of the file; from_dict recomputes them.
            "keys": {"category": self.ref.category, "tool": self.ref.tool, "api": self.ref.api},
            "parameter_keys": dict(self.key_names),  # documented name -> standardized, where they differ
            "url": self.url,
            "method": self.method,
            "tool_description": self.tool_description,
            "api_description": self.api_description,
            "required_parameters": [p.to_dict() for p in self.required_parameters],
            "optional_parameters": [p.to_dict() for p in self.optional_parameters],
            "template_response": self.template_response,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ApiDoc:
        for name in ("category", "tool", "api"):
            if not isinstance(d.get(name), str) or not d[name]:
                raise InputError(f"API doc field {name!r} is missing or not a text")
        return cls(
            category=d["category"],
            tool=d["tool"],
            api=d["api"],
            url=d.get("url") or None,
            method=str(d.get("method") or ""),
            tool_description=str(d.get("tool_description") or ""),
            api_description=str(d.get("api_description") or ""),
            template_response=d.get("template_response"),
            **_param_fields(d),
        )


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, (str, tuple, list, dict)) and not value)


# --- routing -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RouteMatch:
    doc: ApiDoc
    path_params: Mapping[str, str]


_TEMPLATE_PARAM = re.compile(r"\{([^{}/]*)\}")


def _norm_path(path: str) -> str:
    # "/a/b/" and "/a/b" name the same endpoint; an empty path is the root.
    return unquote(path).rstrip("/") or "/"


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


def _url_parts(url: str) -> tuple[str, str] | None:
    """(lower-case host, normalized path) of a doc URL, or None when it has no host."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
    except ValueError:
        return None
    return (host, _norm_path(parts.path)) if host else None


def _build_routes(docs: Iterable[ApiDoc]) -> dict[tuple[str, str], _Routes]:
    table: dict[tuple[str, str], _Routes] = {}
    for doc in docs:
        parts = _url_parts(doc.url) if doc.url else None
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


# --- load reports ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Skipped:
    file: str
    reason: str

    def __str__(self) -> str:
        return f"{self.file}: {self.reason}"


@dataclass(slots=True)
class LoadReport:
    """What one load call took in (API entries) and what it left out, with why."""

    loaded: int = 0
    skipped: list[Skipped] = field(default_factory=list)

    def skip(self, file: Path | str, reason: str) -> None:
        self.skipped.append(Skipped(str(file), reason))


def _read_json(path: Path, report: LoadReport) -> Any:
    """The file's parsed JSON, or None after reporting why it cannot be had."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        report.skip(path, f"unreadable: {e}")
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        report.skip(path, f"not JSON: {e}")
        return None


def _text(d: Mapping[str, Any], name: str) -> str:
    value = d.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"missing field {name!r}")
    return value


# --- the catalog ---------------------------------------------------------------------


class Catalog:
    """Every known API, looked up by names or keys, and routed from HTTP requests."""

    FORMAT = "stbproxy-catalog"
    VERSION = 1

    def __init__(self, docs: Iterable[ApiDoc] = ()) -> None:
        self._docs: dict[ApiRef, ApiDoc] = {}
        self._by_names: dict[tuple[str, str, str], ApiRef] = {}
        self._by_tool: dict[tuple[str, str], list[ApiRef]] = {}
        self._category_keys: dict[str, str] = {}
        self._routes: dict[tuple[str, str], _Routes] | None = None
        for doc in docs:
            self.add(doc)

    def __len__(self) -> int:
        return len(self._docs)

    def __iter__(self) -> Iterator[ApiDoc]:
        return iter(self._docs.values())

    def __contains__(self, ref: object) -> bool:
        return ref in self._docs

    def get(self, ref: ApiRef) -> ApiDoc | None:
        return self._docs.get(ref)

    def add(self, doc: ApiDoc) -> ApiDoc:
        """Add ``doc``, or merge it into what is known of the same API; returns the result."""
        ref = doc.ref
        old = self._docs.get(ref)
        new = doc if old is None else old.merged(doc)
        self._docs[ref] = new
        if old is None:
            self._by_tool.setdefault((ref.category, ref.tool), []).append(ref)
        self._by_names[(doc.category, doc.tool, doc.api)] = ref
        self._category_keys[doc.category] = ref.category
        self._category_keys[ref.category] = ref.category
        if new is not old:
            self._routes = None  # rebuilt on the next route()
        return new

    # lookups by name

    def _cat_key(self, category: str) -> str:
        return self._category_keys.get(category) or category_key(category)

    def lookup(self, category: str, tool: str, api: str) -> ApiDoc | None:
        """The API named by original or standardized names (tool key with "_for_" too),
        or by the function name agents see (``<api>_for_<tool>``, cut to 64 characters)."""
        ref = self._by_names.get((category, tool, api))
        if ref is not None:
            return self._docs.get(ref)
        cat = self._cat_key(category)
        tool_k = _tool_key(tool, cat)
        doc = self._docs.get(ApiRef(cat, tool_k, api_key_name(api)))
        if doc is None:
            doc = self._docs.get(ApiRef(cat, tool_k, _called_api_key(api, _tool_std(tool, cat))))
        if doc is None:
            doc = next((d for d in self.apis_of_tool(cat, tool_k) if d.function_name == api), None)
        return doc

    def apis_of_tool(self, category: str, tool: str) -> list[ApiDoc]:
        cat = self._cat_key(category)
        refs = self._by_tool.get((cat, _tool_key(tool, cat)), [])
        return [self._docs[r] for r in refs]

    # routing HTTP requests

    def route(self, method: str, url: str,
              headers: Headers | Mapping[str, str] | None = None) -> RouteMatch | None:
        """The API a request calls, by URL host, else by X-RapidAPI-Host; None if unmapped."""
        if self._routes is None:
            self._routes = _build_routes(self._docs.values())
        try:
            parts = urlsplit(url)
            host = parts.hostname or ""
        except ValueError:
            return None
        method = method.upper()
        path = _norm_path(parts.path)
        routes = self._routes.get((host, method))
        found = routes.match(path) if routes else None
        if found is None and headers:
            rapid_host = _rapidapi_host(headers)
            if rapid_host and rapid_host != host:
                routes = self._routes.get((rapid_host, method))
                found = routes.match(path) if routes else None
        return found

    # loading

    def load_tools_dir(self, path: str | os.PathLike[str]) -> LoadReport:
        """Load ``tools/<Category>/<tool>.json`` (``path`` may be the folder holding tools/)."""
        root = Path(path)
        if (root / "tools").is_dir():
            root = root / "tools"
        if not root.is_dir():
            raise InputError(f"not a folder of tool docs: {root}")
        report = LoadReport()
        for file in sorted(root.glob("*/*.json")):
            data = _read_json(file, report)
            if data is not None:
                self._load_tool_doc(file, file.parent.name, data, report)
        return report

    def _load_tool_doc(self, file: Path, category: str, data: Any, report: LoadReport) -> None:
        if not isinstance(data, dict):
            report.skip(file, "not a JSON object")
            return
        tool = data.get("tool_name") or data.get("standardized_name")
        apis = data.get("api_list")
        if not isinstance(tool, str) or not tool.strip():
            report.skip(file, "missing field 'tool_name'")
            return
        if not isinstance(apis, list):
            report.skip(file, "missing field 'api_list'")
            return
        seen: dict[str, str] = {}
        for i, entry in enumerate(apis):
            where = f"api_list[{i}]"
            try:
                if not isinstance(entry, dict):
                    raise InputError("not a JSON object")
                doc = ApiDoc(
                    category=category,
                    tool=tool,
                    api=_text(entry, "name"),
                    url=_text(entry, "url"),
                    method=_text(entry, "method"),
                    tool_description=str(data.get("tool_description") or ""),
                    api_description=str(entry.get("description") or ""),
                    **_param_fields(entry),
                )
            except InputError as e:
                report.skip(file, f"{where}: {e}")
                continue
            if _url_parts(doc.url or "") is None:
                report.skip(file, f"{where} ({doc.api!r}): URL has no host: {doc.url!r}")
                continue
            if doc.ref.api in seen:
                report.skip(file, f"{where}: duplicate API name {doc.api!r} "
                                  f"(same key as {seen[doc.ref.api]!r})")
                continue
            seen[doc.ref.api] = doc.api
            old = self._docs.get(doc.ref)
            if old is not None and old.url and old.url != doc.url:
                report.skip(file, f"{where}: {doc.ref} is already documented with URL {old.url}")
                continue
            self.add(doc)
            report.loaded += 1

    def load_query_file(self, path: str | os.PathLike[str]) -> LoadReport:
        """Load the ``api_list`` entries of a StableToolBench query file."""
        file = Path(path)
        report = LoadReport()
        data = _read_json(file, report)
        if data is None:
            return report
        if not isinstance(data, list):
            report.skip(file, "not a JSON list of queries")
            return report
        for qi, query in enumerate(data):
            apis = query.get("api_list") if isinstance(query, dict) else None
            if not isinstance(apis, list):
                report.skip(file, f"query [{qi}]: missing field 'api_list'")
                continue
            for ai, entry in enumerate(apis):
                try:
                    if not isinstance(entry, dict):
                        raise InputError("not a JSON object")
                    doc = ApiDoc(
                        category=_text(entry, "category_name"),
                        tool=_text(entry, "tool_name"),
                        api=_text(entry, "api_name"),
                        method=str(entry.get("method") or ""),
                        api_description=str(entry.get("api_description") or ""),
                        template_response=entry.get("template_response"),
                        **_param_fields(entry),
                    )
                except InputError as e:
                    report.skip(file, f"query [{qi}] api_list[{ai}]: {e}")
                    continue
                self.add(doc)
                report.loaded += 1
        return report

    # persistence

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the catalog as JSON, atomically (a reader never sees half a file)."""
        target = Path(path)
        data = {"format": self.FORMAT, "version": self.VERSION,
                "apis": [doc.to_dict() for doc in self._docs.values()]}
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps(data, ensure_ascii=False, indent=1), encoding="utf-8")
        os.replace(tmp, target)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Catalog:
        file = Path(path)
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as e:
            raise InputError(f"cannot read catalog {file}: {e}") from e
        if not isinstance(data, dict) or data.get("format") != cls.FORMAT:
            raise InputError(f"{file} is not an stbproxy catalog")
        if data.get("version") != cls.VERSION:
            raise InputError(f"{file}: unsupported catalog version {data.get('version')!r}")
        catalog = cls()
        for i, entry in enumerate(data.get("apis") or []):
            if not isinstance(entry, dict):
                raise InputError(f"{file}: apis[{i}] is not a JSON object")
            try:
                catalog.add(ApiDoc.from_dict(entry))
            except InputError as e:
                raise InputError(f"{file}: apis[{i}]: {e}") from e
        return catalog


def _rapidapi_host(headers: Headers | Mapping[str, str]) -> str:
    if isinstance(headers, Mapping):
        value = next((v for k, v in headers.items() if k.lower() == "x-rapidapi-host"), None)
    else:
        value = header_value(headers, "x-rapidapi-host")
    # A host header may carry a port; the doc URLs are matched by host name only.
    return value.strip().lower().rsplit(":", 1)[0] if value else ""
