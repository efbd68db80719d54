"""A value made up from a JSON Schema, the same for the same seed: what the schema simulator
answers when the call's API documents the shape of its answer (an MCP tool's
``outputSchema``). Pure.

Documented values come first (``const``, ``examples``, ``default``, ``enum``), then the
types, formats, bounds and required members; leaves are drawn by their names as the
template simulator draws them (``city`` a city, ``url`` a URL). The caller checks the
result against the schema (json_schema.py): a schema whose rules this does not follow (a
``pattern``, say) gets a value that breaks it, which is reported rather than served.
"""

from __future__ import annotations

from typing import Any

from stbproxy.sim.schema import ValueGenerator

MAX_DEPTH = 12
DEFAULT_ITEMS = 2
# Below this depth only what the schema requires is made (required members, the fewest
# items allowed), so that a schema that contains itself (a tree) still ends.
OPTIONAL_DEPTH = 4
_FORMATS = {
    "date": lambda g: g.date(),
    "date-time": lambda g: g.datetime(),
    "time": lambda g: g.datetime()[11:],
    "email": lambda g: g.string_for({"email"}),
    "uri": lambda g: g.string_for({"url"}),
    "url": lambda g: g.string_for({"url"}),
    "uuid": lambda g: g.string_for({"uuid"}),
    "ipv4": lambda g: ".".join(str(g.rng.randint(1, 254)) for _ in range(4)),
}


def value_for(schema: Any, seed_key: str | bytes) -> Any:
    """A value for ``schema``, drawn with ``seed_key``."""
    return _Maker(schema, seed_key).make(schema, "", 0)


class _Maker:
    def __init__(self, root: Any, seed_key: str | bytes) -> None:
        self.root = root
        self.gen = ValueGenerator(seed_key)

    def make(self, schema: Any, name: str, depth: int) -> Any:
        if schema is True or not isinstance(schema, dict):
            return {} if depth == 0 else self.gen.leaf("str", name)
        schema = self._resolved(schema)
        if depth > MAX_DEPTH:
            return None
        if "const" in schema:
            return schema["const"]
        examples = schema.get("examples")
        if isinstance(examples, list) and examples:
            return examples[0]
        if "example" in schema:  # OpenAPI 3.0's single example
            return schema["example"]
        if "default" in schema:
            return schema["default"]
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            return self.gen.rng.choice(schema["enum"])
        for combined in ("oneOf", "anyOf"):
            options = schema.get(combined)
            if isinstance(options, list) and options:
                return self.make(_merged(schema, options[0], combined), name, depth + 1)
        if isinstance(schema.get("allOf"), list):
            merged = {k: v for k, v in schema.items() if k != "allOf"}
            for part in schema["allOf"]:
                merged = _merged(merged, self._resolved(part) if isinstance(part, dict) else {}, None)
            return self.make(merged, name, depth + 1)
        kind = _type_of(schema)
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, name, depth)
        if kind == "string":
            return self._string(schema, name)
        if kind == "integer":
            return self._number(schema, name, integer=True)
        if kind == "number":
            return self._number(schema, name, integer=False)
        if kind == "boolean":
            return self.gen.leaf("bool", name)
        if kind == "null":
            return None
        return self.gen.leaf("str", name)

    def _resolved(self, schema: dict) -> dict:
        seen = 0
        while isinstance(schema.get("$ref"), str) and seen < MAX_DEPTH:
            target = _pointer(self.root, schema["$ref"])
            if not isinstance(target, dict):
                break
            schema = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
            seen += 1
        return schema

    def _object(self, schema: dict, depth: int) -> dict:
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        if depth >= OPTIONAL_DEPTH:
            properties = {name: sub for name, sub in properties.items() if name in required}
        made = {name: self.make(sub, name, depth + 1) for name, sub in properties.items()}
        for name in required:  # required but described nowhere: a value drawn by its name
            if isinstance(name, str) and name not in made:
                made[name] = self.gen.leaf("str", name)
        return made

    def _array(self, schema: dict, name: str, depth: int) -> list:
        prefix = schema.get("prefixItems") if isinstance(schema.get("prefixItems"), list) else []
        items = schema.get("items", {})
        low = _int(schema.get("minItems"), 0)
        high = _int(schema.get("maxItems"), max(low, DEFAULT_ITEMS))
        wanted = low if depth >= OPTIONAL_DEPTH else max(low, min(DEFAULT_ITEMS, high), len(prefix))
        count = min(wanted, high)
        out = [self.make(sub, name, depth + 1) for sub in prefix[:count]]
        while len(out) < count:
            out.append(self.make(items if isinstance(items, (dict, bool)) else {}, name, depth + 1))
        if schema.get("uniqueItems") and len({repr(v) for v in out}) < len(out):
            out = out[:1]
        return out

    def _string(self, schema: dict, name: str) -> str:
        made = _FORMATS.get(str(schema.get("format", "")))
        text = made(self.gen) if made else str(self.gen.leaf("str", name))
        low = _int(schema.get("minLength"), 0)
        high = _int(schema.get("maxLength"), None)
        if len(text) < low:
            text = text + "x" * (low - len(text))
        if high is not None and len(text) > high:
            text = text[:high]
        return text

    def _number(self, schema: dict, name: str, integer: bool) -> int | float:
        drawn = self.gen.leaf("int" if integer else "float", name)
        value = drawn if isinstance(drawn, (int, float)) and not isinstance(drawn, bool) else 1
        low, high = schema.get("minimum"), schema.get("maximum")
        if isinstance(schema.get("exclusiveMinimum"), (int, float)):
            low = schema["exclusiveMinimum"] + (1 if integer else 1e-6)
        if isinstance(schema.get("exclusiveMaximum"), (int, float)):
            high = schema["exclusiveMaximum"] - (1 if integer else 1e-6)
        if isinstance(low, (int, float)) and value < low:
            value = low
        if isinstance(high, (int, float)) and value > high:
            value = high
        step = schema.get("multipleOf")
        if isinstance(step, (int, float)) and step > 0:
            value = round(value / step) * step
        if integer:
            value = int(value)
        return value


def _type_of(schema: dict) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if isinstance(kind, str):
        return kind
    if "properties" in schema or "required" in schema:
        return "object"
    if "items" in schema or "prefixItems" in schema:
        return "array"
    return ""


def _merged(base: dict, part: dict, dropped: str | None) -> dict:
    """``base`` without ``dropped`` and with ``part``'s members; properties and required merged."""
    out = {k: v for k, v in base.items() if k != dropped}
    for k, v in part.items():
        if k == "properties" and isinstance(out.get("properties"), dict) and isinstance(v, dict):
            out["properties"] = {**out["properties"], **v}
        elif k == "required" and isinstance(out.get("required"), list) and isinstance(v, list):
            out["required"] = [*out["required"], *(r for r in v if r not in out["required"])]
        else:
            out[k] = v
    return out


def _pointer(root: Any, ref: str) -> Any:
    if not ref.startswith("#"):
        return None
    node = root
    for part in ref[1:].split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


def _int(value: Any, fallback: int | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else fallback
