"""The catalog of API docs: an ApiDoc's keys, dict round trip and merging; ToolBench docs folders
loaded (bad docs and query files reported and skipped), calls routed by URL or RapidAPI host
header, lookups by original or key names, save and load; and the catalog modules kept pure."""

import ast
import json
from pathlib import Path

import pytest

from stbproxy.errors import InputError
from stbproxy.models import ApiRef
from stbproxy.stb.catalog import (
    ApiDoc,
    Catalog,
    Param,
)
from tests.stb.catalog_helpers import CLIQUE, _api, _write_tool, clique_catalog  # noqa: F401

REPO_ROOT = Path(__file__).resolve().parents[2]


# --- ApiDoc ------------------------------------------------------------------------


def _clique_doc(**overrides):
    fields = dict(
        category="Data",
        tool="TheClique",
        api="Songkick concert",
        url="https://theclique.p.rapidapi.com/songkick/concert/{id_conc}",
        method="get",
        tool_description="Concerts and football data",
        api_description="Concert info",
        required_parameters=(Param("id_conc", "STRING", "", "40698227-lumineers"),),
    )
    fields.update(overrides)
    return ApiDoc(**fields)


def test_apidoc_derives_keys_and_normalizes_method():
    doc = _clique_doc()
    assert doc.ref == ApiRef("Data", "theclique_for_Data", "songkick_concert")
    assert doc.method == "GET"
    assert doc.function_name == "songkick_concert_for_theclique"


def test_apidoc_dict_round_trip():
    doc = _clique_doc(template_response={"date": "str", "line_up": [{"name": "str"}]})
    data = json.loads(json.dumps(doc.to_dict()))
    assert data["keys"] == {"category": "Data", "tool": "theclique_for_Data", "api": "songkick_concert"}
    assert ApiDoc.from_dict(data) == doc


def test_apidoc_from_dict_names_the_missing_field():
    with pytest.raises(InputError, match="'tool'"):
        ApiDoc.from_dict({"category": "Data", "api": "x"})


def test_merged_fills_gaps_and_keeps_what_is_known():
    from_doc = _clique_doc()
    from_query = ApiDoc("Data", "TheClique", "Songkick concert", method="GET",
                        api_description="Concert info (query file)",
                        template_response={"date": "str"})
    merged = from_doc.merged(from_query)
    assert merged.url == from_doc.url
    assert merged.template_response == {"date": "str"}
    assert merged.api_description == "Concert info"  # the first non-empty value wins
    assert from_query.merged(from_doc).url == from_doc.url


# --- generated ToolBench docs ------------------------------------------------------


@pytest.mark.parametrize(
    "method, url, api, params",
    [
        ("GET", CLIQUE + "/songkick/concert/40698227-lumineers?x=1", "Songkick concert",
         {"id_conc": "40698227-lumineers"}),
        ("get", CLIQUE + "/songkick/concert/abc/", "Songkick concert", {"id_conc": "abc"}),
        # an exact path wins over a template that also matches
        ("GET", CLIQUE + "/songkick/festivals", "Songkick festivals", {}),
        ("GET", CLIQUE + "/songkick/artists", "Songkick anything", {"kind": "artists"}),
        # percent-encoding is undone before matching
        ("GET", CLIQUE + "/transfermarkt/search/lionel%20messi", "Transfermarkt search",
         {"name": "lionel messi"}),
        ("POST", CLIQUE + "/upload", "Upload", {}),
        ("GET", "https://ROAC.p.rapidapi.com/api/Auditores/roac/B12345Sociedad",
         "/api/Auditores/roac/{roac}Sociedad", {"roac": "B12345"}),
    ],
)
def test_route_by_url(clique_catalog, method, url, api, params):
    match = clique_catalog.route(method, url, ())
    assert match is not None
    assert match.doc.api == api
    assert dict(match.path_params) == params


@pytest.mark.parametrize(
    "method, url",
    [
        ("GET", CLIQUE + "/upload"),  # POST only
        ("GET", CLIQUE + "/songkick/concert/1/extra"),  # a template parameter is one segment
        ("GET", CLIQUE + "/unknown"),
        ("GET", "https://other.p.rapidapi.com/songkick/festivals"),
        ("GET", "not a url"),
    ],
)
def test_route_unmapped_is_none(clique_catalog, method, url):
    assert clique_catalog.route(method, url, ()) is None


