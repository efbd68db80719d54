"""A value made up from a JSON Schema, the same for the same seed: what the schema simulator
answers when the call's API documents the shape of its answer (an MCP tool's
``outputSchema``). Pure.

Documented values come first (``const``, ``examples``, ``default``, ``enum``), then the
types, formats, patterns, bounds and required members; leaves are drawn by their names as
the template simulator draws them (``city`` a city, ``url`` a URL). An answer holds no
``writeOnly`` member (a request no ``readOnly`` one). The caller checks the result against
the schema (json_schema.py): a schema whose rules this does not follow gets a value that
breaks it, which is reported rather than served; ``attempt`` 1, 2, ... draw again without
the documented values (a document's example may break its own schema) and with the other
branches of a ``oneOf``.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, TypeVar

from stbproxy import json_schema
from stbproxy.synthesis.templates import ValueGenerator

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
    "ipv6": lambda g: "2001:db8::" + format(g.rng.randint(1, 0xFFFF), "x"),
    "hostname": lambda g: f"{g.string_for({'slug'}).replace('_', '-')}.example.com",
    "byte": lambda g: "c3RicHJveHk=",
    "uri-reference": lambda g: g.string_for({"url"}),
}
_SKIPPED = {"answer": "writeOnly", "request": "readOnly"}


def value_for(schema: Any, seed_key: str, defs: Mapping[str, Any] | None = None,
              direction: str = "answer", attempt: int = 0) -> Any:
    """A value for ``schema``, drawn with ``seed_key``; ``defs``: the shared schemas its
    ``#/$defs/NAME`` references name; ``direction``: "answer" or "request"."""
    root = {**schema, "$defs": {**defs, **schema.get("$defs", {})}} if defs and isinstance(schema, dict) else schema
    return _Maker(root, seed_key, direction, attempt).make(schema, "", 0)


