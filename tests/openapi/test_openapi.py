"""OpenAPI specs read into operations, requests matched and keyed by operation, real answers
checked against the documented schemas, and every simulated answer valid for its schema."""

from __future__ import annotations

import asyncio
import json

import pytest

from stbproxy import json_schema
from stbproxy.errors import InputError
from stbproxy.keys import DEFAULT_RULES, KeyRules
from stbproxy.kinds import kinds_for
from stbproxy.models import Request, Response
from stbproxy.openapi.catalog import OpenApiCatalog, openapi_secret_names
from stbproxy.openapi.schemas import closed
from stbproxy.openapi.spec import read_spec, spec_of
from stbproxy.openapi.traffic import answer_problem, schema_value
from stbproxy.sim.simulators import SchemaSimulator
from stbproxy.synthesis.simulation import Simulation
from tests.openapi_demo.specs import pets_spec, warehouse_spec, write_json, write_yaml

PETS = "http://127.0.0.1:9/v1"
WAREHOUSE = "https://stock.example.test:8443/api"


@pytest.fixture
def catalog(tmp_path) -> OpenApiCatalog:
    found = OpenApiCatalog()
    found.add(read_spec(write_yaml(pets_spec("http://127.0.0.1:9"), tmp_path / "pets.yaml")))
    found.add(read_spec(write_json(warehouse_spec("https://stock.example.test:8443/api"), tmp_path / "stock.json")))
    return found


def op(catalog, name):
    found = catalog.operation(name)
    assert found is not None, name
    return found


# -- reading specs ---------------------------------------------------------------------------


def test_a_yaml_3_0_spec_is_read_with_refs_resolved_and_its_dialect_made_standard(catalog):
    get_pet = op(catalog, "pet-shop/getPet")
    assert (get_pet.method, get_pet.path, get_pet.servers) == ("GET", "/pets/{petId}", (PETS,))
    [pet_id] = get_pet.parameters  # the path item's $ref'd parameter
    assert (pet_id.name, pet_id.where, pet_id.required, pet_id.schema) == ("petId", "path", True, {"type": "integer"})
    schema = closed(get_pet.replies["200"].content["application/json"].schema, get_pet.defs)
    pet = schema["$defs"]["Pet"]
    assert pet["properties"]["tag"]["type"] == ["string", "null"]  # 3.0 nullable
    assert pet["properties"]["litter"]["items"] == {"$ref": "#/$defs/Pet"}  # recursive, kept as a ref
    assert "Owner" in schema["$defs"] and "Vaccination" in schema["$defs"]
    limit = op(catalog, "pet-shop/listPets").parameters[0].schema
    assert limit == {"type": "integer", "minimum": 1, "exclusiveMaximum": 20}  # 3.0's boolean bound
    not_found = get_pet.replies["404"].content["application/json"].schema  # a $ref'd response
    assert json_schema.problem({"message": "gone"}, not_found, get_pet.defs) is None
    assert get_pet.replies["200"].content["application/json"].examples == (
        {"id": 7, "name": "Rex", "status": "sold", "tag": None},)


def test_a_json_3_1_spec_keeps_type_lists_and_ref_siblings(catalog):
    get_item = op(catalog, "warehouse/getItem")
    assert get_item.servers == (WAREHOUSE,)
    schema = closed(get_item.replies["200"].content["application/json"].schema, get_item.defs)
    assert schema["description"] == "An item in stock." and schema["$ref"] == "#/$defs/Item"
    item = schema["$defs"]["Item"]
    assert item["properties"]["weight"]["type"] == ["number", "null"]
    assert item["properties"]["count"]["exclusiveMinimum"] == 0
    assert {p.where for p in get_item.parameters} == {"path", "header"}


