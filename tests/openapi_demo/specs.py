"""The OpenAPI documents the tests write: a pet shop in OpenAPI 3.0 (YAML; path parameters,
enums, nested objects and arrays, $refs, a recursive schema, oneOf, nullable, boolean
exclusive bounds, an apiKey scheme) and a warehouse in OpenAPI 3.1 (JSON; type lists,
numeric exclusive bounds, const, prefixItems, $ref siblings, a header parameter)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

PETS_KEY_PARAM = "appid"  # the pet shop's apiKey, in the query


def pets_spec(base: str) -> dict:
    pet = {
        "type": "object",
        "required": ["id", "name", "status"],
        "properties": {
            "id": {"type": "integer", "minimum": 1},
            "name": {"type": "string", "minLength": 1},
            "tag": {"type": "string", "nullable": True},
            "status": {"type": "string", "enum": ["available", "pending", "sold"]},
            "owner": {"$ref": "#/components/schemas/Owner"},
            "vaccinations": {"type": "array", "items": {"$ref": "#/components/schemas/Vaccination"}},
            "litter": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"}, "maxItems": 2},
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {"title": "Pet Shop", "version": "1.2.0", "description": "Pets for sale, and their owners."},
        "servers": [{"url": "{base}/v1", "variables": {"base": {"default": base}}}],
        "components": {
            "securitySchemes": {"key": {"type": "apiKey", "in": "query", "name": PETS_KEY_PARAM}},
            "parameters": {
                "PetId": {"name": "petId", "in": "path", "required": True, "schema": {"type": "integer"},
                          "description": "The pet's number."},
            },
            "schemas": {
                "Pet": pet,
                "Owner": {"oneOf": [
                    {"type": "object", "required": ["person"], "additionalProperties": False,
                     "properties": {"person": {"type": "string"}}},
                    {"type": "object", "required": ["shop", "since"], "additionalProperties": False,
                     "properties": {"shop": {"type": "integer"}, "since": {"type": "string", "format": "date"}}},
                ]},
                "Vaccination": {"type": "object", "required": ["name", "date"],
                                "properties": {"name": {"type": "string"},
                                               "date": {"type": "string", "format": "date"}}},
                "Error": {"type": "object", "required": ["message"],
                          "properties": {"message": {"type": "string"}}},
            },
            "responses": {
                "NotFound": {"description": "No such pet.",
                             "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}},
            },
        },
        "paths": {
            "/pets": {
                "get": {
                    "operationId": "listPets", "summary": "List the pets for sale.",
                    "parameters": [
                        {"name": "limit", "in": "query", "description": "How many at most.",
                         "schema": {"type": "integer", "minimum": 1, "maximum": 20, "exclusiveMaximum": True}},
                        {"name": "status", "in": "query",
                         "schema": {"type": "string", "enum": ["available", "pending", "sold"]}},
                    ],
                    "responses": {"200": {"description": "The pets.", "content": {"application/json": {
                        "schema": {"type": "array", "items": {"$ref": "#/components/schemas/Pet"},
                                   "minItems": 1, "maxItems": 5}}}}},
                },
                "post": {
                    "operationId": "addPet", "summary": "Put a pet up for sale.",
                    "requestBody": {"required": True, "content": {"application/json": {
                        "schema": {"type": "object", "required": ["name"],
                                   "properties": {"name": {"type": "string"}, "tag": {"type": "string"}}}}}},
                    "responses": {"201": {"description": "Added.", "content": {"application/json": {
                        "schema": {"$ref": "#/components/schemas/Pet"}}}}},
                },
            },
            "/pets/{petId}": {
                "parameters": [{"$ref": "#/components/parameters/PetId"}],
                "get": {
                    "operationId": "getPet", "summary": "One pet.",
                    "responses": {
                        "200": {"description": "The pet.", "content": {"application/json": {
                            "schema": {"$ref": "#/components/schemas/Pet"},
                            "examples": {"rex": {"value": {"id": 7, "name": "Rex", "status": "sold",
                                                           "tag": None}}}}}},
                        "404": {"$ref": "#/components/responses/NotFound"},
                    },
                },
            },
            "/owners/{ownerName}/pets/{petId}/photo": {
                "get": {
                    "operationId": "petPhoto",
                    "parameters": [{"name": "ownerName", "in": "path", "required": True, "schema": {"type": "string"}},
                                   {"$ref": "#/components/parameters/PetId"}],
                    "responses": {"200": {"description": "A photo.", "content": {"image/png": {}}}},
                },
            },
        },
    }


def warehouse_spec(base: str) -> dict:
    return {
        "openapi": "3.1.0",
        "info": {"title": "Warehouse", "version": "3"},
        "servers": [{"url": base}],
        "components": {"schemas": {
            "Item": {"type": "object", "required": ["sku", "count", "place"],
                     "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$",
                                            "examples": ["ABC-1234"]},
                                    "count": {"type": "integer", "exclusiveMinimum": 0},
                                    "weight": {"type": ["number", "null"]},
                                    "kind": {"const": "item"},
                                    "place": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}],
                                              "minItems": 2, "maxItems": 2},
                                    "notes": {"type": ["array", "null"], "items": {"type": "string"}}}},
        }},
        "paths": {
            "/items/{sku}": {"get": {
                "operationId": "getItem",
                "parameters": [{"name": "sku", "in": "path", "required": True, "schema": {"type": "string"}},
                               {"name": "X-Warehouse", "in": "header", "schema": {"type": "string"}}],
                "responses": {"200": {"description": "The item.", "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/Item", "description": "An item in stock."}}}},
                    "4XX": {"description": "A mistake.", "content": {"application/problem+json": {
                        "schema": {"type": "object", "required": ["title"],
                                   "properties": {"title": {"type": "string"}}}}}}},
            }},
            "/items": {"get": {
                "operationId": "listItems",
                "responses": {"2XX": {"description": "All items.", "content": {"application/json": {
                    "schema": {"type": "object", "required": ["items", "total"],
                               "properties": {"items": {"type": "array",
                                                        "items": {"$ref": "#/components/schemas/Item"}},
                                              "total": {"type": "integer", "minimum": 0}}}}}}},
            }},
        },
    }


def write_yaml(document: dict, path: Path) -> Path:
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def write_json(document: dict, path: Path) -> Path:
    path.write_text(json.dumps(document, indent=2), encoding="utf-8")
    return path
