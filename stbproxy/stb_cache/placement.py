"""Which folders and files of a StableToolBench cache a request can reach, and the name
each of the others should have.

A cache file ``<category>/<tool>/<api>.json`` is stored under the key
``api/<category>/<tool>/<api>/<arguments>``. A request can only produce that key from
names: the catalog's keys of the API it routes to (an HTTP call, or a /virtual call
naming a known API), or the /virtual call's own names for an API the catalog does not
know (catalog.category_key, tool_key and called_api_key). Either way the three names are:

- a category key: any name without spaces or commas (those become ``_``);
- a tool key: a standardized tool name, ``_for_`` and that very category key;
- an API key: a standardized name (lower case; ``_`` for any other character).

A folder or file named otherwise is never hit, whatever its entries hold. The check is a
few string operations per folder and per file, nothing per entry. With a catalog its
known names are suggested; a category folder spelt in another case than the catalog's is
reported too: only requests that misspell the category as the folder does reach it.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from pathlib import Path

from stbproxy.stb.catalog import Catalog, api_key_name, category_key, standardize

SUFFIX = "_for_"
CLOSE_ENOUGH = 0.8  # difflib ratio for suggesting a catalog name that is spelt differently


@dataclass(frozen=True)
class Misplaced:
    """A folder (``path`` ends with /) or file of the cache that requests do not reach by
    the names they are given."""

    path: str  # relative to the cache folder
    files: int  # cache files in it (1 for a file)
    reason: str
    suggestion: str  # the relative path it should have
    reachable: bool = False  # reached, but only by requests that spell it as the folder does

    def __str__(self) -> str:
        size = f" ({self.files} file{'s' if self.files != 1 else ''})" if self.path.endswith("/") else ""
        return f"{self.path}{size}: {self.reason}; did you mean {self.suggestion}?"


@dataclass
class Placement:
    reachable: list[Path] = field(default_factory=list)  # the files worth importing, in order
    misplaced: list[Misplaced] = field(default_factory=list)

    @property
    def unreachable_files(self) -> int:
        return sum(m.files for m in self.misplaced if not m.reachable)


class KnownNames:
    """The catalog's category, tool and API keys, for suggestions."""

    def __init__(self, catalog: Catalog | None = None) -> None:
        self.categories: dict[str, str] = {}  # lower case -> the catalog's key
        self.tools: dict[str, list[str]] = {}  # category key -> tool keys
        self.apis: dict[tuple[str, str], list[str]] = {}  # (category key, tool key) -> API keys
        for doc in catalog or ():
            ref = doc.ref
            self.categories.setdefault(ref.category.lower(), ref.category)
            tools = self.tools.setdefault(ref.category, [])
            if ref.tool not in tools:
                tools.append(ref.tool)
            self.apis.setdefault((ref.category, ref.tool), []).append(ref.api)


# -- the rules -----------------------------------------------------------------------------


def category_problem(name: str) -> str | None:
    if " " in name or "," in name:
        return "a category key has no spaces or commas (StableToolBench writes them as '_')"
    return None


def tool_problem(category: str, name: str) -> str | None:
    base, found, suffix = name.rpartition(SUFFIX)
    if not found:
        return f"no {SUFFIX}{category} suffix (a tool key is <standardized tool name>{SUFFIX}<category key>)"
    if suffix != category and suffix.lower() == category.lower():
        return f"ends with {SUFFIX}{suffix}, but its category folder is spelt {category}"
    if not name.endswith(SUFFIX + category):
        return f"does not end with {SUFFIX}{category}, its category folder's name"
    base = name[: -len(SUFFIX + category)]
    if base != standardize(base):
        return f"the tool name {base!r} is not standardized (lower case, '_' for any other character)"
    return None


def api_problem(stem: str) -> str | None:
    if not stem or stem != standardize(stem):
        return "not a standardized API name (lower case, '_' for any other character)"
    return None


def foreign_suffix(category: str, tools: list[str]) -> str | None:
    """X when every tool folder of a category folder ends with the same ``_for_X`` for a
    category X other than the folder's own: the category folder was renamed, and requests
    reach those tools under X."""
    suffixes = {tool.rpartition(SUFFIX)[2] if SUFFIX in tool else None for tool in tools}
    if len(tools) < 2 or len(suffixes) != 1:
        return None
    (suffix,) = suffixes
    if suffix is None or suffix == category or category_problem(suffix):
        return None
    bases = (tool[: -len(SUFFIX + suffix)] for tool in tools)
    return suffix if all(base == standardize(base) for base in bases) else None


