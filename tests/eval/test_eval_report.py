"""Report layout (paper order, mean±std), files, chart; and the import rules of stbeval."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import stbeval
from stbeval import report
from stbeval.errors import InputError
from tests.eval.helpers import table_rows


def pass_summary(method, values):
    groups = [{"group": g, "mean": m, "std": s, "runs": [m / 100] * 3, "queries": 10,
               "counts": {"Solved": 1, "unscored": 2}} for g, (m, s) in values.items()]
    return {"kind": "pass_rate", "method": method, "rounds": 3, "missing": "unsolved", "groups": groups,
            "average": {"group": "Average", "mean": 50.04, "std": 1.06, "runs": [0.5] * 3, "queries": 20,
                        "counts": {"Solved": 2, "unscored": 4}}, "judge": {}, "problems": []}


def test_cells_use_one_decimal():
    assert report.cell(46.6123, 1.26) == "46.6±1.3"
    assert report.cell(100.0, 0.0) == "100.0±0.0"
    assert report.cell(None, None) == "n/a" and report.cell(40.0) == "40.0"


def test_groups_in_paper_order_with_average_last():
    assert report.ordered_groups(["G3_instruction", "custom", "G1_tool", "G1_instruction"]) == [
        "G1_instruction", "G1_tool", "G3_instruction", "custom"]
    text = report.render([pass_summary("cot", {"G2_category": (40.0, 2.0), "G1_instruction": (60.0, 0.44)}),
                          pass_summary("dfs", {"G1_instruction": (70.0, 1.0)})])
    rows = table_rows(text)
    assert rows[0] == ["Method", "G1_instruction", "G2_category", "Average"]
    assert rows[1] == ["cot", "60.0±0.4", "40.0±2.0", "50.0±1.1"]
    assert rows[2] == ["dfs", "70.0±1.0", "", "50.0±1.1"]


def test_run_files_and_counts_table(tmp_path):
    summary = pass_summary("cot", {"G1_tool": (40.0, 2.0), "G1_category": (60.0, 0.0)})
    text = report.write_run(tmp_path, summary)
    assert (tmp_path / "table.md").read_text() == text
    assert (tmp_path / "table.csv").read_text() == ("Method,G1_category,G1_tool,Average\n"
                                                    "cot,60.0±0.0,40.0±2.0,50.0±1.1\n")
    scores = (tmp_path / "scores.csv").read_text().splitlines()
    assert scores[0].startswith("method,group,mean,std,queries,run_0,run_1,run_2,Solved")
    assert scores[1].startswith("cot,G1_tool,40.0000,2.0000,10,40.0000")
    assert ["Total", "20", "2", "0", "0", "4", "0", "0"] in table_rows(text)  # unscored has its own column
    assert report.load_summary(tmp_path) == summary


def test_chart_is_a_png_with_one_series_per_method(tmp_path):
    path = report.bar_chart([pass_summary("a", {"G1_tool": (40.0, 2.0)}), pass_summary("b", {"G1_tool": (50.0, 1.0)})],
                            tmp_path / "c.png")
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 5000
    with pytest.raises(InputError, match="no pass-rate runs"):
        report.bar_chart([], tmp_path / "d.png")


def test_load_summary_refuses_other_files(tmp_path):
    (tmp_path / "summary.json").write_text('{"kind": "other"}')
    with pytest.raises(InputError, match="not an stbeval run summary"):
        report.load_summary(tmp_path)


PACKAGE = Path(stbeval.__file__).parent


def imports_of(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_stbeval_never_imports_the_proxy_and_keeps_foreign_libraries_at_their_edge():
    owners = {"openai": {"judge.py"}, "click": {"cli"}, "vcr": {"cassettes.py"}, "matplotlib": {"report.py"}}
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) >= 12
    for module in modules:
        used = imports_of(module)
        assert "stbproxy" not in used, f"{module.name} imports the proxy side"
        for library, allowed in owners.items():
            if library in used:  # a module, or a package whose modules may all
                owner = module.relative_to(PACKAGE).parts[0]
                assert owner in allowed, f"{module.relative_to(PACKAGE)} imports {library}"