def test_every_operation_is_listed_and_one_without_an_operation_id_gets_one(tmp_path):
    document = pets_spec("http://127.0.0.1:9")
    del document["paths"]["/pets"]["post"]["operationId"]
    spec = spec_of(document, source="pets")
    assert sorted(o.id for o in spec.operations) == ["getPet", "listPets", "petPhoto", "post_pets"]
    assert spec.secrets == {"query": ("appid",)}


@pytest.mark.parametrize("change,where,words", [
    (lambda d: d.update(openapi="2.0"), "/openapi", "not an OpenAPI 3.0 or 3.1 version"),
    (lambda d: d.update(swagger="2.0", openapi=None), "/swagger", "convert it to OpenAPI 3"),
    (lambda d: d["components"]["schemas"].pop("Owner"), "/components/schemas/Pet/properties/owner/$ref",
     "'#/components/schemas/Owner' points at nothing"),
    (lambda d: d["paths"]["/pets"]["get"]["parameters"][0].update({"in": "body"}),
     "/paths/~1pets/get/parameters/0/in", "'in' must be one of"),
    (lambda d: d["components"]["schemas"]["Vaccination"].update(type="date"),
     "/components/schemas/Vaccination", "the schema itself is invalid"),
    (lambda d: d["paths"]["/pets"]["get"]["responses"].update({"20x": {"description": "?"}}),
     "/paths/~1pets/get/responses/20X", "is not an HTTP status"),
    (lambda d: d["paths"]["/pets/{petId}"]["get"].update(operationId="listPets"),
     "/paths/~1pets~1{petId}/get", "is used at /paths/~1pets/get too"),
    (lambda d: d["components"]["schemas"]["Pet"]["properties"]["owner"].update({"$ref": "other.yaml#/Owner"}),
     "/components/schemas/Pet/properties/owner/$ref", "points outside the file"),
    (lambda d: d.update(servers=[{"url": "/v1"}]), "/paths/~1pets/get", "give one with --base-url"),
])
def test_a_bad_spec_is_one_error_naming_the_json_pointer(tmp_path, change, where, words):
    document = pets_spec("http://127.0.0.1:9")
    change(document)
    with pytest.raises(InputError) as caught:
        read_spec(write_json(document, tmp_path / "bad.json"))
    message = str(caught.value)
    assert f"at {where}:" in message and words in message, message


def test_unreadable_files_are_clear_errors(tmp_path):
    broken = tmp_path / "broken.yaml"
    broken.write_text("openapi: 3.0.0\npaths: [\n")
    with pytest.raises(InputError, match=r"broken.yaml is not valid YAML: .* at line \d"):
        read_spec(broken)
    with pytest.raises(InputError, match="top"):
        spec_of(["a list"], source="x")


def test_base_url_replaces_relative_servers(tmp_path):
    document = pets_spec("http://127.0.0.1:9")
    document["servers"] = [{"url": "/v1"}]
    spec = read_spec(write_json(document, tmp_path / "rel.json"), base_url="http://127.0.0.1:5555/v2/")
    assert {o.servers for o in spec.operations} == {("http://127.0.0.1:5555/v2",)}
    with pytest.raises(InputError, match="not an absolute"):
        read_spec(tmp_path / "rel.json", base_url="/v2")


def test_the_catalog_round_trips_and_a_reimport_replaces_the_spec(catalog, tmp_path):
    path = tmp_path / "openapi.json"
    catalog.save(path)
    loaded = OpenApiCatalog.load(path)
    assert [o.to_dict() for o in loaded.operations()] == [o.to_dict() for o in catalog.operations()]
    document = pets_spec("http://127.0.0.1:9")
    del document["paths"]["/owners/{ownerName}/pets/{petId}/photo"]
    replaced = loaded.add(spec_of(document, source="v2"))
    assert replaced is not None and len(replaced.operations) == 4
    assert loaded.operation("pet-shop/petPhoto") is None and len(loaded) == 2
    path.write_text("{}")
    with pytest.raises(InputError, match="not an stbproxy OpenAPI catalog"):
        OpenApiCatalog.load(path)


