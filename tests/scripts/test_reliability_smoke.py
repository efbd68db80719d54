"""scripts/reliability/reliability.py still runs: --quick, as a real process, without the
phases the suite covers on its own (the fuzz set: tests/proxy/test_fuzz_proxy.py; a store that
cannot be written: tests/proxy/test_hardening_proxy.py) and without mounting anything."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reliability" / "reliability.py"


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_reliability_quick_load_and_kills():
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--skip", "fuzz", "--skip", "full_disk"],
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    for row in (r"record c16 +500 +0 +p50 [\d.]+ ms", r"replay c16 +500 +0 .* B/request",
                r"kill -9 x2 \(record\) +\d+ +0 +acknowledged \d+, stored whole \d+, missing 0"):
        assert re.search(row, done.stdout), done.stdout
    assert "all checks passed" in done.stdout
