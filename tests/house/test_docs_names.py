"""Docs that name code stay true: every module, class member and function the docs and
docstring-like pages name in code spans exists (a renamed function, a module moved, a file
that never was). What counts as naming code:

- a path ending in ``.py`` (``mcp/live.py``, ``kinds.py``): some file of the repository ends so;
- a dotted name under ``stbproxy``, ``stbeval`` or ``stbcore``: a module, or a module and one
  name it defines;
- ``Class.member`` where ``Class`` is a class of the code: one of the classes of that name has it;
- ``module.name`` where ``module`` is the name of one module of the packages (``keys.request_key``):
  that module defines it;
- a name followed by its file, as the docs write it (`` `name` (`file.py`) `` or
  `` `name` in `file.py` ``): that file defines it.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("stbproxy", "stbcore", "eval", "scripts", "tests", "addons")
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = {"stbproxy": ROOT / "stbproxy", "stbcore": ROOT / "stbcore", "stbeval": ROOT / "eval"}
# StableToolBench's own files, named where the docs compare with it (never in this repository).
STABLETOOLBENCH_FILES = {"server/main.py", "server/main_mirrorapi.py", "server/system_prompts.py",
                         "qa_pipeline_multithread.py", "toolbench/inference/qa_pipeline_multithread.py"}
WRITTEN = re.compile(r"^# file: (\S+)", re.M)  # a file a page's own block writes (tests/docblocks.py)

SPAN = re.compile(r"`([^`\n]+)`")
NAME_AND_FILE = re.compile(r"`([A-Za-z_][\w.]*)(?:\(\))?`\s*(?:\(|in |of |from )\s*`([\w/.-]+\.py)`")
IDENT = re.compile(r"^[A-Za-z_]\w*$")
# file suffixes
NOT_NAMES = {"json", "jsonl", "yaml", "yml", "md", "csv", "png", "html", "txt", "py", "toml", "pem", "db"}


def _defined(tree: ast.AST) -> tuple[set[str], dict[str, set[str]]]:
    """Names a module defines at its top (and imports), and each class's members."""
    names: set[str] = set()
    classes: dict[str, set[str]] = {}
    for node in getattr(tree, "body", []):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            names.add(node.name)
            members = classes.setdefault(node.name, set())
            for item in ast.walk(node):
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    members.add(item.name)
                elif isinstance(item, ast.Attribute) and isinstance(item.value, ast.Name) and item.value.id == "self":
                    members.add(item.attr)
                elif isinstance(item, (ast.AnnAssign, ast.Assign)):
                    for target in (item.targets if isinstance(item, ast.Assign) else [item.target]):
                        if isinstance(target, ast.Name):
                            members.add(target.id)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                for leaf in ast.walk(target):
                    if isinstance(leaf, ast.Name):
                        names.add(leaf.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.If):  # names defined under TYPE_CHECKING or a version test
            more, _ = _defined(node)
            names |= more
    return names, classes


class Code:
    def __init__(self) -> None:
        self.files: dict[str, set[str]] = {}  # repository path -> names it defines (its classes' members too)
        self.members: dict[str, set[str]] = defaultdict(set)  # class name -> members, over every class of that name
        for folder in CODE_DIRS:
            for path in (ROOT / folder).rglob("*.py"):
                if "node_modules" in path.parts:
                    continue
                names, classes = _defined(ast.parse(path.read_text(encoding="utf-8")))
                for name, members in classes.items():
                    self.members[name] |= members
                self.files[path.relative_to(ROOT).as_posix()] = names | set().union(*classes.values())
        self.package_modules: dict[str, list[str]] = defaultdict(list)  # a module's own name -> its files
        for rel in self.files:
            if rel.split("/")[0] in ("stbproxy", "stbcore", "eval") and not rel.endswith("__init__.py"):
                self.package_modules[rel.rsplit("/", 1)[-1][:-3]].append(rel)

    def files_ending(self, path: str) -> list[str]:
        path = path.lstrip("./")
        if path.startswith("stbeval/"):  # the evaluation package is imported as stbeval, kept in eval/
            path = "eval/" + path.removeprefix("stbeval/")
        return [f for f in self.files if f == path or f.endswith("/" + path)]

    def module(self, dotted: str) -> tuple[str | None, list[str]]:
        """The repository file of the longest module prefix of ``dotted``, and the rest."""
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            head = parts[:cut]
            base = PACKAGES.get(head[0])
            if base is None:
                return None, parts
            for candidate in (base.joinpath(*head[1:]).with_suffix(".py"), base.joinpath(*head[1:], "__init__.py")):
                if len(head) > 1 or candidate.name == "__init__.py":
                    rel = candidate.relative_to(ROOT).as_posix()
                    if rel in self.files:
                        return rel, parts[cut:]
        return None, parts


