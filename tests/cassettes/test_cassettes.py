"""cassettes/vcr_format.py: exchanges <-> vcrpy cassettes, and what bad cassettes get."""

import gzip
import json
import os
from pathlib import Path

import pytest
import yaml
from vcr.cassette import Cassette
from vcr.serialize import deserialize as vcr_deserialize
from vcr.serializers import jsonserializer, yamlserializer

from stbproxy.cassettes import reading as cassette_reading
from stbproxy.cassettes import vcr_format as cassettes
from stbproxy.errors import InputError, StbError
from stbproxy.keys import DEFAULT_RULES, KeyRules, api_key, exact_api_key, request_key
from stbproxy.kinds import http_call
from stbproxy.models import ApiRef, Exchange, Request, Response, Source
from stbproxy.sessions import safe_session_name
from stbproxy.stb.api_requests import stored_request
from stbproxy.stb.catalog import Catalog

SECRET = "sk-cassette-secret-77"


def exchange(url="http://api.example/v1/items?q=1", *, method="GET", req_headers=(), body=b"",
             status=200, resp_headers=(("Content-Type", "application/json"),), resp_body=b'{"ok": true}',
             source=Source.UPSTREAM, key=None):
    request = Request(method, url, tuple(req_headers), body)
    return Exchange(key or request_key(request), request, Response(status, tuple(resp_headers), resp_body),
                    source, stored_at=1.0)


SAMPLES = [
    exchange(),
    exchange("http://api.example/v1/items", method="POST",
             req_headers=(("Content-Type", "application/json"), ("Accept", "a"), ("Accept", "b")),
             body=b'{"name": "caf\xc3\xa9", "n": 2}', status=201, resp_body="naïve ☃ 名前".encode()),
    exchange("http://api.example/bin", resp_headers=(("Content-Type", "application/octet-stream"),),
             resp_body=bytes(range(256)), source=Source.SIMULATED),
    exchange("http://api.example/upload", method="PUT", body=b"\x00\xff\xfe binary", status=204, resp_body=b""),
    exchange("http://llm.example/v1/chat", method="POST", resp_headers=(("Content-Type", "text/event-stream"),),
             resp_body=b'data: {"n": 0}\n\ndata: {"n": 1}\n\r\ndata: [DONE]\n\n', source=Source.PASSTHROUGH),
    exchange("http://api.example/odd", resp_body=b"tab\tcr\r\nnul\x00 bell\x07 nel\xc2\x85 ls\xe2\x80\xa8 end "),
]


def as_tuple(interaction: cassettes.Interaction):
    return (interaction.request, interaction.response, interaction.source)


def expected(ex: Exchange):
    return (ex.request, ex.response, ex.source.value)


# -- round trips ---------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["yaml", "json"])
def test_round_trip_keeps_every_byte(tmp_path, fmt):
    samples = SAMPLES if fmt == "yaml" else [s for s in SAMPLES if b"\xff" not in s.request.body + s.response.body]
    path = tmp_path / f"c.{fmt}"
    assert cassettes.write_cassette(path, samples, fmt) == len(samples)
    interactions, problems = cassette_reading.read_cassette(path)
    assert problems == []
    assert [i.index for i in interactions] == list(range(len(samples)))
    got = [as_tuple(i) for i in interactions]
    # Headers come back grouped by name (vcrpy's form), so compare them as sorted lists.
    for (req, resp, source), ex in zip(got, samples):
        assert (req.method, req.url, req.body) == (ex.request.method, ex.request.url, ex.request.body)
        assert sorted(req.headers) == sorted(ex.request.headers)
        assert (resp.status, resp.body, sorted(resp.headers)) == (ex.response.status, ex.response.body,
                                                                   sorted(ex.response.headers))
        assert source == ex.source.value


