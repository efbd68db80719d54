"""The original seeded fuzz cases: hostile content in valid framing, and ``send`` to try one.

``cases(seed, proxy_port, upstream_port)`` yields endless ``Case`` objects; the same seed gives
the same cases. Each is raw bytes for one connection: a proxied request (absolute-form) to an
upstream on loopback or to a host the proxy must refuse, a POST to /virtual, or a plain request
to the proxy's own address. The ingredients are the ones that broke proxies before: non-UTF-8
paths and headers, lone surrogates (as JSON escapes and as raw bytes), JSON nested 100,000
deep, numbers too long to convert, hundreds of header fields, odd content types,
percent-garbage in queries and forms. Framing is always valid (a correct Content-Length), so
every case deserves an answer. ``send`` sends one case on its own blocking connection.

Used by scripts/reliability/reliability.py (its fuzz phase), tests/proxy/test_fast_lane_differential.py
and tests/proxy/test_hardening_proxy.py. ``Case`` and these ingredients are shared with the rest of
the fuzz kit (issue 24, items 5-8 and 10), one module per job:

- fuzz_carriers.py: the valid requests hostile framing is made from, tagged with a case number;
- fuzz_hostile.py: the hostile case classes, byte-level mutations and ``hostile_cases``;
- fuzz_upstream.py: ``FuzzUpstream``, the loopback upstream that remembers what reached it;
- fuzz_judge.py: the outcomes, ``Result`` and ``judge`` (whose fault an answer is);
- fuzz_runner.py: the asyncio client that sends cases (``run_case``, ``run_cases``);
- fuzz_lane.py: one proxy lane end to end (``fuzz_lane``, ``LaneRun``, the log scan).
"""

from __future__ import annotations

import json
import random
import re
import socket
from dataclasses import dataclass
from typing import Iterator

SURROGATES = ['"\\ud800"', '"\\udfff"', '"a\\udc80b"', '"\\ud83d"']
RAW_SURROGATE = b"\xed\xa0\x80"
ODD_TEXT = ["", "../../etc/passwd", "\u00e9t\u00e9", "\u540d\u524d", "a\x00b", "x" * 5000, "%ff%fe", "\U0001F600",
            "Robert'); DROP TABLE", "{{id}}", "\\", "\t\r"]
CONTENT_TYPES = ["application/json", "application/json; charset=latin-1", "application/x-www-form-urlencoded",
                 "text/plain", "application/octet-stream", "multipart/form-data; boundary=x", "application/vnd+json",
                 "\xff/\xfe", ""]
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "FROB"]


ANSWER, ANY, LEFT = "answer", "any", "left"  # what a case's client may expect (hostile_cases)


@dataclass(frozen=True)
class Case:
    kind: str  # "proxy", "virtual", "own" or "tunnel" (inside a CONNECT tunnel with TLS)
    raw: bytes
    cls: str = "content"  # the hostile-input class (hostile_cases)
    expect: str = ANSWER  # ANSWER: a whole request; ANY: half-closed after it; LEFT: the client leaves
    number: int | None = None  # carried in the target as stbfz=<number> when it is aimed at the upstream
    live: bool = False  # aimed at the live loopback upstream (a miss must reach it)
    leave: str = ""  # how a LEFT client goes: "close" (FIN) or "reset" (RST)
    tunnel: bytes = b""  # the CONNECT authority of a tunnel case


def deep_json(rng: random.Random) -> bytes:
    depth = rng.choice([99, 100, 101, 1000, 100_000])
    if rng.random() < 0.5:
        return b"[" * depth + b"]" * depth
    return b'{"a":' * depth + b"1" + b"}" * depth


LEAVES = [lambda rng: rng.choice(SURROGATES).encode(), lambda rng: json.dumps(rng.choice(ODD_TEXT)).encode(),
          lambda rng: b"1" * 5000, lambda rng: b"1e999999", lambda rng: b"-0", lambda rng: b"null",
          lambda rng: json.dumps(rng.randint(-10**9, 10**9)).encode(), lambda rng: b'"' + RAW_SURROGATE + b'"',
          lambda rng: b'"\xff\xfe"', lambda rng: b"NaN"]


def json_value(rng: random.Random, depth: int = 0) -> bytes:
    """A JSON text, mostly valid, with hostile leaves."""
    roll = rng.random()
    if depth > 3 or roll < 0.3:
        return rng.choice(LEAVES)(rng)
    if roll < 0.6:
        items = [json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
        return b"[" + b",".join(items) + b"]"
    if roll < 0.95:
        keys = [json.dumps(rng.choice(ODD_TEXT + ["api_key", "toolbench_key", "q"])).encode()
                for _ in range(rng.randint(0, 4))]
        return b"{" + b",".join(k + b":" + json_value(rng, depth + 1) for k in keys) + b"}"
    return deep_json(rng)


def odd_bytes(rng: random.Random, size: int = 40) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, size)))


def path_of(rng: random.Random) -> bytes:
    """Mostly what clients send (percent-escaped); sometimes raw non-UTF-8 bytes."""
    path = rng.choice([
        b"/echo", b"/echo/%ff%fe", b"/%2e%2e/%2e%2e/x", b"//double//slash", b"/" + b"a" * 3000, b"/status/404",
        b"/echo/%ed%a0%80", b"/%ff%fe%00", b"/echo;p=1", b"/garbage", b"/reset", b"/binary", b"/gzip",
        b"/echo/" + "名".encode(),
    ])
    query = rng.choice([b"", b"?", b"?a=%zz&&b", b"?api_key=k3y-s3cr3t&q=%ff", b"?q=%ed%a0%80", b"?" + b"&".join(
        b"p%d=%d" % (i, i) for i in range(rng.randint(1, 300)))])
    if rng.random() < 0.2:
        path += b"/" + odd_bytes(rng).translate(None, b" \r\n?#") + rng.choice([b"", RAW_SURROGATE, b"\xff"])
    return path + query


