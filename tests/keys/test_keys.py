import json

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from stbproxy import keys
from stbproxy.keys import KeyRules, canonical, diff, normalize_path, request_key
from stbproxy.models import ApiRef, Request

JSON = (("Content-Type", "application/json"),)
FORM = (("Content-Type", "application/x-www-form-urlencoded"),)


def get(url, headers=(), body=b"", method="GET"):
    return Request(method, url, tuple(headers), body)


# -- requests that must share a key -----------------------------------------------------------
SAME = [
    ("query order", get("http://h/p?a=1&b=2"), get("http://h/p?b=2&a=1")),
    ("host case", get("http://API.Example.COM/p"), get("http://api.example.com/p")),
    ("scheme case", get("HTTP://h/p"), get("http://h/p")),
    ("default http port", get("http://h:80/p"), get("http://h/p")),
    ("default https port", get("https://h:443/p"), get("https://h/p")),
    ("method case", get("http://h/p", method="get"), get("http://h/p")),
    ("dot segments", get("http://h/a/./b/../c"), get("http://h/a/c")),  # httpx sends /a/c for both
    ("a trailing dot segment", get("http://h/x/."), get("http://h/x")),  # httpx sends /x for both
    ("empty path", get("http://h"), get("http://h/")),
    ("a character httpx escapes", get("http://h/a b"), get("http://h/a%20b")),
    ("plus and %20 in query", get("http://h/p?q=a+b"), get("http://h/p?q=a%20b")),
    ("secret query field", get("http://h/p?q=1&api_key=AAA"), get("http://h/p?q=1&api_key=BBB")),
    ("secret query field absent", get("http://h/p?q=1&apikey=AAA"), get("http://h/p?q=1")),
    ("secret headers", get("http://h/p", [("X-RapidAPI-Key", "one"), ("Authorization", "Bearer x")]),
     get("http://h/p", [("X-RapidAPI-Key", "two")])),
    ("other headers", get("http://h/p", [("User-Agent", "a")]), get("http://h/p", [("User-Agent", "b")])),
    ("json key order and spaces", get("http://h/p", JSON, b'{"a": 1, "b": [1, 2]}', "POST"),
     get("http://h/p", JSON, b'{"b":[1,2],"a":1}', "POST")),
    ("json secret field", get("http://h/p", JSON, b'{"a":1,"toolbench_key":"s1"}', "POST"),
     get("http://h/p", JSON, b'{"a":1,"toolbench_key":"s2"}', "POST")),
    ("nested json secret", get("http://h/p", JSON, b'{"auth":{"access_token":"t1"},"q":2}', "POST"),
     get("http://h/p", JSON, b'{"q":2,"auth":{"access_token":"t2"}}', "POST")),
    ("json charset param", get("http://h/p", [("Content-Type", "application/json; charset=utf-8")], b'{"a":1}', "POST"),
     get("http://h/p", JSON, b'{ "a" : 1 }', "POST")),
    ("vendor json type", get("http://h/p", [("Content-Type", "application/vnd.api+json")], b'{"a":1,"b":2}', "POST"),
     get("http://h/p", [("Content-Type", "application/vnd.api+json")], b'{"b":2,"a":1}', "POST")),
    ("form order", get("http://h/p", FORM, b"a=1&b=2", "POST"), get("http://h/p", FORM, b"b=2&a=1", "POST")),
    ("form secret", get("http://h/p", FORM, b"a=1&apikey=zz", "POST"), get("http://h/p", FORM, b"a=1", "POST")),
]


@pytest.mark.parametrize("why,left,right", SAME, ids=[case[0] for case in SAME])
def test_equivalent_requests_share_a_key(why, left, right):
    assert request_key(left) == request_key(right), why
    assert diff(canonical(left), canonical(right)) == []