# -- suggestions ---------------------------------------------------------------------------


def _closest(wanted: str, known: list[str]) -> str | None:
    """The known name equal to ``wanted`` but for case, else the closest one, if close."""
    by_lower = {name.lower(): name for name in known}
    if wanted.lower() in by_lower:
        return by_lower[wanted.lower()]
    close = difflib.get_close_matches(wanted.lower(), list(by_lower), n=1, cutoff=CLOSE_ENOUGH)
    return by_lower[close[0]] if close else None


def suggest_category(name: str, known: KnownNames) -> str:
    by_rules = category_key(name)
    return _closest(by_rules, list(known.categories.values())) or by_rules


def suggest_tool(category: str, name: str, known: KnownNames) -> str:
    base = name
    if name.lower().endswith((SUFFIX + category).lower()):
        base = name[: -len(SUFFIX + category)]
    by_rules = f"{standardize(base)}{SUFFIX}{category}"
    return _closest(by_rules, known.tools.get(category, [])) or by_rules


def suggest_api(category: str, tool: str, stem: str, known: KnownNames) -> str:
    by_rules = api_key_name(stem)
    return _closest(by_rules, known.apis.get((category, tool), [])) or by_rules


# -- the check -----------------------------------------------------------------------------


def check(files: list[Path], root: Path, catalog: Catalog | None = None) -> Placement:
    """Split cache files (``<root>/<category>/<tool>/<api>.json``) into those a request can
    reach and the folders and files it cannot, each with the name it should have."""
    known = KnownNames(catalog)
    tree: dict[str, dict[str, list[Path]]] = {}
    for path in files:
        category, tool, _name = path.relative_to(root).parts
        tree.setdefault(category, {}).setdefault(tool, []).append(path)
    placement = Placement()
    for category, tools in tree.items():
        _check_category(category, tools, known, placement)
    order = {path: index for index, path in enumerate(files)}
    placement.reachable.sort(key=order.__getitem__)
    return placement


def _check_category(category: str, tools: dict[str, list[Path]], known: KnownNames, placement: Placement) -> None:
    files = sum(len(paths) for paths in tools.values())
    reason = category_problem(category)
    if reason:
        placement.misplaced.append(Misplaced(f"{category}/", files, reason,
                                             f"{suggest_category(category, known)}/"))
        return
    renamed = foreign_suffix(category, list(tools))
    if renamed and all(tool_problem(category, tool) for tool in tools):
        reason = f"its tool folders end with {SUFFIX}{renamed}, so requests reach them under {renamed}/"
        placement.misplaced.append(Misplaced(f"{category}/", files, reason, f"{suggest_category(renamed, known)}/"))
        return
    spelt = known.categories.get(category.lower())
    if spelt is not None and spelt != category:
        reason = (f"the catalog spells this category {spelt}: only requests that name it {category!r} "
                  "reach these files")
        placement.misplaced.append(Misplaced(f"{category}/", files, reason, f"{spelt}/", reachable=True))
    for tool, paths in tools.items():
        _check_tool(category, tool, paths, known, placement)


def _check_tool(category: str, tool: str, paths: list[Path], known: KnownNames, placement: Placement) -> None:
    reason = tool_problem(category, tool)
    if reason:
        placement.misplaced.append(Misplaced(f"{category}/{tool}/", len(paths), reason,
                                             f"{category}/{suggest_tool(category, tool, known)}/"))
        return
    for path in paths:
        reason = api_problem(path.stem)
        if reason:
            suggestion = f"{category}/{tool}/{suggest_api(category, tool, path.stem, known)}.json"
            placement.misplaced.append(Misplaced(f"{category}/{tool}/{path.name}", 1, reason, suggestion))
        else:
            placement.reachable.append(path)


def missing_layout_hint(root: Path) -> str:
    """Where cache files are, when there are none at <category>/<tool>/<api>.json."""
    deeper = next(root.glob("*/*/*/*.json"), None)
    if deeper is not None:
        return f"; there are some one level deeper: did you mean {root / deeper.relative_to(root).parts[0]}?"
    if next(root.glob("*/*.json"), None) is not None:
        return f"; this looks like one category (<tool>/<api>.json): did you mean {root.parent}?"
    return ""
