"""What `stbproxy serve` checks and says before it is ready, through the installed command:
each store's own catalog (brought in from its old place beside the store), a replay of
nothing refused, and where real /virtual calls will go."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stbproxy.catalog import ApiDoc, Catalog
from stbproxy.serve_process import ServeProcess
from tests.test_cli_process import stbproxy

pytestmark = pytest.mark.integration


def ready_line(proxy: ServeProcess) -> str:
    return next(line for line in proxy.output if " listening on http://" in line)


def write_tools(root: Path, urls: dict[str, str]) -> Path:
    """A ToolBench tools folder: one tool of category Data whose APIs are ``{name: url}``."""
    folder = root / "tools" / "Data"
    folder.mkdir(parents=True)
    doc = {"tool_name": "Sample", "tool_description": "", "api_list": [
        {"name": name, "url": url, "method": "GET", "description": "", "required_parameters": [],
         "optional_parameters": []} for name, url in urls.items()]}
    (folder / "sample.json").write_text(json.dumps(doc))
    return root / "tools"


def old_catalog(folder: Path, apis: int) -> Path:
    """A catalog where earlier versions kept it: beside the store, in the store's parent folder."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "catalog.json"
    Catalog([ApiDoc(category="Data", tool="Old", api=f"api {n}", url=f"http://old.example/{n}", method="GET")
             for n in range(apis)]).save(path)
    return path


def make_store(path: Path) -> Path:
    """A store as a recording leaves it (an import of nothing creates it)."""
    result = stbproxy("import", "cassette", str(Path(__file__).parent.parent / "cassettes" / "weather_oslo.yaml"),
                      "--store", str(path))
    assert result.returncode == 0, result.stderr
    return path


# -- 6: each store has its own catalog --------------------------------------------------------------


def test_import_tools_writes_into_the_store_and_a_sibling_store_does_not_see_it(tmp_path):
    tools = write_tools(tmp_path / "docs", {"forecast": "http://api.example/forecast"})
    runs = tmp_path / "runs"
    imported = stbproxy("import", "tools", str(tools), "--store", str(runs / "a"))
    assert imported.returncode == 0, imported.stderr
    assert (runs / "a" / "catalog.json").is_file() and not (runs / "catalog.json").exists()
    assert f"catalog {runs / 'a' / 'catalog.json'}: 1 APIs" in imported.stdout

    with ServeProcess(runs / "a") as own, ServeProcess(runs / "b") as sibling:
        mine, theirs = ready_line(own), ready_line(sibling)
    assert f"store {runs / 'a'}, catalog {runs / 'a' / 'catalog.json'} (1 APIs)" in mine
    assert f"store {runs / 'b'}, no catalog" in theirs


def test_a_catalog_in_the_old_place_is_moved_into_the_store_with_a_notice(tmp_path):
    store = make_store(tmp_path / "run" / "store")
    old = old_catalog(tmp_path / "run", apis=3)
    with ServeProcess(store) as proxy:
        said = "".join(proxy.output)
    new = store / "catalog.json"
    assert f"catalog moved from {old} to {new}" in said
    assert f"catalog {new} (3 APIs)" in ready_line(proxy)
    assert new.is_file() and not old.exists()


def test_an_old_catalog_shared_by_sibling_stores_is_copied_until_the_last_takes_it(tmp_path):
    first, second = make_store(tmp_path / "runs" / "a"), make_store(tmp_path / "runs" / "b")
    old = old_catalog(tmp_path / "runs", apis=2)
    tools = write_tools(tmp_path / "docs", {"forecast": "http://api.example/forecast"})

    copied = stbproxy("import", "tools", str(tools), "--store", str(first))  # 'import tools' adopts it first
    assert copied.returncode == 0, copied.stderr
    assert f"catalog copied from {old} to {first / 'catalog.json'}" in copied.stderr
    assert "1 other store(s)" in copied.stderr and old.exists()
    assert f"catalog {first / 'catalog.json'}: 3 APIs (1 new)" in copied.stdout  # the old two, and the new one

    with ServeProcess(second) as proxy:  # the last store beside it: moved
        said = "".join(proxy.output)
    assert f"catalog moved from {old} to {second / 'catalog.json'}" in said
    assert f"catalog {second / 'catalog.json'} (2 APIs)" in ready_line(proxy)
    assert not old.exists()
