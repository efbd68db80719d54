import ast
import json
import time
from pathlib import Path

import pytest

from stbproxy.errors import InputError
from stbproxy.models import ApiRef
from stbproxy.stb.catalog import (
    ApiDoc,
    Catalog,
    Param,
    api_key_name,
    called_api_key,
    category_key,
    change_name,
    function_name,
    standardize,
    tool_key,
)
from tests.stb_samples import QUERIES, is_sample

REPO_ROOT = Path(__file__).resolve().parents[2]
# Tests of query files take ``stb_data`` (tests/conftest.py): a small generated folder, and
# StableToolBench's real one when it is there.


# --- names: expected values worked out by hand from STB_FORMATS.md section 1 ---------

# Real tool and API names from the query files, plus a few made-up ones (marked) for
# rules no real name exercises (CJK, "^", reserved words).
@pytest.mark.parametrize(
    "name, expected",
    [
        ("TheClique", "theclique"),
        ("Songkick concert", "songkick_concert"),
        ("Reqres - dont change!", "reqres_dont_change"),
        ("Trending (music, gaming, news, movies)", "trending_music_gaming_news_movies"),
        ("Token Scanner Multichain | Honeypot Checker Multichain",
         "token_scanner_multichain_honeypot_checker_multichain"),
        ("/{orgCode}/accounts/{accountId}/cards", "orgcode_accounts_accountid_cards"),
        ("/quotes/postcode/correo_argentino/:weight/:postCodeSrc/:postCodeDst",
         "quotes_postcode_correo_argentino_weight_postcodesrc_postcodedst"),
        ("[Embedded signing] Get role ids", "embedded_signing_get_role_ids"),
        ("Is valid?", "is_valid"),
        ("Zoopla_v2", "zoopla_v2"),
        # leading digits get "get_"
        ("1. Shoot thumbnail", "get_1_shoot_thumbnail"),
        ("10 interesting quotes", "get_10_interesting_quotes"),
        ("3.Getestimatedprice", "get_3_getestimatedprice"),
        ("F1 drivers quotes", "f1_drivers_quotes"),
        # non-ASCII letters and emoji become "_", then runs collapse and ends strip
        ("Akaryakıt", "akaryak_t"),
        ("Döviz", "d_viz"),
        ("Çiçeksepeti Data", "i_eksepeti_data"),
        ("Números a Letras", "n_meros_a_letras"),
        ("👋 Demo Project_v13", "demo_project_v13"),
        ("🚀 Cheap YouTube API 🔥", "cheap_youtube_api"),
        # made up: CJK ideographs survive, kana do not; "^" survives
        ("東京 Weather", "東京_weather"),
        ("ひらがな", ""),
        ("x^2 + y", "x^2_y"),
        ("__Hello___World__", "hello_world"),
        ("", ""),
    ],
)
def test_standardize(name, expected):
    assert standardize(name) == expected
    assert standardize(expected) == expected  # standardized names stay as they are


@pytest.mark.parametrize(
    "api_name, expected",
    [
        ("Songkick concert", "songkick_concert"),
        ("/v1/animals", "v1_animals"),
        ("Get User Orders", "get_user_orders"),
        ("10 interesting quotes", "get_10_interesting_quotes"),
        # made up: reserved words, after standardizing
        ("ID", "is_id"),
        ("/id", "is_id"),
        ("From", "is_from"),
        ("class", "is_class"),
        ("Return", "is_return"),
        ("False", "is_false"),
        ("true", "is_true"),
        ("And", "is_and"),
        ("identity", "identity"),
        ("Class Info", "class_info"),
    ],
)
def test_api_key_name(api_name, expected):
    assert api_key_name(api_name) == expected


def test_change_name_only_touches_exact_reserved_words():
    assert change_name("id") == "is_id"
    assert change_name("ID") == "ID"  # change_name alone does not lower-case
    assert change_name("ids") == "ids"


