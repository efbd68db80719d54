"""MCP's pure rules: JSON-RPC messages read once, ids put back byte for byte (JSON and SSE),
eras, keys, header checks."""

from __future__ import annotations

import json

import pytest

from stbproxy.mcp import jsonrpc, protocol, sse
from stbproxy.mcp.protocol import SESSION_ERA, STATELESS_ERA, Era
from stbproxy.models import Request

# -- JSON-RPC ------------------------------------------------------------------------------


@pytest.mark.parametrize("body,kind,method,message_id", [
    (b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}', jsonrpc.REQUEST, "initialize", 0),
    (b'{"method":"tools/list","params":{},"jsonrpc":"2.0","id":"a"}', jsonrpc.REQUEST, "tools/list", "a"),
    (b'{"jsonrpc":"2.0","method":"notifications/initialized"}', jsonrpc.NOTIFICATION,
     "notifications/initialized", None),
    (b'{"jsonrpc":"2.0","id":3,"result":{}}', jsonrpc.RESPONSE, "", 3),
    (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', jsonrpc.BATCH, "", None),
    (b'{"jsonrpc":"1.0","id":1,"method":"ping"}', jsonrpc.INVALID, "", None),
    (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', jsonrpc.INVALID, "ping", None),
    (b'{"jsonrpc":"2.0","id":1,"method":"ping","params":"x"}', jsonrpc.INVALID, "ping", 1),
    (b'not json', jsonrpc.INVALID, "", None),
    (b'{"jsonrpc":"2.0","id":1}', jsonrpc.INVALID, "", None),
])
def test_read(body, kind, method, message_id):
    message = jsonrpc.read(body)
    assert (message.kind, message.method, message.id) == (kind, method, message_id)
    if kind == jsonrpc.INVALID:
        assert message.why


@pytest.mark.parametrize("text,new_id,expected", [
    # the member of the outermost object only, whatever comes before it
    (b'{"jsonrpc":"2.0","id":0,"result":{"id":9}}', 5, b'{"jsonrpc":"2.0","id":5,"result":{"id":9}}'),
    (b'{"result":{"id":9,"list":[{"id":1}]},"id" : 0 }', "x", b'{"result":{"id":9,"list":[{"id":1}]},"id" : "x" }'),
    (b'{"jsonrpc":"2.0","result":{"text":"\\"id\\":1,"},"id":"old"}', 7,
     b'{"jsonrpc":"2.0","result":{"text":"\\"id\\":1,"},"id":7}'),
    (b'{"jsonrpc":"2.0","id":"caf\\u00e9","result":{}}', "w", b'{"jsonrpc":"2.0","id":"w","result":{}}'),
    (b'{"jsonrpc":"2.0","result":{}}', 1, b'{"jsonrpc":"2.0","result":{}}'),  # no id member: as it was
])
def test_with_id_changes_that_member_alone(text, new_id, expected):
    assert jsonrpc.with_id(text, new_id) == expected
    assert json.loads(jsonrpc.with_id(text, new_id)).get("id", new_id) == new_id


def test_with_id_leaves_an_answer_with_the_same_id_as_it_was():
    text = b'{"jsonrpc":"2.0",  "id":  3 ,"result":{"a":1}}'
    assert jsonrpc.with_id(text, 3) is text


# -- server-sent events ----------------------------------------------------------------------

RECORDED = (b'id: 1\r\ndata: \r\nretry: 500\r\n\r\n'
            b'event: message\r\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}'
            b'\r\n\r\n'
            b'id: 2\r\nevent: message\r\ndata: {"jsonrpc":"2.0","id":4,"result":{"content":[]}}\r\n\r\n')


def test_events_are_read_in_order_with_their_ids():
    found = sse.events(RECORDED)
    assert [e.id for e in found] == ["1", None, "2"]
    assert found[0].data == b"" and found[2].event == "message"
    assert sse.answer_in(RECORDED) == {"jsonrpc": "2.0", "id": 4, "result": {"content": []}}


def test_the_answers_id_is_rewritten_and_every_other_byte_kept():
    out = sse.with_answer_id(RECORDED, 11)
    assert out == RECORDED.replace(b'"id":4', b'"id":11')
    assert sse.with_answer_id(RECORDED, 4) == RECORDED


def test_lf_only_streams_and_data_over_several_lines():
    stream = b'data: {"jsonrpc":"2.0",\ndata: "id":1,"result":{}}\n\n'
    out = sse.with_answer_id(stream, "z")
    assert sse.answer_in(out) == {"jsonrpc": "2.0", "id": "z", "result": {}}
    assert sse.messages(b'data: {"a":1}\n\n: a comment\n\n') == [{"a": 1}]


def test_encode_reads_back():
    events = [sse.Event(b'{"x":1}'), sse.Event(b"", "message", "7")]
    assert sse.events(sse.encode(events)) == events


# -- eras, keys, headers ---------------------------------------------------------------------

META = {protocol.META_VERSION: "2026-07-28", protocol.META_CAPABILITIES: {}}


def test_eras():
    assert protocol.era_of("tools/list", {"_meta": META}, {}) == Era(STATELESS_ERA, "2026-07-28")
    assert protocol.era_of("initialize", {"protocolVersion": "2025-06-18"}, {}) == Era(SESSION_ERA, "2025-06-18")
    assert protocol.era_of("tools/list", {}, protocol.lowered((("MCP-Protocol-Version", "2025-11-25"),))) == \
        Era(SESSION_ERA, "2025-11-25")
    assert protocol.era_of("tools/list", None, {}) == Era(SESSION_ERA, protocol.DEFAULT_SESSION_VERSION)


def test_keys_ignore_ids_meta_progress_tokens_empty_cursors_and_client_names():
    server, era = "http://127.0.0.1:9/mcp", Era(SESSION_ERA, "2025-11-25")
    call = {"name": "add", "arguments": {"a": 1, "b": 2}}
    same = protocol.key(server, "tools/call", call, era)
    assert same == protocol.key(server, "tools/call", {**call, "_meta": {"progressToken": 7}}, era)
    assert same.startswith(protocol.key_prefix(server, "tools/call", "add"))
    assert same != protocol.key(server, "tools/call", {"name": "add", "arguments": {"a": 1, "b": 3}}, era)
    assert same != protocol.key(server, "tools/call", call, Era(STATELESS_ERA, "2026-07-28"))
    assert same != protocol.key(server, "tools/call", call, era, auth="abc")
    assert same != protocol.key("http://127.0.0.1:9/other", "tools/call", call, era)
    assert protocol.key(server, "tools/list", {"cursor": None}, era) == protocol.key(server, "tools/list", {}, era)
    assert protocol.key(server, "tools/list", {"cursor": "p2"}, era) != protocol.key(server, "tools/list", {}, era)
    init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "a", "version": "1"}}
    assert protocol.key(server, "initialize", init, era) == protocol.key(
        server, "initialize", {**init, "clientInfo": {"name": "b", "version": "2"}}, era)


