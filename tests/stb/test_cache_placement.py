"""Which folders and files of a StableToolBench cache requests can reach (cache_placement):
never a false alarm for a name the proxy can compute, and for each misnamed one a
suggestion that a request does reach."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stbproxy.keys import DEFAULT_RULES
from stbproxy.models import ApiRef
from stbproxy.stb.catalog import ApiDoc, Catalog
from stbproxy.stb.traffic import StableToolBench
from stbproxy.stb.virtual_calls import VirtualRequest, VirtualUpstream
from stbproxy.stb_cache.placement import check
from tests.stb_samples import is_sample

G1 = "solvable_queries/test_instruction/G1_instruction.json"


def cache_of(root, *relative_paths):
    for relative in relative_paths:
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"{'q': 1}": {"error": "", "response": "ok"}}))
    return sorted(root.glob("*/*/*.json"))


def virtual_ref(category: str, tool: str, api: str, catalog: Catalog | None = None) -> ApiRef:
    """The API a /virtual call with these names is keyed under, as the proxy computes it."""
    return StableToolBench(catalog, VirtualUpstream()).virtual_call(VirtualRequest(category, tool, api, {}),
                                                                    DEFAULT_RULES).api


def ref_path(ref: ApiRef) -> str:
    return f"{ref.category}/{ref.tool}/{ref.api}.json"


names = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\x00"), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(names, names, names)
def test_every_name_a_virtual_call_computes_is_reachable(tmp_path_factory, category, tool, api):
    ref = virtual_ref(category, tool, api)
    if "" in (ref.category, ref.tool, ref.api) or ref.category in (".", ".."):
        return  # no folder or file can carry such a name
    root = tmp_path_factory.mktemp("cache")
    files = cache_of(root, ref_path(ref))
    placement = check(files, root)
    assert placement.misplaced == [] and placement.reachable == files


def test_every_api_of_a_real_catalog_is_reachable(tmp_path, stb_data):
    catalog = Catalog()
    catalog.load_query_file(stb_data / G1)
    files = cache_of(tmp_path, *(ref_path(doc.ref) for doc in catalog))
    placement = check(files, tmp_path, catalog)
    assert len(files) == len(catalog) > (10 if is_sample(stb_data) else 300)
    assert placement.misplaced == [] and placement.reachable == files


# (folder as written, what is reported, the suggestion, the names a /virtual call gives)
MISNAMED = [
    ("Data/weather/get_forecast.json", "Data/weather/", "no _for_Data suffix",
     "Data/weather_for_Data/", ("Data", "weather", "get_forecast")),
    ("Data/weather_for_data/get_forecast.json", "Data/weather_for_data/",
     "ends with _for_data, but its category folder is spelt Data", "Data/weather_for_Data/",
     ("Data", "weather", "get_forecast")),
    ("Data/Weather_API_for_Data/get_forecast.json", "Data/Weather_API_for_Data/",
     "the tool name 'Weather_API' is not standardized", "Data/weather_api_for_Data/",
     ("Data", "Weather API", "get_forecast")),
    ("Data/weather_for_Data/Get Forecast.json", "Data/weather_for_Data/Get Forecast.json",
     "not a standardized API name", "Data/weather_for_Data/get_forecast.json", ("Data", "weather", "Get Forecast")),
    ("Business Software/crm_for_Business_Software/list.json", "Business Software/",
     "a category key has no spaces or commas", "Business_Software/", ("Business Software", "crm", "list")),
]


@pytest.mark.parametrize("written, reported, reason, suggestion, call", MISNAMED)
def test_a_misnamed_folder_or_file_is_reported_with_a_name_requests_reach(tmp_path, written, reported, reason,
                                                                          suggestion, call):
    files = cache_of(tmp_path, written, "Data/news_for_Data/top_stories.json")
    placement = check(files, tmp_path)
    (item,) = placement.misplaced
    assert (item.path, item.files, item.suggestion) == (reported, 1, suggestion) and reason in item.reason
    assert f"{reported}" in str(item) and f"did you mean {suggestion}?" in str(item)
    assert [p.relative_to(tmp_path).as_posix() for p in placement.reachable] == ["Data/news_for_Data/top_stories.json"]
    # the suggestion is where the request that means this API is keyed
    assert ref_path(virtual_ref(*call)).startswith(suggestion.rstrip("/"))


def test_a_renamed_category_folder_is_one_line_naming_the_category_its_tools_say(tmp_path):
    files = cache_of(tmp_path, "data/weather_for_Data/a.json", "data/news_for_Data/b.json", "data/news_for_Data/c.json")
    placement = check(files, tmp_path)
    assert [(m.path, m.files, m.suggestion) for m in placement.misplaced] == [("data/", 3, "Data/")]
    assert "its tool folders end with _for_Data" in placement.misplaced[0].reason
    assert placement.reachable == [] and placement.unreachable_files == 3


def test_the_catalog_suggests_its_own_names_and_its_spelling_of_a_category(tmp_path):
    catalog = Catalog([ApiDoc(category="Sports", tool="Live Score", api="Match Details"),
                       ApiDoc(category="Sports", tool="Live Score", api="Team Form")])
    files = cache_of(tmp_path, "Sports/LiveScore_for_Sports/match_details.json",  # by the rules: livescore
                     "Sports/live_score_for_Sports/MatchDetails.json",          # by the rules: matchdetails
                     "sports/live_score_for_sports/team_form.json")            # a lower-case category
    placement = check(files, tmp_path, catalog)
    by_path = {m.path: m for m in placement.misplaced}
    assert by_path["Sports/LiveScore_for_Sports/"].suggestion == "Sports/live_score_for_Sports/"
    assert by_path["Sports/live_score_for_Sports/MatchDetails.json"].suggestion == \
        "Sports/live_score_for_Sports/match_details.json"
    spelt = by_path["sports/"]
    assert spelt.reachable and spelt.suggestion == "Sports/"
    assert "the catalog spells this category Sports" in spelt.reason
    # reached only by a request that names the category 'sports': imported, yet reported
    reached = [p.relative_to(tmp_path).as_posix() for p in placement.reachable]
    assert reached == ["sports/live_score_for_sports/team_form.json"]
    assert placement.unreachable_files == 2
