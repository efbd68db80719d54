"""An OpenAPI-described API through a real `stbproxy serve`: imported with the CLI, recorded
and replayed by operation, its secret never written, drift found and reported by `stbproxy
check`, and its misses simulated in the documented shape, offline and by an LLM."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from stbproxy import json_schema
from stbproxy.openapi.catalog import OpenApiCatalog
from stbproxy.openapi.schemas import closed
from stbproxy.store.embedded import Store
from tests.fakes.fake_openai import FakeOpenAI
from tests.openapi_demo.api import PetShop
from tests.openapi_demo.specs import pets_spec, write_yaml
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration

KEY = "appid-secret-7c1e9"


def stbproxy(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run([sys.executable, "-m", "stbproxy", *args], capture_output=True, text=True, timeout=60)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def import_spec(tmp_path: Path, store: Path, base: str) -> Path:
    spec = write_yaml(pets_spec(base), tmp_path / "pets.yaml")
    out = stbproxy("import", "openapi", str(spec), "--store", str(store)).stdout
    assert "as 'pet-shop': 4 operations" in out and "appid (query)" in out
    return spec


def get(proxy, url: str, **kwargs) -> requests.Response:
    return requests.request(kwargs.pop("method", "GET"), url, proxies={"http": proxy.url}, timeout=30, **kwargs)


def schema_of(store: Path, operation: str, status: str = "200"):
    op = OpenApiCatalog.load(store / "openapi.json").operation(f"pet-shop/{operation}")
    return closed(op.replies[status].content["application/json"].schema, op.defs)


def every_byte(store: Path) -> bytes:
    return b"".join(p.read_bytes() for p in store.rglob("*") if p.is_file())


def test_recorded_by_operation_replayed_without_the_api_and_the_key_never_written(tmp_path):
    store = tmp_path / "store"
    with PetShop(KEY) as shop:
        import_spec(tmp_path, store, shop.base)
        with ProxyProcess(store, "--mode", "record") as proxy:
            recorded = [get(proxy, f"{shop.base}/v1/pets?limit=2&appid={KEY}"),
                        get(proxy, f"{shop.base}/v1/pets/2?appid={KEY}"),
                        get(proxy, f"{shop.base}/v1/pets?appid={KEY}", method="POST", json={"name": "Zed"})]
        assert len(shop.requests) == 3
    assert [r.status_code for r in recorded] == [200, 200, 201]
    with ProxyProcess(store, "--mode", "replay") as proxy:  # the API is gone
        # Another key, the query in another order, the body's members in another order.
        replayed = [get(proxy, f"{shop.base}/v1/pets?appid=someone-else&limit=2"),
                    get(proxy, f"{shop.base}/v1/pets/2"),
                    get(proxy, f"{shop.base}/v1/pets", method="POST", data=b'{ "name":"Zed" }',
                        headers={"Content-Type": "application/json"})]
        miss = get(proxy, f"{shop.base}/v1/pets/3")
    assert [r.content for r in replayed] == [r.content for r in recorded]
    assert {r.headers["X-Stb-Source"] for r in replayed} == {"cache"}
    assert miss.status_code == 404 and miss.headers["X-Stb-Source"] == "miss"
    assert "openapi/pet-shop/getPet/" in miss.text  # the explanation names the key it looked for
    with Store(store, readonly=True) as db:
        keys = sorted(e.key.rsplit("/", 1)[0] for e in db.scan("openapi/"))
    assert keys == ["openapi/pet-shop/addPet", "openapi/pet-shop/getPet", "openapi/pet-shop/listPets"]
    assert KEY.encode() not in every_byte(store)
    exported = tmp_path / "session.yaml"
    stbproxy("export", "--store", str(store), "--all", "*", "--output", str(exported))
    assert KEY not in exported.read_text() and exported.read_text().count("uri:") == 3
    # The cassette replays by operation too (its requests keyed as the proxy keys them).
    with ProxyProcess(store, "--mode", "replay", "--cassette", str(exported)) as proxy:
        from_cassette = get(proxy, f"{shop.base}/v1/pets?limit=2&appid=a-third-key")
    assert from_cassette.content == recorded[0].content and from_cassette.headers["X-Stb-Source"] == "cache"


def test_drift_is_kept_and_reported_by_check(tmp_path):
    store = tmp_path / "store"
    with PetShop(KEY, drift=True) as shop:
        import_spec(tmp_path, store, shop.base)
        with ProxyProcess(store, "--mode", "record") as proxy:
            got = get(proxy, f"{shop.base}/v1/pets/2?appid={KEY}&debug=yes")
            get(proxy, f"{shop.base}/v1/pets?appid={KEY}")
    assert got.headers["X-Stb-Source"] == "upstream" and got.json()["status"] == "lost"  # kept, as the API said
    text = stbproxy("check", "--store", str(store))
    assert ("real drift: pet-shop/getPet: 1 of 1 real answers broke the schema; "
            "first: 200 /status: 'lost'") in text.stdout
    assert "undeclared parameters: pet-shop/getPet: debug" in text.stdout
    assert "never called (2): pet-shop/addPet, pet-shop/petPhoto" in text.stdout
    assert KEY not in text.stdout
    strict = stbproxy("check", "--store", str(store), "--strict", "--json", check=False)
    assert strict.returncode == 1
    report = json.loads(strict.stdout)
    rows = {r["operation"]: r for r in report["operations"]}
    assert rows["pet-shop/listPets"]["real_broken"] == 1
    assert re.fullmatch(r"200 /\d/name: 1 is not of type 'string'", rows["pet-shop/listPets"]["first_real_problem"])
    assert rows["pet-shop/getPet"]["undeclared_parameters"] == ["debug"]
    assert report["totals"]["with_real_drift"] == 2 and report["never_called"] == ["pet-shop/addPet",
                                                                                    "pet-shop/petPhoto"]
    assert stbproxy("check", "--store", str(store), "--spec", "nope", check=False).returncode == 2


def test_validity_schema_treats_drift_as_invalid_and_simulates_in_the_documented_shape(tmp_path):
    store = tmp_path / "store"
    with PetShop(KEY, drift=True) as shop:
        import_spec(tmp_path, store, shop.base)
        with ProxyProcess(store, "--validity", "schema", "--simulator", "schema") as proxy:
            first = get(proxy, f"{shop.base}/v1/pets?limit=3&appid={KEY}")
            again = get(proxy, f"{shop.base}/v1/pets?limit=3&appid={KEY}")
    assert first.headers["X-Stb-Source"] == "simulated" and again.headers["X-Stb-Source"] == "cache"
    assert again.headers["X-Stb-Origin"] == "simulated" and again.content == first.content
    assert json_schema.problem(first.json(), schema_of(store, "listPets")) is None
    report = json.loads(stbproxy("check", "--store", str(store), "--json").stdout)
    row = {r["operation"]: r for r in report["operations"]}["pet-shop/listPets"]
    assert (row["invalid_logged"], row["real_broken"], row["simulated"], row["simulated_broken"]) == (1, 1, 1, 0)


def test_a_dead_api_is_simulated_offline_from_its_spec(tmp_path):
    store = tmp_path / "store"
    with PetShop(KEY) as shop:
        import_spec(tmp_path, store, shop.base)
    # The shop is gone: its port refuses connections.
    with ProxyProcess(store) as proxy:
        answers = {path: get(proxy, f"{shop.base}/v1{path}") for path in ("/pets?status=sold", "/pets/1", "/pets/2")}
        added = get(proxy, f"{shop.base}/v1/pets", method="POST", json={"name": "Zed"})
    for path, answer in answers.items():
        assert answer.status_code == 200 and answer.headers["X-Stb-Source"] == "simulated", path
    assert json_schema.problem(answers["/pets?status=sold"].json(), schema_of(store, "listPets")) is None
    # the documented example, with the id the call asked for
    assert answers["/pets/1"].json() == {"id": 1, "name": "Rex", "status": "sold", "tag": None}
    assert added.status_code == 201 and json_schema.problem(added.json(), schema_of(store, "addPet", "201")) is None
    report = json.loads(stbproxy("check", "--store", str(store), "--json").stdout)
    assert report["totals"]["with_simulated_drift"] == 0 and report["never_called"] == ["pet-shop/petPhoto"]
    assert sum(r["simulated"] for r in report["operations"]) == 4


def test_the_llm_simulator_is_given_the_operation_and_its_answer_checked(tmp_path):
    store = tmp_path / "store"
    asked: list[str] = []

    def model(request: dict):
        prompt = request["messages"][-1]["content"]
        asked.append(prompt)
        if "petId" in prompt:  # getPet: a pet with a status the enum does not know
            return json.dumps({"error": "", "response": {"id": 2, "name": "Milo", "status": "napping"}})
        return json.dumps({"error": "", "response": [{"id": 9, "name": "Kit", "status": "available"}]})

    with PetShop(KEY) as shop:
        import_spec(tmp_path, store, shop.base)
    with FakeOpenAI(model) as llm:
        env = {"OPENAI_BASE_URL": f"{llm.url}/v1", "OPENAI_API_KEY": "sk-simulator-test"}
        with ProxyProcess(store, "--simulator", "llm", "--sim-model", "fake", env=env) as proxy:
            listed = get(proxy, f"{shop.base}/v1/pets?limit=1&appid={KEY}")
            one = get(proxy, f"{shop.base}/v1/pets/2?appid={KEY}")
    assert listed.json() == [{"id": 9, "name": "Kit", "status": "available"}]
    assert one.json()["status"] in ("available", "pending", "sold")  # replaced: the model's broke the enum
    prompt = asked[0]
    assert "API: listPets (GET " in prompt and "List the pets for sale." in prompt
    assert "- limit (INTEGER): How many at most." in prompt
    assert "must follow this JSON Schema" in prompt and '"minItems": 1' in prompt
    assert 'Arguments: {"limit": "1"}' in prompt and KEY not in "".join(asked)
    with Store(store, readonly=True) as db:
        metas = {e.key.split("/")[2]: e.meta for e in db.scan("openapi/")}
    assert metas["listPets"]["simulator"] == "llm"
    assert metas["getPet"]["simulator"] == "schema" and "'napping' is not one of" in metas["getPet"]["replaced"]


def test_import_errors_name_the_place_and_a_reimport_replaces(tmp_path):
    store = tmp_path / "store"
    spec = import_spec(tmp_path, store, "http://127.0.0.1:9")
    again = stbproxy("import", "openapi", str(spec), "--store", str(store), "--base-url", "http://127.0.0.1:10/api")
    assert "replaced the spec 'pet-shop' imported from" in again.stdout and "1 spec, 4 operations" in again.stdout
    assert OpenApiCatalog.load(store / "openapi.json").operation("pet-shop/getPet").servers == ("http://127.0.0.1:10/api",)
    bad = tmp_path / "bad.yaml"
    bad.write_text(spec.read_text().replace("'#/components/schemas/Owner'", "'#/components/schemas/Ownr'"))
    failed = stbproxy("import", "openapi", str(bad), "--store", str(store), check=False)
    assert failed.returncode == 2
    assert "at /components/schemas/Pet/properties/owner/$ref: $ref '#/components/schemas/Ownr' points at nothing" \
        in failed.stderr
    assert OpenApiCatalog.load(store / "openapi.json").operation("pet-shop/getPet") is not None  # kept as it was


def test_every_worker_of_serve_workers_keys_by_operation(tmp_path):
    """Reader workers key requests themselves: they must know the store's operations too."""
    store = tmp_path / "store"
    with PetShop(KEY) as shop:
        import_spec(tmp_path, store, shop.base)
        with ProxyProcess(store, "--mode", "record", "--workers", "2") as proxy:
            recorded = [get(proxy, f"{shop.base}/v1/pets/{n}?appid={KEY}") for n in (1, 2, 3)]
    with ProxyProcess(store, "--mode", "replay", "--workers", "2") as proxy:
        replayed = [get(proxy, f"{shop.base}/v1/pets/{n}?appid=other") for n in (1, 2, 3) for _ in range(4)]
    assert {r.headers["X-Stb-Source"] for r in replayed} == {"cache"}
    assert [r.content for r in replayed[::4]] == [r.content for r in recorded]
    with Store(store, readonly=True) as db:
        assert len(list(db.scan("openapi/pet-shop/getPet/"))) == 3
