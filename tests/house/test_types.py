"""The pure core and the store are fully typed: stbcore, keys (with the rules, canonical parts,
content types, differences and scrubbing it is built from), models, the seam of the kinds of
traffic and the whole store package (its contract, the embedded store, the shared tier) pass
``mypy --strict`` (the rest of the package is not held to it yet). Everything else, the whole
of stbproxy and the evaluation package, passes mypy's default checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STRICT = ["stbcore", "stbproxy/keys.py", "stbproxy/key_rules.py", "stbproxy/canonical_parts.py",
          "stbproxy/content_types.py", "stbproxy/differences.py", "stbproxy/scrubbing.py", "stbproxy/models.py",
          "stbproxy/traffic/seam.py", "stbproxy/store"]
PLAIN = ["eval", "stbproxy"]


def _mypy(*args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    pytest.importorskip("mypy", reason="mypy is one of the test extras (pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", "mypy", "--ignore-missing-imports", "--follow-imports=silent",
                           "--cache-dir", str(cache), *args], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_the_core_passes_mypy_strict(tmp_path):
    done = _mypy("--strict", *STRICT, cache=tmp_path / "cache")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_typed_packages_pass_mypy(tmp_path):
    done = _mypy(*PLAIN, cache=tmp_path / "cache")
    assert done.returncode == 0, done.stdout + done.stderr
