"""Two real proxies side by side, one with the fast lane (the default) and one with
``--no-fast-lane`` (every request through mitmproxy's protocol layers), each with an
upstream of its own: the same conversations, byte for byte the same answers.

The conversations cover what the lane answers (/virtual calls, plain-HTTP hits and misses,
sessions, errors of the proxy's own), what it hands to mitmproxy (HEAD, HTTP/1.0, chunked,
Expect, heads mitmproxy refuses, over-long heads) and both on one connection; then seeded
hostile cases (scripts/reliability/fuzzkit.py). Ports and Date headers are the only
differences allowed.
"""

from __future__ import annotations

import re
import socket
import time

import pytest

from scripts.reliability import fuzzkit
from tests.servers import ProxyProcess, Upstream

pytestmark = pytest.mark.integration

FUZZ_SEED = 23
FUZZ_CASES = 250
ARGS = ("--simulator", "schema", "--deny-host", "*", "--allow-host", "127.0.0.1", "--upstream-timeout", "5",
        "--max-headers", "40", "-vv")


def virtual(path: str, body: str, extra: str = "") -> str:
    return (f"POST {path} HTTP/1.1\r\nHost: {{own}}\r\nContent-Type: application/json\r\n{extra}"
            f"Content-Length: {len(body.encode())}\r\n\r\n{body}")


CALL = ('{"category": "Data", "tool_name": "Weather", "api_name": "today", "tool_input": "{\\"city\\": \\"Oslo\\"}", '
        '"strip": "", "toolbench_key": "tb-secret-1"}')
OTHER = '{"category": "Data", "tool_name": "Weather", "api_name": "week", "tool_input": {"city": "Rome"}}'

# Each conversation is sent request by request on one connection; the answers are read in turn.
CONVERSATIONS = {
    "virtual": [
        virtual("/virtual", CALL), virtual("/virtual", CALL),  # simulated, then the stored answer
        virtual("/s/run-7/virtual", OTHER), virtual("/virtual", OTHER, "X-Stb-Session: run-8\r\n"),
        virtual("/virtual", "{not json"), virtual("/virtual", '{"category": "Data"}'),
        "GET /virtual HTTP/1.1\r\nHost: {own}\r\n\r\n",
        "GET /nothing/here HTTP/1.1\r\nHost: {own}\r\n\r\n",
        "GET /virtual HTTP/1.1\r\nHost: localhost:{own_port}\r\n\r\n",
    ],
    "plain http": [
        "GET http://{up}/echo/a?x=1 HTTP/1.1\r\nHost: {up}\r\nAccept: */*\r\n\r\n",
        "GET http://{up}/echo/a?x=1 HTTP/1.1\r\nHost: {up}\r\nAccept: */*\r\n\r\n",
        "POST http://{up}/api/items HTTP/1.1\r\nHost: {up}\r\nContent-Type: application/json\r\n"
        "X-RapidAPI-Key: rk-secret-2\r\nContent-Length: 13\r\n\r\n{\"name\": \"x\"}",
        "GET http://{up}/echoheader HTTP/1.1\r\nHost: {up}\r\nX-RapidAPI-Key: rk-secret-3\r\n\r\n",
        "GET http://{up}/setcookie?value=abc HTTP/1.1\r\nHost: {up}\r\n\r\n",
        "GET http://{up}/status/503 HTTP/1.1\r\nHost: {up}\r\n\r\n",
        "GET http://{up}/gzip HTTP/1.1\r\nHost: {up}\r\nAccept-Encoding: gzip\r\n\r\n",
        "GET http://{up}/binary HTTP/1.1\r\nHost: {up}\r\n\r\n",
        "GET http://{up}/echo/s HTTP/1.1\r\nHost: {up}\r\nX-Stb-Session: named\r\n\r\n",
        "GET http://{up}/echo/s HTTP/1.1\r\nHost: {up}\r\nProxy-Authorization: Basic c2Vzc2lvbi05Og==\r\n\r\n",
        "DELETE http://{up}/echo/d HTTP/1.1\r\nHost: {up}\r\nContent-Length: 0\r\n\r\n",
        "GET http://api.example.com/refused HTTP/1.1\r\nHost: api.example.com\r\n\r\n",
        "POST http://{up}/echo/deep HTTP/1.1\r\nHost: {up}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {3000 * 2}\r\n\r\n{'[' * 3000}{']' * 3000}",
        "GET http://127.1:{own_port}/loop HTTP/1.1\r\nHost: 127.1:{own_port}\r\n\r\n",
        "GET http://{up}/echo/bye HTTP/1.1\r\nHost: {up}\r\nConnection: close\r\n\r\n",
    ],
    "mixed": [
        "GET http://{up}/echo/m1 HTTP/1.1\r\nHost: {up}\r\n\r\n",
        "HEAD http://{up}/echo/m1 HTTP/1.1\r\nHost: {up}\r\n\r\n",
        "GET http://{up}/echo/m1 HTTP/1.1\r\nHost: {up}\r\n\r\n",
    ],
    "http/1.0": ["GET http://{up}/echo/old HTTP/1.0\r\nHost: {up}\r\n\r\n"],
    "chunked": ["POST http://{up}/echo/ch HTTP/1.1\r\nHost: {up}\r\nTransfer-Encoding: chunked\r\n\r\n"
                "4\r\nabcd\r\n0\r\n\r\n", "GET http://{up}/echo/ch HTTP/1.1\r\nHost: {up}\r\n\r\n"],
    "expect": ["POST http://{up}/echo/ex HTTP/1.1\r\nHost: {up}\r\nExpect: 100-continue\r\n"
               "Content-Length: 2\r\n\r\nok"],
    "bare lf": ["GET http://{up}/echo/lf HTTP/1.1\nHost: {up}\n\n", virtual("/virtual", OTHER).replace("\r\n", "\n")],
    "too many headers": ["GET http://{up}/echo/h HTTP/1.1\r\nHost: {up}\r\n" + "X-A: b\r\n" * 60 + "\r\n",
                         "GET http://{up}/echo/h HTTP/1.1\r\nHost: {up}\r\n\r\n"],
    "bad request line": ["GET http://{up}/echo/x HTTP/1.1 and more\r\nHost: {up}\r\n\r\n"],
    "bad header": ["GET http://{up}/echo/x HTTP/1.1\r\nHost: {up}\r\nno colon\r\n\r\n"],
    "smuggling": ["POST http://{up}/echo/x HTTP/1.1\r\nHost: {up}\r\nContent-Length: 4\r\n"
                  "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"],
}