class _Maker:
    def __init__(self, root: Any, seed_key: str, direction: str = "answer", attempt: int = 0) -> None:
        self.root = root
        self.gen = ValueGenerator(f"{seed_key}#{attempt}" if attempt else seed_key)
        self.skipped = _SKIPPED.get(direction, "")
        self.attempt = attempt
        self.minimal_at = -1  # the depth of an object made with its required members only

    def make(self, schema: Any, name: str, depth: int) -> Any:
        if schema is True or not isinstance(schema, dict):
            return {} if depth == 0 else self.gen.leaf("str", name)
        schema = self._resolved(schema)
        if depth > MAX_DEPTH:
            return None
        if "const" in schema:
            return schema["const"]
        documented = self._documented(schema)
        if documented is not _NONE:
            return documented
        if isinstance(schema.get("enum"), list) and schema["enum"]:
            fitting = [v for v in schema["enum"] if _fits_type(v, schema.get("type"))]
            return self.gen.rng.choice(fitting or schema["enum"])
        for combined in ("oneOf", "anyOf"):
            options = schema.get(combined)
            if isinstance(options, list) and options:
                return self._option(schema, combined, options, name, depth)
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

    def _option(self, schema: dict, combined: str, options: list, name: str, depth: int) -> Any:
        """A value made from one option; for a oneOf, one that no other option takes too (each
        option tried, then each again with only its required members)."""
        start = (self.attempt + depth) % len(options) if self.attempt else 0
        order = options[start:] + options[:start]
        first = _NONE
        for minimal in ((False, True) if combined == "oneOf" else (False,)):
            for chosen in order:
                part = self._resolved(chosen) if isinstance(chosen, dict) else {}
                self.minimal_at = depth + 1 if minimal else -1
                made = _discriminated(self.make(_merged(schema, part, combined), name, depth + 1),
                                      schema.get("discriminator"), chosen)
                self.minimal_at = -1
                if combined != "oneOf" or len(options) == 1 or depth > OPTIONAL_DEPTH:
                    return made
                first = made if first is _NONE else first
                defs = self.root.get("$defs") if isinstance(self.root, dict) else None
                if sum(json_schema.problem(made, o, defs) is None for o in options) == 1:
                    return made
        return first

    def _documented(self, schema: dict) -> Any:
        """The schema's own example or default, on the first attempt only."""
        if self.attempt:
            return _NONE
        examples = schema.get("examples")
        if isinstance(examples, list) and examples:
            return examples[0]
        if "example" in schema:  # OpenAPI 3.0's single example
            return schema["example"]
        if "default" in schema:
            return schema["default"]
        return _NONE

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
        listed, needed = schema.get("properties"), schema.get("required")
        properties: dict[Any, Any] = listed if isinstance(listed, dict) else {}
        required: list[Any] = needed if isinstance(needed, list) else []
        if self.skipped:  # writeOnly members are never in an answer, readOnly ones never in a request
            hidden = {n for n, sub in properties.items()
                      if isinstance(sub, dict) and self._resolved(sub).get(self.skipped) is True}
            properties = {n: sub for n, sub in properties.items() if n not in hidden}
            required = [n for n in required if n not in hidden]
        if depth >= OPTIONAL_DEPTH or depth == self.minimal_at:
            properties = {name: sub for name, sub in properties.items() if name in required}
        made = {name: self.make(sub, name, depth + 1) for name, sub in properties.items()}
        for name in required:  # required but described nowhere: a value drawn by its name
            if isinstance(name, str) and name not in made:
                made[name] = self.gen.leaf("str", name)
        return made

    def _array(self, schema: dict, name: str, depth: int) -> list:
        leading = schema.get("prefixItems")
        prefix: list[Any] = leading if isinstance(leading, list) else []
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
        low = _int(schema.get("minLength"), 0)
        high = _int(schema.get("maxLength"), None)
        if isinstance(schema.get("pattern"), str):
            text = text_for_pattern(schema["pattern"], self.gen.rng, low, high)
            if text is not None:
                return text
        made = _FORMATS.get(str(schema.get("format", "")))
        text = made(self.gen) if made else str(self.gen.leaf("str", name))
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


_NONE = object()  # no documented value
_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict,
    "null": type(None)}


def _fits_type(value: Any, kind: Any) -> bool:
    """Whether an enum's value has the schema's type (a document may list 1 for a string)."""
    kinds = kind if isinstance(kind, list) else [kind] if isinstance(kind, str) else []
    if not kinds:
        return True
    if isinstance(value, bool):
        return "boolean" in kinds
    return any(isinstance(value, _JSON_TYPES.get(k, object)) for k in kinds)


def _discriminated(value: Any, discriminator: Any, chosen: Any) -> Any:
    """An object of a oneOf/anyOf with a discriminator names the option it was made from."""
    name = discriminator.get("propertyName") if isinstance(discriminator, dict) else None
    if not isinstance(value, dict) or not isinstance(name, str):
        return value
    ref = chosen.get("$ref", "") if isinstance(chosen, dict) else ""
    option = ref.rsplit("/", 1)[-1]
    mapping = discriminator.get("mapping") if isinstance(discriminator.get("mapping"), dict) else {}
    tags = [k for k, v in mapping.items() if isinstance(v, str) and v.rsplit("/", 1)[-1] == option] or [option]
    if value.get(name) in tags or not tags[0] or (name in value and not mapping):
        return value
    return {**value, name: tags[0]}


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


_Fallback = TypeVar("_Fallback", int, None)


def _int(value: Any, fallback: _Fallback) -> int | _Fallback:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else fallback


# -- strings that follow a pattern ----------------------------------------------------------

_PROPERTY = re.compile(r"\\[pP]\{[^}]*\}")  # \p{L} and the like: read as a letter to draw from
_PARSER = getattr(re, "_parser", None)
_CONSTANTS: Any = getattr(re, "_constants", None)  # re's private sre module: no stubs describe it
_CHOICES = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_ .:/@"


