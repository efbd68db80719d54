"""Does a request follow its operation's document? What the spec's own validation would say
of it (``request_problem``), so that a call the real API cannot answer is answered as the
API would answer a broken request (a 4xx naming the rule), never with a made-up success: a
missing credential on a secured operation, a path, query, header or cookie parameter that
is missing or breaks its schema, a required body that is missing, a body in a media type
the operation does not take or that breaks its schema. Pure.

Parameters arrive as text: a value is read as the schema's type would hold it (``"7"`` for
an integer) before it is checked. Form bodies are checked for their required members only
(their values are text whatever the schema says), multipart bodies not at all.
"""

from __future__ import annotations

import json
from http.cookies import CookieError, SimpleCookie
from typing import Any, Mapping, NamedTuple
from urllib.parse import parse_qsl, urlsplit

from stbproxy import json_schema, jsonsafe
from stbproxy.keys import is_json_type
from stbproxy.models import Request
from stbproxy.openapi.model import Operation, Parameter

# Header parameters OpenAPI says to ignore: the request's own framing and credentials.
_IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})


class Broken(NamedTuple):
    # what is at fault: "security" (no credential), "request" (a parameter or the body),
    # "media" (a body type not taken)
    part: str
    rule: str  # what is broken, with where: "query parameter 'limit': 'x' is not of type 'integer'"


def request_problem(op: Operation, request: Request, path_args: Mapping[str, str]) -> Broken | None:
    """The first rule of ``op`` that ``request`` breaks, or None."""
    missing = _security_problem(op, request)
    if missing is not None:
        return Broken("security", missing)
    query = parse_qsl(urlsplit(request.url).query, keep_blank_values=True)
    cookies = cookies_of(request.header("cookie"))
    for p in op.parameters:
        found = _values(p, path_args, query, request, cookies)
        if not found:
            if p.required and not (p.where == "header" and p.name.lower() in _IGNORED_HEADERS):
                return Broken("request", f"{p.where} parameter {p.name!r} is required")
            continue
        problem = _parameter_problem(p, found, op.defs)
        if problem is not None:
            return Broken("request", f"{p.where} parameter {p.name!r}: {problem}")
    return _body_problem(op, request)


def _security_problem(op: Operation, request: Request) -> str | None:
    if not op.security:
        return None
    for alternative in op.security:
        if all(_has_credential(scheme, request) for scheme in alternative):
            return None
    wanted = " or ".join(" and ".join(_scheme_text(s) for s in alternative) for alternative in op.security)
    return f"no credential: the operation needs {wanted}"


def _has_credential(scheme: tuple[str, str, str, str], request: Request) -> bool:
    _, kind, where, what = scheme
    if kind == "apiKey":
        if where == "query":
            return any(k == what for k, _ in parse_qsl(urlsplit(request.url).query, keep_blank_values=True))
        if where == "header":
            return request.header(what) is not None
        return what.lower() in cookies_of(request.header("cookie"))
    auth = (request.header("authorization") or "").strip()
    if not auth:
        return False
    return not what or auth.split(" ", 1)[0].lower() == what


def _scheme_text(scheme: tuple[str, str, str, str]) -> str:
    name, kind, where, what = scheme
    if kind == "apiKey":
        return f"{name} ({where} {what!r})"
    return f"{name} (Authorization: {what.capitalize() or kind})"


def _values(p: Parameter, path_args, query, request: Request, cookies) -> list[str]:
    if p.where == "path":
        return [path_args[p.name]] if p.name in path_args else []
    if p.where == "query":
        return [v for k, v in query if k == p.name or k == f"{p.name}[]"]
    if p.where == "header":
        value = request.header(p.name)
        return [] if value is None else [value]
    value = cookies.get(p.name.lower())
    return [] if value is None else [value]


def _parameter_problem(p: Parameter, values: list[str], defs) -> str | None:
    schema = p.schema
    if not isinstance(schema, dict) or not schema:
        return None
    target = _resolved(schema, defs)
    kind = _types(target)
    if "array" in kind:
        items = values if len(values) > 1 else [v for v in values[0].split(",")] if values[0] else []
        return _first_reading(items, schema, defs, array=True)
    if "object" in kind:
        return None  # deepObject and the like: not read
    return _first_reading(values[-1], schema, defs)


def _first_reading(value: Any, schema, defs, array: bool = False) -> str | None:
    """None when some reading of the text ``value`` follows ``schema``; else the problem of its
    most likely reading."""
    readings = _array_readings(value, schema, defs) if array else _readings(value)
    first = None
    for reading in readings:
        problem = json_schema.problem(reading, schema, defs, "request")
        if problem is None:
            return None
        first = first or problem
    return _trimmed(first)


