"""Smoke test for scripts/bench/bench_proxy.py: a --quick run completes with every request good.

It checks the benchmark works, not the figures: those depend on the machine.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.bench.hitbench import c_load_missing

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "bench_proxy.py"
RUN_TIMEOUT = 120  # --quick takes seconds; mitmproxy start-up on a busy machine takes longer


def _processes_with_env(marker: str) -> list[int]:
    """Pids whose environment holds ``marker``: every process the benchmark started inherits it."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                pass  # gone already, or not ours
    return found


def _run_clean(tmp_path: Path, *args: str) -> str:
    """Run the benchmark with ``args``; its output, once it exited 0 with every request good
    and left neither temp files nor processes behind."""
    # A private TMPDIR: the script's temp dirs land here, and it marks its children.
    env = dict(os.environ, TMPDIR=str(tmp_path))
    proc = subprocess.Popen([sys.executable, str(SCRIPT), *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)  # the script stops its children on SIGTERM
        try:
            out, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        pytest.fail(f"bench_proxy.py {' '.join(args)} took over {RUN_TIMEOUT}s:\n{out}\n{err}")

    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{err}"
    assert "FAILED" not in out and "failed requests: 0" in out, out
    assert not list(tmp_path.iterdir()), "the benchmark left temp files behind"
    if Path("/proc/self/environ").exists():
        assert not _processes_with_env(f"TMPDIR={tmp_path}"), "the benchmark left processes running"
    return out


@pytest.mark.integration
@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_quick_benchmark_runs_clean(tmp_path):
    out = _run_clean(tmp_path, "--quick")
    for path in ("plain", "https"):
        assert f"{path} hits (medians):" in out, out
        assert re.search(rf"{path}: CPU per hit at concurrency 16: [\d.]+ ms \(target <= [\d.]+ ms: (met|MISSED)\); "
                         rf"[\d.]+ of mitmdump \+ dict's [\d.]+ ms", out), out
        assert re.search(rf"{path}: --workers 2 / 1 worker at concurrency 16: [\d.]+x", out), out
    for subject in ("direct", "stbproxy", "stbproxy --workers 2", "mitmdump + dict"):
        assert re.search(rf"^ +{re.escape(subject)} +16 +\d+ +[\d.]+ +[\d.]+", out, re.MULTILINE), out
    assert re.search(r"p50 added at concurrency 1 over a direct call: -?[\d.]+ ms", out), out


@pytest.mark.integration
@pytest.mark.timeout(RUN_TIMEOUT + 60)
def test_workers_only_runs_just_the_two_configurations_under_the_c_load_generator(tmp_path):
    if missing := c_load_missing():  # .ci/run installs gcc and libssl-dev
        pytest.skip(f"hitload.c cannot be built here: {missing}")
    out = _run_clean(tmp_path, "--quick", "--workers-only", "--repeats", "2", "--client", "c")
    for path in ("plain", "https"):
        # Two repeats: the median of two paired ratios, and their range; every answer checked by hitload.c.
        assert re.search(rf"{path}: --workers 2 / 1 worker at concurrency 16: [\d.]+x \(median of the repeats' "
                         rf"ratios, which ranged [\d.]+-[\d.]+;.*the load generator \(hitload\.c\) used", out), out
    subjects = set(re.findall(r"^  (?:plain|https) +(.+?) +c\d+ ", out, re.MULTILINE))
    assert subjects == {"stbproxy", "stbproxy --workers 2"}, out
    assert "CPU per hit at concurrency" not in out, out