def test_vcrpy_reads_what_we_write(tmp_path):
    path = tmp_path / "c.yaml"
    cassettes.write_cassette(path, SAMPLES, "yaml")
    requests, responses = vcr_deserialize(path.read_text(), yamlserializer)
    assert [r.uri for r in requests] == [ex.request.url for ex in SAMPLES]
    assert [r.body or b"" for r in requests] == [ex.request.body for ex in SAMPLES]
    assert [r["body"]["string"] for r in responses] == [ex.response.body for ex in SAMPLES]
    assert [r["headers"]["X-Stb-Source"] for r in responses] == [[ex.source.value] for ex in SAMPLES]
    assert requests[1].headers["Accept"] == "a"  # vcrpy keeps one value per request header
    # and vcrpy's own Cassette loads it as a whole
    loaded = Cassette.load(path=str(path), record_mode="none")
    assert len(loaded) == len(SAMPLES)


def test_we_read_what_vcrpy_writes(tmp_path):
    from vcr.request import Request as VcrRequest
    from vcr.serialize import serialize as vcr_serialize

    vcr_requests = [VcrRequest("GET", "http://h.example/a?x=1", None, {"Accept": "*/*"}),
                    VcrRequest("POST", "http://h.example/b", b'{"k": 1}', {"Content-Type": "application/json"})]
    vcr_responses = [
        {"status": {"code": 200, "message": "OK"}, "headers": {"Content-Length": ["2"]}, "body": {"string": b"hi"}},
        {"status": {"code": 200, "message": "OK"}, "headers": {"Content-Encoding": ["gzip"]},
         "body": {"string": gzip.compress(b'{"zipped": 1}')}},
    ]
    # YAML: vcrpy's JSON serializer cannot hold the gzip bytes of the second answer.
    path = tmp_path / "vcr.yaml"
    path.write_text(vcr_serialize({"requests": vcr_requests, "responses": vcr_responses}, yamlserializer))
    interactions, problems = cassette_reading.read_cassette(path)
    assert problems == []
    first, second = interactions
    assert first.request == Request("GET", "http://h.example/a?x=1", (("Accept", "*/*"),), b"")
    assert first.response.body == b"hi" and first.response.headers == ()  # framing is not kept
    assert second.request.body == b'{"k": 1}'
    assert second.response.body == b'{"zipped": 1}' and second.response.headers == ()  # stored decoded
    path.write_text(vcr_serialize({"requests": vcr_requests[:1], "responses": vcr_responses[:1]}, jsonserializer))
    (only,), problems = cassette_reading.read_cassette(path)
    assert problems == [] and only.response.body == b"hi"


def test_secrets_are_redacted_again_on_export(tmp_path):
    leaky = exchange(f"http://api.example/x?api_key={SECRET}&q=1", method="POST",
                     req_headers=(("X-RapidAPI-Key", SECRET), ("Authorization", f"Bearer {SECRET}"),
                                  ("Content-Type", "application/json")),
                     body=json.dumps({"access_token": SECRET, "q": "x"}).encode(),
                     resp_headers=(("Set-Cookie", f"s={SECRET}"), ("X-Echo", SECRET)),
                     resp_body=f'{{"echo": "{SECRET}"}}'.encode())
    for fmt in ("yaml", "json"):
        path = tmp_path / f"leak.{fmt}"
        cassettes.write_cassette(path, [leaky], fmt)
        raw = path.read_bytes()
        assert SECRET.encode() not in raw
        assert b"REDACTED" in raw
        (interaction,), _ = cassette_reading.read_cassette(path)
        assert "q=1" in interaction.request.url and json.loads(interaction.request.body)["q"] == "x"


def test_json_refuses_binary_bodies_clearly_and_writes_nothing(tmp_path):
    path = tmp_path / "bin.json"
    with pytest.raises(StbError, match=r"interaction\(s\) 2, 3 .*--format yaml"):
        cassettes.write_cassette(path, SAMPLES, "json")
    assert list(tmp_path.iterdir()) == []


