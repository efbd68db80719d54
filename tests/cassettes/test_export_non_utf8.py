"""Export of bytes that are not UTF-8 (issue 24, item 9): a header value the proxy stored with
surrogate escapes is exported, read back and replayed as the same bytes, and an entry that
cannot be exported for any other reason is named while every other one is written."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading

import pytest
import requests
import vcr
from vcr.serializers import jsonserializer, yamlserializer

from stbproxy.cassettes import reading as cassette_reading
from stbproxy.cassettes import vcr_format as cassettes
from stbproxy.cassettes.inprocess import replay
from stbproxy.errors import StbError
from stbproxy.models import Exchange, Request, Response, Source
from stbproxy.sessions import SessionRecord
from stbproxy.store.embedded import Store
from tests.servers import ProxyProcess

SECRET = "sk-nonutf8-secret-4242"
ODD_REQUEST_VALUE = b"ab\xff\xfecd"  # not UTF-8: the proxy stores it as "ab\udcff\udcfecd"
ODD_RESPONSE_HEADER = b"X-Odd: caf\xe9 \xff\xfe"  # an upstream's Latin-1 bytes, stored one character a byte


def exchange(url: str, *, method: str = "GET", req_headers=(), resp_headers=(), body: bytes = b"{}",
             source=Source.UPSTREAM, key: str = "http/api.example/GET/x/0") -> Exchange:
    return Exchange(key, Request(method, url, tuple(req_headers)),
                    Response(200, (("Content-Type", "application/json"), *resp_headers), body, "OK"), source, 1.0)


# -- the conversion ---------------------------------------------------------------------------


def test_a_request_header_with_lone_surrogates_is_written_as_its_bytes_and_read_back(tmp_path):
    stored = ODD_REQUEST_VALUE.decode("utf-8", "surrogateescape")
    odd = exchange("http://api.example/x?q=1", req_headers=(("X-Odd", stored), ("X-Fine", "café")),
                   resp_headers=(("X-Latin", "caf\xe9 \xff\xfe"),  # from an upstream: Latin-1 text
                                 ("X-Escaped", "ok\udcff")))  # a flow file's surrogate-escaped text
    path = tmp_path / "odd.yaml"
    assert cassettes.write_cassette(path, [odd], "yaml") == 1
    text = path.read_text(encoding="utf-8")
    assert "!!binary" in text
    # vcrpy's own loader reads the value back as the bytes the client sent
    (raw,) = yamlserializer.deserialize(text)["interactions"]
    assert raw["request"]["headers"]["X-Odd"] == [ODD_REQUEST_VALUE]
    assert raw["request"]["headers"]["X-Fine"] == ["café"]  # UTF-8 text stays text
    assert raw["response"]["headers"]["X-Escaped"] == ["ok\xff"]  # vcrpy plays response headers as text
    # ... and the import reads each side as the store keeps it: the same text, the same bytes
    (interaction,), problems = cassette_reading.read_cassette(path)
    assert problems == []
    assert interaction.request.header("X-Odd") == stored
    assert interaction.request.header("X-Odd").encode("utf-8", "surrogateescape") == ODD_REQUEST_VALUE
    assert interaction.response.header("X-Latin").encode("latin-1") == b"caf\xe9 \xff\xfe"
    assert interaction.response.header("X-Escaped").encode("latin-1") == b"ok\xff"


def test_json_cassettes_hold_the_same_values_as_escapes(tmp_path):
    stored = ODD_REQUEST_VALUE.decode("utf-8", "surrogateescape")
    path = tmp_path / "odd.json"
    cassettes.write_cassette(path, [exchange("http://api.example/x", req_headers=(("X-Odd", stored),))], "json")
    assert "\\udcff" in path.read_text(encoding="ascii")
    assert jsonserializer.deserialize(path.read_text())["interactions"][0]["request"]["headers"]["X-Odd"] == [stored]
    (interaction,), _ = cassette_reading.read_cassette(path)
    assert interaction.request.header("X-Odd") == stored


def test_a_url_byte_that_is_not_utf8_is_percent_encoded(tmp_path):
    path = tmp_path / "url.yaml"
    cassettes.write_cassette(path, [exchange("http://api.example/caf\udce9?q=\udcff\udcfe")], "yaml")
    (interaction,), _ = cassette_reading.read_cassette(path)
    assert interaction.request.url == "http://api.example/caf%E9?q=%FF%FE"


def test_utf8_traffic_is_written_byte_for_byte_as_before(tmp_path):
    # The text the export wrote before non-UTF-8 values were handled, for an exchange with
    # non-ASCII UTF-8 in a header, the URL and both bodies, and Latin-1 in a response header.
    ordinary = Exchange(
        "k1", Request("POST", f"http://api.example/v1/x?city=Z%C3%BCrich&api_key={SECRET}",
                      (("Content-Type", "application/json"), ("X-Note", "café ünïcode"),
                       ("Authorization", f"Bearer {SECRET}")),
                      '{"q": "größe"}'.encode()),
        Response(200, (("Content-Type", "application/json"), ("X-Latin", "caf\xe9 \xff"), ("Set-Cookie", "a=b")),
                 '{"answer": "ça va"}'.encode(), "OK"), Source.UPSTREAM, 1.0)
    path = tmp_path / "ordinary.yaml"
    cassettes.write_cassette(path, [ordinary], "yaml")
    assert path.read_text(encoding="utf-8") == BEFORE


BEFORE = r'''interactions:
- request:
    body: "{\"q\": \"gr\xF6\xDFe\"}"
    headers:
      Authorization:
      - REDACTED
      Content-Type:
      - application/json
      X-Note:
      - "caf\xE9 \xFCn\xEFcode"
    method: POST
    uri: http://api.example/v1/x?city=Z%C3%BCrich&api_key=REDACTED
  response:
    body:
      string: "{\"answer\": \"\xE7a va\"}"
    headers:
      Content-Type:
      - application/json
      Set-Cookie:
      - REDACTED
      X-Latin:
      - "caf\xE9 \xFF"
      X-Stb-Source:
      - upstream
    status:
      code: 200
      message: OK
version: 1
'''


# -- one entry never breaks an export ---------------------------------------------------------


def test_an_exchange_that_fails_conversion_is_named_and_the_others_are_written(tmp_path):
    good = exchange("http://api.example/a?q=1", key="http/api.example/GET/a/1")
    broken = exchange(f"http://api.example/b?api_key={SECRET}", key="http/api.example/GET/b/2",
                      source="upstream")  # not a Source: converting it raises AttributeError
    later = exchange("http://api.example/c?q=3", key="http/api.example/GET/c/3")
    path = tmp_path / "partial.yaml"
    left_out: list = []
    assert cassettes.write_cassette(path, [good, broken, later], "yaml", left_out=left_out) == 2
    assert [i.request.url for i in cassette_reading.read_cassette(path)[0]] == [good.request.url, later.request.url]
    (item,) = left_out
    line = str(item)
    assert item.index == 1 and "AttributeError" in item.reason
    assert "GET http://api.example/b?api_key=REDACTED" in line and "http/api.example/GET/b/2" in line
    assert SECRET not in line
    # A caller that asks for no list of left-out entries gets all of them or an error, never a part.
    with pytest.raises(StbError, match="1 exchange.* cannot be exported: GET http://api.example/b"):
        cassettes.write_cassette(tmp_path / "strict.yaml", [good, broken, later], "yaml")
    assert not (tmp_path / "strict.yaml").exists()


def test_an_exchange_that_no_cassette_text_can_hold_is_named_and_the_others_are_written(tmp_path):
    # A method with a lone surrogate: no byte form to fall back on, and YAML text cannot hold it.
    odd = exchange(f"http://api.example/m?api_key={SECRET}", method="G\udcffT", key="http/api.example/GET/m/1",
                   req_headers=(("X-Odd", "\udcff"),))  # a header value YAML can hold (as bytes)
    fine = [exchange(f"http://api.example/ok?n={n}", key=f"http/api.example/GET/ok/{n}") for n in range(3)]
    path = tmp_path / "partial.yaml"
    left_out: list = []
    assert cassettes.write_cassette(path, [fine[0], odd, *fine[1:]], "yaml", left_out=left_out) == 3
    assert len(cassette_reading.read_cassette(path)[0]) == 3
    (item,) = left_out
    assert item.index == 1 and "request.method" in item.reason and "lone surrogate" in item.reason
    assert "\\udcff" in str(item) and "api_key=REDACTED" in str(item) and SECRET not in str(item)
    assert str(item).isprintable()


# -- end to end: a real proxy, the CLI, import and replay -------------------------------------


class RawUpstream:
    """A loopback HTTP server that answers every request with a header holding bytes that are
    not UTF-8 (http.server cannot send those) and a JSON body naming the path it got."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> RawUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._listener.close()
        self._thread.join(timeout=5)

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            with conn:
                conn.settimeout(10)
                head = b""
                try:
                    while b"\r\n\r\n" not in head:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        head += chunk
                    target = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b"?"
                    body = json.dumps({"path": target.decode("latin-1")}).encode()
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + ODD_RESPONSE_HEADER
                                 + b"\r\nContent-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
                except OSError:
                    pass


