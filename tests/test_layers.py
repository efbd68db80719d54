"""Imports only point down the layers (DESIGN.md), and each foreign library has one owner."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "stbproxy"

# Lower number = lower layer. A module may import stbproxy modules of its own layer or below.
LAYERS = {
    "errors": 1, "models": 1, "jsonsafe": 1, "recent": 1, "atomic_files": 1,
    "keys": 2, "redact": 2, "catalog": 2, "validity": 2, "routing": 2,
    "bodies": 2, "sessions": 2, "limits": 2, "auth_throttle": 2,
    "forgetting": 2, "stability_queries": 2, "provenance": 2,
    "store": 3, "sim": 3, "upstream": 3, "stb_cache": 3, "cassette_store": 3, "destinations": 3,
    "private_files": 3, "trust_bundle": 3, "cache_placement": 3,
    "engine": 4, "worker_link": 4, "reader_engine": 4, "settings": 4, "virtual_api": 4, "runtime": 4, "guard": 4, "conversation_export": 4,
    "cassettes": 2,
    "mitm": 5, "workers": 5, "cli": 5, "inprocess": 5, "pytest_plugin": 5, "serve_process": 5, "stability": 5,
    "__main__": 6, "__init__": 0,
}
OWNERS = {"rocksdict": "store", "openai": "sim", "mitmproxy": "mitm", "click": "cli", "httpx": "upstream",
          "requests_mock": "inprocess", "redis": "store", "ahocorasick_rs": "validity"}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if node.module == "stbproxy":
                names.update(f"stbproxy.{alias.name}" for alias in node.names)
    return names


MODULES = sorted(PACKAGE.rglob("*.py"))


def layer_name(path: Path) -> str:
    """A module's layer name: its own stem, or its subpackage's name (stbproxy/cli/*.py is "cli")."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else path.stem


def module_id(path: Path) -> str:
    return str(path.relative_to(PACKAGE).with_suffix(""))


def test_every_module_has_a_layer():
    assert {layer_name(p) for p in MODULES} <= set(LAYERS)


@pytest.mark.parametrize("path", MODULES, ids=[module_id(p) for p in MODULES])
def test_imports_point_down(path):
    mine = LAYERS[layer_name(path)]
    for name in imports_of(path):
        if name.startswith("stbproxy.") and name != "stbproxy.":
            other = name.split(".")[1]
            if other in LAYERS:
                assert LAYERS[other] <= mine or other == "__init__", f"{module_id(path)} imports {other} (layer up)"


@pytest.mark.parametrize("library,owner", sorted(OWNERS.items()))
def test_each_foreign_library_has_one_owner(library, owner):
    users = {layer_name(p) for p in MODULES if any(n == library or n.startswith(library + ".") for n in imports_of(p))}
    assert users <= {owner}, f"{library} imported by {users - {owner}}"


def test_stbeval_never_imports_the_proxy():
    for path in (ROOT / "eval").rglob("*.py"):
        assert not any(n == "stbproxy" or n.startswith("stbproxy.") for n in imports_of(path)), path


# stbeval's own foreign libraries, each behind one module of eval/.
EVAL_OWNERS = {"rouge_score": "rouge"}


@pytest.mark.parametrize("library,owner", sorted(EVAL_OWNERS.items()))
def test_each_foreign_library_of_stbeval_has_one_owner(library, owner):
    users = {p.stem for p in (ROOT / "eval").glob("*.py")
             if any(n == library or n.startswith(library + ".") for n in imports_of(p))}
    assert users == {owner}, f"{library} imported by {users}"


CORE_MODULES = sorted((ROOT / "stbcore").glob("*.py"))


@pytest.mark.parametrize("path", CORE_MODULES, ids=[p.stem for p in CORE_MODULES])
def test_stbcore_sits_below_both_and_needs_only_the_standard_library(path):
    for name in imports_of(path):
        top = name.split(".")[0]
        assert top not in ("stbproxy", "stbeval"), f"stbcore.{path.stem} imports {name}"
        assert top in sys.stdlib_module_names or top in ("__future__", "stbcore"), \
            f"stbcore.{path.stem} imports the third-party {name}"


def test_every_package_is_installed():
    """A wheel holds only the packages pyproject lists (an editable install hides a missing one)."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(init.parent.relative_to(ROOT).parts) for init in PACKAGE.rglob("__init__.py")}
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"
