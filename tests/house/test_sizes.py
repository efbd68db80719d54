"""No Python module of the project is over 500 lines: past that, a module holds more than one
job, and it is split by job (the package's, the scripts' and the tests' alike)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("stbproxy", "stbcore", "eval", "scripts", "tests")
MOST_LINES = 500


def test_no_module_is_over_500_lines():
    modules = [path for folder in FOLDERS for path in (ROOT / folder).rglob("*.py")]
    assert len(modules) > 100, "the project's modules were not found"
    over = {str(path.relative_to(ROOT)): lines for path in modules
            if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MOST_LINES}
    assert not over, f"modules over {MOST_LINES} lines (split them by job): {over}"