# -- requests that must not -----------------------------------------------------------------
DIFFERENT = [
    ("method", get("http://h/p"), get("http://h/p", method="POST"), "method"),
    ("scheme", get("http://h/p"), get("https://h/p"), "scheme"),
    ("host", get("http://a/p"), get("http://b/p"), "host"),
    ("non-default port", get("http://h:8080/p"), get("http://h/p"), "host"),
    ("path", get("http://h/p"), get("http://h/q"), "path"),
    ("trailing slash", get("http://h/p/"), get("http://h/p"), "path"),
    ("encoded slash", get("http://h/a%2Fb"), get("http://h/a/b"), "path"),
    # the upstream receives each as written (issue 38, item 3): keyed as one, one path's
    # answer would be served for the other
    ("escaped dot segments", get("http://h/p1/a/%2e%2e/%2E%2E/secret"), get("http://h/secret"), "path"),
    ("repeated slashes", get("http://h/p3//admin"), get("http://h/p3/admin"), "path"),
    ("percent-encoded unreserved", get("http://h/%7Euser"), get("http://h/~user"), "path"),
    ("hex case of an escape", get("http://h/%7euser"), get("http://h/%7Euser"), "path"),
    ("query value", get("http://h/p?a=1"), get("http://h/p?a=2"), "query:a"),
    ("repeated names keep order", get("http://h/p?a=1&a=2"), get("http://h/p?a=2&a=1"), "query:a"),
    ("key is not secret by default", get("http://h/p?key=1"), get("http://h/p?key=2"), "query:key"),
    ("key is not secret by default", get("http://h/p?key=1"), get("http://h/p?key=2"), "query:key"),
    ("json value", get("http://h/p", JSON, b'{"a":1}', "POST"), get("http://h/p", JSON, b'{"a":2}', "POST"), "json:a"),
    ("json int vs string", get("http://h/p", JSON, b'{"a":1}', "POST"), get("http://h/p", JSON, b'{"a":"1"}', "POST"),
     "json:a"),
    ("form value", get("http://h/p", FORM, b"a=1", "POST"), get("http://h/p", FORM, b"a=2", "POST"), "form:a"),
    ("raw bytes", get("http://h/p", body=b"\x00\x01", method="POST"),
     get("http://h/p", body=b"\x00\x02", method="POST"), "body"),
    ("body vs none", get("http://h/p", JSON, b'{"a":1}', "POST"), get("http://h/p", method="POST"), "body"),
]


@pytest.mark.parametrize("why,left,right,part", DIFFERENT, ids=[case[0] for case in DIFFERENT])
def test_different_requests_get_different_keys_and_diff_names_the_part(why, left, right, part):
    assert request_key(left) != request_key(right), why
    assert [d.part for d in diff(canonical(left), canonical(right))] == [part]


def test_user_configured_secret_and_volatile_fields_leave_the_key():
    rules = KeyRules.build(secret_fields=["sig"], volatile_fields=["_ts"])
    a = get("http://h/p?q=1&sig=AAA&_ts=100")
    b = get("http://h/p?q=1&sig=BBB&_ts=200")
    assert request_key(a, rules) == request_key(b, rules)
    assert request_key(a) != request_key(b)  # the defaults keep them


def test_openweathers_appid_is_a_secret_by_default():
    """OpenWeather's key travels as ?appid=...: never keyed, never stored (issue 44)."""
    from stbproxy.redact import redact_url

    a = get("http://h/data/2.5/weather?q=London&appid=KEY-ONE")
    b = get("http://h/data/2.5/weather?appid=&q=London")
    assert request_key(a) == request_key(b)
    assert "KEY-ONE" not in redact_url(a)


def test_invalid_json_under_json_type_is_keyed_by_its_bytes():
    a = get("http://h/p", JSON, b"{not json", "POST")
    b = get("http://h/p", JSON, b"{not json ", "POST")
    assert canonical(a).body_kind == "bytes"
    assert request_key(a) != request_key(b)
    assert request_key(a) == request_key(get("http://h/p", JSON, b"{not json", "POST"))


def test_non_utf8_form_body_is_keyed_by_bytes():
    c = canonical(get("http://h/p", FORM, b"a=\xff\xfe", "POST"))
    assert c.body_kind == "bytes"