@pytest.mark.parametrize(
    "headers",
    [
        (("X-RapidAPI-Host", "theclique.p.rapidapi.com"),),
        (("x-rapidapi-host", "TheClique.P.RapidAPI.com"),),
        {"X-RAPIDAPI-HOST": "theclique.p.rapidapi.com:443"},
    ],
)
def test_route_by_rapidapi_host_header(clique_catalog, headers):
    # A gateway or local relay URL: only the header says which tool is meant.
    match = clique_catalog.route("GET", "http://127.0.0.1:8080/songkick/concert/42", headers)
    assert match is not None
    assert match.doc.ref == ApiRef("Data", "theclique_for_Data", "songkick_concert")
    assert match.path_params == {"id_conc": "42"}


def test_route_header_does_not_rescue_an_unknown_host_or_path(clique_catalog):
    assert clique_catalog.route("GET", "http://127.0.0.1/songkick/concert/42", ()) is None
    assert clique_catalog.route(
        "GET", "http://127.0.0.1/songkick/concert/42", (("X-RapidAPI-Host", "nope.p.rapidapi.com"),)
    ) is None
    assert clique_catalog.route(
        "GET", "http://127.0.0.1/missing", (("X-RapidAPI-Host", "theclique.p.rapidapi.com"),)
    ) is None


def test_lookup_and_apis_of_tool_by_original_or_key_names(clique_catalog):
    doc = clique_catalog.lookup("Data", "TheClique", "Songkick concert")
    assert doc is not None and doc.url.endswith("{id_conc}")
    assert clique_catalog.lookup("Data", "theclique", "songkick_concert") is doc
    assert clique_catalog.lookup("Data", "theclique_for_Data", "songkick_concert") is doc
    assert clique_catalog.lookup("Data", "TheClique", "Songkick nothing") is None
    assert clique_catalog.lookup("Sports", "TheClique", "Songkick concert") is None
    names = [d.api for d in clique_catalog.apis_of_tool("Data", "TheClique")]
    assert names == ["Songkick concert", "Songkick festivals", "Songkick anything",
                     "Transfermarkt search", "Upload"]
    assert len(clique_catalog.apis_of_tool("Data", "theclique_for_Data")) == 5
    assert clique_catalog.apis_of_tool("Data", "Nobody") == []


def test_bad_docs_are_reported_and_skipped(tmp_path):
    tools = tmp_path / "tools"
    _write_tool(tmp_path, "Data", "Mixed Bag", [
        _api("Good one", "https://mixed.p.rapidapi.com/good"),
        {"name": "No url", "method": "GET"},
        _api("Relative url", "/v1/relative"),
        _api("Good-One", "https://mixed.p.rapidapi.com/again"),  # same key as "Good one"
        {"url": "https://mixed.p.rapidapi.com/nameless", "method": "GET"},
        "not an object",
        dict(_api("Bad params", "https://mixed.p.rapidapi.com/p"), required_parameters=[{"type": "x"}]),
    ])
    (tools / "Data" / "broken.json").write_text("{not json", encoding="utf-8")
    (tools / "Data" / "latin1.json").write_bytes('{"tool_name": "Caf\xe9"}'.encode("latin-1"))
    (tools / "Data" / "list.json").write_text("[]", encoding="utf-8")
    (tools / "Data" / "folder.json").mkdir()  # matches the pattern but cannot be read
    (tools / "Data" / "no_name.json").write_text(json.dumps({"api_list": []}), encoding="utf-8")
    (tools / "Data" / "no_list.json").write_text(json.dumps({"tool_name": "X"}), encoding="utf-8")

    catalog = Catalog()
    report = catalog.load_tools_dir(tools)
    assert report.loaded == 1
    assert [d.api for d in catalog] == ["Good one"]
    reasons = {(Path(s.file).name, s.reason.split(":")[0]) for s in report.skipped}
    mixed = "mixed_bag.json"
    assert reasons == {
        ("broken.json", "not JSON"),
        ("latin1.json", "unreadable"),
        ("folder.json", "unreadable"),
        ("list.json", "not a JSON object"),
        ("no_name.json", "missing field 'tool_name'"),
        ("no_list.json", "missing field 'api_list'"),
        (mixed, "api_list[1]"),
        (mixed, "api_list[2] ('Relative url')"),
        (mixed, "api_list[3]"),
        (mixed, "api_list[4]"),
        (mixed, "api_list[5]"),
        (mixed, "api_list[6]"),
    }
    by_entry = {s.reason.split(":")[0]: s.reason for s in report.skipped if s.file.endswith(mixed)}
    assert "missing field 'url'" in by_entry["api_list[1]"]
    assert "URL has no host" in by_entry["api_list[2] ('Relative url')"]
    assert "duplicate API name 'Good-One'" in by_entry["api_list[3]"]
    assert "missing field 'name'" in by_entry["api_list[4]"]
    assert "parameter without a name" in by_entry["api_list[6]"]


