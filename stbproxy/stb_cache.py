"""Reading StableToolBench's response cache into stbproxy entries.

Layout: ``<cache>/<category_key>/<tool_key>/<api_key>.json``, each file one JSON object
mapping ``str(args_dict)`` (a Python literal, not JSON: key order and value types are
the client's) to ``{"error": ..., "response": ...}``. Every entry is re-keyed
canonically (keys.api_key), so ``{'b': 1, 'a': 2}`` and ``{'a': 2, 'b': '1'}`` meet.
Problems are reported per entry and never stop the import.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from stbproxy import keys, validity
from stbproxy.catalog import Catalog
from stbproxy.bodies import api_body_response
from stbproxy.errors import InputError
from stbproxy.keys import DEFAULT_RULES, KeyRules
from stbproxy.models import ApiRef, Exchange, Source
from stbproxy.routing import stored_request


@dataclass(frozen=True)
class Problem:
    file: str
    reason: str
    entry: str = ""  # the offending cache key, shortened

    def __str__(self) -> str:
        where = f"{self.file} [{self.entry}]" if self.entry else self.file
        return f"{where}: {self.reason}"


@dataclass
class ImportSummary:
    files: int = 0
    entries: int = 0
    imported: int = 0
    duplicates: int = 0  # already stored, or the same canonical call twice in the cache
    invalid: int = 0  # failed answers (check_result), left out unless asked for
    problems: list[Problem] = field(default_factory=list)

    @property
    def unparseable(self) -> int:
        return len(self.problems)


def cache_files(root: Path) -> list[Path]:
    if not root.is_dir():
        raise InputError(f"not a StableToolBench cache folder: {root}")
    return sorted(root.glob("*/*/*.json"))


def read_cache_file(path: Path, root: Path, *, catalog: Catalog | None = None, rules: KeyRules = DEFAULT_RULES,
                    include_invalid: bool = False, now: float = 0.0,
                    summary: ImportSummary) -> Iterator[Exchange]:
    """The entries of one cache file as Exchanges; problems go to ``summary``."""
    name = str(path.relative_to(root))
    try:
        document = json.loads(path.read_bytes())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        summary.problems.append(Problem(name, f"not a readable JSON file: {exc}"))
        return
    if not isinstance(document, dict):
        summary.problems.append(Problem(name, f"expected a JSON object of cached calls, found {type(document).__name__}"))
        return
    category, tool, api = path.parent.parent.name, path.parent.name, path.stem
    ref = ApiRef(category, tool, api)
    doc = catalog.get(ref) if catalog is not None else None
    for raw_key, value in document.items():
        summary.entries += 1
        args = parse_args(raw_key)
        if not isinstance(args, dict):
            summary.problems.append(Problem(name, "cache key is not a Python dict literal", _short(raw_key)))
            continue
        if not isinstance(value, dict) or "response" not in value:
            summary.problems.append(Problem(name, "cached value is not an {error, response} object", _short(raw_key)))
            continue
        if not include_invalid and not validity.check_result(value):
            summary.invalid += 1
            continue
        yield Exchange(
            key=keys.api_key(ref, args, rules),
            request=stored_request(ref, doc, args),
            response=api_body_response(value["response"]),
            source=Source.IMPORTED,
            stored_at=now,
            api=ref,
            meta={"error": str(value.get("error") or ""), "origin": "stb-cache"},
        )


def parse_args(raw_key: str):
    """``str(args_dict)`` back into a dict; None when it is not a plain literal."""
    if raw_key.strip() in ("", "{}"):
        return {}
    try:
        return ast.literal_eval(raw_key)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        try:  # some dumps used JSON keys
            return json.loads(raw_key)
        except ValueError:
            return None


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit] + "..."