# -- matching and keys -------------------------------------------------------------------------


def call(catalog, method, url, body=b"", headers=(), rules=DEFAULT_RULES):
    return kinds_for(None, catalog).call(Request(method, url, tuple(headers), body), rules)


def test_requests_match_operations_by_host_method_and_template(catalog):
    assert call(catalog, "GET", f"{PETS}/pets/12").facts["operation"] == "pet-shop/getPet"
    assert call(catalog, "GET", f"{PETS}/pets/12/").facts["operation"] == "pet-shop/getPet"
    assert call(catalog, "GET", f"{PETS}/pets").facts["operation"] == "pet-shop/listPets"
    photo = call(catalog, "GET", f"{PETS}/owners/Ana%20Lee/pets/3/photo")
    assert photo.args == {"ownerName": "Ana Lee", "petId": "3"}
    assert call(catalog, "GET", "https://stock.example.test:8443/api/items/ABC-1234").kind == "openapi"
    for other in (f"{PETS}/pets/12/extra", "http://127.0.0.1:10/v1/pets", f"{PETS.replace('/v1', '')}/pets",
                  "https://stock.example.test/api/items"):
        assert call(catalog, "GET", other).key.startswith("http/"), other  # keyed as plain HTTP
    for other in ("http://127.0.0.1:10/v1/pets", "https://stock.example.test/api/items"):  # no documented server
        assert call(catalog, "GET", other).kind == "http", other
    # Under a documented server, but no operation's: plain HTTP keys; a 404 or 405 when the API is down.
    assert call(catalog, "GET", f"{PETS}/pets/12/extra").facts == {"unmatched": "pet-shop", "allowed": []}
    assert call(catalog, "DELETE", f"{PETS}/pets/12").facts == {"unmatched": "pet-shop", "allowed": ["GET"]}


def test_a_literal_path_wins_over_a_template(tmp_path):
    document = pets_spec("http://127.0.0.1:9")
    document["paths"]["/pets/mine"] = {"get": {"operationId": "myPets", "responses": {"200": {"description": "x"}}}}
    found = OpenApiCatalog({"p": spec_of(document, source="p", name="p")})
    assert call(found, "GET", f"{PETS}/pets/mine").facts["operation"] == "p/myPets"
    assert call(found, "GET", f"{PETS}/pets/7").facts["operation"] == "p/getPet"


def test_keys_are_per_operation_and_named_arguments(catalog):
    one = call(catalog, "GET", f"{PETS}/pets?status=sold&limit=3")
    assert one.key.startswith("openapi/pet-shop/listPets/")
    assert call(catalog, "GET", f"{PETS}/pets?limit=3&status=sold").key == one.key  # query order
    assert call(catalog, "GET", f"{PETS}/pets?limit=4&status=sold").key != one.key
    assert call(catalog, "GET", f"{PETS}/pets/1").key != call(catalog, "GET", f"{PETS}/pets/2").key
    # An undeclared parameter is kept in the key, and noted.
    debug = call(catalog, "GET", f"{PETS}/pets?limit=3&status=sold&debug=1")
    assert debug.key != one.key and debug.facts["undeclared"] == ["debug"]
    # Bodies are canonical JSON; a declared header counts, an undeclared one does not.
    a = call(catalog, "POST", f"{PETS}/pets", b'{"name": "Zed", "tag": "x"}', [("content-type", "application/json")])
    b = call(catalog, "POST", f"{PETS}/pets", b'{"tag":"x","name":"Zed"}', [("content-type", "application/json"),
                                                                          ("x-trace", "1")])
    assert a.key == b.key and a.args == {"name": "Zed", "tag": "x"}
    item = f"{WAREHOUSE}/items/ABC-1234"
    assert call(catalog, "GET", item, headers=[("x-warehouse", "north")]).key != call(catalog, "GET", item).key