def test_write_is_atomic_and_stays_at_the_output_path(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    path = out / "c.yaml"
    path.write_text("old contents")
    monkeypatch.setattr(cassettes.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(28, "No space left")))
    with pytest.raises(OSError):
        cassettes.write_cassette(path, SAMPLES, "yaml")
    assert path.read_text() == "old contents" and sorted(p.name for p in out.iterdir()) == ["c.yaml"]
    monkeypatch.undo()
    cassettes.write_cassette(path, SAMPLES[:1], "yaml")
    assert sorted(p.name for p in out.iterdir()) == ["c.yaml"] and "interactions" in path.read_text()
    with pytest.raises(InputError, match="does not exist"):
        cassettes.write_cassette(tmp_path / "missing" / "c.yaml", SAMPLES, "yaml")
    assert not (tmp_path / "missing").exists()


@pytest.mark.parametrize("raw", ["../../etc/passwd", "has space", "ünïcode-名前", "a/b\\c", "..", "x" * 300])
def test_odd_session_names_give_a_cassette_in_the_output_folder(tmp_path, raw):
    name = safe_session_name(raw)
    path = tmp_path / f"{name}.yaml"
    cassettes.write_cassette(path, SAMPLES[:1], "yaml")
    assert [p.resolve() for p in tmp_path.iterdir()] == [path.resolve()]
    assert path.resolve().parent == tmp_path.resolve()


def test_format_follows_the_file_name_unless_chosen():
    assert cassettes.format_for("x.JSON") == "json"
    assert cassettes.format_for("x.yaml") == cassettes.format_for("x") == "yaml"
    assert cassettes.format_for("x.json", "yaml") == "yaml"


# -- bad cassettes ---------------------------------------------------------------------------------

GOOD = {"request": {"method": "GET", "uri": "http://h.example/a", "body": None, "headers": {}},
        "response": {"status": {"code": 200, "message": "OK"}, "headers": {}, "body": {"string": "ok"}}}


def with_change(path: str, value) -> dict:
    interaction = json.loads(json.dumps(GOOD))
    *parents, last = path.split(".")
    target = interaction
    for part in parents:
        target = target[part]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return interaction


@pytest.mark.parametrize("interaction,reason", [
    (with_change("request", KeyError), "missing request"),
    (with_change("response", KeyError), "missing response"),
    (with_change("request.uri", KeyError), "missing request.uri"),
    (with_change("request.method", KeyError), "missing request.method"),
    (with_change("request.uri", "/relative"), "not an absolute URL"),
    (with_change("request.method", "GET /x"), "not an HTTP method"),
    (with_change("request.headers", ["a"]), "request.headers must be a mapping"),
    (with_change("request.body", {"x": 1}), "request.body must be text or bytes"),
    (with_change("response.status", KeyError), "missing response.status"),
    (with_change("response.status.code", "200"), "code must be a number"),
    (with_change("response.status.code", 42), "code must be a number"),
    (with_change("response.body", KeyError), "missing response.body"),
    (with_change("response.body", "ok"), "response.body must be a mapping"),
    (with_change("response.body.string", KeyError), "response.body has no 'string'"),
    (with_change("response.headers", {"X": [{"nested": 1}]}), "not text"),
    ("just text", "must be a mapping"),
])
def test_a_bad_interaction_is_one_problem_and_the_rest_still_load(tmp_path, interaction, reason):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump({"interactions": [GOOD, interaction, GOOD], "version": 1}))
    interactions, problems = cassette_reading.read_cassette(path)
    assert [i.index for i in interactions] == [0, 2]
    assert [p.index for p in problems] == [1] and reason in problems[0].reason
    assert str(problems[0]).startswith("interaction 1: ")


