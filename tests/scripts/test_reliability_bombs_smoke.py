"""scripts/reliability/bombs.py still runs: --quick, as a real process, every lane's bomb and
huge answers refused within its memory budget."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "reliability" / "bombs.py"


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_bombs_quick():
    done = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--limit", str(8 << 20), "--budget-mib", "96"],
                          capture_output=True, text=True, timeout=230)
    out = done.stdout
    assert done.returncode == 0, f"bombs.py exited {done.returncode}:\n{out}\n{done.stderr}"
    for lane in ("fast", "mitmproxy", "tunnel"):
        assert re.search(rf"^{lane} +small +200 upstream +1,013 +\d+ +\d+ +\d+ +\d+ +1 ", out, re.M), out
        for answer in ("gzip", "plain", "chunked"):
            row = re.search(rf"^{lane} +{answer} +502 error +[\d,]+ +(\d+) +(\d+) +(-?\d+) +\d+ +0 ", out, re.M)
            assert row, out
            idle, peak, _ = map(int, row.groups())
            assert peak - idle <= 96, out
    assert "all checks passed" in out, out
