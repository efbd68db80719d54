"""Parameter names, documented and standardized: an ApiDoc keeps the mapping both ways (keys
take standardized names, the wire documented ones), the mapping survives save and load, and the
query files (``stb_data``, tests/conftest.py) and StableToolBench's own function schemas use the
names the catalog does."""

import json

from stbproxy.stb.catalog import (
    ApiDoc,
    Catalog,
    Param,
    api_key_name,
    function_name,
    standardize,
)
from tests.stb_samples import QUERIES, is_sample

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
