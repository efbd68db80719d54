"""StableToolBench's answer shapes as HTTP responses, and back. Pure."""

from __future__ import annotations

import json
from typing import Any

from stbproxy import jsonsafe
from stbproxy.keys import is_json_type
from stbproxy.models import Headers, Response

JSON_HEADERS = (("Content-Type", "application/json"),)
TEXT_HEADERS = (("Content-Type", "text/plain; charset=utf-8"),)
_UNESCAPED = json.JSONEncoder(ensure_ascii=False)  # built once: imports make an answer per entry


def error_object_response(error: str, status: int = 200) -> Response:
    """A StableToolBench-shaped ``{"error": ..., "response": ""}`` JSON answer."""
    return Response(status, JSON_HEADERS, json.dumps({"error": error, "response": ""}).encode())


def api_body_response(value: Any) -> Response:
    """An API's answer value (JSON or text) as the HTTP response the API would have sent."""
    headers, body = api_body_parts(value)
    return Response(200, headers, body)


def api_body_parts(value: Any) -> tuple[Headers, bytes]:
    """api_body_response's headers and body (one of two header tuples: text or JSON)."""
    if isinstance(value, str):
        return TEXT_HEADERS, value.encode("utf-8", "surrogatepass")
    return JSON_HEADERS, _UNESCAPED.encode(value).encode("utf-8", "surrogatepass")


def body_value(body: bytes, content_type: str | None) -> Any:
    """A JSON body as its value; any other body as text (as StableToolBench's server did)."""
    text = body.decode("utf-8", "replace")
    if is_json_type(content_type):
        try:
            return jsonsafe.loads(text)
        except ValueError:
            return text
    return text
