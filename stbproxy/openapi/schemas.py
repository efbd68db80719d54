"""An OpenAPI schema object as a JSON Schema 2020-12 whose references name the document's
shared schemas, ``#/$defs/NAME`` (``Bundler.defs``: each converted once per document, so a
schema that a thousand operations reach is kept once; json_schema.with_defs makes one
document of a schema and them, recursive schemas included), and OpenAPI 3.0's dialect made
standard: ``nullable`` becomes a ``"null"`` type (an ``enum`` without null still refuses
null, as 3.0.3 says), boolean ``exclusiveMinimum``/``exclusiveMaximum`` become numbers, and
``$ref`` siblings are dropped as 3.0 says. A 3.1 schema is JSON Schema already. A
``pattern`` that cannot be read even as ECMA-262 is dropped, with a warning naming its
place: it costs that one constraint, not the document. Pure."""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from stbproxy import json_schema
from stbproxy.errors import InputError

# Keywords whose value is a schema, a list of schemas or a map of schemas: only these are
# walked, so that a property named "$ref" or an example holding one is left alone.
_ONE = ("additionalProperties", "items", "not", "if", "then", "else", "contains", "propertyNames",
        "unevaluatedItems", "unevaluatedProperties", "additionalItems")
_LIST = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAP = ("properties", "patternProperties", "dependentSchemas", "$defs", "definitions")

Lookup = Callable[[str, str], Any]  # (ref, where it sits) -> the referenced node


class Bundler:
    """Turns the schemas of one document into self-contained JSON Schemas.

    ``lookup`` resolves a local ``$ref`` (it raises InputError naming the place for one that
    points at nothing); ``dialect`` is "3.0" or "3.1"."""

    def __init__(self, lookup: Lookup, dialect: str) -> None:
        self._lookup = lookup
        self._dialect = dialect
        self._names: dict[str, str] = {}  # ref -> its name under $defs
        self._refs: dict[str, str] = {}  # the other way
        self._converted: dict[str, Any] = {}  # ref -> the converted schema it names
        self.defs: dict[str, Any] = {}  # name -> the converted schema: the document's shared schemas
        self.warnings: list[str] = []  # constraints dropped, each with its place

    def local(self, schema: Any, where: str) -> Any:
        """``schema`` (found at JSON pointer ``where``) converted, its references naming ``defs``."""
        return self._convert(schema, where, [])

    def bundle(self, schema: Any, where: str) -> Any:
        """``schema`` (found at JSON pointer ``where``) with every schema it reaches under ``$defs``."""
        used: list[str] = []
        top = self._convert(schema, where, used)
        defs: dict[str, Any] = {}
        while used:
            ref = used.pop()
            name = self._names[ref]
            if name not in defs:
                defs[name] = self._converted[ref]
                used.extend(self._refs_inside(ref))
        if not defs:
            return top
        if not isinstance(top, dict):  # a boolean schema cannot hold $defs, and needs none
            return top
        return {**top, "$defs": {**top.get("$defs", {}), **defs}}

    def source_of(self, name: str) -> str:
        """The JSON pointer of the schema named ``name`` under ``$defs``."""
        return self._refs[name][1:] or "/"

    def _refs_inside(self, ref: str) -> list[str]:
        found: list[str] = []
        self._collect(self._converted[ref], found)
        return found

    def _collect(self, node: Any, found: list[str]) -> None:
        if isinstance(node, dict):
            target = node.get("$ref")
            if isinstance(target, str) and target.startswith("#/$defs/"):
                ref = self._refs.get(target[len("#/$defs/"):])
                if ref is not None:
                    found.append(ref)
            for value in node.values():
                self._collect(value, found)
        elif isinstance(node, list):
            for value in node:
                self._collect(value, found)

    def _convert(self, schema: Any, where: str, used: list[str]) -> Any:
        if isinstance(schema, bool):
            return schema
        if not isinstance(schema, dict):
            raise InputError(f"{where}: a schema must be an object, not {type(schema).__name__}")
        ref = schema.get("$ref")
        if isinstance(ref, str):
            name = self._define(ref, where)
            used.append(ref)
            pointer = {"$ref": f"#/$defs/{name}"}
            if self._dialect == "3.0":
                return pointer  # 3.0: "$ref" siblings are ignored
            rest = {k: v for k, v in schema.items() if k != "$ref"}
            return {**self._convert(rest, where, used), **pointer} if rest else pointer
        out: dict[str, Any] = {}
        for key, value in schema.items():
            here = f"{where}/{_escape(key)}"
            if key in _ONE and isinstance(value, (dict, bool)):
                out[key] = self._convert(value, here, used)
            elif key in _LIST and isinstance(value, list):
                out[key] = [self._convert(v, f"{here}/{i}", used) for i, v in enumerate(value)]
            elif key in _MAP and isinstance(value, dict):
                out[key] = {k: self._convert(v, f"{here}/{_escape(k)}", used) for k, v in value.items()}
            elif key == "items" and isinstance(value, list):  # an old tuple form
                out["prefixItems"] = [self._convert(v, f"{here}/{i}", used) for i, v in enumerate(value)]
            elif key == "examples" and not isinstance(value, list):  # a map, as media types write them
                self.warnings.append(f"{here}: examples dropped: a schema's examples are a list")
            elif key == "pattern" and json_schema.pattern_error(value) is not None:
                self.warnings.append(f"{here}: pattern {value!r} dropped: {json_schema.pattern_error(value)}")
            else:
                out[key] = value
        if isinstance(out.get("patternProperties"), dict):
            out["patternProperties"] = self._readable(out["patternProperties"], f"{where}/patternProperties")
        return _standard(out) if self._dialect == "3.0" else out

    def _define(self, ref: str, where: str) -> str:
        """The $defs name of ``ref``, converting its target the first time it is met."""
        name = self._names.get(ref)
        if name is not None:
            return name
        name = _def_name(ref, self._refs.keys())
        self._names[ref] = name  # before converting: a recursive target finds its own name
        self._refs[name] = ref
        target = self._lookup(ref, f"{where}/$ref")
        self._converted[ref] = self.defs[name] = self._convert(target, ref[1:] or "/", [])
        return name

    def _readable(self, patterns: dict[str, Any], where: str) -> dict[str, Any]:
        """``patternProperties`` without the patterns that cannot be read (each a warning)."""
        kept = {}
        for pattern, schema in patterns.items():
            error = json_schema.pattern_error(pattern)
            if error is None:
                kept[pattern] = schema
            else:
                self.warnings.append(f"{where}/{_escape(pattern)}: pattern property dropped: {error}")
        return kept


