"""`stbproxy eval stability` end to end: real proxies, a loopback real API, a PNG, and
defaults that need nothing but the installed package."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stbproxy.stability.experiment import calls_of
from stbproxy.stability.queries import builtin_queries
from stbproxy.stb.catalog import Catalog

SCRIPT = Path(sys.executable).with_name("stbproxy")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def stability(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """The command as a user runs it, in a folder of its own, with a temporary folder the
    test can look into afterwards."""
    (cwd / "tmp").mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and not k.startswith("STBPROXY_")}
    # Eight proxies start in a run; on 2 idle cores it takes about 20 s. The limit is only
    # there so that a hung proxy fails the test instead of stalling the suite.
    return subprocess.run([str(SCRIPT), "eval", "stability", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env | {"TMPDIR": str(cwd / "tmp")})


def assert_passed_and_plotted(result: subprocess.CompletedProcess, png: Path) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    assert "PASS: at 0% down every call is answered validly by the real API" in result.stdout
    assert "PASS: without the simulator the valid share falls" in result.stdout
    assert "PASS: with the simulator the valid share stays flat" in result.stdout
    assert "FAIL" not in result.stdout
    assert png.read_bytes()[:8] == PNG_MAGIC


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_the_command_runs_on_its_built_in_queries_with_no_option_but_quick(tmp_path):
    result = stability("--quick", "--out", "plot/stability.png", "--data", "plot/stability.json", cwd=tmp_path)
    assert_passed_and_plotted(result, tmp_path / "plot" / "stability.png")
    assert result.stdout.startswith("built-in synthetic queries: 40 calls to 40 APIs of 20 tools; fault seed 0\n")
    # The curves as data, for the HTML report: every call valid at 0 % down, with and without the simulator.
    curves = json.loads((tmp_path / "plot" / "stability.json").read_text())
    assert [s["name"] for s in curves["series"]] == ["with simulator (schema)", "without simulator"]
    assert [x for x, _y in curves["series"][0]["points"]] == [0, 10, 20, 50]
    assert curves["series"][0]["points"][0][1] == curves["series"][1]["points"][0][1] == 100
    # The proxies' stores and the catalog are removed: only the plot is left behind.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plot", "tmp"]  # stability.png and .json in plot/
    assert list((tmp_path / "tmp").iterdir()) == []


@pytest.mark.integration
@pytest.mark.timeout(150)
def test_the_command_runs_on_a_stabletoolbench_query_file(tmp_path, stb_data):
    queries = stb_data / "solvable_queries" / "test_instruction" / "G1_instruction.json"
    result = stability("--quick", "--queries", str(queries), "--out", str(tmp_path / "g1.png"), cwd=tmp_path)
    assert_passed_and_plotted(result, tmp_path / "g1.png")
    assert result.stdout.startswith("G1_instruction.json: ")


@pytest.mark.parametrize("content,says", [
    ([{"query": "q", "api_list": []}], "q.json lists no API calls"),
    ([{"query": "q", "api_list": [{"tool_name": "t", "api_name": "a"}]}],
     "query [0] api_list[0] needs category_name, tool_name and api_name"),
    ({"not": "a list"}, "is not a StableToolBench query file"),
])
def test_a_query_file_it_cannot_use_is_one_error_line(tmp_path, content, says):
    (tmp_path / "q.json").write_text(json.dumps(content))
    result = stability("--queries", "q.json", cwd=tmp_path, timeout=60)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("stbproxy: error: ")
    assert says in result.stderr


def test_the_built_in_queries_are_a_valid_query_file_of_30_tools(tmp_path):
    path = tmp_path / "builtin.json"
    path.write_text(json.dumps(builtin_queries()))
    catalog = Catalog()
    report = catalog.load_query_file(path)
    assert (report.loaded, report.skipped) == (120, [])
    assert len(catalog) == 90
    assert len({call.tool_key for call in calls_of(builtin_queries())}) == 30