_HEAD_END = re.compile(rb"\r?\n\r?\n")


def read_answer(sock: socket.socket, buffer: bytes, method: bytes) -> tuple[bytes, bytes, bool]:
    """One answer (interim 1xx answers included) from ``buffer`` and the socket: (answer,
    what is left, whether the connection then closed)."""
    answer = b""
    while True:
        while not _HEAD_END.search(buffer):
            chunk = sock.recv(65536)
            if not chunk:
                return answer + buffer, b"", True
            buffer += chunk
        end = _HEAD_END.search(buffer).end()
        head, buffer = buffer[:end], buffer[end:]
        answer += head
        if not re.match(rb"HTTP/1\.[01] 1\d\d", head):
            break
    length = re.search(rb"(?i)\ncontent-length: *(\d+)", head)
    if method == b"HEAD" or (length and int(length.group(1)) == 0):
        return answer, buffer, False
    if length is None:  # no length: until the connection closes
        while chunk := sock.recv(65536):
            buffer += chunk
        return answer + buffer, b"", True
    while len(buffer) < int(length.group(1)):
        chunk = sock.recv(65536)
        if not chunk:
            return answer + buffer, b"", True
        buffer += chunk
    size = int(length.group(1))
    return answer + buffer[:size], buffer[size:], False


def converse(port: int, requests: list[bytes]) -> bytes:
    """The answers to ``requests``, sent one after another on one connection, and whether
    the proxy closed it."""
    with socket.create_connection(("127.0.0.1", port), timeout=15) as sock:
        return converse_on(sock, requests)


def converse_on(sock: socket.socket, requests: list[bytes], transcript: bytes = b"") -> bytes:
    """``converse`` on a connection already made (a TLS one, say), after ``transcript``."""
    buffer = b""
    for raw in requests:
        try:
            sock.sendall(raw)
        except OSError as exc:
            return transcript + f"[send failed: {type(exc).__name__}]".encode()
        answer, buffer, closed = read_answer(sock, buffer, raw.split(b" ", 1)[0])
        transcript += answer + b"\n----\n"
        if closed:
            return transcript + b"[closed]"
    sock.settimeout(0.5)
    try:
        transcript += b"[closed]" if sock.recv(1) == b"" else b"[more data]"
    except TimeoutError:
        transcript += b"[open]"
    except OSError:  # a TLS connection ended without close_notify
        transcript += b"[closed]"
    return transcript


def normalized(transcript: bytes, proxy: ProxyProcess, upstream: Upstream) -> bytes:
    text = re.sub(rb"(?m)^Date: [^\r\n]*", b"Date: -", transcript)
    return text.replace(b":%d" % proxy.port, b":PROXY").replace(b":%d" % upstream.port, b":UPSTREAM")


