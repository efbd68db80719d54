"""Made-up answers that are valid HTTP and valid for the document: the documented status
(a 204 or 205 without a body or a content type, a 302 with its Location), the documented
headers, a body in the documented media type (JSON written as JSON, a string included;
text, HTML and XML as text), a broken request answered with the 4xx the document gives
for it, and a simulation that fails answered as no success at all. Pure."""

from __future__ import annotations

import json
from typing import Any, Iterable

from stbproxy import json_schema
from stbproxy.models import Request, Response
from stbproxy.openapi.model import MediaType, Operation, Reply
from stbproxy.openapi.validate import Broken, problem_details
from stbproxy.stb.bodies import error_object_response
from stbproxy.synthesis.from_schema import value_for
from stbproxy.synthesis.simulation import Simulation

NO_BODY = frozenset({204, 205, 304})
ATTEMPTS = 4  # draws from a schema before a simulation is given up
# The 4xx a broken request gets: the first the operation documents, else the last named.
_REJECTIONS = {"security": (("401", "403"), 401, "Unauthorized"),
               "media": (("415", "422", "400"), 415, "Unsupported Media Type"),
               "request": (("422", "400"), 422, "Unprocessable Entity")}
_FRAMING = frozenset({"content-type", "content-length", "transfer-encoding", "connection"})
_MESSAGE_MEMBERS = ("message", "detail", "error_description", "error", "description", "title", "msg")


def is_json_media(media_type: str) -> bool:
    base = media_type.split(";", 1)[0].strip()
    return base.endswith("/json") or base.endswith("+json") or base in ("*/*", "application/*")


def value_following(op: Operation, media: MediaType, key: str) -> Any:
    """A value for ``media``: a documented example that follows its schema, else a draw from
    the schema that does (a few draws), else the first draw (which the caller reports)."""
    schema = media.schema
    for example in media.examples:
        if schema is None or json_schema.problem(example, schema, op.defs, "answer") is None:
            return example
    if schema is None:
        return {}
    first = None
    for attempt in range(ATTEMPTS):
        value = value_for(schema, key, op.defs, "answer", attempt)
        if json_schema.problem(value, schema, op.defs, "answer") is None:
            return value
        first = value if attempt == 0 else first
    return first


def documented_headers(op: Operation, reply: Reply | None, status: int, key: str) -> tuple[tuple[str, str], ...]:
    """The headers the reply documents, each with a value that follows its schema; a redirect
    always has a Location (the documented one, else the server's URL)."""
    out = []
    for name, media in (reply.headers.items() if reply is not None else ()):
        if name in _FRAMING:
            continue
        text = _header_text(op, media, f"{key}#{name}")
        if text is not None:
            out.append((name, text))
    if 300 <= status < 400 and not any(name == "location" for name, _ in out):
        out.append(("location", op.servers[0] + "/"))
    return tuple(out)


def _header_text(op: Operation, media: MediaType, key: str) -> str | None:
    candidates = [*media.examples]
    if media.schema is not None:
        candidates.extend(value_for(media.schema, key, op.defs, "answer", attempt) for attempt in range(2))
    for value in candidates:
        if media.schema is not None and json_schema.problem(value, media.schema, op.defs, "answer") is not None:
            continue
        text = _header_form(value)
        if text is not None:
            return text
    return None


def _header_form(value: Any) -> str | None:
    """A value as a header holds it (OpenAPI's ``simple`` style), or None when it cannot."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, (int, float, str)):
        text = str(value)
    elif isinstance(value, list) and all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in value):
        text = ",".join(str(v) for v in value)
    else:
        return None
    return text if text.isprintable() and text.isascii() and text.strip() == text else None


def text_answer(op: Operation, status: int, headers, media_type: str, media: MediaType, made: Simulation,
                key: str) -> Simulation:
    """An answer in a media type that is not JSON: the model's text when it follows the
    schema, else a documented example, else text made from the schema, else text of the
    media type's own shape (an HTML page, an XML document)."""
    content_type = "text/plain" if media_type in ("text/*", "*/*") else media_type
    from_model = made.meta.get("simulator") != "schema"
    text: str | bytes | None = _model_text(made, media, op) if from_model else None
    meta = dict(made.meta) if text is not None else {**made.meta, "simulator": "schema"}
    if text is None:
        text = _documented_text(op, media, key, content_type)
    if text is None:
        return failed(f"no {content_type} answer that follows the schema could be made", meta, simulator_on=True)
    body = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    return Simulation(Response(status, (("content-type", content_type), *headers), body), ok=True, meta=meta)