@pytest.mark.parametrize(
    "category, expected",
    [
        ("Data", "Data"),
        ("Artificial_Intelligence_Machine_Learning", "Artificial_Intelligence_Machine_Learning"),
        ("eCommerce", "eCommerce"),  # case is kept
        ("Business Software", "Business_Software"),
        ("Health, Fitness", "Health_Fitness"),
        # one pass of "__" -> "_": three underscores end as two
        ("Artificial Intelligence / Machine Learning", "Artificial_Intelligence__Machine_Learning"),
    ],
)
def test_category_key(category, expected):
    assert category_key(category) == expected


@pytest.mark.parametrize(
    "tool, category, expected",
    [
        ("TheClique", "Data", "theclique_for_Data"),
        ("👋 Demo Project", "Events", "demo_project_for_Events"),
        ("Çiçeksepeti Data", "eCommerce", "i_eksepeti_data_for_eCommerce"),
        ("F1 drivers quotes", "Sports", "f1_drivers_quotes_for_Sports"),
        ("Pagepeeker", "Tools", "pagepeeker_for_Tools"),
        # already a tool key: not suffixed twice
        ("theclique_for_Data", "Data", "theclique_for_Data"),
        ("AI-writer", "Artificial_Intelligence_Machine_Learning",
         "ai_writer_for_Artificial_Intelligence_Machine_Learning"),
    ],
)
def test_tool_key(tool, category, expected):
    assert tool_key(tool, category) == expected


@pytest.mark.parametrize(
    "api, tool, expected",
    [
        ("Songkick concert", "TheClique", "songkick_concert_for_theclique"),
        ("10 interesting quotes", "F1 drivers quotes", "get_10_interesting_quotes_for_f1_drivers_quotes"),
        ("Me", "👋 Demo Project_v2", "me_for_demo_project_v2"),
        # 105 characters in full: only the last 64 are kept
        ("Currency Converter With Forecast and Historical Data",
         "Forecast crypto and fiat currency exchange rates",
         "orical_data_for_forecast_crypto_and_fiat_currency_exchange_rates"),
    ],
)
def test_function_name(api, tool, expected):
    assert function_name(api, tool) == expected
    assert len(expected) <= 64


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


# --- parameter names: documented <-> standardized (issue: real calls carry documented names) ----

TEAM = ApiDoc(category="Sports", tool="Loop Ball", api="Team players", url="https://loop-ball.p.rapidapi.com/team",
              method="GET", required_parameters=(Param("id"), Param("from")),
              optional_parameters=(Param("playerId"), Param("season")))


def test_doc_keeps_the_mapping_between_documented_and_standardized_parameter_names():
    assert TEAM.key_names == {"id": "is_id", "from": "is_from", "playerId": "playerid"}
    assert TEAM.wire_names == {"is_id": "id", "is_from": "from", "playerid": "playerId"}
    # keys: standardized names whichever spelling arrives; unlisted names as given
    assert TEAM.key_args({"id": 1, "from": "a", "playerId": "p", "season": 2, "Extra-Thing": 3}) == \
        {"is_id": 1, "is_from": "a", "playerid": "p", "season": 2, "Extra-Thing": 3}
    assert TEAM.key_args({"is_id": 1, "playerid": "p"}) == {"is_id": 1, "playerid": "p"}
    # a clash: the standardized spelling wins, in either order
    assert TEAM.key_args({"playerid": "std", "playerId": "doc"}) == {"playerid": "std"}
    assert TEAM.key_args({"playerId": "doc", "playerid": "std"}) == {"playerid": "std"}
    # the wire: documented names; a documented spelling or an unlisted name passes as given
    assert TEAM.wire_args({"is_id": 1, "is_from": "a", "playerid": "p", "season": 2, "playerId": "q", "x_y": 0}) == \
        {"id": 1, "from": "a", "playerId": "q", "season": 2, "x_y": 0}


def test_parameter_mapping_survives_save_and_load(tmp_path):
    Catalog([TEAM]).save(tmp_path / "c.json")
    saved = json.loads((tmp_path / "c.json").read_text())["apis"][0]
    assert saved["parameter_keys"] == {"id": "is_id", "from": "is_from", "playerId": "playerid"}
    (loaded,) = Catalog.load(tmp_path / "c.json")
    assert loaded.wire_names == TEAM.wire_names and loaded.key_names == TEAM.key_names


