"""HTTPS through the fast lane (tunnel_lane.py) against HTTPS through mitmproxy's layers
(``--no-fast-lane``): two real proxies, one real TLS upstream, the same conversations inside
CONNECT tunnels, byte for byte the same answers.

The conversations cover what the lane answers itself inside TLS (hits, misses, sessions,
errors of the proxy's own), what it gives to mitmproxy's HTTP layer inside the same TLS
connection (HEAD, HTTP/1.0, chunked, Expect, heads mitmproxy refuses), refused CONNECTs,
plain HTTP inside a tunnel (handed to mitmproxy), HTTP/2 offered in ALPN, and a client
that does not trust the proxy's CA (the log must say so in the same words).
"""

from __future__ import annotations

import re
import socket
import ssl
import time

import pytest

from tests.proxy.test_fast_lane_differential import assert_same_transcripts, converse_on, normalized, read_answer
from tests.servers import ProxyProcess, Upstream

pytestmark = pytest.mark.integration

ARGS = ("--simulator", "schema", "--deny-host", "*", "--allow-host", "127.0.0.1", "--allow-host", "localhost",
        "--upstream-timeout", "5", "--max-headers", "40", "-vv")


def get(path: str, extra: str = "") -> str:
    return f"GET {path} HTTP/1.1\r\nHost: {{host}}\r\n{extra}\r\n"