def test_the_specs_api_key_is_secret_never_keyed(catalog, tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    catalog.save(store / "openapi.json")
    names = openapi_secret_names(store)
    assert names == {"query": frozenset({"appid"})}
    rules = KeyRules.build(secret_fields=names["query"])
    with_key = call(catalog, "GET", f"{PETS}/pets/1?appid=s3cret-1", rules=rules)
    assert with_key.key == call(catalog, "GET", f"{PETS}/pets/1?appid=other", rules=rules).key
    assert "appid" not in with_key.args
    from stbproxy.settings import Settings
    assert "appid" in Settings(store=store).key_rules().secret_fields


def test_a_secret_echoed_into_another_argument_enters_no_key(catalog):
    """A client that writes its own key into an ordinary argument too (a query value, the
    body): the value is REDACTED before it is keyed, as keys.canonical does for plain HTTP."""
    def with_key(secret: str):
        return call(catalog, "POST", f"{PETS}/pets?status={secret}",
                    json.dumps({"name": "Zed", "tag": f"owner {secret}"}).encode(),
                    [("content-type", "application/json"), ("x-api-key", secret)])

    one, other = with_key("sk-live-aaaa1111bbbb"), with_key("sk-live-cccc2222dddd")
    assert one.key == other.key
    assert one.args == {"status": "REDACTED", "name": "Zed", "tag": "owner REDACTED"}


# -- checking real answers -----------------------------------------------------------------------


def answer(status, value, content_type="application/json"):
    body = value if isinstance(value, bytes) else json.dumps(value).encode()
    return Response(status, (("content-type", content_type),), body)


PET = {"id": 3, "name": "Luna", "status": "sold"}


@pytest.mark.parametrize("status,value,content_type,problem", [
    (200, PET, "application/json", None),
    (200, dict(PET, status="lost"), "application/json", "200 /status: 'lost' is not one of"),
    (200, dict(PET, owner={"person": "A", "shop": 1}), "application/json", "200 /owner:"),
    (200, dict(PET, litter=[{"id": "x", "name": "P", "status": "sold"}]), "application/json",
     "200 /litter/0/id: 'x' is not of type 'integer'"),
    (404, {"message": "no such pet"}, "application/json", None),
    (404, {"error": "gone"}, "application/json", "404 /: 'message' is a required property"),
    (500, {"message": "boom"}, "application/json", "status 500 is not documented"),
    (200, b"<html>", "text/html", "200: the answer is text/html, not the documented application/json"),
    (200, b"{broken", "application/json", "200: the answer is not JSON"),
])
def test_real_answers_are_checked_against_the_schema_for_their_status(catalog, status, value, content_type, problem):
    found = answer_problem(op(catalog, "pet-shop/getPet"), answer(status, value, content_type))
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem), found


def test_ranges_and_defaults_are_used_for_statuses_not_listed(catalog):
    get_item = op(catalog, "warehouse/getItem")
    assert answer_problem(get_item, answer(422, {"title": "bad sku"}, "application/problem+json")) is None
    assert "'title' is a required" in answer_problem(get_item, answer(409, {}, "application/problem+json"))
    list_items = op(catalog, "warehouse/listItems")
    assert answer_problem(list_items, answer(206, {"items": [], "total": 0})) is None


def test_drift_is_kept_by_default_and_invalid_under_validity_schema(catalog):
    kinds = kinds_for(None, catalog)
    the_call = call(catalog, "GET", f"{PETS}/pets/3")
    drifted = answer(200, dict(PET, status="lost"))
    kept = kinds.of(the_call).judge(the_call, drifted, "auto")
    assert kept.verdict.valid and kept.meta["drift"].startswith("200 /status")
    assert kept.meta["operation"] == "pet-shop/getPet"
    refused = kinds.of(the_call).judge(the_call, drifted, "schema")
    assert not refused.verdict.valid and refused.verdict.reason.startswith("schema: 200 /status")
    fine = kinds.of(the_call).judge(the_call, answer(200, PET), "schema")
    assert fine.verdict.valid and "drift" not in fine.meta


