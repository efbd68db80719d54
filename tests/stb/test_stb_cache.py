import ast
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stbproxy import keys
from stbproxy.errors import InputError
from stbproxy.models import ApiRef, Source
from stbproxy.stb_cache.importer import ImportSummary, cache_files, parse_args, read_cache_file


@pytest.mark.parametrize("raw,expected", [
    ("{'listing_id': '456789'}", {"listing_id": "456789"}),
    ("{'page': 1, 'q': 'a b'}", {"page": 1, "q": "a b"}),
    ("{'flag': True, 'none': None, 'xs': [1, 2]}", {"flag": True, "none": None, "xs": [1, 2]}),
    ('{"json": "keys"}', {"json": "keys"}),
    ("{}", {}), ("", {}),
    ("{'a': __import__('os')}", None),  # only literals, never code
    ("[1, 2]", [1, 2]),  # parsed, and then refused as not a dict by the reader
    ("not python {", None),
])
def test_cache_keys_are_python_literals(raw, expected):
    assert parse_args(raw) == expected


def make_cache(root, files: dict[str, object]):
    for relative, content in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content if isinstance(content, str) else json.dumps(content))
    return root


def read_all(root, **options):
    summary = ImportSummary()
    entries = [e for path in cache_files(root) for e in read_cache_file(path, root, summary=summary, **options)]
    return entries, summary


CANONICAL = keys.KeyRules(stb_keys="canonical")


def test_reader_keys_entries_by_their_text_keeps_failures_and_reports_every_problem(tmp_path):
    root = make_cache(tmp_path / "cache", {
        "Data/theclique_for_Data/songkick_concert.json": {
            "{'id_conc': '1', 'page': 2}": {"error": "", "response": "{\"ok\": 1}"},
            # another call to StableToolBench
            "{'page': '2', 'id_conc': '1'}": {"error": "", "response": "{\"ok\": 2}"},
            "{'id_conc': '3'}": {"error": "", "response": {"already": "json"}},
            "{'id_conc': '4'}": {"error": "Failed to generate fake response", "response": ""},
            "{'id_conc': '5'}": ["not", "an", "object"],
            "['a', 'list']": {"error": "", "response": "x"},
        },
        "Data/theclique_for_Data/broken.json": "{not json",
        "Data/theclique_for_Data/a_list.json": [1, 2],
    })
    entries, summary = read_all(root)
    ref = ApiRef("Data", "theclique_for_Data", "songkick_concert")
    assert [e.key for e in entries[:2]] == [keys.exact_api_key(ref, "{'id_conc': '1', 'page': 2}"),
                                            keys.exact_api_key(ref, "{'page': '2', 'id_conc': '1'}")]
    assert entries[0].key != entries[1].key
    assert all(e.source is Source.IMPORTED and e.api == ref for e in entries)
    assert entries[0].response.body == b'{"ok": 1}'
    assert json.loads(entries[2].response.body) == {"already": "json"}
    failed = entries[3]
    assert failed.meta["error"] == "Failed to generate fake response" and failed.meta["failure"] == "other"
    assert (len(entries), summary.entries, summary.failures, summary.skipped, summary.unparseable) == (4, 6, 1, 0, 4)
    reasons = "\n".join(map(str, summary.problems))
    assert "broken.json: not a readable JSON file" in reasons
    assert "a_list.json: expected a JSON object" in reasons
    assert "not an answer object" in reasons and "not a Python dict literal" in reasons


def test_canonical_keys_meet_the_same_call_in_any_order_and_type(tmp_path):
    root = make_cache(tmp_path / "cache", {"Data/theclique_for_Data/songkick_concert.json": {
        "{'id_conc': '1', 'page': 2}": {"error": "", "response": "one"},
        "{'page': '2', 'id_conc': '1'}": {"error": "", "response": "one"}}})
    entries, _ = read_all(root, rules=CANONICAL)
    ref = ApiRef("Data", "theclique_for_Data", "songkick_concert")
    assert [e.key for e in entries] == [keys.api_key(ref, {"id_conc": "1", "page": 2})] * 2


def test_skip_failures_leaves_cached_failures_out(tmp_path):
    root = make_cache(tmp_path / "cache", {"C/t_for_C/a.json": {"{'x': 1}": {"error": "boom", "response": ""},
                                                                 "{'x': 2}": {"error": "", "response": "fine"}}})
    entries, summary = read_all(root, skip_failures=True)
    assert [e.response.body for e in entries] == [b"fine"]
    assert (summary.failures, summary.skipped) == (1, 1)