@pytest.mark.parametrize("text,message", [
    ("interactions: []\nversion: 2\n", "version 2 is not supported"),
    ("interactions: []\n", "looks truncated (the file ends early): it has 0 interactions but no 'version'"),
    ("interactions:\n- request: {method: GET}\n", "looks truncated (the file ends early): it has 1 interactions"),
    ("interactions:\n- request:\n    body: 'cut in the mid", "looks truncated (the file ends early): invalid YAML"),
    ('{"interactions": [{"request": {"method": "GET", "uri": "http://a.exam', "looks truncated"),
    ('{"interactions": [{"request": {}}], "version": 1', "looks truncated (the file ends early): invalid JSON"),
    ('{"log": {"version": "1.2", "entries": []}}', "a HAR file (an HTTP Archive, as browsers and mitmproxy's "
                                                   "hardump write), not a vcrpy cassette; expected a vcrpy cassette"),
    ("", "an empty file, not a vcrpy cassette"),
    ("2160:9:websocket;0:~8:response;", "a mitmproxy flow file (mitmdump -w; 'stbproxy import cassette' reads it "
                                         "into a store), not a vcrpy cassette"),
    ('{"other": 1}', "a JSON document without a top-level 'interactions', not a vcrpy cassette"),
    ('{"interactions": [], "version": "1"}', "version '1' is not supported"),
    ("- request: {}\n  response: {}\n", "before 1.0"),
    ("version: 1\n", "a YAML document without a top-level 'interactions', not a vcrpy cassette"),
    ("interactions: {}\nversion: 1\n", "'interactions' must be a list"),
    ("interactions: [\nversion: 1\n", "invalid YAML"),
    ('{"interactions": [,]}', "invalid JSON"),
    ("!!python/object/apply:os.system ['touch PWNED']\n", "unsafe or unknown YAML tag"),
    ("interactions:\n- !!python/object/apply:os.system ['touch PWNED']\nversion: 1\n", "unsafe or unknown YAML tag"),
    ("interactions:\n- !!python/object:stbproxy.models.Request {method: GET}\nversion: 1\n", "unsafe or unknown"),
    ("interactions: !!python/name:os.system\nversion: 1\n", "unsafe or unknown YAML tag"),
    ("x: !!python/module:os\n", "unsafe or unknown YAML tag"),
])
def test_a_bad_cassette_is_a_clear_error_naming_the_file(tmp_path, monkeypatch, text, message):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        cassette_reading.read_cassette(path)
    assert str(path) in str(caught.value) and message in str(caught.value)
    assert not (tmp_path / "PWNED").exists()


def test_non_utf8_and_missing_files_are_clear_errors(tmp_path):
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"interactions: []\nversion: 1\n# caf\xe9\n")
    with pytest.raises(InputError, match="not UTF-8"):
        cassette_reading.read_cassette(path)
    path.write_bytes(gzip.compress(b"interactions: []\nversion: 1\n"))
    with pytest.raises(InputError, match=r"a gzip-compressed file \(decompress it first\), not a vcrpy cassette"):
        cassette_reading.read_cassette(path)
    with pytest.raises(InputError, match="cannot read"):
        cassette_reading.read_cassette(tmp_path / "nope.yaml")


def test_binary_bodies_in_yaml_cassettes_are_read_as_bytes(tmp_path):
    path = tmp_path / "bin.yaml"
    path.write_text(yamlserializer.serialize({"version": 1, "interactions": [
        {"request": {"method": "POST", "uri": "http://h.example/u", "body": b"\x00\xff", "headers": {}},
         "response": {"status": {"code": 200, "message": "OK"}, "headers": {}, "body": {"string": b"\xfe\x00"}}}]}))
    assert "!!binary" in path.read_text()
    (interaction,), problems = cassette_reading.read_cassette(path)
    assert problems == [] and interaction.request.body == b"\x00\xff" and interaction.response.body == b"\xfe\x00"


def test_flow_files_are_told_apart_from_cassettes():
    assert cassette_reading.is_flow_file(b"1234:4:type,4:http;")
    assert not cassette_reading.is_flow_file(b"interactions:\n")
    assert not cassette_reading.is_flow_file(b'{"interactions"')


