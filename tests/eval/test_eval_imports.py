"""stbeval's own modules import each other without a cycle, and model.py imports none of them."""

from __future__ import annotations

import ast
from pathlib import Path

EVAL = Path(__file__).resolve().parents[2] / "eval"


def local_imports(path: Path) -> set[str]:
    """The stbeval modules ``path`` imports (relative imports, at any depth of the file)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                names.add(node.module.split(".")[0])
            else:
                names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("stbeval."):
            names.add(node.module.split(".")[1])
    return names


GRAPH = {p.stem: local_imports(p) for p in EVAL.glob("*.py")}


def test_no_import_cycles():
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        assert module not in path, f"import cycle: {' -> '.join(path[path.index(module):] + [module])}"
        if module in done:
            return
        for other in GRAPH.get(module, ()):
            visit(other, path + [module])
        done.add(module)

    for module in GRAPH:
        visit(module, [])


def test_the_shared_model_stands_alone():
    assert GRAPH["model"] == set()
    # The readers build on the model and the message reader, never on each other's loader.
    assert GRAPH["messages"] == {"model"}
    assert "answers" not in GRAPH["toolbench"] | GRAPH["cassettes"]