def _readings(text: str) -> list[Any]:
    found: list[Any] = [text]
    for read in (int, float):
        try:
            found.append(read(text))
        except ValueError:
            pass
    if text in ("true", "false"):
        found.append(text == "true")
    return found


def _array_readings(items: list[str], schema, defs) -> list[list[Any]]:
    """The items as text, then each read as the item schema's type would hold it."""
    item_schema = _resolved(_resolved(schema, defs).get("items") or {}, defs)
    kinds = _types(item_schema)
    typed = []
    for text in items:
        choices = [r for r in _readings(text) if _json_type(r) in kinds] if kinds else []
        typed.append(choices[-1] if choices else text)
    return [items, typed]


def _body_problem(op: Operation, request: Request) -> Broken | None:
    body = request.body or b""
    if not body:
        return Broken("request", "a request body is required") if op.body_required else None
    if not op.body:
        return None  # a body the operation does not describe: not read
    sent = (request.header("content-type") or "").split(";", 1)[0].strip().lower()
    media = _media_for(op, sent)
    if media is None:
        return Broken("media", f"the body is {sent or 'of no media type'}; the operation takes "
                               f"{', '.join(op.body)}")
    media_type, schema = media
    if is_json_type(media_type) or (sent and is_json_type(sent)):
        try:
            value = jsonsafe.loads(body)
        except (ValueError, UnicodeDecodeError):
            return Broken("request", f"the body is not JSON, as {media_type} is")
        if schema is None:
            return None
        problem = json_schema.problem(value, schema, op.defs, "request")
        return Broken("request", f"body {_trimmed(problem)}") if problem else None
    if media_type == "application/x-www-form-urlencoded" and isinstance(schema, dict):
        return _form_problem(body, schema, op.defs)
    return None


def _media_for(op: Operation, sent: str) -> tuple[str, Any] | None:
    """The documented media type that ``sent`` is (exact, then ``type/*``, then ``*/*``)."""
    if sent in op.body:
        return sent, op.body[sent].schema
    for media_type, media in op.body.items():
        base = media_type.split(";", 1)[0].strip()
        if base == sent or base == "*/*" or (base.endswith("/*") and sent.startswith(base[:-1])):
            return media_type, media.schema
    if not sent:  # a client that names no type: read as the first documented one
        media_type, media = next(iter(op.body.items()))
        return media_type, media.schema
    return None


def _form_problem(body: bytes, schema: dict, defs) -> Broken | None:
    target = _resolved(schema, defs)
    required = target.get("required") if isinstance(target.get("required"), list) else []
    if not required:
        return None
    try:
        sent = {k.split("[", 1)[0] for k, _ in parse_qsl(body.decode("utf-8"), keep_blank_values=True)}
    except UnicodeDecodeError:
        return None
    listed = target.get("properties")
    properties: dict[Any, Any] = listed if isinstance(listed, dict) else {}
    for name in required:
        if name not in sent and not (isinstance(properties.get(name), dict) and properties[name].get("readOnly")):
            return Broken("request", f"body: {name!r} is a required property")
    return None


def _resolved(schema: Any, defs) -> dict:
    seen = 0
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and seen < 16:
        ref = schema["$ref"]
        name = ref[len("#/$defs/"):] if ref.startswith("#/$defs/") else None
        target = (defs or {}).get(name) if name else None
        if target is None and isinstance(schema.get("$defs"), dict) and name:
            target = schema["$defs"].get(name)
        if not isinstance(target, dict):
            break
        schema = target
        seen += 1
    return schema if isinstance(schema, dict) else {}


def _types(schema: dict) -> set[str]:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    if "items" in schema:
        return {"array"}
    if "properties" in schema:
        return {"object"}
    return set()


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    return "string"


def cookies_of(header: str | None) -> dict[str, str]:
    """A Cookie header's pairs, names lower-cased ({} when it does not parse)."""
    if not header:
        return {}
    jar = SimpleCookie()
    try:
        jar.load(header)
    except CookieError:
        return {}
    return {name.lower(): morsel.value for name, morsel in jar.items()}


def _trimmed(text: str | None, limit: int = 300) -> str:
    text = text or ""
    return text if len(text) <= limit else text[:limit - 3] + "..."


def problem_details(status: int, title: str, detail: str) -> bytes:
    """An RFC 9457 problem object, what Prism and many APIs answer a broken request with."""
    return json.dumps({"type": "about:blank", "title": title, "status": status, "detail": detail},
                      ensure_ascii=False).encode()
