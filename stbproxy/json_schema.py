"""JSON Schema checks (the only importer of jsonschema): does a value follow a schema, and
if not, where it first breaks it. Pure.

MCP tools describe their arguments and results with JSON Schema (2020-12 by default),
and a simulated answer must follow the schema its real counterpart promises. Validators
are built once per schema; a schema that is itself broken is reported as such, never as
a value that breaks it.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from stbproxy.recent import Recent

_VALIDATORS: Recent[Any] = Recent(256)


def problem(value: Any, schema: Any) -> str | None:
    """None when ``value`` follows ``schema``; else what breaks it first, with the JSON
    pointer of the place (``/items/0/price: 'x' is not of type 'number'``)."""
    validator = _validator(schema)
    if isinstance(validator, str):
        return validator
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return None
    where = "/" + "/".join(str(part) for part in error.absolute_path)
    return f"{where}: {error.message}"


def schema_problem(schema: Any) -> str | None:
    """What makes ``schema`` unusable as a JSON Schema, or None."""
    checked = _validator(schema)
    return checked if isinstance(checked, str) else None


def _validator(schema: Any) -> Any:
    if not isinstance(schema, (dict, bool)):
        return f"the schema is a {type(schema).__name__}, not an object"
    try:
        identity = json.dumps(schema, sort_keys=True, default=str)
    except (TypeError, ValueError) as exc:
        return f"the schema cannot be read: {exc}"
    found = _VALIDATORS.get(identity)
    if found is not None:
        return found
    cls = validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(schema)
        made: Any = cls(schema, format_checker=cls.FORMAT_CHECKER)
    except SchemaError as exc:
        where = "/" + "/".join(str(part) for part in exc.absolute_path)
        made = f"the schema itself is invalid at {where}: {exc.message}"
    _VALIDATORS.put(identity, made)
    return made
