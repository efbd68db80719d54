"""scripts/reliability/h2_flood.py still runs: --quick, as a real process, on both lanes (the
thresholds are the business of tests/proxy/test_h2_flood.py; here they are wide, for a busy machine)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reliability" / "h2_flood.py"


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_h2_flood_quick_runs_both_lanes():
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--max-added", "5000"],
                          capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    for lane in ("fast-lane", "no-fast-lane"):
        assert f"\nlane {lane}\n" in done.stdout
    assert len(re.findall(r"other client, during flood: hits p50 [\d.]+, p99 [\d.]+", done.stdout)) == 2
    assert len(re.findall(r"GOAWAY ENHANCE_YOUR_CALM [1-9]", done.stdout)) == 2, done.stdout
    assert len(re.findall(r"of which the proxy waited for the answer: 0\n", done.stdout)) == 2
    assert len(re.findall(r"SIGTERM to exit: [\d.]+ s \(exit status 0\)", done.stdout)) == 2
    assert "all checks passed" in done.stdout