def test_second_doc_with_another_url_for_the_same_api_is_reported(tmp_path):
    _write_tool(tmp_path, "Data", "TheClique", [_api("Songkick concert", CLIQUE + "/a")])
    other = _write_tool(tmp_path, "Data", "THECLIQUE!", [_api("Songkick concert", CLIQUE + "/b")],
                        stem="zz_theclique_copy")
    catalog = Catalog()
    report = catalog.load_tools_dir(tmp_path)
    assert report.loaded == 1
    assert len(report.skipped) == 1 and report.skipped[0].file == str(other)
    assert "already documented" in report.skipped[0].reason
    assert catalog.lookup("Data", "TheClique", "Songkick concert").url == CLIQUE + "/a"


def test_missing_tools_folder_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="not a folder of tool docs"):
        Catalog().load_tools_dir(tmp_path / "absent")


@pytest.mark.parametrize(
    "content, reason",
    [
        ("{", "not JSON"),
        ('{"query": "x"}', "not a JSON list of queries"),
        ('[{"api_list": [{"category_name": "Data", "tool_name": "T"}]}]', "missing field 'api_name'"),
        ('[{"query": "no list"}]', "missing field 'api_list'"),
    ],
)
def test_bad_query_files_are_reported(tmp_path, content, reason):
    path = tmp_path / "G9_bad.json"
    path.write_text(content, encoding="utf-8")
    report = Catalog().load_query_file(path)
    assert report.loaded == 0
    assert len(report.skipped) == 1 and reason in report.skipped[0].reason
    assert report.skipped[0].file == str(path)


def test_save_and_load_round_trip(clique_catalog, tmp_path):
    path = tmp_path / "catalog.json"
    clique_catalog.save(path)
    loaded = Catalog.load(path)
    assert len(loaded) == len(clique_catalog) == 6
    assert list(loaded) == list(clique_catalog)
    match = loaded.route("GET", CLIQUE + "/songkick/concert/7", ())
    assert match.doc.api == "Songkick concert" and match.path_params == {"id_conc": "7"}


@pytest.mark.parametrize(
    "content, message",
    [
        ("nope", "cannot read catalog"),
        ('{"format": "other"}', "not an stbproxy catalog"),
        ('{"format": "stbproxy-catalog", "version": 99, "apis": []}', "unsupported catalog version"),
        ('{"format": "stbproxy-catalog", "version": 1, "apis": [{"category": "Data"}]}', r"apis\[0\]"),
    ],
)
def test_load_rejects_bad_catalog_files(tmp_path, content, message):
    path = tmp_path / "catalog.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=message):
        Catalog.load(path)


CATALOG_MODULES = ["catalog.py", "api_doc.py", "routes.py", "tool_docs.py"]


@pytest.mark.parametrize("module", CATALOG_MODULES + ["validity.py"])
def test_pure_modules_import_only_stdlib_models_and_errors(module):
    source = (REPO_ROOT / "stbproxy" / "stb" / module).read_text(encoding="utf-8")
    imported = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
            if node.module in ("stbproxy", "stbproxy.stb"):
                imported |= {f"{node.module}.{a.name}" for a in node.names}
    local = {m for m in imported if m.startswith("stbproxy.")} - {"stbproxy.stb"}
    catalog_modules = {f"stbproxy.stb.{m.removesuffix('.py')}" for m in CATALOG_MODULES}
    assert local <= {"stbproxy.models", "stbproxy.errors", "stbproxy.jsonsafe"} | catalog_modules
    assert not imported & {"mitmproxy", "rocksdict", "openai", "click", "httpx", "requests"}
