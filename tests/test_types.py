"""The pure core and the store are fully typed: stbcore, keys (with the rules, canonical parts,
content types, differences and scrubbing it is built from), models, the seam of the kinds of
traffic and the whole store package (its contract, the embedded store, the shared tier) pass
``mypy --strict`` (the rest of the package is not held to it yet)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STRICT = ["stbcore", "stbproxy/keys.py", "stbproxy/key_rules.py", "stbproxy/canonical_parts.py",
          "stbproxy/content_types.py", "stbproxy/differences.py", "stbproxy/scrubbing.py", "stbproxy/models.py",
          "stbproxy/traffic/seam.py", "stbproxy/store"]


def test_the_core_passes_mypy_strict(tmp_path):
    pytest.importorskip("mypy", reason="mypy is one of the test extras (pip install -e '.[test]')")
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--ignore-missing-imports",
                           "--follow-imports=silent", "--cache-dir", str(tmp_path / "cache"), *STRICT],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
