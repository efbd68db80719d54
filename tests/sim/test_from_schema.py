"""Values made up from JSON Schemas: each one follows its schema, the same key gives the
same value, and documented values come first."""

from __future__ import annotations

import pytest

from stbproxy.json_schema import problem, schema_problem
from stbproxy.synthesis.from_schema import value_for

SCHEMAS = {
    "object": {"type": "object", "properties": {"city": {"type": "string"}, "high": {"type": "number"},
                                                "days": {"type": "integer", "minimum": 1, "maximum": 7}},
               "required": ["city", "high", "days"]},
    "formats": {"type": "object", "properties": {
        "day": {"type": "string", "format": "date"}, "at": {"type": "string", "format": "date-time"},
        "mail": {"type": "string", "format": "email"}, "id": {"type": "string", "format": "uuid"},
        "code": {"type": "string", "minLength": 3, "maxLength": 3}}, "required": ["day", "at", "mail", "id", "code"]},
    "enum and bounds": {"type": "object", "properties": {
        "unit": {"enum": ["C", "F"]}, "pct": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "step": {"type": "integer", "multipleOf": 5, "minimum": 10, "maximum": 20}}, "required": ["unit", "pct"]},
    "arrays": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "integer"}},
                                          "required": ["n"]}, "minItems": 3, "maxItems": 4},
    "refs and combinations": {"$defs": {"place": {"type": "object", "properties": {"name": {"type": "string"}},
                                                  "required": ["name"]}},
                              "type": "object", "properties": {
                                  "home": {"$ref": "#/$defs/place"},
                                  "either": {"oneOf": [{"type": "integer"}, {"type": "string"}]},
                                  "both": {"allOf": [{"properties": {"a": {"type": "string"}}, "required": ["a"]},
                                                     {"properties": {"b": {"type": "boolean"}}, "required": ["b"]}]},
                                  "maybe": {"type": ["null", "string"]}},
                              "required": ["home", "either", "both"]},
    "required but undescribed": {"type": "object", "required": ["note"]},
    "a tool's default result wrapper": {"properties": {"result": {"title": "Result", "type": "string"}},
                                        "required": ["result"], "title": "shoutOutput", "type": "object"},
}


@pytest.mark.parametrize("schema", SCHEMAS.values(), ids=SCHEMAS.keys())
def test_a_value_follows_its_schema_and_the_same_key_gives_the_same_value(schema):
    assert schema_problem(schema) is None
    value = value_for(schema, "mcp/h/1/tools/call/x/abc")
    assert problem(value, schema) is None, value
    assert value_for(schema, "mcp/h/1/tools/call/x/abc") == value


def test_documented_values_come_first():
    assert value_for({"type": "string", "const": "fixed"}, "k") == "fixed"
    assert value_for({"type": "integer", "examples": [42, 7]}, "k") == 42
    assert value_for({"type": "string", "default": "d"}, "k") == "d"


def test_problems_name_the_place():
    assert problem({"days": "x"}, SCHEMAS["object"]).startswith("/")
    assert "is not of type 'integer'" in problem({"city": "a", "high": 1, "days": "x"}, SCHEMAS["object"])
    assert "invalid" in schema_problem({"type": 5})
