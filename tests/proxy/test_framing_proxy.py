"""Request framing through a running proxy, on both lanes (the fast lane and --no-fast-lane)
and inside a CONNECT tunnel with TLS: chunk data not followed by CRLF (h11 0.14's
CVE-2025-43859: ``5\\r\\nhelloXX0\\r\\n\\r\\n`` was answered 200 and the upstream got "hello"), a
control byte that mitmproxy's reader strips from a header value's end
(``Transfer-Encoding: chunked\\x0b`` was read as chunked), a transfer coding the proxy does not
apply (``gzip, chunked`` was forwarded with the gzip coding dropped): each is refused (400, or
501 for the coding) and nothing reaches the upstream. A header field named in Connection is
not forwarded (RFC 9110 7.6.1). Clients on 127.0.0.1 only."""

from __future__ import annotations

import json
import socket
import ssl

import pytest

from scripts.reliability import fuzzkit  # raw requests, as hostile clients send them
from tests.servers import ProxyProcess

pytestmark = pytest.mark.integration

LANES = {"fast-lane": (), "no-fast-lane": ("--no-fast-lane",)}

REFUSED = {
    # name: (the head's framing lines, the body, the status the proxy answers)
    "chunk data without its CRLF": (b"Transfer-Encoding: chunked", b"5\r\nhelloXX0\r\n\r\n", 400),
    "chunk data with a bare LF": (b"Transfer-Encoding: chunked", b"5\r\nhello\n0\r\n\r\n", 400),
    "chunk data longer than its size": (b"Transfer-Encoding: chunked", b"3\r\nhello\r\n0\r\n\r\n", 400),
    "a vertical tab after chunked": (b"Transfer-Encoding: chunked\x0b", b"5\r\nhello\r\n0\r\n\r\n", 400),
    "a form feed before chunked": (b"Transfer-Encoding: \x0cchunked", b"5\r\nhello\r\n0\r\n\r\n", 400),
    "a vertical tab after a length": (b"Content-Length: 5\x0b", b"hello", 400),
    "a bare CR at a value's end": (b"Content-Length: 5\r\nX-A: ab\r", b"hello", 400),
    "gzip, chunked": (b"Transfer-Encoding: gzip, chunked", b"5\r\nhello\r\n0\r\n\r\n", 501),
    "deflate,chunked": (b"Transfer-Encoding: deflate,chunked", b"5\r\nhello\r\n0\r\n\r\n", 501),
}


def request(authority: str, path: str, framing: bytes, body: bytes, absolute: bool = True) -> bytes:
    target = f"http://{authority}{path}" if absolute else path
    return (f"POST {target} HTTP/1.1\r\nHost: {authority}\r\nContent-Type: text/plain\r\n".encode()
            + framing + b"\r\n\r\n" + body)


@pytest.fixture(scope="module", params=list(LANES))
def proxy(request, tmp_path_factory, test_ca):
    folder = tmp_path_factory.mktemp(request.param)
    with ProxyProcess(folder / "store", "--upstream-ca", str(test_ca.ca_file), *LANES[request.param]) as running:
        yield running


@pytest.mark.parametrize("case", list(REFUSED))
def test_broken_or_hidden_framing_is_refused_and_nothing_is_forwarded(proxy, upstream, case):
    framing, body, status = REFUSED[case]
    path = "/echo/framing-" + "-".join(case.split())
    got, answer = fuzzkit.send(proxy.port, request(f"127.0.0.1:{upstream.port}", path, framing, body), timeout=15)
    assert got == status, answer[:400]
    assert b"x-stb-source: error" in answer.lower() and b"nothing was forwarded or stored" in answer
    assert upstream.hits[path] == 0


def test_a_valid_chunked_body_still_goes_through(proxy, upstream):
    path = "/echo/framing-valid-chunked"
    body = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: dropped\r\n\r\n"
    got, answer = fuzzkit.send(proxy.port, request(f"127.0.0.1:{upstream.port}", path, b"Transfer-Encoding: chunked",
                                                   body))
    assert got == 200, answer[:400]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["body"] == "hello world"


def test_a_request_line_split_at_a_vertical_tab_is_refused(proxy, upstream):
    path = "/echo/framing-request-line"
    raw = f"GET\x0bhttp://127.0.0.1:{upstream.port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{upstream.port}\r\n\r\n"
    got, answer = fuzzkit.send(proxy.port, raw.encode())
    assert got == 400, answer[:400]
    assert upstream.hits[path] == 0


def test_header_fields_named_in_connection_are_not_forwarded(proxy, upstream):
    authority = f"127.0.0.1:{upstream.port}"
    raw = (f"GET http://{authority}/echo/hop-by-hop HTTP/1.1\r\nHost: {authority}\r\n"
           f"Connection: keep-alive, X-Hop, x-internal\r\nX-Hop: secret\r\nX-Internal: 1\r\nX-Kept: yes\r\n\r\n")
    got, answer = fuzzkit.send(proxy.port, raw.encode())
    assert got == 200, answer[:400]
    sent = {k.lower(): v for k, v in upstream.requests[-1][2].items()}
    assert sent.get("x-kept") == "yes" and "x-hop" not in sent and "x-internal" not in sent


def test_inside_a_tls_tunnel_chunk_framing_is_read_strictly_too(proxy, tls_upstream, test_ca):
    authority = f"localhost:{tls_upstream.port}"
    sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=15)
    sock.sendall(f"CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        head += sock.recv(1)
    assert head.startswith(b"HTTP/1.1 200"), head
    context = ssl.create_default_context(cafile=str(proxy.ca_file))
    with context.wrap_socket(sock, server_hostname="localhost") as tls:
        tls.sendall(request(authority, "/echo/tunnel-framing", b"Transfer-Encoding: chunked", b"5\r\nhelloXX0\r\n\r\n",
                            absolute=False))
        answer = b""
        while True:
            chunk = tls.recv(65536)
            if not chunk:
                break
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:300]
    assert tls_upstream.hits["/echo/tunnel-framing"] == 0
