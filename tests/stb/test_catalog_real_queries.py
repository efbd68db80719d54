"""The catalog against query files: every file loads without skips, every G1 API routes and
looks up to exactly one entry, and routing is fast enough for the request path. The tests take
``stb_data`` (tests/conftest.py): a small generated folder, and StableToolBench's real one when it
is there."""

import json
import time

from stbproxy.models import ApiRef
from stbproxy.stb.catalog import (
    Catalog,
    api_key_name,
    category_key,
    standardize,
    tool_key,
)
from tests.stb.catalog_helpers import _api, _write_tool
from tests.stb_samples import QUERIES

# --- the real query files ----------------------------------------------------------


def _g1_entries(stb_data):
    return [api for query in json.loads((stb_data / QUERIES / "G1_instruction.json").read_text(encoding="utf-8"))
            for api in query["api_list"]]


def test_all_query_files_load_without_skips(stb_data):
    catalog = Catalog()
    QUERY_DIR = stb_data / QUERIES
    assert len(sorted(QUERY_DIR.glob("G*_*.json"))) == 6
    for path in sorted(QUERY_DIR.glob("G*_*.json")):
        report = catalog.load_query_file(path)
        assert report.skipped == [], path.name
        assert report.loaded > 0
    # The same API recurs across queries and groups; it is one entry each time.
    originals = {(a["category_name"], a["tool_name"], a["api_name"])
                 for path in QUERY_DIR.glob("G*_*.json")
                 for q in json.loads(path.read_text(encoding="utf-8")) for a in q["api_list"]}
    assert len(catalog) == len(originals)
    for doc in catalog:
        assert len(doc.function_name) <= 64


def test_every_g1_api_routes_and_looks_up_to_exactly_one_entry(tmp_path, stb_data):
    G1_INSTRUCTION = stb_data / QUERIES / "G1_instruction.json"
    entries = _g1_entries(stb_data)
    # Generate a ToolBench docs folder for the same APIs: one host per tool, and a
    # {param} segment for each API that has required parameters.
    tools: dict[tuple[str, str], list] = {}
    urls = {}
    for a in entries:
        cat, tool, name = a["category_name"], a["tool_name"], a["api_name"]
        host = f"{standardize(tool)}-{cat}".lower().replace("_", "-") + ".p.rapidapi.com"
        path = "/" + api_key_name(name)
        if a["required_parameters"]:
            path += "/{" + a["required_parameters"][0]["name"] + "}"
        doc_apis = tools.setdefault((cat, tool), [])
        if all(d["name"] != name for d in doc_apis):
            doc_apis.append(_api(name, f"https://{host}{path}", a["method"]))
            urls[(cat, tool, name)] = (a["method"], f"https://{host}{path}")
    for (cat, tool), apis in tools.items():
        _write_tool(tmp_path, cat, tool, apis)

    catalog = Catalog()
    docs_report = catalog.load_tools_dir(tmp_path / "tools")
    query_report = catalog.load_query_file(G1_INSTRUCTION)
    assert docs_report.skipped == [] and query_report.skipped == []
    assert len(catalog) == len(urls)

    seen = set()
    for a in entries:
        cat, tool, name = a["category_name"], a["tool_name"], a["api_name"]
        doc = catalog.lookup(cat, tool, name)
        assert doc is not None, (cat, tool, name)
        assert doc.ref == ApiRef(category_key(cat), tool_key(tool, cat), api_key_name(name))
        # what StableToolBench's client sends: standardized tool, api key
        assert catalog.lookup(cat, standardize(tool), api_key_name(name)) is doc
        # the merge kept the doc's URL and the query file's template
        assert doc.url == urls[(cat, tool, name)][1]
        # ({} says nothing, so it does not count as a template)
        assert doc.template_response == (a.get("template_response") or None)
        method, url = urls[(cat, tool, name)]
        match = catalog.route(method, url.replace("{", "v-").replace("}", ""), ())
        assert match is not None and match.doc is doc
        seen.add(doc.ref)
    assert len(seen) == len(urls)  # no two named APIs share an entry


def test_routing_is_fast_enough_for_the_request_path(tmp_path, stb_data):
    catalog = Catalog()
    catalog.load_query_file(stb_data / QUERIES / "G1_instruction.json")
    many = [_api(f"Endpoint {i}", f"https://big.p.rapidapi.com/v1/item{i}/{{id}}") for i in range(40)]
    _write_tool(tmp_path, "Data", "Big", many)
    catalog.load_tools_dir(tmp_path)
    catalog.route("GET", "https://big.p.rapidapi.com/v1/item0/1", ())  # builds the table
    start = time.perf_counter()
    for _ in range(5_000):
        match = catalog.route("GET", "https://big.p.rapidapi.com/v1/item39/abc", ())
    per_call = (time.perf_counter() - start) / 5_000
    assert match.doc.api == "Endpoint 39" and match.path_params == {"id": "abc"}
    assert per_call < 200e-6  # typically a few microseconds