def _standard(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI 3.0's schema keywords in JSON Schema's own terms."""
    if schema.pop("nullable", False) is True:
        kind = schema.get("type")
        if isinstance(kind, str):
            schema["type"] = [kind, "null"]
        elif isinstance(kind, list) and "null" not in kind:
            schema["type"] = [*kind, "null"]
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        flag = schema.get(exclusive)
        if isinstance(flag, bool):
            del schema[exclusive]
            if flag and bound in schema:
                schema[exclusive] = schema.pop(bound)
    return schema


def _def_name(ref: str, taken) -> str:
    """``#/components/schemas/Pet`` -> ``Pet``; a name already taken, or another place,
    gets its whole pointer in a safe spelling."""
    parts = [_unescape(p) for p in ref.lstrip("#").strip("/").split("/")]
    short = parts[-1] if parts[:2] == ["components", "schemas"] and len(parts) == 3 else ""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", short or "_".join(parts)) or "root"
    base, n = name, 2
    while name in taken:
        name, n = f"{base}_{n}", n + 1
    return name


def _escape(key: str) -> str:
    return str(key).replace("~", "~0").replace("/", "~1")


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def closed(schema: Any, defs: Mapping[str, Any] | None) -> Any:
    """``schema`` with the shared schemas it reaches, and only those, under its ``$defs``: one
    document that stands alone (for a prompt, or a tool that reads one schema)."""
    if not defs or not isinstance(schema, dict):
        return schema
    reached: dict[str, Any] = {}
    pending = _names_in(schema)
    while pending:
        name = pending.pop()
        if name in reached or name not in defs:
            continue
        reached[name] = defs[name]
        pending.extend(_names_in(defs[name]))
    return {**schema, "$defs": {**reached, **schema.get("$defs", {})}} if reached else schema


def _names_in(node: Any) -> list[str]:
    found: list[str] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            ref = item.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                found.append(ref[len("#/$defs/"):])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found