def transcripts_of(proxy: ProxyProcess, upstream: Upstream) -> dict[str, bytes]:
    """Every conversation's answers, then the fuzz cases', normalized."""
    transcripts = {}
    for name, conversation in CONVERSATIONS.items():
        requests = [r.replace("{own}", f"127.0.0.1:{proxy.port}").replace("{own_port}", str(proxy.port))
                    .replace("{up}", f"127.0.0.1:{upstream.port}").encode() for r in conversation]
        transcripts[name] = normalized(converse(proxy.port, requests), proxy, upstream)
        if name == "virtual":
            time.sleep(0.3)  # for the log lines to arrive
            transcripts["mitmproxy saw the /virtual connection"] = str(
                "client connect" in "".join(proxy.output)).encode()
    cases = fuzzkit.cases(FUZZ_SEED, proxy.port, upstream.port)
    answers = [normalized(fuzzkit.send(proxy.port, next(cases).raw, timeout=15)[1], proxy, upstream)
               for _ in range(FUZZ_CASES)]
    transcripts[f"fuzz seed {FUZZ_SEED}"] = b"\n====\n".join(answers)
    return transcripts


@pytest.mark.timeout(240)
def assert_same_transcripts(with_lane: dict[str, bytes], without: dict[str, bytes], seen: str) -> None:
    """Equal named transcripts from the two proxies; ``seen`` names the entry that says whether
    mitmproxy's layers saw the connection: not with the lane, and so when it is off."""
    assert with_lane.pop(seen) == b"False"  # the lane served it
    assert without.pop(seen) == b"True"
    assert with_lane.keys() == without.keys()
    for name in with_lane:
        assert with_lane[name] == without[name], (f"{name}:\n{with_lane[name].decode('latin-1')}\n"
                                                  f"--- without the lane ---\n{without[name].decode('latin-1')}")


def test_with_and_without_the_fast_lane_every_answer_is_the_same(tmp_path):
    with ProxyProcess(tmp_path / "a" / "store", *ARGS) as lane, \
            ProxyProcess(tmp_path / "b" / "store", *ARGS, "--no-fast-lane") as layers:
        # One upstream after the other on the same port: the simulator's answers depend on
        # the URL, and the upstream counts calls.
        with Upstream() as upstream:
            with_lane = transcripts_of(lane, upstream)
            port = upstream.port
        with Upstream(port=port) as upstream:
            without = transcripts_of(layers, upstream)
        outputs = ["".join(proxy.output) for proxy in (lane, layers)]

    assert_same_transcripts(with_lane, without, "mitmproxy saw the /virtual connection")
    virtual_answers = with_lane["virtual"].split(b"\n----\n")
    assert virtual_answers[1].startswith(b"HTTP/1.1 200") and b"X-Stb-Source: cache" in virtual_answers[1]
    assert b"X-Stb-Source: cache" in with_lane["plain http"].split(b"\n----\n")[1]
    assert with_lane["plain http"].endswith(b"[closed]")  # Connection: close honoured
    get, head, get_again = with_lane["mixed"].split(b"\n----\n")[:3]  # HEAD's answer has no body
    assert head.startswith(b"HTTP/1.1 ") and head.endswith(b"\r\n\r\n") and get_again.startswith(b"HTTP/1.1 200")
    for output in outputs:
        assert "Traceback" not in output and "failed in the fast lane" not in output
        assert not any(secret in output for secret in ("tb-secret-1", "rk-secret-2", "rk-secret-3"))


AUTH_CONVERSATION = [
    virtual("/virtual", CALL),  # no credentials: 407
    virtual("/virtual", CALL, "Proxy-Authorization: Basic dXNlcjpwYXNz\r\n"),
    "GET http://{up}/echo/auth HTTP/1.1\r\nHost: {up}\r\nProxy-Authorization: Basic dXNlcjpwYXNz\r\n\r\n",
    "GET http://{up}/echo/auth HTTP/1.1\r\nHost: {up}\r\nProxy-Authorization: Basic dXNlcjpwYXNz\r\n\r\n",
    "GET http://{up}/echo/auth HTTP/1.1\r\nHost: {up}\r\nProxy-Authorization: Basic dXNlcjp3cm9uZw==\r\n\r\n",
    "GET http://{up}/echo/auth HTTP/1.1\r\nHost: {up}\r\n\r\n",
]


@pytest.mark.timeout(120)
def test_with_proxy_auth_the_answers_are_the_same_too(tmp_path):
    args = ("--simulator", "schema", "--proxy-auth", "user:pass", "--allow-host", "127.0.0.1")
    with ProxyProcess(tmp_path / "a" / "store", *args) as lane, \
            ProxyProcess(tmp_path / "b" / "store", *args, "--no-fast-lane") as layers:
        answers = []
        port = 0
        for proxy in (lane, layers):
            with Upstream(port=port) as upstream:
                port = upstream.port
                requests = [r.replace("{own}", f"127.0.0.1:{proxy.port}").replace("{up}", f"127.0.0.1:{port}")
                            .encode() for r in AUTH_CONVERSATION]
                answers.append(normalized(converse(proxy.port, requests), proxy, upstream))
    with_lane, without = answers
    assert with_lane == without, f"{with_lane.decode('latin-1')}\n--- without the lane ---\n{without.decode('latin-1')}"
    statuses = re.findall(rb"^HTTP/1.1 (\d+)", with_lane, re.M)
    assert statuses == [b"407", b"200", b"200", b"200", b"407", b"407"], statuses