@pytest.mark.parametrize("cached", [
    {"response": "reversed", "error": ""},  # members in another order
    {"error": "", "response": "x", "took": 0.5},  # a member more
    {"error": None, "response": "x"},  # an error that is not text
    {"response": "no error member"},
    {"error": ""},  # nor a response: served as cached all the same (its client reads the error)
])
def test_an_answer_that_is_more_than_error_and_response_is_kept_whole(tmp_path, cached):
    from stbproxy.stb.bodies import WHOLE_ANSWER

    root = make_cache(tmp_path / "cache", {"C/t_for_C/a.json": {"{'x': 1}": cached}})
    (entry,), _ = read_all(root)
    assert entry.meta[WHOLE_ANSWER] == cached and list(entry.meta[WHOLE_ANSWER]) == list(cached)


def test_a_secret_argument_enters_no_key_and_no_stored_request(tmp_path):
    root = make_cache(tmp_path / "cache", {"C/t_for_C/a.json": {
        "{'q': 'x', 'api_key': 'sk-cached-secret-1'}": {"error": "", "response": "one"},
        "{'q': 'x', 'api_key': 'sk-cached-secret-2'}": {"error": "", "response": "two"}}})
    entries, _ = read_all(root)
    ref = ApiRef("C", "t_for_C", "a")
    assert {e.key for e in entries} == {keys.exact_api_key(ref, f"{{'q': 'x', 'api_key': '{keys.HIDDEN_ARGUMENT}'}}")}
    assert all(b"sk-cached-secret" not in e.request.body and "sk-cached-secret" not in e.request.url for e in entries)


def test_missing_cache_folder_is_named(tmp_path):
    with pytest.raises(InputError, match="not a StableToolBench cache folder"):
        cache_files(tmp_path / "nowhere")


# -- the fast path for flat literals agrees with ast.literal_eval ---------------------------------


scalars = st.one_of(st.text(max_size=12), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
                    st.booleans(), st.none())


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=10), scalars, max_size=6))
def test_fast_literal_path_agrees_with_literal_eval(args):
    raw = str(args)
    assert parse_args(raw) == ast.literal_eval(raw)


@pytest.mark.parametrize("stb_keys", ["exact", "canonical"])
def test_imported_keys_meet_http_calls_with_documented_names_and_virtual_calls(tmp_path, stb_keys):
    """The cache holds the agent's standardized names (is_id, playerid); an HTTP call with
    the documented ones (id, playerId) and a /virtual call meet the imported entry: under
    exact keys when the /virtual call gives the cached text, and the HTTP call's arguments,
    strings in the doc's order, give it too; under canonical keys in any order and type."""
    from stbproxy.kinds import http_call
    from stbproxy.models import Request
    from stbproxy.stb.catalog import ApiDoc, Catalog, Param
    from stbproxy.stb.traffic import StableToolBench
    from stbproxy.stb.virtual_calls import VirtualUpstream, parse

    rules = keys.KeyRules(stb_keys=stb_keys)
    doc = ApiDoc(category="Sports", tool="Loop Ball", api="Team players", method="GET",
                 url="https://loop-ball.p.rapidapi.com/team/{id}",
                 required_parameters=(Param("id"),), optional_parameters=(Param("playerId"),))
    catalog = Catalog([doc])
    root = make_cache(tmp_path / "cache", {"Sports/loop_ball_for_Sports/team_players.json": {
        "{'is_id': '42', 'playerid': 'p7'}": {"error": "", "response": "{\"team\": 42}"}}})
    (with_catalog,), _ = read_all(root, catalog=catalog, rules=rules)
    (without_catalog,), _ = read_all(root, rules=rules)
    over_http = http_call(Request("GET", "https://loop-ball.p.rapidapi.com/team/42?playerId=p7"), catalog, rules)
    virtual = StableToolBench(catalog, VirtualUpstream())

    def over_virtual(tool_input: str) -> str:
        return virtual.virtual_call(parse(json.dumps({
            "category": "Sports", "tool_name": "loop_ball", "api_name": "team_players",
            "tool_input": tool_input, "strip": "", "toolbench_key": ""}).encode()), rules).key

    # keys agree whether or not the catalog was there at import
    assert with_catalog.key == without_catalog.key == over_http.key == over_virtual('{"is_id": "42", "playerid": "p7"}')
    other_order_and_type = over_virtual('{"playerid": "p7", "is_id": 42}')
    assert (other_order_and_type == with_catalog.key) is (stb_keys == "canonical")
    # the request kept with the entry is the real call, under the documented names
    assert with_catalog.request.url == "https://loop-ball.p.rapidapi.com/team/42?playerId=p7"


# -- the import's records: the bytes of the Exchanges read_cache_file gives -----------------------
from stbproxy.stb.catalog import Catalog, api_key_name, category_key, tool_key  # noqa: E402
from stbproxy.stb_cache.importer import encode_file, encoded_files  # noqa: E402
from stbproxy.store.record_format import encode_exchange  # noqa: E402