def text_for_pattern(pattern: str, rng, low: int = 0, high: int | None = None) -> str | None:
    """A string that ``pattern`` (ECMA-262) matches, within the length bounds, drawn with
    ``rng``; None when none was found in a few draws (the caller falls back on the rest)."""
    if _PARSER is None:
        return None
    try:
        parsed = _PARSER.parse(_PROPERTY.sub("[a-z]", pattern.replace("[^]", "[\\s\\S]")))
    except (re.error, ValueError, OverflowError, RecursionError):
        return None
    for _ in range(12):
        try:
            text = _Drawer(rng).draw(parsed)
        except (RecursionError, ValueError, IndexError):
            return None
        if len(text) < low:
            text = text + (text[-1:] or "a") * (low - len(text))
        if (high is None or len(text) <= high) and json_schema.matches(pattern, text):
            return text
    return None


class _Drawer:
    """One draw from a pattern parsed by ``re``'s own parser (sre), item by item."""

    def __init__(self, rng) -> None:
        self.rng = rng
        self.groups: dict[int, str] = {}

    def draw(self, items, depth: int = 0) -> str:
        c = _CONSTANTS
        out = []
        for op, av in items:
            if op is c.LITERAL:
                out.append(chr(av))
            elif op is c.NOT_LITERAL:
                out.append(next(ch for ch in _CHOICES if ord(ch) != av))
            elif op is c.ANY:
                out.append(self.rng.choice("abcxyz"))
            elif op is c.IN:
                out.append(self._one_of(av))
            elif op is c.BRANCH:
                out.append(self.draw(self.rng.choice(av[1]), depth + 1))
            elif op is c.SUBPATTERN:
                text = self.draw(av[-1], depth + 1)
                if av[0] is not None:
                    self.groups[av[0]] = text
                out.append(text)
            elif op in (c.MAX_REPEAT, c.MIN_REPEAT, getattr(c, "POSSESSIVE_REPEAT", None)):
                lowest, highest, inner = av
                top = min(highest, lowest + 3) if highest != c.MAXREPEAT else lowest + 3
                count = self.rng.randint(lowest, max(lowest, top)) if depth < 6 else lowest
                out.extend(self.draw(inner, depth + 1) for _ in range(count))
            elif op is c.GROUPREF:
                out.append(self.groups.get(av, ""))
            elif op is getattr(c, "ATOMIC_GROUP", None):
                out.append(self.draw(av, depth + 1))
            # AT (anchors), ASSERT and ASSERT_NOT draw nothing
        return "".join(out)

    def _one_of(self, items) -> str:
        c = _CONSTANTS
        negated = bool(items) and items[0][0] is c.NEGATE
        if not negated:
            op, av = self.rng.choice(items)
            if op is c.LITERAL:
                return chr(av)
            if op is c.RANGE:
                return chr(self.rng.randint(av[0], min(av[1], av[0] + 25)))
            if op is c.CATEGORY:
                return next(ch for ch in self.rng.sample(_CHOICES, len(_CHOICES)) if _in_category(ch, av))
            return "a"
        return next((ch for ch in _CHOICES if not any(_in_item(ch, item) for item in items[1:])), "~")


def _in_item(ch: str, item) -> bool:
    c = _CONSTANTS
    op, av = item
    if op is c.LITERAL:
        return ord(ch) == av
    if op is c.RANGE:
        return av[0] <= ord(ch) <= av[1]
    if op is c.CATEGORY:
        return _in_category(ch, av)
    return False


def _in_category(ch: str, category) -> bool:
    name = str(category).rsplit("_", 1)[-1].lower()  # CATEGORY_DIGIT -> digit, CATEGORY_NOT_WORD -> word
    has = {"digit": ch.isdigit(), "word": ch.isalnum() or ch == "_", "space": ch.isspace()}.get(name, True)
    return not has if "_NOT_" in str(category) else has