# -- importing an interaction ---------------------------------------------------------------------


def test_imported_exchange_is_keyed_like_the_proxy_and_redacted():
    request = Request("GET", f"http://h.example/a?x=1&api_key={SECRET}", (("X-RapidAPI-Key", SECRET),))
    response = Response(200, (("Content-Length", "99"), ("X-Stb-Source", "upstream"), ("X-Echo", SECRET)),
                        f"echo {SECRET}".encode())
    ex = cassette_reading.imported_exchange(request, response, catalog=None, rules=DEFAULT_RULES, now=5.0)
    assert ex.key == request_key(request) and ex.source is Source.IMPORTED and ex.stored_at == 5.0
    assert SECRET not in repr(ex) and ex.response.body == b"echo REDACTED"
    assert ex.response.headers == (("X-Echo", "REDACTED"),)


def test_imported_exchange_gets_the_api_key_when_the_catalog_maps_it(tmp_path):
    catalog_file = tmp_path / "catalog.json"
    Catalog().save(catalog_file)
    catalog = Catalog.load(catalog_file)
    routed = _catalog_with_weather(tmp_path)
    request = Request("GET", "https://weather.p.rapidapi.com/current?city=Paris",
                      (("X-RapidAPI-Host", "weather.p.rapidapi.com"),))
    plain = cassette_reading.imported_exchange(request, Response(200), catalog=catalog, rules=DEFAULT_RULES, now=0.0)
    mapped = cassette_reading.imported_exchange(request, Response(200), catalog=routed, rules=DEFAULT_RULES, now=0.0)
    assert plain.key.startswith("http/") and plain.api is None
    assert mapped.key.startswith("api/Weather/") and mapped.api.category == "Weather" and mapped.api.api == "current"
    assert mapped.key == http_call(request, routed, DEFAULT_RULES).key  # the key the proxy would use


def test_an_exported_virtual_call_is_keyed_as_its_api_call_again():
    # A /virtual call of an API whose URL the catalog does not know is stored (and
    # exported) as a stand-in request; importing it must give back the API's key, so
    # that `serve --cassette` answers the same /virtual call from it.
    # Its arguments keep their order and types, which its exact key is made of.
    ref = ApiRef("Data", "theclique_for_Data", "songkick_concert")
    args = {"page": 2, "id_conc": "40698227"}
    stand_in = stored_request(ref, None, args)
    ex = cassette_reading.imported_exchange(stand_in, Response(200), catalog=None, rules=DEFAULT_RULES, now=0.0)
    assert ex.api == ref and ex.key == exact_api_key(ref, "{'page': 2, 'id_conc': '40698227'}")
    canonical = KeyRules(stb_keys="canonical")
    again = cassette_reading.imported_exchange(stand_in, Response(200), catalog=None, rules=canonical, now=0.0)
    assert again.key == api_key(ref, {"id_conc": "40698227", "page": "2"}, canonical)
    other = Request("POST", "http://virtual.invalid/not/an/api/call", (), b"[]")
    assert cassette_reading.imported_exchange(other, Response(200), catalog=None, rules=DEFAULT_RULES,
                                       now=0.0).key == request_key(other)


def _catalog_with_weather(tmp_path: Path) -> Catalog:
    tools = tmp_path / "tools" / "Weather"
    tools.mkdir(parents=True)
    (tools / "weather.json").write_text(json.dumps({
        "tool_name": "weather", "standardized_name": "weather", "host": "weather.p.rapidapi.com",
        "api_list": [{"name": "current", "url": "https://weather.p.rapidapi.com/current", "method": "GET",
                      "required_parameters": [{"name": "city", "type": "STRING"}], "optional_parameters": []}],
    }))
    catalog = Catalog()
    catalog.load_tools_dir(tmp_path / "tools")
    return catalog