def test_storage_key_is_readable_and_prefixed_by_host_and_method():
    key = request_key(get("https://Weather.P.RapidAPI.com:443/v1/forecast?city=Paris"))
    assert key.startswith("http/weather.p.rapidapi.com/GET/v1/forecast/")
    assert len(key.rsplit("/", 1)[1]) == 32


@pytest.mark.parametrize("url", ["http://[::1", "http://h:99999/p", "http://h:port/p", "not a url", "", "http://"])
def test_malformed_urls_still_get_a_stable_key(url):
    assert request_key(get(url)) == request_key(get(url))


@pytest.mark.parametrize("raw,normal", [
    ("", "/"), ("/", "/"), ("/a//b", "/a//b"), ("/a/b/", "/a/b/"), ("/a/../../b", "/b"), ("/a/./", "/a/"),
    ("/x/.", "/x"), ("/a/..", "/"), ("//x", "//x"), ("/%41", "/%41"), ("/a%20b", "/a%20b"), ("/a b", "/a%20b"),
    ("/caf%C3%A9", "/caf%C3%A9"), ("/caf%c3%a9", "/caf%c3%a9"), ("/café", "/caf%C3%A9"), ("/%2e%2e/x", "/%2e%2e/x"),
    ("/a%zz", "/a%zz"), ('/{"x"}', "/%7B%22x%22%7D"),
])
def test_normalize_path_is_the_path_the_upstream_receives(raw, normal):
    assert normalize_path(raw) == normal


def _httpx_path(path: str) -> str:
    import httpx

    return httpx.Request("GET", "http://h" + path).url.raw_path.decode("ascii").partition("?")[0]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(["", ".", "..", "a", "%2e", "%2E%2e", "%7e", "~", "%41", "é", " ", "%", "%zz", "x.y",
                                 '"', "{", "|", "\\", "[", ";p=1", ":", "@", "+", "!", "%2F"]), max_size=8),
       st.booleans())
def test_the_key_path_is_what_httpx_sends_upstream(segments, trailing):
    """The contract behind item 3 of issue 38: two paths share a key exactly when the
    upstream receives them alike. Both lanes hand the request to httpx, which resolves
    literal dot segments and escapes what cannot travel, and changes nothing else."""
    path = "/" + "/".join(segments) + ("/" if trailing else "")
    assert normalize_path(path) == _httpx_path(path)


def test_a_json_body_miss_names_the_fields_that_differ_not_the_whole_body():
    stored = canonical(get("http://h/p", JSON, json.dumps({"city": "Paris", "units": "metric", "api_key": "sk-1",
                                                          "filters": {"max": 3, "tags": ["a", "b"]}}).encode(), "POST"))
    incoming = canonical(get("http://h/p", JSON, json.dumps({"city": "Rome", "units": "metric", "api_key": "sk-2",
                                                            "filters": {"tags": ["a", "c"]}, "page": 2}).encode(),
                             "POST"))
    found = {d.part: (d.expected, d.actual) for d in diff(stored, incoming)}
    assert found == {"json:city": ("Paris", "Rome"), "json:filters.max": ("3", "<absent>"),
                     "json:filters.tags[1]": ("b", "c"), "json:page": ("<absent>", "2")}


def test_diff_lists_query_names_added_and_removed():
    stored = canonical(get("http://h/p?a=1&b=2"))
    incoming = canonical(get("http://h/p?a=1&c=3"))
    found = {d.part: (d.expected, d.actual) for d in diff(stored, incoming)}
    assert found == {"query:b": ("2", "<absent>"), "query:c": ("<absent>", "3")}


def test_api_key_ignores_arg_order_and_secrets():
    api = ApiRef("data", "theclique_for_data", "songkick_concert")
    one = keys.api_key(api, {"id_conc": "x", "page": 1, "toolbench_key": "s"})
    two = keys.api_key(api, {"page": 1, "id_conc": "x"})
    assert one == two
    assert one.startswith("api/data/theclique_for_data/songkick_concert/")
    assert keys.api_key(api, {"page": 2, "id_conc": "x"}) != one


