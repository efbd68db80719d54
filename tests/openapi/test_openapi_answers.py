"""Issue 40's promises on small documents written here: a real answer documented without a
body is valid; simulated answers are valid HTTP and valid for the document (204 without a
body or a content type, a 302 with its Location, a JSON string as JSON, text/html as HTML,
no writeOnly member, a nullable enum that stays closed, a failed simulation no success);
a broken request is answered with the 4xx the document's validation gives, naming the
rule; ECMA-262 patterns are read, and one no dialect reads costs that constraint only."""

from __future__ import annotations

import asyncio
import json

import pytest

from stbproxy import json_schema
from stbproxy.keys import DEFAULT_RULES
from stbproxy.kinds import kinds_for
from stbproxy.models import Request, Response
from stbproxy.openapi.catalog import OpenApiCatalog
from stbproxy.openapi.spec import spec_of
from stbproxy.sim.simulators import SchemaSimulator

BASE = "http://127.0.0.1:9/v1"


class _NoStore:
    def scan(self, prefix):
        return iter(())


def document() -> dict:
    json_ok = lambda schema: {"description": "ok", "content": {"application/json": {"schema": schema}}}  # noqa: E731
    return {
        "openapi": "3.0.3", "info": {"title": "Shapes", "version": "1"}, "servers": [{"url": BASE}],
        "components": {
            "securitySchemes": {"key": {"type": "apiKey", "in": "header", "name": "X-Key"}},
            "schemas": {"User": {"type": "object", "required": ["name", "password"], "properties": {
                "id": {"type": "integer", "readOnly": True},
                "name": {"type": "string", "pattern": r"^\p{L}+$"},
                "password": {"type": "string", "writeOnly": True},
                "mood": {"type": "string", "nullable": True, "enum": ["glad", "sad"]}}}}},
        "paths": {
            "/users": {"post": {"operationId": "addUser", "security": [{"key": []}],
                                "requestBody": {"required": True, "content": {"application/json": {
                                    "schema": {"$ref": "#/components/schemas/User"}}}},
                                "responses": {"201": json_ok({"$ref": "#/components/schemas/User"}),
                                              "422": {"description": "bad"}}}},
            "/users/{id}": {
                "parameters": [{"name": "id", "in": "path", "required": True, "schema": {"type": "integer"}}],
                "delete": {"operationId": "dropUser", "responses": {"204": {"description": "gone"}}},
                "get": {"operationId": "getUser",
                        "responses": {"200": json_ok({"$ref": "#/components/schemas/User"})}}},
            "/login": {"get": {"operationId": "login", "responses": {"302": {
                "description": "to the app", "headers": {"Location": {"schema": {"type": "string"},
                                                                      "example": "https://app.example/home"}}}}}},
            "/motto": {"get": {"operationId": "motto", "responses": {"200": json_ok({"type": "string"})}}},
            "/page": {"get": {"operationId": "page", "responses": {"200": {"description": "html", "content": {
                "text/html": {"schema": {"type": "string"}}}}}}},
            "/broken": {"get": {"operationId": "broken", "responses": {"200": json_ok(
                {"type": "string", "enum": ["a"], "minLength": 3})}}},
        }}


@pytest.fixture(scope="module")
def shapes():
    spec = spec_of(document(), source="shapes.json")
    return OpenApiCatalog({spec.name: spec}), spec


def simulate(catalog, method, path, body=b"", headers=()):
    kinds = kinds_for(None, catalog)
    call = kinds.call(Request(method, BASE + path, tuple(headers), body), DEFAULT_RULES)
    return call, asyncio.run(kinds.of(call).simulate(call, SchemaSimulator(None, _NoStore()), "the API is down"))


def test_a_real_answer_documented_without_a_body_is_valid(shapes):
    catalog, _ = shapes
    kinds = kinds_for(None, catalog)
    call = kinds.call(Request("DELETE", BASE + "/users/7", (), b""), DEFAULT_RULES)
    judged = kinds.of(call).judge(call, Response(204, (), b""), "auto")
    assert judged.verdict.valid and "drift" not in judged.meta
    assert not kinds.of(call).judge(call, Response(500, (), b""), "auto").verdict.valid


def test_simulated_no_content_redirect_string_and_html_answers(shapes):
    catalog, _ = shapes
    _, gone = simulate(catalog, "DELETE", "/users/7")
    assert (gone.ok, gone.response.status, gone.response.body, gone.response.header("content-type")) == (
        True, 204, b"", None)
    _, moved = simulate(catalog, "GET", "/login")
    assert moved.response.status == 302 and moved.response.header("location") == "https://app.example/home"
    _, motto = simulate(catalog, "GET", "/motto")
    assert motto.response.header("content-type") == "application/json"
    assert isinstance(json.loads(motto.response.body), str)  # a JSON string, quoted
    _, page = simulate(catalog, "GET", "/page")
    assert page.response.header("content-type") == "text/html" and page.response.body.startswith(b"<!DOCTYPE html>")