def test_a_4xx_the_operation_lists_is_a_real_answer(catalog):
    from dataclasses import replace

    from stbproxy.openapi.traffic import _documented_client_error

    kinds = kinds_for(None, catalog)
    pet = call(catalog, "GET", f"{PETS}/pets/3")
    judge = kinds.of(pet).judge
    kept = judge(pet, answer(404, {"message": "no such pet"}), "auto")  # getPet lists 404
    assert kept.verdict.valid and kept.verdict.reason == "openapi: 404 is documented for pet-shop/getPet"
    assert kept.meta["failure"] == "not_found" and "drift" not in kept.meta
    drifted = answer(404, {"error": "gone"})  # listed, but not in its documented shape: drift, as for a 200
    assert judge(pet, drifted, "auto").verdict.valid and not judge(pet, drifted, "schema").verdict.valid
    assert not judge(pet, answer(400, {"message": "bad id"}), "auto").verdict.valid  # not listed
    item = call(catalog, "GET", f"{WAREHOUSE}/items/ABC-1234")  # getItem lists 4XX
    problem = answer(409, {"title": "taken"}, "application/problem+json")
    assert kinds.of(item).judge(item, problem, "auto").verdict.valid
    for transient in (408, 429):  # "try again later" says nothing of the call: never kept
        assert not kinds.of(item).judge(item, answer(transient, {"title": "later"}, "application/problem+json"),
                                        "auto").verdict.valid
    only_default = replace(op(catalog, "pet-shop/getPet"), replies={"default": op(catalog, "pet-shop/getPet")
                                                                     .replies["404"]})
    assert not _documented_client_error(only_default, answer(404, {"message": "no such pet"}))


# -- simulated answers ---------------------------------------------------------------------------


def test_every_operation_gets_schema_answers_that_follow_its_schema(catalog):
    """The promise of item 4, over every operation of both specs and many keys."""
    checked = 0
    for operation in catalog.operations():
        status, reply = operation.success()
        media = reply.json_media() if reply else None
        if media is None or media[1].schema is None:
            continue
        for n in range(60):
            value = schema_value(operation, f"key-{n}", status)
            assert json_schema.problem(value, media[1].schema, operation.defs) is None, (operation.name, n, value)
            checked += 1
    assert checked == 60 * 5


def test_schema_answers_are_deterministic_per_key_and_documented_examples_come_first(catalog):
    list_pets = op(catalog, "pet-shop/listPets")
    assert schema_value(list_pets, "a", 200) == schema_value(list_pets, "a", 200)
    assert schema_value(list_pets, "a", 200) != schema_value(list_pets, "b", 200)
    assert schema_value(op(catalog, "pet-shop/getPet"), "any", 200) == {"id": 7, "name": "Rex", "status": "sold",
                                                                       "tag": None}


def simulate_through_kind(catalog, simulator, method, url, body=b""):
    kinds = kinds_for(None, catalog)
    the_call = call(catalog, method, url, body, [("content-type", "application/json")] if body else [])
    return asyncio.run(kinds.of(the_call).simulate(the_call, simulator, "the API is down"))


def test_the_schema_simulator_answers_in_the_documented_shape_and_status(catalog, tmp_path):
    simulator = SchemaSimulator(None, None)
    made = simulate_through_kind(catalog, simulator, "POST", f"{PETS}/pets", b'{"name": "Zed"}')
    assert made.ok and made.response.status == 201
    assert made.response.header("content-type") == "application/json"
    add_pet = op(catalog, "pet-shop/addPet")
    pet_schema = add_pet.replies["201"].content["application/json"].schema
    assert json_schema.problem(json.loads(made.response.body), pet_schema, add_pet.defs) is None
    item = simulate_through_kind(catalog, simulator, "GET", f"{WAREHOUSE}/items/XYZ-0001")
    assert json.loads(item.response.body)["sku"] == "XYZ-0001"  # the call's, which follows the pattern
    item = simulate_through_kind(catalog, simulator, "GET", f"{WAREHOUSE}/items/lowercase")
    assert json.loads(item.response.body)["sku"] == "ABC-1234"  # the schema's own example, which its pattern needs


