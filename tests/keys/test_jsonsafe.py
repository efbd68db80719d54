"""JSON parsing with a depth bound, and the body limits built on it."""

import json

import pytest

from stbproxy import jsonsafe
from stbproxy.front.limits import HeaderLimits, body_problem
from stbproxy.keys import canonical_body
from stbproxy.models import Request
from stbproxy.redact import redact_request, secret_values
from stbproxy.stb.virtual_calls import parse


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


@pytest.mark.parametrize("depth,ok", [(1, True), (100, True), (101, False), (900, False), (100_000, False)])
def test_depth_is_bounded_without_recursion_errors(depth, ok):
    if ok:
        assert jsonsafe.loads(nested(depth)) is not None
        return
    with pytest.raises(jsonsafe.JsonTooDeep, match="deeper than 100 levels"):
        jsonsafe.loads(nested(depth).encode())
    assert isinstance(jsonsafe.JsonTooDeep(100), ValueError)  # callers' "not JSON" paths still apply


def test_wide_documents_with_many_brackets_are_fine():
    wide = json.dumps([{"a": [i]} for i in range(5000)])
    assert len(jsonsafe.loads(wide)) == 5000 and not jsonsafe.too_deep(wide)


def test_every_body_parser_survives_a_deep_body():
    deep = nested(100_000).encode()
    request = Request("POST", "http://api.example/x", (("Content-Type", "application/json"),), deep)
    assert canonical_body(deep, "application/json")[0] == "bytes"  # keyed by its bytes, as invalid JSON
    assert secret_values(request) == frozenset() and redact_request(request).body == deep
    assert "nested deeper" in body_problem(deep, "application/json")
    assert body_problem(b"{not json", "application/json") is None  # forwarded as before


@pytest.mark.parametrize("raw,message", [
    (nested(100_000).encode(), "JSON nested deeper than 100 levels"),
    (json.dumps({"category": "a", "tool_name": "t", "api_name": "x", "tool_input": nested(500)}).encode(),
     "'tool_input' is JSON nested deeper"),
    (b'{"category": "a\\ud800", "tool_name": "t", "api_name": "x", "tool_input": "{}"}', "lone surrogate"),
    (b'{"category": "a", "tool_name": "t", "api_name": "x", "tool_input": "{\\"q\\": \\"\\\\udc00\\"}"}',
     "lone surrogate"),
    ('{"category": "a", "tool_name": "t", "api_name": "x", "tool_input": "{}", "x": "\ud800"}'
     .encode("utf-8", "surrogatepass"), "lone surrogate"),
])
def test_virtual_bodies_that_cannot_be_forwarded_get_422(raw, message):
    reply = parse(raw)
    assert reply.status == 422 and message in reply.document["error"]


def test_a_surrogate_pair_is_ordinary_text():
    parsed = parse(b'{"category": "a\\ud83d\\ude00", "tool_name": "t", "api_name": "x", "tool_input": "{}"}')
    assert parsed.category == "a\U0001F600"


@pytest.mark.parametrize("fields,problem", [
    ([(b"X-A", b"1")] * 100, None),
    ([(b"X-A", b"1")] * 101, "101 header fields, more than the limit of 100"),
    ([(b"Cookie", b"x" * 70_000)], "more than the limit of 65536"),
])
def test_header_limits(fields, problem):
    found = HeaderLimits().problem(fields)
    assert found == problem if problem is None else problem in found