def headers_of(rng: random.Random) -> list[bytes]:
    lines = [rng.choice([
        b"X-Stb-Session: ../../etc", b"X-Stb-Session: \xff\xfe", b"Proxy-Authorization: Basic !!!",
        b"Proxy-Authorization: Basic " + b"QUJD" * 10, b"X-RapidAPI-Host: \xff.example", b"Cookie: a=\xff; b",
        b"X-RapidAPI-Key: " + odd_bytes(rng).replace(b"\r", b"").replace(b"\n", b""), b"Accept-Encoding: br, zstd, x",
        b"Authorization: Bearer \xed\xa0\x80", b"X-Odd: " + "\u540d".encode(), b"Expect: 100-continue",
    ]) for _ in range(rng.randint(0, 4))]
    if rng.random() < 0.1:
        lines += [b"X-Many-%d: v" % i for i in range(rng.choice([99, 150, 2000]))]
    if rng.random() < 0.05:
        lines.append(b"X-Big: " + b"v" * 70_000)
    return lines


def body_of(rng: random.Random) -> tuple[bytes, bytes]:
    content_type = rng.choice(CONTENT_TYPES).encode("utf-8", "surrogateescape")
    makers = [json_value, json_value, deep_json, lambda r: odd_bytes(r, 200), lambda r: b"a=%ff&b=%zz&&=",
              lambda r: b""]
    return content_type, rng.choice(makers)(rng)


def request(method: bytes, target: bytes, host: bytes, headers: list[bytes], content_type: bytes, body: bytes) -> bytes:
    head = [method + b" " + target + b" HTTP/1.1", b"Host: " + host, *headers]
    if content_type:
        head.append(b"Content-Type: " + content_type)
    head.append(b"Content-Length: %d" % len(body))
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def virtual_body(rng: random.Random) -> bytes:
    roll = rng.random()
    if roll < 0.15:
        return rng.choice([deep_json(rng), odd_bytes(rng, 100), b"[1,2]", b"null", b'"text"'])
    if roll < 0.6:  # a well-formed call with hostile names and arguments
        names = [json.dumps(rng.choice(ODD_TEXT + ["Data", "Weather", "chat_with_user"])).encode() for _ in range(3)]
        args = b"{" + b",".join(json.dumps(rng.choice(ODD_TEXT)).encode() + b":" + json_value(rng)
                                for _ in range(rng.randint(0, 3))) + b"}"
        tool_input = json.dumps(args.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        return (b'{"category":%s,"tool_name":%s,"api_name":%s,"tool_input":%s,"strip":"","toolbench_key":"k"}'
                % (*names, tool_input))
    fields = {}
    for name in ("category", "tool_name", "api_name", "tool_input", "strip", "toolbench_key"):
        if rng.random() < 0.9:
            fields[name] = rng.choice([json.dumps(rng.choice(ODD_TEXT)).encode(), json_value(rng),
                                       rng.choice(SURROGATES).encode(), b'"chat_with_user"', b'"Data"'])
    return b"{" + b",".join(json.dumps(k).encode() + b":" + v for k, v in fields.items()) + b"}"


def cases(seed: int, proxy_port: int, upstream_port: int) -> Iterator[Case]:
    """Endless hostile cases; the same seed gives the same cases."""
    rng = random.Random(seed)
    own = b"127.0.0.1:%d" % proxy_port
    upstream = b"127.0.0.1:%d" % upstream_port
    while True:
        roll = rng.random()
        content_type, body = body_of(rng)
        if roll < 0.45:
            host = rng.choice([upstream] * 6 + [b"api.example.com", b"\xff.example", b"xn--80ak6aa92e.com:80"])
            method = rng.choice(METHODS).encode()
            yield Case("proxy", request(method, b"http://" + host + path_of(rng), host, headers_of(rng),
                                        content_type, body))
        elif roll < 0.9:
            yield Case("virtual", request(b"POST", rng.choice([b"/virtual", b"/virtual/", b"/virtual?x=%ff"]), own,
                                          headers_of(rng), b"application/json", virtual_body(rng)))
        else:
            method = rng.choice(METHODS).encode()
            yield Case("own", request(method, path_of(rng), own, headers_of(rng), content_type, body))


_STATUS = re.compile(rb"^HTTP/1\.[01] (\d{3})")
_INTERIM = re.compile(rb"^HTTP/1\.[01] 1\d\d")


def send(port: int, raw: bytes, timeout: float = 30.0) -> tuple[int | None, bytes]:
    """One case on its own connection: (status, answer) or (None, what went wrong)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(raw)
            received = b""
            while True:
                while b"\r\n\r\n" not in received:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    received += chunk
                head, _, body = received.partition(b"\r\n\r\n")
                if not _INTERIM.match(head):
                    break
                received = body  # "100 Continue" before the answer (Expect: 100-continue)
            length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
            while length and len(body) < int(length.group(1)):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                body += chunk
    except OSError as exc:
        return None, f"{type(exc).__name__}: {exc}".encode()
    match = _STATUS.match(head)
    return (int(match.group(1)) if match else None), head + b"\r\n\r\n" + body
