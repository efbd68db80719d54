"""scripts/stability.py --quick end to end: real proxies, a loopback real API, a PNG."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "stability.py"
QUERIES = REPO.parent / "shared" / "data" / "stabletoolbench" / "solvable_queries" / "test_instruction" / "G1_instruction.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_stability_quick_passes_and_writes_a_png(tmp_path):
    if not QUERIES.is_file():
        pytest.skip(f"StableToolBench sample queries not found at {QUERIES}")
    out = tmp_path / "plot" / "stability.png"
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy")}
    # Eight proxies start in this run; on 2 idle cores it takes about 20-30 s. The limit
    # is only there so that a hung proxy fails the test instead of stalling the suite.
    result = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--queries", str(QUERIES), "--out", str(out)],
                            capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS: without the simulator the valid share falls" in result.stdout
    assert "PASS: with the simulator the valid share stays flat" in result.stdout
    assert "FAIL" not in result.stdout
    assert out.read_bytes()[:8] == PNG_MAGIC
    # Temp stores are removed: nothing but the plot is left behind in the working dir.
    assert [p.name for p in tmp_path.iterdir()] == ["plot"]