G1 = "solvable_queries/test_instruction/G1_instruction.json"


def real_api_cache(root, stb_data, apis: int = 30):
    """A cache of the original layout for real G1 APIs, every kind of cached value among
    each API's entries: template answers as JSON text and as objects, text with quotes,
    control characters and non-ASCII, failures, cached errors."""
    queries = json.loads((stb_data / G1).read_text())
    docs = {}
    for query in queries:
        for api in query["api_list"]:
            path = (root / category_key(api["category_name"]) / tool_key(api["tool_name"], api["category_name"])
                    / f"{api_key_name(api['api_name'])}.json")
            docs.setdefault(path, api)
    for path, api in list(docs.items())[:apis]:
        params = [p["name"] for p in api["required_parameters"] + api["optional_parameters"]] or ["q"]
        template = api.get("template_response") or {"result": "str"}
        answers = [json.dumps(template), template, 'a "quoted" café\x00 東京 answer', {"nested": [1, 2.5, None]},
                   "API rate limit exceeded", ""]
        document = {}
        for i, answer in enumerate(answers * 2):
            args = {name: (f"value {i}" if n == 0 else i) for n, name in enumerate(params)}
            error = "Timeout" if i == 7 else ""
            document[str(args)] = {"error": error, "response": answer}
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document))
    return root


@pytest.mark.parametrize("with_catalog", [False, True])
@pytest.mark.parametrize("skip_failures", [False, True])
@pytest.mark.parametrize("rules", [keys.DEFAULT_RULES, CANONICAL], ids=["exact", "canonical"])
def test_encoded_records_are_the_bytes_of_the_entries_exchanges(tmp_path, stb_data, with_catalog, skip_failures, rules):
    root = real_api_cache(tmp_path / "cache", stb_data)
    catalog = None
    if with_catalog:
        catalog = Catalog()
        catalog.load_query_file(stb_data / G1)
        assert all(catalog.get(api_of_path(path)) for path in cache_files(root))
    total = 0
    for path in cache_files(root):
        summary = ImportSummary()
        expected = [(e.key, encode_exchange(e)) for e in read_cache_file(
            path, root, catalog=catalog, rules=rules, skip_failures=skip_failures, now=1700000000.25, summary=summary)]
        encoded = encode_file(path, root, catalog=catalog, rules=rules, skip_failures=skip_failures,
                              now=1700000000.25)
        assert encoded.records == expected
        assert (encoded.entries, encoded.failures, encoded.skipped, encoded.unparseable, encoded.problems) == (
            summary.entries, summary.failures, summary.skipped, summary.unparseable, summary.problems)
        total += len(expected)
    assert 30 * 6 <= total < 30 * 12 if skip_failures else total == 30 * 12  # failures left out only if asked


def api_of_path(path):
    return ApiRef(path.parent.parent.name, path.parent.name, path.stem)


answers = st.one_of(st.text(max_size=30), st.dictionaries(st.text(max_size=5), scalars, max_size=3))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.dictionaries(st.text(max_size=8), scalars, max_size=4), answers,
                          st.sampled_from(["", "", "boom"])), min_size=1, max_size=12))
def test_encoded_records_agree_for_any_arguments_and_answers(tmp_path_factory, entries):
    root = make_cache(tmp_path_factory.mktemp("cache"), {"C/t_for_C/a.json": {
        str(args): {"error": error, "response": answer} for args, answer, error in entries}})
    (path,) = cache_files(root)
    for rules in (keys.DEFAULT_RULES, CANONICAL):
        expected = [(e.key, encode_exchange(e)) for e in read_cache_file(
            path, root, rules=rules, now=5.0, summary=ImportSummary())]
        assert encode_file(path, root, catalog=None, rules=rules, now=5.0).records == expected


def test_files_encoded_by_worker_processes_come_in_order_and_agree(tmp_path, stb_data):
    root = real_api_cache(tmp_path / "cache", stb_data)
    (root / "C" / "t_for_C").mkdir(parents=True)
    (root / "C" / "t_for_C" / "broken.json").write_text("{not json")
    files = cache_files(root)
    one = list(encoded_files(files, root, catalog_file=None, rules=CANONICAL, now=2.0, jobs=1))
    two = list(encoded_files(files, root, catalog_file=None, rules=CANONICAL, now=2.0, jobs=2))
    assert len(two) == len(files) and two == one
    assert any(e.problems for e in two) and sum(len(e.records) for e in two) == 30 * 12
    assert all(keys.stb_keys_of(key) == "canonical" for e in two for key, _ in e.records)
