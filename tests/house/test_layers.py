"""Imports only point down the layers (docs/internals.md), and each foreign library has one owner."""

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "stbproxy"

# Lower number = lower layer. A module may import stbproxy modules of its own layer or below.
# A package has one entry, and all its modules share its layer.
LAYERS = {
    "errors": 1, "models": 1, "jsonsafe": 1, "recent": 1, "atomic_files": 1, "multipart": 1, "yaml_text": 1,
    "content_types": 1,
    "keys": 2, "key_rules": 2, "canonical_parts": 2, "differences": 2, "redact": 2, "request_secrets": 2,
    "scrubbing": 2, "traffic": 2, "kinds": 2, "mcp": 2, "openapi": 2, "json_schema": 2, "misses": 2,
    "sessions": 2, "forgetting": 2, "provenance": 2, "stb": 2, "synthesis": 2, "forensics": 2,
    "store": 3, "client_env": 3, "sim": 3, "upstream": 3, "private_files": 3, "trust_bundle": 3, "stb_cache": 3,
    "engine": 4, "settings": 4, "serve_options": 4, "runtime": 4, "front": 4, "workers": 4, "cassettes": 4,
    "mitm": 5, "cli": 5, "pytest_plugin": 5, "serve_process": 5, "stability": 5,
    "__main__": 6, "__init__": 0,
}
# A folder is one layer: a module that belongs to another layer moves to a package of that
# layer, so no module has an entry of its own inside a package.
OWNERS = {"rocksdict": "store", "openai": "sim", "mitmproxy": "mitm", "click": "cli", "httpx": "upstream",
          "requests_mock": "cassettes", "redis": "store", "ahocorasick_rs": "stb", "vcr": "cassettes",
          "jsonschema": "json_schema", "yaml": "yaml_text", "referencing": "openapi"}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            if node.module == "stbproxy" or node.module.startswith("stbproxy."):
                names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def layer_of(dotted: str) -> str | None:
    """The LAYERS entry of a module under stbproxy ("stb.catalog" -> "stb"), or None."""
    top = dotted.split(".", 1)[0]
    return top if top in LAYERS else None


MODULES = sorted(PACKAGE.rglob("*.py"))


def layer_name(path: Path) -> str:
    """A module's LAYERS entry: its own, or its package's (stbproxy/cli/*.py is "cli")."""
    return layer_of(".".join(path.relative_to(PACKAGE).with_suffix("").parts)) or path.stem


def concern(path: Path) -> str:
    """The package (or top-level module) a module belongs to."""
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def module_id(path: Path) -> str:
    return str(path.relative_to(PACKAGE).with_suffix(""))


def test_a_folder_is_one_layer():
    assert [name for name in LAYERS if "." in name] == []


def test_every_module_has_a_layer():
    assert {layer_name(p) for p in MODULES} <= set(LAYERS)


@pytest.mark.parametrize("path", MODULES, ids=[module_id(p) for p in MODULES])
def test_imports_point_down(path):
    mine = LAYERS[layer_name(path)]
    for name in imports_of(path):
        if name.startswith("stbproxy.") and name != "stbproxy.":
            other = layer_of(name.split(".", 1)[1])
            if other is not None:
                assert LAYERS[other] <= mine or other == "__init__", f"{module_id(path)} imports {other} (layer up)"


@pytest.mark.parametrize("library,owner", sorted(OWNERS.items()))
def test_each_foreign_library_has_one_owner(library, owner):
    users = {concern(p) for p in MODULES if any(n == library or n.startswith(library + ".") for n in imports_of(p))}
    assert users <= {owner}, f"{library} imported by {users - {owner}}"


def test_stbeval_never_imports_the_proxy():
    for path in (ROOT / "eval").rglob("*.py"):
        assert not any(n == "stbproxy" or n.startswith("stbproxy.") for n in imports_of(path)), path


# stbeval's own foreign libraries, each behind one module of eval/.
EVAL_OWNERS = {"rouge_score": "rouge", "httpx": "exec_http"}  # exec_http: eval exec's requests, through the proxy


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
