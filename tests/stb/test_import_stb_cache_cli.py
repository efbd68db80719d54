"""`stbproxy import stb-cache` as a user runs it: folders and files no request can reach are
named with the name they should have and left out, --strict imports nothing then, and an
import that brings in nothing says why and fails."""

from __future__ import annotations

import json

import pytest

from stbproxy.store.embedded import Store
from tests.cli.test_cli_process import stbproxy

pytestmark = pytest.mark.integration


def write_cache(root, files: dict[str, int]):
    """A cache of the original layout: each file holds ``n`` good answers."""
    for relative, n in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({str({"city": f"city {i}"}): {"error": "", "response": f"sunny {i}"}
                                    for i in range(n)}))
    return root


def stored_tools(store) -> set[str]:
    with Store(store, readonly=True) as db:
        return {"/".join(key.split("/")[1:3]) for key in db.keys("api/")}


MISNAMED = {
    "Data/weather_for_Data/get_forecast.json": 3,        # as StableToolBench names it
    "Data/weather/get_history.json": 2,                  # no _for_Data
    "Data/news_for_data/top.json": 2,                    # the category suffix in another case
    "Data/geo_for_Data/Get City.json": 2,                # not a standardized API name
    "Business Software/crm_for_Business_Software/list.json": 2,  # a category key has no spaces
}


def test_folders_and_files_no_request_reaches_are_named_with_their_right_name_and_left_out(tmp_path):
    cache, store = write_cache(tmp_path / "cache", MISNAMED), tmp_path / "store"
    result = stbproxy("import", "stb-cache", str(cache), "--store", str(store), "--jobs", "1")
    assert result.returncode == 0, result.stderr
    assert ("imported: 3, duplicates: 0, failed answers kept (served as StableToolBench serves them): 0, "
            "unparseable: 0, unreachable files (left out): 4") \
        in result.stdout
    reported = [line.strip() for line in result.stderr.splitlines()]
    assert reported == [
        "unreachable: Business Software/ (1 file): a category key has no spaces or commas (StableToolBench "
        "writes them as '_'); did you mean Business_Software/?",
        "unreachable: Data/geo_for_Data/Get City.json: not a standardized API name (lower case, '_' for any "
        "other character); did you mean Data/geo_for_Data/get_city.json?",
        "unreachable: Data/news_for_data/ (1 file): ends with _for_data, but its category folder is spelt Data; "
        "did you mean Data/news_for_Data/?",
        "unreachable: Data/weather/ (1 file): no _for_Data suffix (a tool key is <standardized tool name>_for_"
        "<category key>); did you mean Data/weather_for_Data/?",
    ]
    assert stored_tools(store) == {"Data/weather_for_Data"}

    # moved where the suggestions say, every file is imported
    for old, new in [("Business Software/crm_for_Business_Software/list.json",
                      "Business_Software/crm_for_Business_Software/list.json"),
                     ("Data/geo_for_Data/Get City.json", "Data/geo_for_Data/get_city.json"),
                     ("Data/news_for_data/top.json", "Data/news_for_Data/top.json"),
                     ("Data/weather/get_history.json", "Data/weather_for_Data/get_history.json")]:
        (cache / new).parent.mkdir(parents=True, exist_ok=True)
        (cache / old).rename(cache / new)
    again = stbproxy("import", "stb-cache", str(cache), "--store", str(store), "--jobs", "1")
    assert again.returncode == 0 and again.stderr == "", again.stderr
    assert "imported: 8, duplicates: 3" in again.stdout
    assert stored_tools(store) == {"Data/weather_for_Data", "Data/news_for_Data", "Data/geo_for_Data",
                                   "Business_Software/crm_for_Business_Software"}


def test_strict_imports_nothing_when_any_folder_is_misnamed(tmp_path):
    cache, store = write_cache(tmp_path / "cache", MISNAMED), tmp_path / "store"
    result = stbproxy("import", "stb-cache", str(cache), "--store", str(store), "--strict")
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 5 and all(line.startswith("  unreachable: ") for line in lines[:4])
    assert lines[4] == ("stbproxy: error: nothing imported (--strict): 4 folders and files are named so that no "
                        "request reaches them, or only under a spelling the catalog does not use (listed above)")
    assert not store.exists()
    good = write_cache(tmp_path / "good", {"Data/weather_for_Data/get_forecast.json": 3})
    assert stbproxy("import", "stb-cache", str(good), "--store", str(store), "--strict").returncode == 0


@pytest.mark.parametrize("files, says", [
    ({}, "nothing imported: no <category>/<tool>/<api>.json files in {cache}"),
    ({"tool_response_cache/Data/weather_for_Data/a.json": 1},
     "nothing imported: no <category>/<tool>/<api>.json files in {cache}; there are some one level deeper: "
     "did you mean {cache}/tool_response_cache?"),
    ({"Data/weather/a.json": 2, "Data/news/b.json": 1},
     "nothing imported: no request can reach any of the 2 cache files (their folders and names, and the names "
     "they should have, are listed above)"),
    ({"Data/weather_for_Data/a.json": 0}, "nothing imported: the cache files hold no entries"),
])
def test_an_import_that_brings_in_nothing_fails_with_one_line_saying_why(tmp_path, files, says):
    cache = write_cache(tmp_path / "cache", files)
    cache.mkdir(exist_ok=True)
    result = stbproxy("import", "stb-cache", str(cache), "--store", str(tmp_path / "store"))
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == "stbproxy: error: " + says.format(cache=cache)