def test_api_keys_are_the_ones_stores_already_hold():
    # Pinned: entries written before the rule moved to stbcore must still be found.
    api = ApiRef("data", "theclique_for_data", "songkick_concert")
    args = {"id_conc": "x", "page": 1, "toolbench_key": "s", "flag": True, "none": None,
            "nested": {"b": [1, 2.5], "a": "é"}}
    assert keys.api_key(api, args) == "api/data/theclique_for_data/songkick_concert/0ab8bca7a21904119152b86e122e59ba"
    assert keys.api_key(api, {}) == "api/data/theclique_for_data/songkick_concert/44136fa355b3678a1146ad16f7e8649e"


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.integers(), st.integers(min_value=10**20), st.floats(), st.booleans()))
def test_a_number_argument_is_keyed_by_its_json_text(number):
    """arg_text writes plain numbers without the JSON encoder, exactly as it would."""
    assert keys.arg_text(number) == json.dumps(number, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


# -- properties ---------------------------------------------------------------------------------
names = st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8).filter(
    lambda n: n.lower() not in keys.SECRET_FIELDS)
values = st.text(max_size=12)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3), max_leaves=10)


@settings(max_examples=200, deadline=None)
@given(method=st.text(max_size=8), url=st.text(max_size=60), body=st.binary(max_size=64),
       content_type=st.sampled_from([None, "application/json", "application/x-www-form-urlencoded", "text/plain",
                                     "@@"]),
       header_values=st.lists(st.text(max_size=10), max_size=3))
def test_key_normalization_never_raises(method, url, body, content_type, header_values):
    headers = [("X-H", v) for v in header_values]
    if content_type:
        headers.append(("Content-Type", content_type))
    request = Request(method, url, tuple(headers), body)
    key = request_key(request)
    assert isinstance(key, str) and key.startswith("http/")
    assert diff(canonical(request), canonical(request)) == []


@settings(max_examples=200, deadline=None)
@given(pairs=st.dictionaries(names, values, max_size=6), secret_a=values, secret_b=values, data=st.data())
def test_reordered_query_and_different_secrets_share_a_key(pairs, secret_a, secret_b, data):
    from urllib.parse import urlencode

    # a secret is REDACTED wherever it is: a value that holds one is another value
    assume(not any(secret in value for value in pairs.values() for secret in (secret_a, secret_b) if secret))
    items = list(pairs.items())
    shuffled = data.draw(st.permutations(items))
    a = get("http://h/p?" + urlencode(items + [("api_key", secret_a)]), [("X-RapidAPI-Key", secret_a)])
    b = get("http://h/p?" + urlencode(list(shuffled) + [("api_key", secret_b)]), [("X-RapidAPI-Key", secret_b)])
    assert request_key(a) == request_key(b)


@settings(max_examples=200, deadline=None)
@given(document=st.dictionaries(names, json_values, max_size=6), secret_a=values, secret_b=values, data=st.data())
def test_reordered_json_and_different_secrets_share_a_key(document, secret_a, secret_b, data):
    order = data.draw(st.permutations(list(document)))
    a_doc = {**document, "toolbench_key": secret_a}
    b_doc = {"toolbench_key": secret_b, **{k: document[k] for k in order}}
    a = get("http://h/p", JSON, json.dumps(a_doc).encode(), "POST")
    b = get("http://h/p", JSON, json.dumps(b_doc, indent=2).encode(), "POST")
    assert request_key(a) == request_key(b)


def test_a_path_with_a_lone_surrogate_still_gets_a_key():
    """canonical never raises: a cassette can carry a URL whose bytes were no UTF-8."""
    odd = Request("GET", "http://127.0.0.1:9/a/\udcff")
    assert keys.request_key(odd) == keys.request_key(Request("GET", "http://127.0.0.1:9/a/\udcff"))
    assert keys.request_key(odd) != keys.request_key(Request("GET", "http://127.0.0.1:9/a/b"))
