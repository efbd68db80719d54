"""Reading ToolBench's doc files into a catalog: a ``tools/<Category>/<tool>.json``
folder and StableToolBench query files, with a ``LoadReport`` of what each load took in
and what it left out, and why."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol, TypedDict

from stbproxy.errors import InputError
from stbproxy.models import ApiRef
from stbproxy.stb.api_doc import ApiDoc, Param, param_fields, url_parts


class _Parameters(TypedDict):
    required_parameters: tuple[Param, ...]
    optional_parameters: tuple[Param, ...]


def _parameters(entry: Mapping[str, Any]) -> _Parameters:
    """An entry's two parameter lists, as the ApiDoc fields they fill."""
    lists = param_fields(entry)
    return {"required_parameters": lists["required_parameters"], "optional_parameters": lists["optional_parameters"]}


class Catalog(Protocol):
    """What loading needs of a catalog (catalog.Catalog is one)."""

    def get(self, ref: ApiRef) -> ApiDoc | None: ...

    def add(self, doc: ApiDoc) -> ApiDoc: ...


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


def load_tools_dir(catalog: Catalog, path: str | os.PathLike[str]) -> LoadReport:
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
            _load_tool_doc(catalog, file, file.parent.name, data, report)
    return report


def _load_tool_doc(catalog: Catalog, file: Path, category: str, data: Any, report: LoadReport) -> None:
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
                **_parameters(entry),
            )
        except InputError as e:
            report.skip(file, f"{where}: {e}")
            continue
        if url_parts(doc.url or "") is None:
            report.skip(file, f"{where} ({doc.api!r}): URL has no host: {doc.url!r}")
            continue
        if doc.ref.api in seen:
            report.skip(file, f"{where}: duplicate API name {doc.api!r} "
                              f"(same key as {seen[doc.ref.api]!r})")
            continue
        seen[doc.ref.api] = doc.api
        old = catalog.get(doc.ref)
        if old is not None and old.url and old.url != doc.url:
            report.skip(file, f"{where}: {doc.ref} is already documented with URL {old.url}")
            continue
        catalog.add(doc)
        report.loaded += 1


def load_query_file(catalog: Catalog, path: str | os.PathLike[str]) -> LoadReport:
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
                    **_parameters(entry),
                )
            except InputError as e:
                report.skip(file, f"query [{qi}] api_list[{ai}]: {e}")
                continue
            catalog.add(doc)
            report.loaded += 1
    return report


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