def test_cached_failures_are_kept_by_default_and_skip_failures_leaves_them_out(tmp_path):
    cache = tmp_path / "cache"
    write_cache(cache, {"Data/weather_for_Data/a.json": 1})
    (cache / "Data/weather_for_Data/a.json").write_text(json.dumps({"{'city': 'x'}": {
        "error": "", "response": "API rate limit exceeded"}}))
    kept = stbproxy("import", "stb-cache", str(cache), "--store", str(tmp_path / "store"))
    assert kept.returncode == 0
    assert "imported: 1, duplicates: 0, failed answers kept (served as StableToolBench serves them): 1" in kept.stdout
    # a second run that finds everything stored already has imported nothing new, and is fine
    again = stbproxy("import", "stb-cache", str(cache), "--store", str(tmp_path / "store"))
    assert again.returncode == 0 and "imported: 0, duplicates: 1" in again.stdout
    skipped = stbproxy("import", "stb-cache", str(cache), "--store", str(tmp_path / "s2"), "--skip-failures")
    assert skipped.returncode == 1 and "failed answers left out (--skip-failures): 1" in skipped.stdout
    assert skipped.stderr.splitlines()[-1] == (
        "stbproxy: error: nothing imported: the 1 entries that could be read are failed answers (StableToolBench's "
        "check_result rejects them), left out by --skip-failures")


def test_an_import_under_other_keys_than_the_store_holds_is_refused(tmp_path):
    cache, store = tmp_path / "cache", tmp_path / "store"
    write_cache(cache, {"Data/weather_for_Data/a.json": 1})
    assert stbproxy("import", "stb-cache", str(cache), "--store", str(store)).returncode == 0
    other = stbproxy("import", "stb-cache", str(cache), "--store", str(store), "--stb-keys", "canonical")
    assert other.returncode != 0
    assert other.stderr.splitlines()[-1] == (
        f"stbproxy: error: the store at {store} holds StableToolBench calls under exact keys, and this import would "
        "add canonical keys, which no proxy serving it would meet: import with --stb-keys exact, or into a new store")


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_cache_full_of_broken_entries_counts_every_one_and_lists_the_first_fifty(tmp_path, jobs):
    cache, store = tmp_path / "cache", tmp_path / "store"
    for n in range(12):  # 12 files of 10 broken keys and 2 good calls each: 120 problems
        path = cache / "Data" / "weather_for_Data" / f"api_{n}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        broken = {f"not a dict literal {i}": {"error": "", "response": "x"} for i in range(10)}
        good = {str({"city": f"c{i}"}): {"error": "", "response": f"sunny {i}"} for i in range(2)}
        path.write_text(json.dumps({**broken, **good}))
    result = stbproxy("import", "stb-cache", str(cache), "--store", str(store), "--jobs", jobs)
    assert result.returncode == 0, result.stderr
    assert ("imported: 24, duplicates: 0, failed answers kept (served as StableToolBench serves them): 0, "
            "unparseable: 120") in result.stdout
    listed = [line for line in result.stderr.splitlines() if line.startswith("  unparseable: ")]
    assert len(listed) == 50
    assert "cache key is not a Python dict literal" in listed[0]
    assert result.stderr.splitlines()[-1] == "  ... and 70 more"


def test_a_proxy_keying_otherwise_than_the_store_is_refused_before_it_is_ready(tmp_path):
    cache, store = tmp_path / "cache", tmp_path / "store"
    write_cache(cache, {"Data/weather_for_Data/a.json": 1})
    assert stbproxy("import", "stb-cache", str(cache), "--store", str(store)).returncode == 0
    served = stbproxy("serve", "--store", str(store), "--port", "0", "--stb-keys", "canonical",
                      "--confdir", str(tmp_path / "certs"))
    assert served.returncode != 0 and "listening" not in served.stdout
    assert served.stderr.strip().splitlines()[-1].startswith(
        f"stbproxy: error: the store at {store} holds StableToolBench calls under exact keys (api/Data/")
    assert "serve it with --stb-keys exact, or import into a new store with --stb-keys canonical" in served.stderr


def test_stats_count_imported_failed_answers_apart(tmp_path):
    cache, store = tmp_path / "cache", tmp_path / "store"
    write_cache(cache, {"Data/weather_for_Data/a.json": 2})
    (cache / "Data/weather_for_Data/b.json").write_text(json.dumps({
        "{'city': 'x'}": {"error": "", "response": "API rate limit exceeded"},
        "{'city': 'y'}": {"error": "", "response": "Unauthorized"}}))
    assert stbproxy("import", "stb-cache", str(cache), "--store", str(store)).returncode == 0
    shown = stbproxy("stats", "--store", str(store))
    assert "failed answers, by origin (served as stored)" in shown.stdout
    assert [line.split() for line in shown.stdout.splitlines() if line.startswith("imported")] == [
        ["imported", "4", "100.0%"], ["imported", "2", "50.0%"]]
    errors = json.loads(stbproxy("stats", "--store", str(store), "--errors", "--json").stdout)
    assert errors["imported_failures"] == {"total": 2, "by_kind": {"not_connected": 1, "not_authorised": 1}}
    assert sum(row["count"] for row in errors["real"]) == 0  # not this proxy's calls
