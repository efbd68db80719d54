"""JSON Schema checks (the only importer of jsonschema): does a value follow a schema, and
if not, where it first breaks it. Pure.

MCP tools describe their arguments and results with JSON Schema (2020-12 by default),
and a simulated answer must follow the schema its real counterpart promises. Validators
are built once per schema; a schema that is itself broken is reported as such, never as
a value that breaks it.

Patterns are ECMA-262's, the dialect JSON Schema names (``\\p{L}``, which Python's ``re``
refuses), read with the ``regex`` library. OpenAPI's schemas share their named parts once
per document: ``defs`` holds them, and a schema refers to them as ``#/$defs/NAME``.
``direction`` reads ``readOnly`` and ``writeOnly`` as OpenAPI does: an answer holds no
writeOnly member and needs none, a request needs no readOnly member.
"""

from __future__ import annotations

import functools
import json
from typing import Any, Literal, Mapping

import jsonschema
import regex
from jsonschema.exceptions import SchemaError, ValidationError
from jsonschema.validators import extend, validator_for

from stbproxy.recent import Recent

Direction = Literal["any", "answer", "request"]
_VALIDATORS: Recent[Any] = Recent(256)


# -- ECMA-262 patterns --------------------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def ecma_pattern(pattern: str) -> Any:
    """``pattern`` (ECMA-262) compiled with ``regex``; raises regex.error when it cannot be read."""
    return regex.compile(pattern.replace("[^]", r"[\s\S]"))


def pattern_error(pattern: Any) -> str | None:
    """Why ``pattern`` cannot be read as an ECMA-262 regular expression, or None."""
    if not isinstance(pattern, str):
        return f"a pattern must be a string, not {type(pattern).__name__}"
    try:
        ecma_pattern(pattern)
    except (regex.error, ValueError, OverflowError) as exc:
        return str(exc)
    return None


def matches(pattern: str, text: str) -> bool:
    """Whether ``text`` follows ``pattern`` (a search, as JSON Schema's ``pattern`` is)."""
    try:
        return ecma_pattern(pattern).search(text, timeout=1.0) is not None
    except (regex.error, ValueError, OverflowError, TimeoutError):
        return True  # a pattern that cannot be run constrains nothing


def _pattern(validator, pattern, instance, schema):
    if validator.is_type(instance, "string") and not matches(pattern, instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator, patterns, instance, schema):
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        for name, value in instance.items():
            if matches(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


_FORMATS = jsonschema.FormatChecker()
_FORMATS.checkers = {**jsonschema.Draft202012Validator.FORMAT_CHECKER.checkers}
_FORMATS.checks("regex", raises=(regex.error, ValueError))(lambda text: not isinstance(text, str)
                                                           or ecma_pattern(text) is not None)


# -- readOnly and writeOnly ---------------------------------------------------------------


def _flag(validator, subschema: Any, name: str) -> bool:
    """Whether ``subschema`` (or what its $ref names) says ``name: true``."""
    if not isinstance(subschema, dict):
        return False
    if subschema.get(name) is True:
        return True
    ref = subschema.get("$ref")
    if isinstance(ref, str):
        try:
            target = validator._resolver.lookup(ref).contents
        except Exception:  # an unresolvable ref is reported where it is used
            return False
        return isinstance(target, dict) and target.get(name) is True
    return False


def _required_skipping(flag: str):
    def required(validator, required, instance, schema):
        if not validator.is_type(instance, "object"):
            return
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        for name in required:
            if name not in instance and not _flag(validator, properties.get(name), flag):
                yield ValidationError(f"{name!r} is a required property")
    return required


def _no_write_only(validator, properties, instance, schema):
    yield from jsonschema.Draft202012Validator.VALIDATORS["properties"](validator, properties, instance, schema)
    if validator.is_type(instance, "object"):
        for name, subschema in properties.items():
            if name in instance and _flag(validator, subschema, "writeOnly"):
                yield ValidationError(f"{name!r} is writeOnly: an answer does not hold it")


def _discriminator(validator, discriminator, instance, schema):
    """OpenAPI's discriminator: an object of a oneOf/anyOf names its kind in this member."""
    name = discriminator.get("propertyName") if isinstance(discriminator, dict) else None
    if isinstance(name, str) and validator.is_type(instance, "object") and name not in instance:
        yield ValidationError(f"does not contain the discriminating property {name!r}")


_BASE = {"pattern": _pattern, "patternProperties": _pattern_properties, "discriminator": _discriminator}
_CLASSES = {
    "any": extend(jsonschema.Draft202012Validator, _BASE, format_checker=_FORMATS),
    "answer": extend(jsonschema.Draft202012Validator,
                     {**_BASE, "required": _required_skipping("writeOnly"), "properties": _no_write_only},
                     format_checker=_FORMATS),
    "request": extend(jsonschema.Draft202012Validator, {**_BASE, "required": _required_skipping("readOnly")},
                      format_checker=_FORMATS),
}


# -- checks ---------------------------------------------------------------------------------


def problem(value: Any, schema: Any, defs: Mapping[str, Any] | None = None, direction: Direction = "any") -> str | None:
    """None when ``value`` follows ``schema``; else what breaks it first, with the JSON
    pointer of the place (``/items/0/price: 'x' is not of type 'number'``). ``defs``: the
    shared schemas ``#/$defs/NAME`` refers to (checked when they were imported)."""
    validator = _validator(schema, defs, direction)
    if isinstance(validator, str):
        return validator
    try:
        error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    except jsonschema.exceptions._WrappedReferencingError as exc:  # a $ref to a schema not given
        return f"the schema cannot be followed: {exc}"
    if error is None:
        return None
    where = "/" + "/".join(str(part) for part in error.absolute_path)
    return f"{where}: {error.message}"


def schema_problem(schema: Any) -> str | None:
    """What makes ``schema`` unusable as a JSON Schema, or None."""
    checked = _validator(schema, None, "any")
    return checked if isinstance(checked, str) else None


def with_defs(schema: Any, defs: Mapping[str, Any] | None) -> Any:
    """``schema`` as one document: the shared schemas under its ``$defs`` (not copied)."""
    if not defs or not isinstance(schema, dict):
        return schema
    own = schema.get("$defs")
    return {**schema, "$defs": {**defs, **own} if isinstance(own, dict) else defs}


def _validator(schema: Any, defs: Mapping[str, Any] | None, direction: Direction) -> Any:
    if not isinstance(schema, (dict, bool)):
        return f"the schema is a {type(schema).__name__}, not an object"
    try:
        identity = (id(defs) if defs else 0, direction, json.dumps(schema, sort_keys=True, default=str))
    except (TypeError, ValueError) as exc:
        return f"the schema cannot be read: {exc}"
    found = _VALIDATORS.get(identity)
    if found is not None:
        return found
    own = validator_for(schema, default=jsonschema.Draft202012Validator)
    cls = _CLASSES[direction] if own is jsonschema.Draft202012Validator else own
    try:
        cls.check_schema(schema, format_checker=_FORMATS)  # the shared schemas were checked alone
        made: Any = cls(with_defs(schema, defs), format_checker=cls.FORMAT_CHECKER)
    except SchemaError as exc:
        where = "/" + "/".join(str(part) for part in exc.absolute_path)
        made = f"the schema itself is invalid at {where}: {exc.message}"
    _VALIDATORS.put(identity, made)
    return made