def _model_text(made: Simulation, media: MediaType, op: Operation) -> str | None:
    try:
        text = made.response.body.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if media.schema is None:
        return text
    return text if json_schema.problem(text, media.schema, op.defs, "answer") is None else None


def _documented_text(op: Operation, media: MediaType, key: str, content_type: str) -> str | bytes | None:
    for example in media.examples:
        if isinstance(example, str) and (media.schema is None
                                         or json_schema.problem(example, media.schema, op.defs, "answer") is None):
            return example
    schema = media.schema
    if isinstance(schema, dict) and _only_string(schema):
        if schema.get("format") == "binary" or not content_type.startswith(("text/", "application/xml")):
            return _binary(content_type)
        return _shaped_text(content_type, key)
    if schema is not None:
        value = value_following(op, MediaType(schema, ()), key)
        if isinstance(value, str) and json_schema.problem(value, schema, op.defs, "answer") is None:
            return value
        if content_type.split(";", 1)[0].strip().endswith("xml") and isinstance(value, (dict, list)):
            return _xml(value, _xml_name(schema, op.defs) or "result")  # the schema's shape, as XML
        return None
    return _shaped_text(content_type, key) if content_type.startswith(("text/", "application/xml")) \
        else _binary(content_type)


def _only_string(schema: dict) -> bool:
    """A schema that any string follows: a type string, a format, words."""
    loose = {"type", "format", "description", "title", "example", "examples", "nullable", "x-", "readOnly"}
    return schema.get("type") in ("string", None) and all(k in loose or k.startswith("x-") for k in schema)


def _shaped_text(content_type: str, key: str) -> str:
    words = value_for({"type": "string"}, key + "#text", None)
    base = content_type.split(";", 1)[0].strip()
    if base == "text/html":
        return f"<!DOCTYPE html>\n<html><head><title>{words}</title></head><body><p>{words}</p></body></html>\n"
    if base.endswith("xml"):
        return f'<?xml version="1.0" encoding="UTF-8"?>\n<result>{words}</result>\n'
    if base == "text/csv":
        return f"name\n{words}\n"
    return words


def _binary(content_type: str) -> bytes:
    return b"stbproxy simulated " + content_type.split(";", 1)[0].encode("ascii", "replace") + b"\n"


def rejected(op: Operation, broken: Broken, key: str) -> Simulation:
    """A broken request's answer: the status the operation documents for it, a body that
    follows that status's schema when it has one (the rule in its message member where it
    fits), else a problem object; the rule always in ``X-Stb-Rejected``."""
    codes, fallback, title = _REJECTIONS[broken.part]
    status = next((int(code) for code in codes if code in op.replies), fallback)
    headers = [("x-stb-rejected", _header_safe(broken.rule))]
    if status == 401:
        headers.append(("www-authenticate", _challenge(op)))
    found = op.reply_for(status)
    media = found[1].json_media() if found is not None else None
    body = problem_details(status, title, broken.rule)
    content_type = "application/problem+json"
    if media is not None and media[1].schema is not None:
        value = _with_message(op, value_following(op, media[1], key), media[1].schema, broken.rule)
        if json_schema.problem(value, media[1].schema, op.defs, "answer") is None:
            body = json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
            content_type = "application/json" if "*" in media[0] else media[0]
    meta = {"simulator": "validation", "rejected": broken.rule}
    return Simulation(Response(status, (("content-type", content_type), *headers), body), ok=True, meta=meta)


