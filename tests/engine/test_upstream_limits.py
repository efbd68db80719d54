"""What an upstream may answer and a client may ask (issue 38, items 1, 7 and 13): an answer
larger than --max-upstream-body (a compression bomb included) is refused, read no further and
never stored; every coding the proxy offers is decoded, in any stack, and an answer in another
is refused, never passed on half decoded; a URL too long to forward is answered 414 at the
door, and the -v log quotes no URL at length. On the upstream client, and through real
`stbproxy serve` processes on both lanes and through HTTPS tunnels."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket
import ssl
import threading
import tracemalloc
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, unquote, urlsplit

import brotli
import pytest
import requests
import zstandard

from stbproxy.engine import Engine, EngineConfig
from stbproxy.errors import UpstreamError
from stbproxy.models import Mode, Request, Source
from stbproxy.store.embedded import Store
from stbproxy.upstream import Upstream, UpstreamConfig
from tests.servers import ProxyProcess

BOMB_MIB = 32  # inflates to this much; about 32 KiB on the wire
BOMB = gzip.compress(bytes(BOMB_MIB << 20), compresslevel=9)
DOCUMENT = json.dumps({"city": "Oslo", "high": 14, "note": "decoded " * 50}).encode()


def raw_deflate(data: bytes) -> bytes:
    deflate = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    return deflate.compress(data) + deflate.flush()


ENCODERS = {"gzip": gzip.compress, "x-gzip": gzip.compress, "deflate": zlib.compress, "br": brotli.compress,
            "zstd": zstandard.ZstdCompressor().compress, "identity": lambda data: data,
            "compress": lambda data: b"\x1f\x9d\x90" + data, "foo": lambda data: data}


def encoded(data: bytes, codings: list[str]) -> bytes:
    for coding in codings:
        data = ENCODERS[coding](data)
    return data


class _Answers(BaseHTTPRequestHandler):
    """/bomb, /plain?bytes=N (with a length), /chunked?bytes=N (without), /coded/CODINGS (the
    document in those codings, applied in order), /raw-deflate, /members (two gzip members),
    /accept (the Accept-Encoding received), /events (a gzip event stream), anything else: a
    small JSON answer."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args) -> None:
        pass

    def do_HEAD(self) -> None:  # noqa: N802 (the head a GET would have: a length over the limit, a coding)
        self.send_response(200)
        self.send_header("Content-Encoding", "compress")
        self.send_header("Content-Length", "2000000")
        self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        parts = urlsplit(self.path)
        query = dict(parse_qsl(parts.query))
        self.server.paths.append(parts.path)
        try:
            if parts.path == "/bomb":
                self.answer(BOMB, ("Content-Encoding", "gzip"))
            elif parts.path == "/plain":
                self.answer(b"x" * int(query["bytes"]))
            elif parts.path == "/chunked":
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                left = int(query["bytes"])
                while left:
                    piece = min(left, 65536)
                    self.wfile.write(b"%x\r\n%s\r\n" % (piece, b"y" * piece))
                    left -= piece
                self.wfile.write(b"0\r\n\r\n")
            elif parts.path.startswith("/coded/"):
                header = unquote(parts.path[len("/coded/"):])
                codings = [c.strip().lower() for c in header.split(",")]
                self.answer(encoded(DOCUMENT, codings), ("Content-Encoding", header))
            elif parts.path == "/raw-deflate":
                self.answer(raw_deflate(DOCUMENT), ("Content-Encoding", "deflate"))
            elif parts.path == "/members":  # gzip's members one after another, as `cat a.gz b.gz` makes
                self.answer(gzip.compress(DOCUMENT[:100]) + gzip.compress(DOCUMENT[100:]), ("Content-Encoding", "gzip"))
            elif parts.path == "/accept":
                self.answer(json.dumps(self.headers.get("Accept-Encoding")).encode())
            elif parts.path == "/events":
                events = b"".join(b"data: %d\n\n" % i for i in range(3)) + bytes(4 << 20)
                self.answer(gzip.compress(events), ("Content-Encoding", "gzip"), ("Content-Type", "text/event-stream"))
            else:
                self.answer(b'{"ok": true}')
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            self.close_connection = True  # the proxy stopped reading, as it should

    def answer(self, body: bytes, *headers: tuple[str, str]) -> None:
        self.send_response(200)
        if not any(name == "Content-Type" for name, _ in headers):
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)


class AnswerServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, tls=None) -> None:
        super().__init__(("127.0.0.1", 0), _Answers)
        self.paths: list[str] = []
        self.scheme = "https" if tls else "http"
        if tls is not None:
            self.socket = tls.server_context().wrap_socket(self.socket, server_side=True)

    def url(self, path: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server_address[1]}{path}"

    def __enter__(self) -> "AnswerServer":
        threading.Thread(target=self.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.shutdown()
        self.server_close()


@pytest.fixture
def answers():
    with AnswerServer() as server:
        yield server


def fetch(url: str, limit: int | None = None, method: str = "GET", headers=()) -> tuple:
    async def run():
        upstream = Upstream(UpstreamConfig(timeout=10, **({"max_body": limit} if limit else {})))
        try:
            return await upstream.send(Request(method, url, tuple(headers)))
        finally:
            await upstream.aclose()

    return asyncio.run(run())[0]


def refusal(url: str, limit: int | None = 1 << 20) -> UpstreamError:
    with pytest.raises(UpstreamError) as caught:
        fetch(url, limit)
    return caught.value


# -- the limit (item 1) --------------------------------------------------------------------------------


def test_an_answer_over_the_limit_is_refused_whether_its_length_is_announced_or_not(answers):
    announced = refusal(answers.url("/plain?bytes=2000000"))
    assert announced.failure == "too-large" and "announces 2,000,000 bytes" in str(announced)
    unannounced = refusal(answers.url("/chunked?bytes=3000000"))
    assert unannounced.failure == "too-large"
    for error in (announced, unannounced):
        assert "larger than the limit of 1,048,576 bytes (--max-upstream-body)" in str(error)
    assert fetch(answers.url("/plain?bytes=1048576"), 1 << 20).body == b"x" * 1048576  # the limit itself passes
    assert fetch(answers.url("/chunked?bytes=1048576"), 1 << 20).body == b"y" * 1048576


def test_a_gzip_bomb_stops_inflating_at_the_limit(answers):
    tracemalloc.start()
    try:
        error = refusal(answers.url("/bomb"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert error.failure == "too-large" and "once decoded (gzip)" in str(error), error
    assert peak < 8 << 20, f"inflating took {peak:,} bytes: it did not stop at the 1 MiB limit"
    assert len(fetch(answers.url("/bomb"), limit=BOMB_MIB << 20).body) == BOMB_MIB << 20  # within a larger limit


def test_an_answer_over_the_limit_is_an_error_never_simulated_nor_stored(tmp_path, answers):
    async def run(store):
        upstream = Upstream(UpstreamConfig(timeout=10, max_body=1 << 20))
        try:
            engine = Engine(store, upstream, EngineConfig(mode=Mode.VIRTUAL))
            return [await engine.handle(Request("GET", answers.url(path))) for path in ("/bomb", "/coded/compress")]
        finally:
            await upstream.aclose()

    with Store(tmp_path / "store") as store:
        for answer in asyncio.run(run(store)):
            assert answer.source is Source.ERROR and answer.response.status == 502, answer
            assert answer.response.header("X-Stb-Source") == "error"
        assert list(store.entries()) == []


# -- codings (item 7) -----------------------------------------------------------------------------------


@pytest.mark.parametrize("codings", ["gzip", "x-gzip", "deflate", "br", "zstd", "identity", "gzip, gzip",
                                     "gzip,identity", "deflate, br, zstd", "X-GZIP"])
def test_every_coding_offered_is_decoded_in_any_stack(answers, codings):
    response = fetch(answers.url(f"/coded/{codings}"))
    assert response.body == DOCUMENT
    assert response.header("Content-Encoding") is None  # decoded: the header would corrupt it


def test_raw_deflate_and_concatenated_gzip_members_are_decoded_whole(answers):
    assert fetch(answers.url("/raw-deflate")).body == DOCUMENT
    assert fetch(answers.url("/members")).body == DOCUMENT


@pytest.mark.parametrize("codings", ["compress", "gzip, compress", "foo", ", ".join(["gzip"] * 6)])
def test_a_coding_not_decoded_is_refused_never_passed_on_half(answers, codings):
    error = refusal(answers.url(f"/coded/{codings}"), None)
    assert error.failure == "undecodable" and "not passed on or stored" in str(error), error


def test_an_answer_without_a_body_needs_no_coding_decoded_and_is_within_any_limit(answers):
    response = fetch(answers.url("/anything"), 1 << 20, method="HEAD")
    assert response.status == 200 and response.body == b""


def test_a_request_offers_upstream_only_the_codings_decoded(answers):
    sent = [("Accept-Encoding", "gzip, compress;q=0.5, br;q=0.8, *")]
    assert json.loads(fetch(answers.url("/accept"), headers=sent).body) == "gzip, br;q=0.8"
    assert json.loads(fetch(answers.url("/accept"), headers=[("Accept-Encoding", "compress")]).body) == "identity"
    assert json.loads(fetch(answers.url("/accept")).body) is None  # none sent: none added


def test_an_event_stream_is_decoded_in_bounded_pieces(answers):
    async def run():
        upstream = Upstream(UpstreamConfig(timeout=10))
        try:
            head, _ = await upstream.open_stream(Request("GET", answers.url("/events")))
            pieces = [piece async for piece in head.stream.chunks()]
            await head.stream.aclose()
            return head, pieces
        finally:
            await upstream.aclose()

    head, pieces = asyncio.run(run())
    assert head.header("Content-Encoding") is None
    assert b"".join(pieces).startswith(b"data: 0\n\ndata: 1\n\ndata: 2\n\n")
    assert max(map(len, pieces)) <= 64 * 1024  # a stream is never limited in total: each piece is


# -- through real proxies: both lanes, and HTTPS through the tunnel lane ------------------------------------


LANES = {"fast lane": ((), "http"), "--no-fast-lane": (("--no-fast-lane",), "http"), "tunnel lane": ((), "https")}


def through(proxy: ProxyProcess) -> requests.Session:
    client = requests.Session()
    client.trust_env = False
    client.proxies = {"http": proxy.url, "https": proxy.url}
    client.verify = str(proxy.ca_file)
    return client


@pytest.mark.integration
@pytest.mark.parametrize("lane", list(LANES))
def test_through_the_proxy_a_bomb_is_refused_and_never_stored(tmp_path, test_ca, lane):
    args, scheme = LANES[lane]
    with AnswerServer(test_ca if scheme == "https" else None) as server, \
            ProxyProcess(tmp_path / "store", "--max-upstream-body", "1MiB", "--upstream-ca", str(test_ca.ca_file),
                         *args) as proxy:
        client = through(proxy)
        for path in ("/bomb", "/chunked?bytes=2000000"):
            bomb = client.get(server.url(path), timeout=30)
            assert bomb.status_code == 502 and bomb.headers["X-Stb-Source"] == "error", bomb.text[:300]
            assert "(--max-upstream-body)" in bomb.json()["error"]
        assert client.get(server.url("/after"), timeout=30).status_code == 200  # and the proxy serves on
    with Store(tmp_path / "store", readonly=True) as store:
        assert [entry.request.url.rsplit("/", 1)[1] for entry in store.entries()] == ["after"]


@pytest.mark.integration
@pytest.mark.parametrize("lane", list(LANES))
def test_through_the_proxy_codings_and_long_urls(tmp_path, test_ca, lane):
    args, scheme = LANES[lane]
    with AnswerServer(test_ca if scheme == "https" else None) as server, \
            ProxyProcess(tmp_path / "store", "--upstream-ca", str(test_ca.ca_file), *args) as proxy:
        client = through(proxy)
        coded = client.get(server.url("/coded/x-gzip"), timeout=30, stream=True)
        assert "Content-Encoding" not in coded.headers
        assert coded.raw.read(decode_content=False) == DOCUMENT  # the bytes on the wire, not gzip's
        unknown = client.get(server.url("/coded/compress"), timeout=30)
        assert unknown.status_code == 502 and "'compress' is not a coding" in unknown.json()["error"]

        long_url = server.url("/long?q=" + "a" * 70_000)
        too_long = client.get(long_url, timeout=30)
        assert too_long.status_code == 414 and too_long.headers["X-Stb-Source"] == "error"
        assert "more than the 65,536 this proxy forwards" in too_long.json()["error"]
        assert "/long" not in server.paths  # never forwarded
        assert client.get(server.url("/after"), timeout=30).status_code == 200  # and the proxy serves on
    with Store(tmp_path / "store", readonly=True) as store:
        stored = {entry.request.url.split("127.0.0.1:", 1)[1].split("/", 1)[1]: entry for entry in store.entries()}
    assert stored["coded/x-gzip"].response.body == DOCUMENT  # kept decoded, as served
    assert stored["coded/x-gzip"].response.header("Content-Encoding") is None
    assert not [path for path in stored if path.startswith(("coded/compress", "long"))]


@pytest.mark.integration
def test_the_log_quotes_a_long_url_by_a_bounded_prefix(tmp_path):
    with socket.socket() as closed:  # a port nothing listens on: the call fails, and -v logs why
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
    url = f"http://127.0.0.1:{port}/gone?q=" + "b" * 60_000
    with ProxyProcess(tmp_path / "store", "--mode", "record", "-v") as proxy:
        answer = through(proxy).get(url, timeout=30)
        assert answer.status_code == 502
        assert len(answer.text) < 4096, "the answer quotes the whole URL"
    logged = [line for line in proxy.output if "/gone" in line]
    assert logged and max(map(len, logged)) < 4096, f"a log line of {max(map(len, logged)):,} characters"
    assert "more characters)" in logged[0]
