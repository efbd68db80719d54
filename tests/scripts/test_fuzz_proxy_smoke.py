"""scripts/reliability/fuzz_proxy.py still runs: as a module from the repository root, as its
docstring says, on both lanes, with a few valid cases (the hostile classes are the business
of tests/proxy/test_fuzz_proxy.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.integration
@pytest.mark.timeout(120)
def test_fuzz_proxy_script_runs_both_lanes():
    done = subprocess.run([sys.executable, "-m", "scripts.reliability.fuzz_proxy", "--cases", "120", "--class", "valid",
                           "--seed", "3"], cwd=REPO, capture_output=True, text=True, timeout=110)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    for lane in ("fast-lane", "no-fast-lane"):
        assert re.search(rf"lane {lane} \(seed 3\): 120 cases started over [\d.]+s, .*: answered 120", done.stdout), \
            done.stdout
    assert done.stdout.count("after the run, a proxied GET: ok") == 2
    assert "all checks passed (240 cases, seed 3, lanes fast-lane, no-fast-lane)" in done.stdout
