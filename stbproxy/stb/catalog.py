"""The catalog: every known API, looked up by names or keys, and routed from HTTP requests.

The catalog knows every API by its standardized keys (an ApiRef), which is what the
store and StableToolBench's cache use, and by its original names, which is what
/virtual clients and query files use. It reads ToolBench doc folders and query files
(tool_docs.py) and saves itself as one JSON file; beyond those files it does no I/O.

The API doc model is api_doc.py, the name rules stbcore/toolbench_names.py, the routing table routes.py;
their public names are importable from here too, where most callers take them.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Iterable, Iterator, Mapping

from stbcore.toolbench_names import (
    api_key_name,
    called_api_key,
    called_api_key_of,
    category_key,
    change_name,
    function_name,
    standard_tool_name,
    standardize,
    tool_key,
    tool_key_in,
)
from stbproxy.errors import InputError
from stbproxy.models import ApiRef, Headers
from stbproxy.stb import tool_docs
from stbproxy.stb.api_doc import ApiDoc, Param
from stbproxy.stb.routes import RouteMatch, RouteTable
from stbproxy.stb.tool_docs import LoadReport

# Where most callers take them from.
__all__ = ["ApiDoc", "Catalog", "LoadReport", "Param", "RouteMatch", "api_key_name", "called_api_key",
           "category_key", "change_name", "function_name", "standardize", "tool_key"]


class Catalog:
    """Every known API, looked up by names or keys, and routed from HTTP requests."""

    FORMAT = "stbproxy-catalog"
    VERSION = 1

    def __init__(self, docs: Iterable[ApiDoc] = ()) -> None:
        self._docs: dict[ApiRef, ApiDoc] = {}
        self._by_names: dict[tuple[str, str, str], ApiRef] = {}
        self._by_tool: dict[tuple[str, str], list[ApiRef]] = {}
        self._category_keys: dict[str, str] = {}
        self._routes: RouteTable | None = None
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
        tool_k = tool_key_in(tool, cat)
        doc = self._docs.get(ApiRef(cat, tool_k, api_key_name(api)))
        if doc is None:
            doc = self._docs.get(ApiRef(cat, tool_k, called_api_key_of(api, standard_tool_name(tool, cat))))
        if doc is None:
            doc = next((d for d in self.apis_of_tool(cat, tool_k) if d.function_name == api), None)
        return doc

    def apis_of_tool(self, category: str, tool: str) -> list[ApiDoc]:
        cat = self._cat_key(category)
        refs = self._by_tool.get((cat, tool_key_in(tool, cat)), [])
        return [self._docs[r] for r in refs]

    # routing HTTP requests

    def route(self, method: str, url: str,
              headers: Headers | Mapping[str, str] | None = None) -> RouteMatch | None:
        """The API a request calls, by URL host, else by X-RapidAPI-Host; None if unmapped."""
        if self._routes is None:
            self._routes = RouteTable(self._docs.values())
        return self._routes.match(method, url, headers)

    # loading

    def load_tools_dir(self, path: str | os.PathLike[str]) -> LoadReport:
        """Load ``tools/<Category>/<tool>.json`` (``path`` may be the folder holding tools/)."""
        return tool_docs.load_tools_dir(self, path)

    def load_query_file(self, path: str | os.PathLike[str]) -> LoadReport:
        """Load the ``api_list`` entries of a StableToolBench query file."""
        return tool_docs.load_query_file(self, path)

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