def test_how_many_parameter_names_change_under_standardization_in_the_real_queries(stb_data):
    catalog = Catalog()
    for group in ("G1_instruction", "G2_category"):
        assert catalog.load_query_file(stb_data / QUERIES / f"{group}.json").skipped == []
    params = [p for doc in catalog for p in doc.required_parameters + doc.optional_parameters]
    changed_apis = [doc for doc in catalog if doc.key_names]
    changed_params = sum(1 for p in params if api_key_name(p.name) != p.name)
    if is_sample(stb_data):  # the sample's renamed parameters, worked out by hand
        renamed = {p.name: api_key_name(p.name) for p in params if api_key_name(p.name) != p.name}
        assert renamed == {"id": "is_id", "from": "is_from", "accountId": "accountid", "pageSize": "pagesize",
                           "return": "is_return", "checkIn": "checkin", "class": "is_class"}
        assert (len(changed_apis), changed_params) == (5, 8)
    else:
        assert (len(catalog), len(changed_apis), changed_params, len(params)) == (1250, 309, 440, 2148)


def test_standardized_names_are_those_in_the_function_schemas_stabletoolbench_shows_agents(stb_data):
    """The schemas StableToolBench's own pipeline wrote into its answers name each function
    and parameter as the catalog does: function names resolve to the API, and the
    parameters are the doc's key names."""
    G1_INSTRUCTION = stb_data / QUERIES / "G1_instruction.json"
    PIPELINE_ANSWERS = stb_data / "pipeline_answers_tool_calls" / "G1_instruction"
    catalog = Catalog()
    catalog.load_query_file(G1_INSTRUCTION)
    queries = {str(q["query_id"]): q for q in json.loads(G1_INSTRUCTION.read_text())}
    checked = renames = 0
    for answer_file in sorted(PIPELINE_ANSWERS.glob("*.json")):
        generation = json.loads(answer_file.read_text())["answer_generation"]
        query = queries[answer_file.name.split("_")[0]]
        by_function = {function_name(a["api_name"], a["tool_name"]): a for a in query["api_list"]}
        for schema in generation["function"]:
            function = schema["function"]
            if function["name"] == "Finish":
                continue
            entry = by_function[function["name"]]
            doc = catalog.lookup(entry["category_name"], standardize(entry["tool_name"]), function["name"])
            assert doc is not None and doc.ref.api == api_key_name(entry["api_name"]), function["name"]
            # (StableToolBench lists optional parameters only when there are required ones)
            shown = doc.required_parameters + (doc.optional_parameters if doc.required_parameters else ())
            renamed = doc.key_args(dict.fromkeys(p.name for p in shown))
            assert set(function["parameters"]["properties"]) == set(renamed), function["name"]
            checked += 1
            renames += any(p.name in doc.key_names for p in shown)
    assert (checked, renames) == ((8, 4) if is_sample(stb_data) else (77, 24))


def test_api_names_are_matched_as_stabletoolbench_matches_them(clique_catalog):
    doc = clique_catalog.lookup("Data", "TheClique", "Songkick concert")
    # the whole function name agents are shown, with the standardized or original tool name
    assert clique_catalog.lookup("Data", "theclique", "songkick_concert_for_theclique") is doc
    assert clique_catalog.lookup("Data", "TheClique", "songkick_concert_for_theclique") is doc
    assert called_api_key("songkick_concert_for_theclique", "theclique", "Data") == "songkick_concert"
    assert called_api_key("Chat With User", "theclique", "Data") == "chat_with_user"
    assert called_api_key("chat_with_user_for_theclique", "TheClique", "Data") == "chat_with_user"
    assert called_api_key("is_id_for_theclique", "theclique_for_Data", "Data") == "is_id"
    assert called_api_key("songkick_concert", "", "Data") == "songkick_concert"


def test_function_names_cut_to_64_characters_resolve_through_the_catalog():
    long_api = "Get the list of all upcoming concerts in a very particular city"
    doc = ApiDoc(category="Data", tool="TheClique", api=long_api, method="GET")
    catalog = Catalog([doc])
    shown = doc.function_name
    assert len(shown) == 64 and not shown.startswith(api_key_name(long_api)[:5])
    assert catalog.lookup("Data", "theclique", shown) is doc