def test_answers_hold_no_write_only_member_and_nullable_keeps_the_enum_closed(shapes):
    catalog, spec = shapes
    op = catalog.operation("shapes/getUser")
    for n in range(20):
        _, made = simulate(catalog, "GET", f"/users/{n + 1}")
        value = json.loads(made.response.body)
        assert "password" not in value
        assert json_schema.problem(value, {"$ref": "#/$defs/User"}, op.defs, "answer") is None
    assert json_schema.problem({"name": "Åsa", "mood": None}, {"$ref": "#/$defs/User"}, op.defs, "answer")
    assert "writeOnly" in json_schema.problem({"name": "Åsa", "password": "x"}, {"$ref": "#/$defs/User"},
                                              op.defs, "answer")


def test_a_simulation_that_cannot_follow_the_schema_is_no_success(shapes):
    catalog, _ = shapes
    _, made = simulate(catalog, "GET", "/broken")
    assert not made.ok and made.response.status == 502


@pytest.mark.parametrize("method,path,body,headers,status,words", [
    ("POST", "/users", b'{"name": "Zed", "password": "p"}', [], 401, "no credential"),
    ("POST", "/users", b'{"name": "Zed"}', [("x-key", "k")], 422, "'password' is a required property"),
    ("POST", "/users", b"not json", [("x-key", "k"), ("content-type", "application/json")], 422, "not JSON"),
    ("POST", "/users", b"", [("x-key", "k")], 422, "a request body is required"),
    ("GET", "/users/seven", b"", [], 422, "path parameter 'id'"),  # 422: none documented, as Prism
    ("GET", "/nowhere", b"", [], 404, "no operation of shapes matches GET"),
    ("PUT", "/users/7", b"", [], 405, "it takes DELETE, GET"),
])
def test_a_request_that_breaks_the_document_gets_its_4xx_naming_the_rule(shapes, method, path, body, headers,
                                                                          status, words):
    catalog, _ = shapes
    if body and not any(k == "content-type" for k, _ in headers):
        headers = [*headers, ("content-type", "application/json")]
    _, made = simulate(catalog, method, path, body, headers)
    expected = status
    assert made.ok and made.response.status == expected, made.response
    assert words in made.response.header("x-stb-rejected") and made.meta["rejected"] == made.response.header(
        "x-stb-rejected")
    assert json.loads(made.response.body)["status"] == expected
    _, fine = simulate(catalog, "POST", "/users", b'{"name": "Zed", "password": "p"}',
                       [("x-key", "k"), ("content-type", "application/json")])
    assert fine.response.status == 201 and "password" not in json.loads(fine.response.body)


def test_ecma_patterns_are_read_and_one_that_cannot_be_costs_only_its_constraint(shapes):
    _, spec = shapes
    assert spec.warnings == () and spec.schemas["User"]["properties"]["name"]["pattern"] == r"^\p{L}+$"
    broken = document()
    broken["components"]["schemas"]["User"]["properties"]["name"]["pattern"] = "(unclosed"
    read = spec_of(broken, source="broken.json")
    assert "pattern" not in read.schemas["User"]["properties"]["name"]
    assert len(read.warnings) == 1 and read.warnings[0].startswith("/components/schemas/User/properties/name/pattern")


def test_schemas_are_shared_once_per_document(shapes):
    catalog, spec = shapes
    schema = catalog.operation("shapes/getUser").replies["200"].content["application/json"].schema
    assert schema == {"$ref": "#/$defs/User"} and list(spec.schemas) == ["User"]
    assert spec.to_dict()["schemas"] is spec.schemas


@pytest.mark.integration
def test_bench_openapi_scale_runs_on_a_small_document(tmp_path):
    """The scale benchmark's smoke test: one small document imported, served and checked."""
    import subprocess
    import sys
    from pathlib import Path

    spec = tmp_path / "shapes.json"
    spec.write_text(json.dumps(document()))
    script = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "bench_openapi_scale.py"
    done = subprocess.run([sys.executable, str(script), "--spec", f"shapes={spec}", "--only", "shapes",
                           "--json", str(tmp_path / "out.json")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    [row] = json.loads((tmp_path / "out.json").read_text())
    assert row["import_s"] > 0 and row["catalog_mb"] > 0 and row["ready_s"] > 0 and row["serve_rss_mb"] > 0
    assert "OpenAPI shapes (7 operations)" in row["ready_line"]