def _with_message(op: Operation, value: Any, schema: Any, rule: str) -> Any:
    if not isinstance(value, dict):
        return value
    for name in _MESSAGE_MEMBERS:
        if name in value and isinstance(value[name], str):
            tried = {**value, name: rule}
            if json_schema.problem(tried, schema, op.defs, "answer") is None:
                return tried
    return value


def _challenge(op: Operation) -> str:
    for alternative in op.security:
        for _, kind, _, what in alternative:
            if kind == "http" and what == "basic":
                return 'Basic realm="api"'
            if kind == "apiKey":
                return 'ApiKey realm="api"'
    return 'Bearer realm="api"'


def unmatched(spec: str, request: Request, allowed: Iterable[str]) -> Simulation:
    """A request to a documented server that no operation takes: 405 when the path is an
    operation's for other methods (``Allow`` names them), else 404."""
    path = request.url.split("?", 1)[0]
    allowed = sorted(set(allowed))
    if allowed:
        status, title = 405, "Method Not Allowed"
        rule = f"{request.method} is not an operation of {spec} at {path}; it takes {', '.join(allowed)}"
        extra = [("allow", ", ".join(allowed))]
    else:
        status, title = 404, "Not Found"
        rule = f"no operation of {spec} matches {request.method} {path}"
        extra = []
    headers = (("content-type", "application/problem+json"), ("x-stb-rejected", _header_safe(rule)), *extra)
    return Simulation(Response(status, headers, problem_details(status, title, rule)), ok=True,
                      meta={"simulator": "validation", "rejected": rule})


def failed(text: str, meta: dict, *, simulator_on: bool) -> Simulation:
    """A simulation that could not be made valid: answered as no success at all (502)."""
    return Simulation(error_object_response(text, status=502), ok=False, meta={**meta, "error": text},
                      attempted=simulator_on)


def failed_simulation(made: Simulation) -> Simulation:
    """The simulator's own failure, its status made a failure's: 502 when it tried, 503 when
    no simulator is on."""
    response = made.response
    if response.status < 400:
        response = Response(502 if made.attempted else 503, response.headers, response.body)
    return Simulation(response, ok=False, meta=made.meta, attempted=made.attempted)


def _header_safe(text: str) -> str:
    cleaned = "".join(ch if ch.isprintable() and ch.isascii() else "?" for ch in text)
    return cleaned[:400]


def _xml_name(schema: Any, defs) -> str | None:
    """The root element's name: the schema's ``xml.name``, else the name of the schema it refers to."""
    seen = 0
    while isinstance(schema, dict) and seen < 8:
        xml = schema.get("xml")
        if isinstance(xml, dict) and isinstance(xml.get("name"), str):
            return xml["name"]
        ref = schema.get("$ref")
        if not (isinstance(ref, str) and ref.startswith("#/$defs/")):
            return None
        schema, seen = (defs or {}).get(ref[len("#/$defs/"):]), seen + 1
        if isinstance(schema, dict) and not isinstance(schema.get("xml"), dict):
            return ref[len("#/$defs/"):]
    return None


def _xml(value: Any, root: str) -> str:
    """A value made from the schema, written as XML: members as elements, items repeated."""
    from xml.etree import ElementTree

    def fill(element, item):
        if isinstance(item, dict):
            for name, inner in item.items():
                for one in inner if isinstance(inner, list) else [inner]:
                    fill(ElementTree.SubElement(element, _tag(name)), one)
        elif isinstance(item, list):
            for one in item:
                fill(ElementTree.SubElement(element, "member"), one)
        elif item is not None:
            element.text = str(item).lower() if isinstance(item, bool) else str(item)

    top = ElementTree.Element(_tag(root))
    fill(top, value)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ElementTree.tostring(top, encoding="unicode") + "\n"


def _tag(name: str) -> str:
    cleaned = "".join(ch if ch.isalnum() or ch in "_-." else "_" for ch in str(name)) or "item"
    return cleaned if cleaned[0].isalpha() or cleaned[0] == "_" else f"_{cleaned}"
