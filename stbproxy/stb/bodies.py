"""StableToolBench's answer shapes as HTTP responses, and back. Pure."""

from __future__ import annotations

import json
from typing import Any, Mapping

from stbproxy import jsonsafe
from stbproxy.keys import is_json_type
from stbproxy.models import Headers, Response

JSON_HEADERS = (("Content-Type", "application/json"),)
TEXT_HEADERS = (("Content-Type", "text/plain; charset=utf-8"),)
_UNESCAPED = json.JSONEncoder(ensure_ascii=False)  # built once: imports make an answer per entry


def error_object_response(error: str, status: int = 200) -> Response:
    """A StableToolBench-shaped ``{"error": ..., "response": ""}`` JSON answer."""
    return Response(status, JSON_HEADERS, json.dumps({"error": error, "response": ""}).encode())


# The facts kept beside an answer: the answer object itself when it is more than
# ``{"error": <text>, "response": ...}`` in that order (extra members, an error that is not
# text), so that it is served as it was given, member for member.
WHOLE_ANSWER = "stb_answer"
# An answer that is no answer object but an HTTP status of the /virtual endpoint itself (a
# StableToolBench server's own failure, passed on): the status, in the answer's facts.
VIRTUAL_STATUS = "virtual_status"


# In a cassette, the facts beside an answer ride in headers of its response: the error text
# (when there is one) and the whole answer object (when kept whole), each as ASCII JSON.
ERROR_HEADER = "X-Stb-Error"
ANSWER_HEADER = "X-Stb-Answer"


def answer_headers(meta: Mapping) -> Headers:
    """The headers that carry an answer's error and whole object into a cassette."""
    headers = []
    if meta.get("error"):
        headers.append((ERROR_HEADER, json.dumps(str(meta["error"]))))
    if isinstance(meta.get(WHOLE_ANSWER), dict):
        headers.append((ANSWER_HEADER, json.dumps(meta[WHOLE_ANSWER])))
    return tuple(headers)


def answer_facts(headers: Headers) -> tuple[Headers, dict]:
    """answer_headers read back: the other headers, and the facts they carried."""
    facts: dict = {}
    rest = []
    for name, value in headers:
        lower = name.lower()
        if lower in (ERROR_HEADER.lower(), ANSWER_HEADER.lower()):
            try:
                found = jsonsafe.loads(value)
            except ValueError:
                continue
            if lower == ERROR_HEADER.lower() and isinstance(found, str):
                facts["error"] = found
            elif lower == ANSWER_HEADER.lower() and isinstance(found, dict):
                facts[WHOLE_ANSWER] = found
        else:
            rest.append((name, value))
    return tuple(rest), facts


def answer_parts(obj: dict) -> tuple[Response, dict]:
    """A StableToolBench answer object as the API's own answer (its ``response`` as the
    body) and the facts kept beside it: its error text, and the whole object when the two
    do not give it back exactly (WHOLE_ANSWER)."""
    error = obj.get("error")
    meta: dict = {"error": "" if error is None else str(error)}
    if not is_plain_answer(obj):
        meta[WHOLE_ANSWER] = obj
    return api_body_response(obj.get("response", "")), meta


def is_plain_answer(obj: dict) -> bool:
    """Whether ``obj`` is exactly ``{"error": <text>, "response": ...}``, members in that order."""
    if len(obj) != 2 or type(obj.get("error")) is not str or "response" not in obj:
        return False
    return next(iter(obj)) == "error"


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