class _Says:
    """A stand-in simulator answering a fixed value (what an LLM might say)."""

    def __init__(self, value, ok=True):
        self.value, self.ok, self.jobs = value, ok, []

    async def simulate(self, job):
        self.jobs.append(job)
        body = json.dumps(self.value).encode()
        return Simulation(Response(200, (("content-type", "application/json"),), body), ok=self.ok,
                          meta={"simulator": "llm"})


def test_an_llm_answer_that_breaks_the_schema_is_replaced_and_marked(catalog):
    bad = _Says({"pets": "none"})
    made = simulate_through_kind(catalog, bad, "GET", f"{PETS}/pets?limit=2")
    assert made.ok and made.meta["simulator"] == "schema"
    assert made.meta["replaced"].startswith("llm's answer broke the schema at /: ")
    schema = closed(op(catalog, "pet-shop/listPets").replies["200"].content["application/json"].schema,
                    op(catalog, "pet-shop/listPets").defs)
    assert json_schema.problem(json.loads(made.response.body), schema) is None
    good = _Says([{"id": 4, "name": "Kit", "status": "available"}])
    made = simulate_through_kind(catalog, good, "GET", f"{PETS}/pets?limit=2")
    assert json.loads(made.response.body) == good.value and "replaced" not in made.meta


def test_the_simulator_is_told_the_operation(catalog):
    says = _Says([{"id": 4, "name": "Kit", "status": "available"}])
    simulate_through_kind(catalog, says, "GET", f"{PETS}/pets?limit=2&status=sold")
    [job] = says.jobs
    doc = job.doc
    assert (doc.tool, doc.api, doc.method, doc.url) == ("Pet Shop", "listPets", "GET", f"{PETS}/pets")
    assert doc.api_description == "List the pets for sale." and doc.tool_description.startswith("Pets for sale")
    assert [p.name for p in doc.optional_parameters] == ["limit", "status"]
    assert doc.output_schema["type"] == "array"
    assert job.args == {"limit": "2", "status": "sold"}
    add = _Says({"id": 1, "name": "Zed", "status": "sold"})
    simulate_through_kind(catalog, add, "POST", f"{PETS}/pets", b'{"name": "Zed"}')
    assert [p.name for p in add.jobs[0].doc.required_parameters] == ["name"]


def test_a_document_nested_beyond_reason_is_a_clear_error(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text('{"openapi": "3.1.0", "paths": {"/a": {"get": {"responses": {"200": {"description": "x", '
                    '"content": {"application/json": {"schema": ' + '{"items": ' * 5000 + "{}" + "}" * 5000
                    + "}}}}}}}}")
    with pytest.raises(InputError, match="deep.json: nested too deeply"):
        read_spec(deep)


def test_schema_answers_say_back_what_the_call_named(catalog):
    simulator = SchemaSimulator(None, None)
    added = simulate_through_kind(catalog, simulator, "POST", f"{PETS}/pets", b'{"name": "Zed"}')
    assert json.loads(added.response.body)["name"] == "Zed"
    one = simulate_through_kind(catalog, simulator, "GET", f"{PETS}/pets/12")
    assert json.loads(one.response.body) == {"id": 12, "name": "Rex", "status": "sold", "tag": None}
    # A value the schema refuses is not said back: id must be 1 or more.
    zero = simulate_through_kind(catalog, simulator, "GET", f"{PETS}/pets/0")
    assert json.loads(zero.response.body)["id"] == 7
    llm = _Says({"id": 3, "name": "Luna", "status": "sold"})
    assert json.loads(simulate_through_kind(catalog, llm, "GET", f"{PETS}/pets/12").response.body)["id"] == 3