def raw_get(proxy_port: int, url: bytes, headers: bytes = b"") -> bytes:
    """One request through the proxy, written byte for byte; the whole answer."""
    host = url.split(b"/")[2]
    with socket.create_connection(("127.0.0.1", proxy_port), timeout=30) as conn:
        conn.sendall(b"GET " + url + b" HTTP/1.1\r\nHost: " + host + b"\r\n" + headers + b"Connection: close\r\n\r\n")
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def head_and_body(answer: bytes) -> tuple[list[bytes], bytes]:
    head, _, body = answer.partition(b"\r\n\r\n")
    return head.split(b"\r\n"), body


def stb(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stbproxy", *map(str, args)], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.integration
def test_a_recorded_non_utf8_header_exports_imports_and_replays_as_the_same_bytes(tmp_path):
    store = tmp_path / "rec" / "store"
    with RawUpstream() as upstream:
        base = b"http://127.0.0.1:%d" % upstream.port
        odd_url, plain_url = base + b"/odd?q=%FF%FE", base + b"/plain"
        with ProxyProcess(store) as proxy:
            odd = raw_get(proxy.port, odd_url, b"X-Odd-Header: " + ODD_REQUEST_VALUE + b"\r\nX-Stb-Session: s1\r\n")
            plain = raw_get(proxy.port, plain_url, b"X-Stb-Session: s1\r\n")
    for answer in (odd, plain):
        lines, _ = head_and_body(answer)
        assert lines[0].startswith(b"HTTP/1.1 200") and ODD_RESPONSE_HEADER in lines
        assert b"X-Stb-Source: upstream" in lines
    with Store(store, readonly=True) as db:
        (stored,) = [ex for ex in db.entries() if ex.request.url.endswith("/odd?q=%FF%FE")]
    assert stored.request.header("X-Odd-Header").encode("utf-8", "surrogateescape") == ODD_REQUEST_VALUE

    # Both ways of exporting write every entry (they failed whole with UnicodeEncodeError).
    everything, session = tmp_path / "all.yaml", tmp_path / "s1.yaml"
    for args, path in ((("--all", "*"), everything), (("--session", "s1"), session)):
        result = stb("export", *args, "-o", path, "--store", store)
        assert result.returncode == 0, result.stderr
        assert "wrote 2 interactions" in result.stdout and "not exported" not in result.stderr
    items = yamlserializer.deserialize(session.read_text(encoding="utf-8"))["interactions"]
    assert [i["request"]["uri"] for i in items] == [odd_url.decode(), plain_url.decode()]  # the session's order
    assert items[0]["request"]["headers"]["X-Odd-Header"] == [ODD_REQUEST_VALUE]

    # Plain vcrpy reads and plays the cassette.
    client = requests.Session()
    client.trust_env = False
    with vcr.use_cassette(str(session), record_mode="none") as played:
        reply = client.get(odd_url.decode())
        assert reply.status_code == 200 and reply.json() == {"path": "/odd?q=%FF%FE"}
        assert played.play_count == 1

    # Imported back: the stored request header is the same text, and a replay sends the same bytes.
    imported = tmp_path / "imported" / "store"
    result = stb("import", "cassette", session, "--store", imported)
    assert result.returncode == 0, result.stderr
    with Store(imported, readonly=True) as db:
        (back,) = [ex for ex in db.entries() if ex.request.url.endswith("/odd?q=%FF%FE")]
    assert back.request.header("X-Odd-Header") == stored.request.header("X-Odd-Header")
    with ProxyProcess(imported, "--mode", "replay") as proxy:
        from_store = raw_get(proxy.port, odd_url)
    with ProxyProcess(tmp_path / "untouched" / "store", "--cassette", str(everything)) as proxy:
        from_cassette = raw_get(proxy.port, odd_url)
    for answer in (from_store, from_cassette):
        lines, body = head_and_body(answer)
        assert lines[0].startswith(b"HTTP/1.1 200"), answer[:300]
        assert ODD_RESPONSE_HEADER in lines and body == head_and_body(odd)[1]

    # In-process replay hands the same header to `requests` (as Latin-1 text of those bytes).
    with replay(session) as player:
        reply = client.get(odd_url.decode())
    assert not player.misses
    assert reply.headers["X-Odd"].encode("latin-1") == ODD_RESPONSE_HEADER.split(b": ", 1)[1]


@pytest.mark.integration
def test_the_cli_writes_the_rest_names_what_it_left_out_and_exits_1(tmp_path):
    store = tmp_path / "store"
    with Store(store) as db:
        db.put(exchange("http://api.example/ok?n=1", key="http/api.example/GET/ok/1"))
        db.put(exchange(f"http://api.example/m?api_key={SECRET}", method="G\udcffT", key="http/api.example/GET/m/2"))
        db.put(exchange("http://api.example/ok?n=3", key="http/api.example/GET/ok/3"))
    out = tmp_path / "partial.yaml"
    result = stb("export", "--all", "*", "-o", out, "--store", store)
    assert result.returncode == 1, result.stderr
    (line,) = [ln for ln in result.stderr.splitlines() if "not exported:" in ln]
    assert "G\\udcffT http://api.example/m?api_key=REDACTED (key http/api.example/GET/m/2)" in line
    assert "request.method" in line
    assert SECRET not in result.stderr + result.stdout
    assert "wrote 2 interactions" in result.stdout and "1 not exported" in result.stdout
    assert "1 of 3 entries could not be exported" in result.stderr
    assert len(cassette_reading.read_cassette(out)[0]) == 2


@pytest.mark.integration
def test_the_pytest_plugin_keeps_the_old_cassette_when_an_export_is_partial(tmp_path):
    from stbproxy.pytest_plugin import _export

    store = tmp_path / "store"
    with Store(store) as db:
        db.put(exchange("http://api.example/ok?n=1", key="http/api.example/GET/ok/1"))
        db.put(exchange("http://api.example/m", method="G\udcffT", key="http/api.example/GET/m/2"))
        for key in ("http/api.example/GET/ok/1", "http/api.example/GET/m/2"):
            db.append_session("t", SessionRecord(0, 1.0, "GET", "", 200, "upstream", key, 0.0).to_stored())
    cassette = tmp_path / "cassettes" / "t.yaml"
    cassette.parent.mkdir()
    cassette.write_text("interactions: []\nversion: 1\n")
    with pytest.raises(pytest.fail.Exception, match="left as it was"):
        _export(store, "t", cassette)
    assert cassette.read_text() == "interactions: []\nversion: 1\n"
    assert [p.name for p in cassette.parent.iterdir()] == ["t.yaml"]  # no temporary file left behind


def test_a_flow_files_response_header_bytes_are_kept_as_an_upstream_answers_are(tmp_path):
    from mitmproxy import io as mitm_io
    from mitmproxy.test import tflow

    from stbproxy.mitm import read_flow_file

    flow = tflow.tflow(resp=True)
    raw_value = "caf\u00e9 ".encode() + b"\xff\xfe"  # UTF-8 text and bytes that are not
    flow.response.headers.fields = ((b"Content-Type", b"text/plain"), (b"X-Odd", raw_value))
    path = tmp_path / "flows.mitm"
    with path.open("wb") as file:
        mitm_io.FlowWriter(file).add(flow)
    ((_, response),) = list(read_flow_file(path))
    # Latin-1 text, one character a byte: sent again as these very bytes (flows.response_to_mitm)
    assert response.header("X-Odd").encode("latin-1") == raw_value
