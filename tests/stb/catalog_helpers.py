"""What the catalog tests share: a generated ToolBench docs folder (a tool's JSON file and its
APIs, written here) and a catalog loaded from one for TheClique and ROAC."""

import json
from pathlib import Path

import pytest

from stbproxy.stb.catalog import Catalog, standardize


def _write_tool(root: Path, category: str, tool_name: str, apis: list, stem=None, **extra) -> Path:
    path = root / "tools" / category / f"{stem or standardize(tool_name)}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"tool_name": tool_name, "tool_description": f"{tool_name} docs",
           "title": tool_name, "standardized_name": standardize(tool_name), "api_list": apis}
    doc.update(extra)
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def _api(name, url, method="GET", required=(), optional=()):
    def param(n):
        return {"name": n, "type": "STRING", "description": "", "default": ""}

    return {"name": name, "url": url, "method": method, "description": f"{name} docs",
            "required_parameters": [param(p) for p in required],
            "optional_parameters": [param(p) for p in optional]}


CLIQUE = "https://theclique.p.rapidapi.com"


@pytest.fixture
def clique_catalog(tmp_path):
    _write_tool(tmp_path, "Data", "TheClique", [
        _api("Songkick concert", CLIQUE + "/songkick/concert/{id_conc}", required=["id_conc"]),
        _api("Songkick festivals", CLIQUE + "/songkick/festivals"),
        _api("Songkick anything", CLIQUE + "/songkick/{kind}", required=["kind"]),
        _api("Transfermarkt search", CLIQUE + "/transfermarkt/search/{name}/", required=["name"]),
        _api("Upload", CLIQUE + "/upload", method="POST"),
    ])
    _write_tool(tmp_path, "Business_Software", "ROAC", [
        _api("/api/Auditores/roac/{roac}Sociedad",
             "https://roac.p.rapidapi.com/api/Auditores/roac/{roac}Sociedad", required=["roac"]),
    ])
    catalog = Catalog()
    report = catalog.load_tools_dir(tmp_path)  # the folder holding tools/ is accepted
    assert report.loaded == 6 and report.skipped == []
    return catalog