def problems_of(text: str, code: Code, written: set[str] = frozenset()) -> list[str]:
    found = []
    for span in SPAN.findall(text):
        span = span.strip()
        if re.fullmatch(r"[\w/.-]+\.py", span) and not span.startswith(("http", "/")):
            if span not in STABLETOOLBENCH_FILES and span not in written and not code.files_ending(span):
                found.append(f"`{span}`: no such file")
        elif re.fullmatch(r"(stbproxy|stbeval|stbcore)(\.[A-Za-z_]\w*)+", span):
            module, rest = code.module(span)
            if module is None:
                found.append(f"`{span}`: no such module")
            elif rest and (len(rest) > 2 or rest[0] not in code.files[module]
                           or (len(rest) == 2 and rest[1] not in code.members.get(rest[0], set()))):
                found.append(f"`{span}`: {module} defines no {'.'.join(rest)}")
        elif re.fullmatch(r"[A-Z]\w*\.[a-z_]\w*(\(\))?", span):
            owner, member = span.rstrip("()").split(".")
            if owner in code.members and member not in code.members[owner]:
                found.append(f"`{span}`: no class {owner} has {member}")
        elif re.fullmatch(r"[a-z_]\w*\.[A-Za-z_]\w*(\(\))?", span):
            module, name = span.rstrip("()").split(".")
            files = code.package_modules.get(module, [])
            if len(files) == 1 and name not in NOT_NAMES and name not in code.files[files[0]]:
                found.append(f"`{span}`: {files[0]} defines no {name}")
    for name, path in NAME_AND_FILE.findall(text):
        files = code.files_ending(path)
        leaf = name.split(".")[-1]
        if files and IDENT.match(leaf) and not any(leaf in code.files[f] for f in files):
            found.append(f"`{name}` ({path}): not defined there")
    return found


def test_every_name_of_the_code_the_docs_give_exists():
    code = Code()
    texts = {page: page.read_text(encoding="utf-8") for page in PAGES}
    written = {name for text in texts.values() for name in WRITTEN.findall(text)}
    problems = [f"{page.relative_to(ROOT)}: {problem}" for page, text in texts.items()
                for problem in problems_of(text, code, written)]
    assert not problems, "\n".join(problems)


def test_the_check_finds_what_the_docs_once_said():
    code = Code()
    said = ("For a proxy, put the kind into `kinds_for` (`kinds.py`).\n"
            "`from stbproxy.inprocess import replay` and `stbproxy.inprocess` and `runtime.py` "
            "`Engine.no_such_member`, `session_tools` in `mcp/gone.py`, `ghost_function` (`runtime.py`), "
            "`keys.no_such_key` and `keys.request_key`, `report.md`")
    found = problems_of(said, code)
    assert any(problem.startswith("`stbproxy.inprocess`:") for problem in found)
    assert "`Engine.no_such_member`: no class Engine has no_such_member" in found
    assert "`ghost_function` (runtime.py): not defined there" in found
    assert any("mcp/gone.py" in problem for problem in found)
    assert "`keys.no_such_key`: stbproxy/keys.py defines no no_such_key" in found
    assert not [p for p in found if "kinds_for" in p or "request_key" in p or "report.md" in p]  # all true