def test_vcrpys_loader_refuses_object_construction(tmp_path, monkeypatch):
    # The loader we rely on: a tag naming a callable is refused, never called.
    monkeypatch.chdir(tmp_path)
    with pytest.raises(yaml.constructor.ConstructorError):
        yamlserializer.deserialize("!!python/object/apply:os.system ['touch PWNED']")
    assert not os.path.exists("PWNED")


@pytest.mark.parametrize("answer", [
    {"error": "", "response": "API rate limit exceeded"},  # a cached failure, plain
    {"error": "Function executing from x error...\ntimed out", "response": ""},  # an error text
    {"response": "the other way round", "error": ""},  # kept whole
    {"error": "", "response": {"a": 1}, "took": 0.5},
])
def test_a_stabletoolbench_answer_crosses_a_cassette_as_it_is_served(answer):
    """An imported answer's error text and whole object ride in the cassette, so that a
    cassette replays the answer StableToolBench's server would give."""
    from stbproxy.stb.bodies import answer_parts
    from stbproxy.stb.virtual_calls import reply_from_answer

    ref = ApiRef("Data", "theclique_for_Data", "songkick_concert")
    response, meta = answer_parts(answer)
    exchange = Exchange(exact_api_key(ref, "{'id_conc': '1'}"), stored_request(ref, None, {"id_conc": "1"}),
                        response, Source.IMPORTED, 0.0, api=ref, meta=meta)
    (interaction,) = cassettes.exchanges_to_cassette([exchange])["interactions"]
    request = Request(interaction["request"]["method"], interaction["request"]["uri"], (),
                      interaction["request"]["body"].encode())
    headers = tuple((k, v) for k, values in interaction["response"]["headers"].items() for v in values)
    body = interaction["response"]["body"]["string"]
    again = cassette_reading.imported_exchange(
        request, Response(200, headers, body.encode() if isinstance(body, str) else body),
        catalog=None, rules=DEFAULT_RULES, now=0.0)
    assert again.key == exchange.key
    served = reply_from_answer(again.response, Source.CACHE, again.meta)
    assert json.dumps(served.document) == json.dumps(answer)
    assert not any(k.lower() in ("x-stb-error", "x-stb-answer") for k, _ in again.response.headers)


@pytest.mark.parametrize("tool_input", ['{"city": "Paris", "days": 3}', '{"days": "3", "city": "Paris"}',
                                        '{"city": "Paris", "days": "3"}'])
def test_a_virtual_call_of_an_api_with_a_url_is_keyed_back_from_its_cassette(tool_input):
    """Under exact keys the request kept with a /virtual call must give its key back when a
    cassette is read: a query would turn 3 into "3" or reorder the arguments, so such a call
    keeps a stand-in with its arguments as they were; one whose query reads back keeps the
    real call."""
    from stbproxy.stb.api_doc import ApiDoc, Param
    from stbproxy.stb.traffic import StableToolBench
    from stbproxy.stb.virtual_calls import VirtualUpstream, parse

    doc = ApiDoc(category="Weather", tool="Open Weather", api="Forecast by city", method="GET",
                 url="https://open-weather.p.rapidapi.com/forecast/{city}",
                 required_parameters=(Param("city"),), optional_parameters=(Param("days", "NUMBER"),))
    catalog = Catalog([doc])
    call = StableToolBench(catalog, VirtualUpstream()).virtual_call(parse(json.dumps({
        "category": "Weather", "tool_name": "Open Weather", "api_name": "Forecast by city",
        "tool_input": tool_input, "strip": "", "toolbench_key": ""}).encode()), DEFAULT_RULES)
    again = cassette_reading.imported_exchange(call.request, Response(200), catalog=catalog, rules=DEFAULT_RULES,
                                               now=0.0)
    assert again.key == call.key
    assert (call.request.host == "open-weather.p.rapidapi.com") is (tool_input == '{"city": "Paris", "days": "3"}')