def test_key_parts_name_server_method_and_tool():
    key = protocol.key("https://tools.example/mcp", "tools/call", {"name": "get weather", "arguments": {}},
                       Era(SESSION_ERA, "2025-11-25"))
    assert protocol.key_parts(key) == {"where": "tools.example", "method": "tools/call", "name": "get weather"}
    key = protocol.key("http://h:8000/mcp", "resources/templates/list", {}, Era(SESSION_ERA, "2025-11-25"))
    assert protocol.key_parts(key) == {"where": "h:8000", "method": "resources/templates/list", "name": ""}
    assert protocol.key_parts("api/Data/x/y/z") is None


@pytest.mark.parametrize("url,server", [
    ("HTTPS://Tools.Example:443/mcp?x=1", "https://tools.example/mcp"),
    ("http://127.0.0.1:8000/mcp", "http://127.0.0.1:8000/mcp"),
    ("http://[::1]:80/mcp", "http://[::1]/mcp"),
])
def test_server_ids(url, server):
    assert protocol.server_id(url) == server


def test_stateless_headers_must_say_what_the_body_says():
    era = Era(STATELESS_ERA, "2026-07-28")
    params = {"name": "add", "_meta": META}
    good = (("Mcp-Method", "tools/call"), ("Mcp-Name", "add"), ("MCP-Protocol-Version", "2026-07-28"))
    assert protocol.header_mismatch("tools/call", params, protocol.lowered(good), era) is None
    encoded = (("Mcp-Method", "tools/call"), ("Mcp-Name", "=?base64?YWRk?="))
    assert protocol.header_mismatch("tools/call", params, protocol.lowered(encoded), era) is None
    assert "Mcp-Method" in protocol.header_mismatch("tools/call", params, {"mcp-method": "tools/list"}, era)
    assert "Mcp-Name" in protocol.header_mismatch("tools/call", params, {"mcp-name": "sub"}, era)
    assert "MCP-Protocol-Version" in protocol.header_mismatch(
        "tools/call", params, {"mcp-protocol-version": "2025-11-25"}, era)
    # the session era has no such rule
    assert protocol.header_mismatch("tools/call", {"name": "add"}, {"mcp-name": "sub"},
                                    Era(SESSION_ERA, "2025-11-25")) is None


# -- serve --mcp NAME=URL ----------------------------------------------------------------------

def test_local_endpoint_specs_and_paths():
    from stbproxy.errors import ConfigError
    from stbproxy.mcp import endpoints

    assert endpoints.parse_specs(["demo=http://127.0.0.1:9/mcp", "b.2=https://tools.example/mcp"]) == {
        "demo": "http://127.0.0.1:9/mcp", "b.2": "https://tools.example/mcp"}
    for bad, named in (("demo", "NAME=URL"), ("a b=http://h/mcp", "NAME=URL"), ("x=ftp://h/mcp", "not an http"),
                       ("x=http:///mcp", "not an http"), ("x=http://h/a;x=http://h/b", "")):
        specs = bad.split(";")
        with pytest.raises(ConfigError, match=named or "given twice"):
            endpoints.parse_specs(specs)
    assert endpoints.local_target("/mcp/demo") == ("demo", None)
    assert endpoints.local_target("/mcp/demo/?x=1") == ("demo", None)
    assert endpoints.local_target("/s/run%201/mcp/demo") == ("demo", "run 1")
    assert endpoints.local_target("/mcp") is None and endpoints.local_target("/virtual") is None
    sent = endpoints.to_server(Request("POST", "http://127.0.0.1:8080/mcp/demo", (("Host", "127.0.0.1:8080"),
                                                                                 ("Accept", "*/*")), b"{}"),
                               "https://tools.example/mcp")
    assert sent.url == "https://tools.example/mcp" and sent.header("host") == "tools.example"
    assert sent.header("accept") == "*/*" and sent.body == b"{}"