# Each conversation: (the host named in CONNECT and SNI, the requests inside the tunnel).
CONVERSATIONS = {
    "hits": ("localhost", [
        get("/echo/a?x=1", "Accept: */*\r\n"), get("/echo/a?x=1", "Accept: */*\r\n"),
        "POST /api/items HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "X-RapidAPI-Key: rk-secret-2\r\nContent-Length: 13\r\n\r\n{\"name\": \"x\"}",
        get("/echoheader", "X-RapidAPI-Key: rk-secret-3\r\n"), get("/setcookie?value=abc"), get("/status/503"),
        get("/gzip", "Accept-Encoding: gzip\r\n"), get("/binary"), get("/echo/s", "X-Stb-Session: named\r\n"),
        "DELETE /echo/d HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\n\r\n",
        "POST /echo/deep HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {3000 * 2}\r\n\r\n{'[' * 3000}{']' * 3000}",
        get("/echo/bye", "Connection: close\r\n"),
    ]),
    "by address, no SNI": ("127.0.0.1", [get("/echo/ip"), get("/echo/ip")]),
    "mixed": ("localhost", [get("/echo/m1"), "HEAD /echo/m1 HTTP/1.1\r\nHost: {host}\r\n\r\n", get("/echo/m1")]),
    "http/1.0": ("localhost", [get("/echo/a?x=1"), "GET /echo/old HTTP/1.0\r\nHost: {host}\r\n\r\n"]),
    "chunked": ("localhost", ["POST /echo/ch HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n\r\n"
                              "4\r\nabcd\r\n0\r\n\r\n", get("/echo/ch")]),
    "expect": ("localhost", ["POST /echo/ex HTTP/1.1\r\nHost: {host}\r\nExpect: 100-continue\r\n"
                             "Content-Length: 2\r\n\r\nok"]),
    "too many headers": ("localhost", [get("/echo/h", "X-A: b\r\n" * 60), get("/echo/h")]),
    "bad header": ("localhost", [get("/echo/x", "no colon\r\n")]),
    "absolute-form inside": ("localhost", ["GET https://{host}/echo/abs HTTP/1.1\r\nHost: {host}\r\n\r\n"]),
}


def connect(port: int, target: str, extra: str = "", version: str = "HTTP/1.1") -> tuple[socket.socket, bytes]:
    sock = socket.create_connection(("127.0.0.1", port), timeout=15)
    sock.sendall(f"CONNECT {target} {version}\r\nHost: {target}\r\n{extra}\r\n".encode())
    return sock, read_connect_answer(sock)


def read_connect_answer(sock: socket.socket) -> bytes:
    """A CONNECT's answer: a 2xx one has no body whatever its header fields say."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            return head + b"[closed]"
        head += chunk
    if re.match(rb"HTTP/1\.[01] 2\d\d", head):
        return head
    answer, rest, _closed = read_answer(sock, head, b"CONNECT")
    assert rest == b""
    return answer


def client_context(ca_file, alpn=("http/1.1",)) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file))
    context.set_alpn_protocols(list(alpn))
    return context


def converse_in_tunnel(proxy: ProxyProcess, upstream: Upstream, host: str, requests: list[str]) -> bytes:
    target = f"{host}:{upstream.port}"
    sock, transcript = connect(proxy.port, target)
    with client_context(proxy.ca_file).wrap_socket(sock, server_hostname=host) as tls:
        return converse_on(tls, [raw.replace("{host}", target).encode() for raw in requests], transcript + b"\n----\n")


def special_cases(proxy: ProxyProcess, upstream: Upstream) -> dict[str, bytes]:
    """The tunnels that are not one plain conversation."""
    target = f"localhost:{upstream.port}"
    found = {}
    # a refused CONNECT (a denied destination), then a plain request on the same connection
    sock, answer = connect(proxy.port, "api.example.com:443")
    with sock:
        sock.sendall(f"GET http://{target}/echo/after HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        found["refused connect"] = answer + b"\n----\n" + read_answer(sock, b"", b"GET")[0]
    # an HTTP/1.0 CONNECT, as Python's http.client (requests, urllib3) sends it, then keep-alive
    # requests inside; and one refused, after which the connection closes
    sock, answer = connect(proxy.port, target, version="HTTP/1.0")
    with client_context(proxy.ca_file).wrap_socket(sock, server_hostname="localhost") as tls:
        found["http/1.0 connect"] = converse_on(
            tls, [get(path).replace("{host}", target).encode() for path in ("/echo/p1", "/echo/p1", "/echo/p2")],
            answer + b"\n----\n")
    sock, answer = connect(proxy.port, "api.example.com:443", version="HTTP/1.0")
    with sock:  # closed after the answer, as an HTTP/1.0 request without keep-alive asks
        sock.settimeout(5)
        try:
            after = b"[closed]" if not sock.recv(1) else b"[open]"
        except TimeoutError:
            after = b"[open]"
        except OSError:
            after = b"[closed]"
        found["refused http/1.0 connect"] = answer + b"\n----\n" + after
    # plain HTTP inside a tunnel: mitmproxy's to carry (it answers the CONNECT again; sent once)
    sock, answer = connect(proxy.port, target)
    with sock:
        sock.sendall(f"GET /echo/plain-in-tunnel HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        found["plain http in a tunnel"] = answer + b"\n----\n" + read_answer(sock, b"", b"GET")[0]
    # HTTP/2 offered: mitmproxy's HTTP layer speaks it, the lane does not stand in
    sock, _ = connect(proxy.port, target)
    with client_context(proxy.ca_file, ("h2", "http/1.1")).wrap_socket(sock, server_hostname="localhost") as tls:
        found["alpn offered h2, http/1.1"] = (tls.selected_alpn_protocol() or "-").encode()
    # a client that says goodbye in TLS (close_notify) after one request
    sock, _ = connect(proxy.port, target)
    tls = client_context(proxy.ca_file).wrap_socket(sock, server_hostname="localhost")
    with tls:
        tls.sendall(f"GET /echo/a?x=1 HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        answer = read_answer(tls, b"", b"GET")[0]
        try:
            tls.unwrap()  # sends close_notify; the proxy closes the connection
            found["close_notify"] = answer + b"\n----\n[shut down]"
        except (ssl.SSLError, OSError) as exc:
            found["close_notify"] = answer + f"\n----\n[{type(exc).__name__}]".encode()
    # a client that does not trust the proxy's CA
    sock, _ = connect(proxy.port, target)
    with sock:
        try:
            ssl.create_default_context().wrap_socket(sock, server_hostname="localhost")
            found["untrusted CA"] = b"handshake passed"
        except ssl.SSLCertVerificationError:
            found["untrusted CA"] = b"certificate refused by the client"
    time.sleep(0.5)  # for the proxy's log line
    found["untrusted CA, the proxy's log"] = "\n".join(
        re.sub(r"^[-\d]+ [:,\d]+ ", "", line.strip()) for line in proxy.output  # without the time
        if "TLS handshake failed" in line).encode()
    return {name: normalized(text, proxy, upstream) for name, text in found.items()}


def all_transcripts(proxy: ProxyProcess, upstream: Upstream) -> dict[str, bytes]:
    transcripts = {}
    for name, (host, requests) in CONVERSATIONS.items():
        transcripts[name] = normalized(converse_in_tunnel(proxy, upstream, host, requests), proxy, upstream)
        if name == "hits":
            time.sleep(0.3)
            transcripts["mitmproxy saw the tunnel"] = str("client connect" in "".join(proxy.output)).encode()
    transcripts.update(special_cases(proxy, upstream))
    return transcripts


def side_by_side(tmp_path, test_ca, args, talk) -> tuple[list, list[str]]:
    """What ``talk(proxy, upstream)`` returns with the lane and without it (--no-fast-lane),
    each time with the same TLS upstream on the same port (simulated answers depend on the
    URL), and each proxy's output."""
    args = (*args, "--upstream-ca", str(test_ca.ca_file))
    results = []
    port = 0
    with ProxyProcess(tmp_path / "a" / "store", *args) as lane, \
            ProxyProcess(tmp_path / "b" / "store", *args, "--no-fast-lane") as layers:
        for proxy in (lane, layers):
            with Upstream(tls=test_ca, port=port) as upstream:
                port = upstream.port
                results.append(talk(proxy, upstream))
        return results, ["".join(proxy.output) for proxy in (lane, layers)]


@pytest.mark.timeout(240)
def test_https_with_and_without_the_fast_lane_every_answer_is_the_same(tmp_path, test_ca):
    (with_lane, without), outputs = side_by_side(tmp_path, test_ca, ARGS, all_transcripts)

    assert_same_transcripts(with_lane, without, "mitmproxy saw the tunnel")
    hits = with_lane["hits"].split(b"\n----\n")
    assert hits[0].startswith(b"HTTP/1.1 200 Connection established")
    assert b"X-Stb-Source: upstream" in hits[1] and b"X-Stb-Source: cache" in hits[2]
    assert with_lane["hits"].endswith(b"[closed]")
    assert b"HTTP/1.1 200" in with_lane["mixed"].split(b"\n----\n")[3]  # GET after the HEAD mitmproxy served
    assert with_lane["refused connect"].startswith(b"HTTP/1.1 403")
    assert with_lane["http/1.0 connect"].startswith(b"HTTP/1.0 200 Connection established")
    assert with_lane["http/1.0 connect"].count(b"X-Stb-Source: cache") == 1  # the second /echo/p1
    assert with_lane["refused http/1.0 connect"].startswith(b"HTTP/1.1 403")
    assert with_lane["refused http/1.0 connect"].endswith(b"[closed]")
    tunnelled = with_lane["plain http in a tunnel"]  # the upstream speaks TLS only: a simulated answer
    assert tunnelled.count(b"Connection established") == 1 and b"X-Stb-Source: simulated" in tunnelled
    assert with_lane["alpn offered h2, http/1.1"] == b"h2"
    goodbye = with_lane["close_notify"]  # answered, then closed (not left hanging until the timeout)
    assert goodbye.startswith(b"HTTP/1.1 200") and goodbye.endswith((b"[shut down]", b"[SSLEOFError]"))
    assert with_lane["untrusted CA"] == b"certificate refused by the client"
    assert b"does not trust the proxy's certificate for localhost" in with_lane["untrusted CA, the proxy's log"]
    for output in outputs:
        assert "Traceback" not in output and "failed in the fast lane" not in output
        assert not any(secret in output for secret in ("rk-secret-2", "rk-secret-3"))


@pytest.mark.timeout(120)
def test_https_with_proxy_auth_the_answers_are_the_same_too(tmp_path, test_ca):
    def talk(proxy: ProxyProcess, upstream: Upstream) -> bytes:
        target = f"localhost:{upstream.port}"
        # no credentials, then wrong ones, on one connection; then right ones and a request inside
        sock, first = connect(proxy.port, target)
        with sock:
            sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n"
                         "Proxy-Authorization: Basic dXNlcjp3cm9uZw==\r\n\r\n".encode())
            second = read_connect_answer(sock)
        sock, third = connect(proxy.port, target, "Proxy-Authorization: Basic dXNlcjpwYXNz\r\n")
        with client_context(proxy.ca_file).wrap_socket(sock, server_hostname="localhost") as tls:
            tls.sendall(f"GET /echo/auth HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            inside = read_answer(tls, b"", b"GET")[0]
        return normalized(b"\n----\n".join([first, second, third, inside]), proxy, upstream)

    args = ("--simulator", "schema", "--proxy-auth", "user:pass", "--allow-host", "localhost")
    results, _outputs = side_by_side(tmp_path, test_ca, args, talk)
    with_lane, without = results
    assert with_lane == without, f"{with_lane.decode('latin-1')}\n--- without the lane ---\n{without.decode('latin-1')}"
    assert re.findall(rb"^HTTP/1.1 (\d+)", with_lane, re.M) == [b"407", b"407", b"200", b"200"]
