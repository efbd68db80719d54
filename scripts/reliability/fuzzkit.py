"""Hostile requests for a running proxy, from seeded generators (shared by the fuzz tests,
scripts/reliability/fuzz_proxy.py and scripts/reliability/reliability.py, which import it as
scripts.reliability.fuzzkit).

``cases``: hostile content in valid framing. Each case is raw bytes for one connection: a
proxied request (absolute-form) to an upstream on loopback or to a host the proxy must
refuse, a POST to /virtual, or a plain request to the proxy's own address. The ingredients
are the ones that broke proxies before: non-UTF-8 paths and headers, lone surrogates (as
JSON escapes and as raw bytes), JSON nested 100,000 deep, numbers too long to convert,
hundreds of header fields, odd content types, percent-garbage in queries and forms. Framing
is always valid (a correct Content-Length), so every case deserves an answer.

``hostile_cases`` (issue 24, items 5-8 and 10): those, plus hostile framing made at the byte
level from valid requests, each case labelled with its class and with what the client may
expect: an answer, an answer or a close (the client half-closes after bytes whose framing
is unknown), or nothing (the client leaves mid-request). ``FuzzUpstream`` is the loopback
upstream they aim at: it remembers, by the case number each proxied target carries, which
cases reached it and what it answered, so that ``judge`` can tell a 5xx the upstream made
from one the proxy made, and an answer that blames the upstream for a request that never
reached it. ``fuzz_lane`` runs a proxy (one lane), the cases, the checks afterwards and the
scan of the proxy's log, for tests/test_fuzz_proxy.py and scripts/reliability/fuzz_proxy.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import socket
import ssl
import struct
import time
from collections import Counter
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


# -- hostile framing, seeded byte-level mutations of valid requests (issue 24, items 5-8) -----

CASE_TAG = b"stbfz="  # proxied targets carry stbfz=<case number>: the upstream knows what reached it
BENIGN_PATHS = [b"/echo", b"/echo/a/b", b"/api/items", b"/echo/%41%42", b"/status/200", b"/"]
FAILING_PATHS = [b"/status/500", b"/status/503", b"/garbage", b"/reset"]  # the upstream fails on purpose
OWN_PATHS = [b"/", b"/virtual", b"/nothing-here", b"/virtual/x"]
TOOLS = [b"Data", b"Weather", b"Finance", b"Sports"]
KIND_WEIGHTS = {"proxy": 4, "virtual": 3, "own": 2, "tunnel": 1}  # a tunnel costs a TLS handshake


@dataclass
class _Req:
    """A valid request to build hostile ones from: its parts, before framing."""
    kind: str
    method: bytes
    target: bytes
    headers: list[bytes]  # Host first
    body: bytes
    number: int | None
    live: bool
    tunnel: bytes = b""

    def wire(self, *, framing: str = "length", prefix: bytes = b"", extra: list[bytes] = (),
             chunks: bytes | None = None) -> bytes:
        """The request on the wire: a Content-Length ("length"), chunked ("chunked": ``chunks``
        is the chunked body, made from the body when None) or no framing header ("none")."""
        head = [self.method + b" " + self.target + b" HTTP/1.1", *self.headers, *extra]
        body = self.body
        if framing == "length" and (body or self.method in (b"POST", b"PUT", b"PATCH")):
            head.append(b"Content-Length: %d" % len(body))
        elif framing == "chunked":
            head.append(b"Transfer-Encoding: chunked")
            body = chunked(body) if chunks is None else chunks
        elif framing == "none":
            body = b""
        return prefix + b"\r\n".join(head) + b"\r\n\r\n" + body

    def head(self, extra: list[bytes] = ()) -> bytes:
        """The request line and header fields, without a framing header or the blank line."""
        return b"\r\n".join([self.method + b" " + self.target + b" HTTP/1.1", *self.headers, *extra])

    def case(self, cls: str, raw: bytes, expect: str = ANSWER, leave: str = "") -> Case:
        return Case(self.kind, raw, cls, expect, self.number, self.live, leave, self.tunnel)


def chunked(body: bytes, trailer: list[bytes] = (), ext: bytes = b"", pieces: int = 2) -> bytes:
    """``body`` in chunked coding (up to ``pieces`` chunks, each size line with ``ext``), then the trailer."""
    out, step = b"", max(1, -(-len(body) // max(1, pieces)))
    for start in range(0, len(body), step):
        piece = body[start:start + step]
        out += b"%x%s\r\n%s\r\n" % (len(piece), ext, piece)
    return out + b"0\r\n" + b"".join(line + b"\r\n" for line in trailer) + b"\r\n"


class _Ctx:
    def __init__(self, proxy_port: int, upstream_port: int, tls_port: int | None) -> None:
        self.own = b"127.0.0.1:%d" % proxy_port
        self.upstream = b"127.0.0.1:%d" % upstream_port
        self.tls = b"localhost:%d" % tls_port if tls_port else None

    def protected(self, raw: bytes, number: int | None) -> list[tuple[int, int]]:
        """Spans a mutation leaves whole: the destination's address and the case's tag, so that a
        mutated case still goes where its judge thinks it goes."""
        words = [self.own, self.upstream] + ([self.tls] if self.tls else [])
        if number is not None:
            words.append(CASE_TAG + b"%d" % number)
        # each span and the byte after it (a digit there would change a port or the number)
        return [(m.start(), m.end() + 1) for word in words for m in re.finditer(re.escape(word), raw)]


def _call_body(rng: random.Random) -> bytes:
    return json.dumps({"category": rng.choice(TOOLS).decode(), "tool_name": "Fuzz%d" % rng.randrange(50),
                       "api_name": "api%d" % rng.randrange(20), "tool_input": json.dumps({"q": rng.randrange(9)}),
                       "strip": "", "toolbench_key": "k"}).encode()


def carrier(rng: random.Random, ctx: _Ctx, number: int, kinds: tuple[str, ...] = tuple(KIND_WEIGHTS), *,
            body: bool | None = None, failing: float = 0.0) -> _Req:
    """A valid request of one of ``kinds`` (tunnel only when there is a TLS upstream); with
    ``body`` True it carries one (a POST); ``failing``: the chance to aim at a failing upstream route."""
    kinds = tuple(k for k in kinds if k != "tunnel" or ctx.tls) or ("proxy",)
    kind = rng.choices(kinds, [KIND_WEIGHTS[k] for k in kinds])[0]
    wants_body = rng.random() < 0.5 if body is None else body
    if kind == "virtual":
        method = b"POST" if wants_body or rng.random() < 0.9 else b"GET"
        payload = _call_body(rng) if method == b"POST" else b""
        headers = [b"Host: " + ctx.own] + ([b"Content-Type: application/json"] if payload else [])
        return _Req("virtual", method, rng.choice([b"/virtual", b"/virtual/"]), headers, payload, None, False)
    if kind == "own":
        method = b"POST" if wants_body else b"GET"
        payload = b'{"a": 1}' if wants_body else b""
        headers = [b"Host: " + ctx.own] + ([b"Content-Type: application/json"] if payload else [])
        return _Req("own", method, rng.choice(OWN_PATHS), headers, payload, None, False)
    path = rng.choice(FAILING_PATHS) if rng.random() < failing else rng.choice(BENIGN_PATHS)
    query = b"?" + CASE_TAG + b"%d" % number + rng.choice([b"", b"&q=1", b"&api_key=k3y-s3cr3t"])
    method = rng.choice([b"POST", b"PUT", b"PATCH"]) if wants_body else rng.choice([b"GET", b"GET", b"DELETE"])
    payload = json.dumps({"n": number, "q": "x" * rng.randrange(40)}).encode() if wants_body else b""
    host = ctx.tls if kind == "tunnel" else ctx.upstream
    headers = [b"Host: " + host, b"Accept: */*"] + ([b"Content-Type: application/json"] if payload else [])
    if kind == "tunnel":
        return _Req("tunnel", method, path + query, headers, payload, number, True, host)
    return _Req("proxy", method, b"http://" + host + path + query, headers, payload, number, True)


def _high(rng: random.Random) -> bytes:
    """A few bytes that are not UTF-8 (or not valid as it): lone high bytes, overlongs, surrogates."""
    return rng.choice([b"\xff", b"\xfe", b"\xff\xfe", b"\xc0\xaf", b"\x80", RAW_SURROGATE, b"\xe9", b"\xf5\x80"])


def _insert(rng: random.Random, data: bytes, piece: bytes, start: int = 1) -> bytes:
    at = rng.randint(min(start, len(data)), len(data))
    return data[:at] + piece + data[at:]


def _in_path(rng: random.Random, req: _Req, piece: bytes) -> bytes:
    """The request target with ``piece`` inside its path (never inside the authority or the tag)."""
    target = req.target
    start = target.index(b"/", len(b"http://")) if target.startswith(b"http://") else 0
    end = target.find(b"?")
    end = len(target) if end < 0 else end
    at = rng.randint(start + 1, max(start + 1, end))
    return target[:at] + piece + target[at:]


def _retarget(req: _Req, target: bytes) -> _Req:
    return _Req(req.kind, req.method, target, req.headers, req.body, req.number, req.live, req.tunnel)


AUDIT_PATHS = [(b"POST", b"/virtual\xff\xfe"), (b"GET", b"/\xc0\xaf"), (b"GET", b"/s/\xff/virtual"),
               (b"POST", b"/virtual/\xed\xa0\x80"), (b"GET", b"/\xff")]  # issue 24, item 5, and neighbours


def case_nonutf8_path(rng, ctx, n):
    if rng.random() < 0.4:  # the audit's own examples, to the proxy's own address
        method, target = rng.choice(AUDIT_PATHS)
        call = carrier(rng, ctx, n, ("virtual",), body=True)  # its Host and a /virtual call's body
        if method == b"POST":
            return _retarget(call, target).case("nonutf8-path", _retarget(call, target).wire())
        req = _Req("own", method, target, call.headers[:1], b"", None, False)
        return req.case("nonutf8-path", req.wire())
    req = carrier(rng, ctx, n)
    return req.case("nonutf8-path", _retarget(req, _in_path(rng, req, _high(rng))).wire())


def case_nonutf8_method(rng, ctx, n):
    req = carrier(rng, ctx, n, ("proxy", "proxy", "virtual", "own", "tunnel"))
    method = req.method if rng.random() < 0.5 else rng.choice([b"POST", b"GET"])
    req = _Req(req.kind, _insert(rng, method, _high(rng), 0), req.target, req.headers, req.body, req.number, req.live,
               req.tunnel)
    return req.case("nonutf8-method", req.wire())


def case_nonutf8_header(rng, ctx, n):
    req = carrier(rng, ctx, n)
    line = rng.choice([b"X-Odd: " + _high(rng), b"X-" + _high(rng) + b": v", _high(rng) + b": v",
                       b"User-Agent: agent/" + _high(rng), b"Accept-Language: " + _high(rng) + b"en",
                       b"X-Stb-Session: s" + _high(rng), b"X-RapidAPI-Key: k" + _high(rng)])
    return req.case("nonutf8-header", req.wire(extra=[line]))


def case_nul_header(rng, ctx, n):
    req = carrier(rng, ctx, n)
    line = rng.choice([b"X-A: a\x00b", b"X-A: \x00", b"Accept: */*\x00", b"X-Stb-Session: s\x00", b"X-A\x00: b",
                       b"User-Agent: \x00\x00"])
    return req.case("nul-header", req.wire(extra=[line]))


def case_bare_cr(rng, ctx, n):
    req = carrier(rng, ctx, n)
    variant = rng.choice(["value", "value", "end", "name", "start"])
    line = {"value": b"X-A: a\rb", "end": b"X-A: ab\r", "name": b"X-A\r: b", "start": b"\rX-A: b"}[variant]
    return req.case("bare-cr-" + ("name" if variant in ("name", "start") else "value"), req.wire(extra=[line]))


def case_obs_fold(rng, ctx, n):
    req = carrier(rng, ctx, n)
    fold = rng.choice([b" b", b"\tb", b"  folded value", b" "])
    if rng.random() < 0.2:  # whitespace-led line right after the request line (RFC 9112, 2.2)
        req.headers = [fold + b": x" if rng.random() < 0.5 else fold] + req.headers
        return req.case("obs-fold", req.wire())
    return req.case("obs-fold", req.wire(extra=[b"X-A: a", fold]))


def case_nul_path(rng, ctx, n):
    req = carrier(rng, ctx, n)
    if req.kind in ("virtual", "own") and rng.random() < 0.5:
        return req.case("nul-path", _retarget(req, _insert(rng, req.target, b"\x00")).wire())
    target = _in_path(rng, req, rng.choice([b"\x00", b"%00\x00", b"\x00\x00"]))
    return req.case("nul-path", _retarget(req, target).wire())


def case_chunked_trailer(rng, ctx, n):
    req = carrier(rng, ctx, n, ("proxy", "virtual", "tunnel"), body=True)
    trailer = rng.sample([b"X-Trailer: 1", b"X-Checksum: abc", b"Expires: 0", b"X-Empty:"], rng.randint(1, 2))
    return req.case("chunked-trailer", req.wire(framing="chunked", chunks=chunked(req.body, trailer)))


def case_chunk_bad_size(rng, ctx, n):
    req = carrier(rng, ctx, n, ("proxy", "virtual", "tunnel"), body=True)
    if rng.random() < 0.2:  # a size that parses but is larger than any body sent: the client then half-closes
        size = rng.choice([b"ffffffff", b"7fffffffffffffff", b"10000000"])
        raw = req.wire(framing="chunked", chunks=size + b"\r\n" + req.body[:8])
        return req.case("chunk-huge-size", raw, *((LEFT, "close") if req.kind == "tunnel" else (ANY,)))
    size = rng.choice([b"zz", b"-1", b"-0", b"0x4", b"", b"+4", b"4\x00", b"1" + b"0" * 20, b"f" * 24, b"\xff",
                       b"4 4"])
    piece = req.body[:4]
    chunks = size + b"\r\n" + piece + b"\r\n0\r\n\r\n"
    return req.case("chunk-bad-size", req.wire(framing="chunked", chunks=chunks))


def case_chunk_ext(rng, ctx, n):
    req = carrier(rng, ctx, n, ("proxy", "virtual", "tunnel"), body=True)
    ext = rng.choice([b";a=b", b";a", b';a="q d"', b";a=b;c=d", b" ;a=b"])
    chunks = chunked(req.body, ext=ext, pieces=rng.randint(1, 3))
    return req.case("chunk-ext", req.wire(framing="chunked", chunks=chunks))


def case_blank_line(rng, ctx, n):
    req = carrier(rng, ctx, n)
    return req.case("blank-line-first", req.wire(prefix=rng.choice([b"\r\n", b"\r\n", b"\n"])))


def _leaving(rng, req: _Req, cls: str, raw: bytes) -> Case:
    """A client that leaves: it closes (FIN or RST), or half-closes and still reads (any answer or a close)."""
    if req.kind == "tunnel" or rng.random() < 0.7:
        return req.case(cls, raw, LEFT, rng.choice(["close", "close", "reset"]))
    return req.case(cls, raw, ANY)


def case_left_mid_body(rng, ctx, n):
    req = carrier(rng, ctx, n, ("proxy", "virtual", "tunnel"), body=True)
    raw = req.wire()
    cut = len(raw) - rng.randint(1, len(req.body))
    return _leaving(rng, req, "left-mid-body", raw[:cut])


def case_left_mid_chunk(rng, ctx, n):
    req = carrier(rng, ctx, n, ("proxy", "virtual", "tunnel"), body=True)
    raw = req.wire(framing="chunked", chunks=chunked(req.body, pieces=2))
    head_end = raw.index(b"\r\n\r\n") + 4
    cut = rng.randint(head_end + 1, len(raw) - 3)  # inside a size line, a chunk or before the last one
    return _leaving(rng, req, "left-mid-chunk", raw[:cut])


def case_left_before_answer(rng, ctx, n):
    req = carrier(rng, ctx, n, ("proxy", "proxy", "virtual", "tunnel"))
    if req.kind in ("proxy", "tunnel"):  # the upstream takes its time: the client is gone when the answer comes
        path, _, query = req.target.partition(b"?")
        authority = re.match(rb"http://[^/]+", path)
        req = _retarget(req, (authority.group(0) if authority else b"") + b"/slow?" + query)
    return req.case("left-before-answer", req.wire(), LEFT, rng.choice(["close", "reset"]))


def case_huge_length(rng, ctx, n):
    req = carrier(rng, ctx, n, ("proxy", "virtual", "tunnel"), body=True)
    size = rng.choice([10**12, 2**31, 2**40, 2**63 - 1, 10**30])
    raw = req.head() + b"\r\nContent-Length: %d\r\n\r\n" % size + req.body[:rng.randint(0, len(req.body))]
    return _leaving(rng, req, "huge-length-left", raw)


def case_duplicate_length(rng, ctx, n):
    req = carrier(rng, ctx, n, ("proxy", "virtual", "tunnel"), body=True)
    size = len(req.body)
    lines = rng.choice([[b"Content-Length: %d" % size, b"Content-Length: %d" % size],
                        [b"Content-Length: %d" % size, b"Content-Length: %d" % (size + 3)],
                        [b"Content-Length: %d" % (size + 3), b"Content-Length: %d" % size],
                        [b"Content-Length: %d, %d" % (size, size)], [b"Content-Length: %d, 0" % size]])
    body = req.body + (b"xyz" if lines[0] == b"Content-Length: %d" % (size + 3) else b"")  # as the first one says
    return req.case("duplicate-length", req.head() + b"\r\n" + b"\r\n".join(lines) + b"\r\n\r\n" + body)


def case_length_and_chunked(rng, ctx, n):
    req = carrier(rng, ctx, n, ("proxy", "virtual", "tunnel"), body=True)
    chunks = chunked(req.body)
    length = rng.choice([len(chunks), len(req.body), 0])
    te = b"Transfer-Encoding: " + rng.choice([b"chunked", b"chunked, chunked", b" chunked"])
    lines = [b"Content-Length: %d" % length, te] if rng.random() < 0.5 else [te, b"Content-Length: %d" % length]
    return req.case("length-and-chunked", req.head() + b"\r\n" + b"\r\n".join(lines) + b"\r\n\r\n" + chunks)


def _free_positions(rng: random.Random, size: int, spans: list[tuple[int, int]], count: int) -> list[int]:
    found = []
    for _ in range(count * 20):
        at = rng.randrange(size)
        if not any(start <= at < end for start, end in spans):
            found.append(at)
            if len(found) == count:
                break
    return found


def _mutable_base(rng, ctx, n) -> tuple[_Req, bytes]:
    req = carrier(rng, ctx, n, ("proxy", "proxy", "virtual", "own"))
    framing = rng.choice(["length", "length", "chunked"]) if req.body else "length"
    return req, req.wire(framing=framing)


def _mutated(req: _Req, cls: str, raw: bytes) -> Case:
    """A mutated request aimed at the upstream stays live only while its request target still
    carries the case's number in its query (a flip can end the target early: a space, a '#')."""
    if req.live:
        parts = raw.split(b"\n", 1)[0].split(b" ")
        target = parts[1] if len(parts) > 2 else b""
        tagged = re.match(rb"[^#?]*\?[^#]*" + re.escape(CASE_TAG + b"%d" % req.number) + rb"(?!\d)", target)
        req = _Req(req.kind, req.method, req.target, req.headers, req.body, req.number, bool(tagged), req.tunnel)
    return req.case(cls, raw, ANY)


def case_flip(rng, ctx, n):
    req, raw = _mutable_base(rng, ctx, n)
    data = bytearray(raw)
    for at in _free_positions(rng, len(data), ctx.protected(raw, req.number), rng.randint(1, 3)):
        data[at] = rng.randrange(256) if rng.random() < 0.5 else data[at] ^ (1 << rng.randrange(8))
    return _mutated(req, "byte-flip", bytes(data))


def case_truncate(rng, ctx, n):
    req, raw = _mutable_base(rng, ctx, n)
    return _mutated(req, "truncated", raw[:rng.randrange(1, len(raw))])


def case_duplicate(rng, ctx, n):
    req, raw = _mutable_base(rng, ctx, n)
    spans = ctx.protected(raw, req.number)
    for _ in range(50):
        start = rng.randrange(len(raw))
        end = min(len(raw), start + rng.randint(1, 40))
        if all(e <= start or s >= end or (start <= s and e <= end) for s, e in spans):  # whole spans or none
            break
    else:
        start, end = 0, 0
    at = _free_positions(rng, len(raw) + 1, spans, 1) or [len(raw)]
    return _mutated(req, "duplicated-bytes", raw[:at[0]] + raw[start:end] + raw[at[0]:])


def case_valid(rng, ctx, n):
    req = carrier(rng, ctx, n, failing=0.15)
    return req.case("valid", req.wire(framing=rng.choice(["length", "length", "chunked"]) if req.body else "length"))


def case_content(rng, ctx, n):
    """The hostile content of ``cases`` (valid framing), each proxied target tagged with its number."""
    content_type, body = body_of(rng)
    roll = rng.random()
    if roll < 0.5:
        host = rng.choice([ctx.upstream] * 6 + [b"api.example.com", b"\xff.example", b"xn--80ak6aa92e.com:80"])
        path = path_of(rng)
        path += (b"&" if b"?" in path else b"?") + CASE_TAG + b"%d" % n
        raw = request(rng.choice(METHODS).encode(), b"http://" + host + path, host, headers_of(rng), content_type, body)
        return Case("proxy", raw, "content", ANSWER, n, host == ctx.upstream)
    if roll < 0.85:
        raw = request(b"POST", rng.choice([b"/virtual", b"/virtual/", b"/virtual?x=%ff"]), ctx.own, headers_of(rng),
                      b"application/json", virtual_body(rng))
        return Case("virtual", raw, "content", ANSWER)
    raw = request(rng.choice(METHODS).encode(), path_of(rng), ctx.own, headers_of(rng), content_type, body)
    return Case("own", raw, "content", ANSWER)


# class -> (maker, weight); the weights favour what costs the proxy little, so thousands fit in seconds
CLASSES = {
    "content": (case_content, 14), "valid": (case_valid, 6),
    "nonutf8-path": (case_nonutf8_path, 6), "nonutf8-method": (case_nonutf8_method, 4),
    "nonutf8-header": (case_nonutf8_header, 4), "nul-header": (case_nul_header, 4), "bare-cr": (case_bare_cr, 4),
    "obs-fold": (case_obs_fold, 4), "nul-path": (case_nul_path, 4), "chunked-trailer": (case_chunked_trailer, 4),
    "chunk-bad-size": (case_chunk_bad_size, 5), "chunk-ext": (case_chunk_ext, 3),
    "blank-line-first": (case_blank_line, 4), "left-mid-body": (case_left_mid_body, 4),
    "left-mid-chunk": (case_left_mid_chunk, 3), "huge-length-left": (case_huge_length, 2),
    "left-before-answer": (case_left_before_answer, 2), "duplicate-length": (case_duplicate_length, 3),
    "length-and-chunked": (case_length_and_chunked, 3),
    "byte-flip": (case_flip, 8), "truncated": (case_truncate, 5), "duplicated-bytes": (case_duplicate, 4),
}


def hostile_cases(seed: int, proxy_port: int, upstream_port: int, tls_port: int | None = None,
                  classes: list[str] | None = None) -> Iterator[Case]:
    """Endless cases of the named classes (all by default), numbered from 1; the same seed
    and ports give the same cases. With ``tls_port`` (a TLS upstream on localhost), some go
    inside CONNECT tunnels."""
    names = list(classes or CLASSES)
    unknown = set(names) - set(CLASSES)
    if unknown:
        raise ValueError(f"unknown case classes: {sorted(unknown)} (known: {sorted(CLASSES)})")
    rng = random.Random(seed)
    ctx = _Ctx(proxy_port, upstream_port, tls_port)
    weights = [CLASSES[name][1] for name in names]
    number = 0
    while True:
        number += 1
        yield CLASSES[rng.choices(names, weights)[0]][0](rng, ctx, number)


# -- the loopback upstream the cases aim at ----------------------------------------------------


def make_tls(folder) -> tuple[str, ssl.SSLContext]:
    """A throw-away CA (its PEM file, for the proxy's --upstream-ca) and a server context with a
    certificate for localhost and 127.0.0.1 signed by it."""
    import datetime
    import ipaddress
    from pathlib import Path

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    day = datetime.timedelta(days=1)

    def issued(subject: str, key, issuer: str, signer, ca: bool):
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - day).not_valid_after(now + 2 * day)
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if ca:
            builder = builder.add_extension(x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                key_encipherment=False, data_encipherment=False, key_agreement=False, encipher_only=False,
                decipher_only=False), critical=True)
        else:
            builder = builder.add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = issued("stbproxy fuzz CA", ca_key, "stbproxy fuzz CA", ca_key, True)
    cert = issued("localhost", key, "stbproxy fuzz CA", ca_key, False)
    ca_file, cert_file, key_file = folder / "fuzz-ca.pem", folder / "fuzz-server.pem", folder / "fuzz-server.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert_file, key_file)
    return str(ca_file), context


class FuzzUpstream:
    """An HTTP upstream on 127.0.0.1 (and, with a TLS context, an HTTPS one on another port),
    served on the running event loop. It answers everything 200 with a small JSON body, except
    on purpose: /status/NNN answers NNN, /garbage answers bytes that are not HTTP, /reset resets
    the connection. It remembers what it did for each case number (stbfz=N in the target)."""

    def __init__(self) -> None:
        self.answers: dict[int, int | str] = {}  # case number -> status sent, "garbage" or "reset"
        self.requests = 0
        self.port = 0
        self.tls_port: int | None = None
        self._servers: list[asyncio.AbstractServer] = []

    async def start(self, tls: ssl.SSLContext | None = None) -> "FuzzUpstream":
        server = await asyncio.start_server(self._connection, "127.0.0.1", 0, limit=1 << 23, backlog=512)
        self._servers.append(server)
        self.port = server.sockets[0].getsockname()[1]
        if tls is not None:
            server = await asyncio.start_server(self._connection, "127.0.0.1", 0, ssl=tls, limit=1 << 23, backlog=512)
            self._servers.append(server)
            self.tls_port = server.sockets[0].getsockname()[1]
        return self

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for server in self._servers:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 2)

    def reached(self, number: int | None) -> bool:
        return number is not None and number in self.answers

    def failed(self, number: int | None) -> bool:
        """Whether the upstream itself failed this case (a 5xx, garbage or a reset)."""
        answer = self.answers.get(number) if number is not None else None
        return answer in ("garbage", "reset") or (isinstance(answer, int) and answer >= 500)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while await self._exchange(reader, writer):
                pass
        except Exception:  # noqa: BLE001 - a test server: whatever happens, the connection just ends
            pass
        finally:
            writer.close()

    async def _exchange(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return False
        self.requests += 1
        numbers = [int(n) for n in re.findall(rb"stbfz=(\d{1,12})", head.split(b"\r\n", 1)[0])]
        lines = head[:-4].split(b"\r\n")
        method, _, rest = lines[0].partition(b" ")
        target = rest.rpartition(b" ")[0] or rest
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            fields[name.strip().lower()] = value.strip()
        status: int | str = 200
        try:
            if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
                body = b""
                while size := int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16):
                    body += (await reader.readexactly(size + 2))[:-2]
                while (await reader.readuntil(b"\r\n")) != b"\r\n":  # the trailer section
                    pass
            else:
                body = await reader.readexactly(int(fields.get(b"content-length", b"0") or 0))
        except (ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            body, status = b"", 400
        path = re.sub(rb"^[a-zA-Z]+://[^/?]*", b"", target).split(b"?")[0]
        match = re.fullmatch(rb"/status/(\d{3})", path)
        if status == 200 and match and 200 <= int(match.group(1)) <= 599:
            status = int(match.group(1))
        elif status == 200 and path in (b"/garbage", b"/reset"):
            status = path[1:].decode()
        elif path == b"/slow":
            await asyncio.sleep(0.3)
        for number in numbers:
            self.answers[number] = status
        if status == "garbage":
            writer.write(b"this is not HTTP at all\r\n\r\n")
            await writer.drain()
            return False
        if status == "reset":
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return False
        document = json.dumps({"method": method.decode("latin-1"), "path": path.decode("latin-1"),
                               "bytes": len(body), "status": status}).encode()
        close = status == 400 or fields.get(b"connection", b"").lower() == b"close"
        writer.write(b"HTTP/1.1 %d Fuzz\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
            status, len(document), b"Connection: close\r\n" if close else b"", b"" if method == b"HEAD" else document))
        await writer.drain()
        return not close


# -- sending cases and judging the answers -----------------------------------------------------

# What a case came to. The first three are fine; every other one is the proxy's failure.
ANSWERED, CLOSED, GONE = "answered", "closed", "client left"
PROXY_5XX = "proxy-made 5xx"  # a 5xx the upstream did not make (see judge)
BLAMED = "blamed the upstream"  # an answer that says the upstream failed, though the case never reached it
NO_ANSWER = "closed without an answer"  # a whole request, and the proxy closed (or reset) without a word
HANG = "hang"  # neither an answer nor a close within the case's timeout
GARBLED = "not HTTP"  # bytes came back, but no status line
REFUSED = "connection refused"
TUNNEL = "tunnel refused"  # the CONNECT or the TLS handshake with the proxy failed
FINE = (ANSWERED, CLOSED, GONE)
LEAVING_AFTER = (0, 0.01, 0.05, 0.2)  # seconds a leaving client waits before it goes
# 5xx a proxy may make for the client's own request: 501 (a method or coding it does not
# implement, as item 7 allows for trailers) and 505 (an HTTP version it does not speak).
UNSUPPORTED = (501, 505)
# Sources that say an answer came from the upstream or was made because it failed (the proxy's
# own refusals, 4xx with X-Stb-Source: error, say neither).
BLAMING_SOURCES = ("upstream", "unavailable", "simulated", "simulated-error")


@dataclass
class Result:
    case: Case
    outcome: str
    status: int | None = None
    answer: bytes = b""  # the answer's head and the start of its body (or what came back)
    seconds: float = 0.0
    detail: str = ""

    @property
    def source(self) -> str:
        match = re.search(rb"(?im)^x-stb-source: *([^\r\n]*)", self.answer)
        return match.group(1).decode("latin-1") if match else "-"

    @property
    def failed(self) -> bool:
        return self.outcome not in FINE

    def describe(self, width: int = 300) -> str:
        head, _, body = self.answer.partition(b"\r\n\r\n")
        first_body_line = body.split(b"\n", 1)[0][:160]
        status_line = head.split(b"\r\n", 1)[0]
        via = f", via CONNECT {self.case.tunnel.decode()}" if self.case.tunnel else ""
        return (f"[{self.case.cls} / {self.case.kind} / expects {self.case.expect}"
                f"{' / ' + self.case.leave if self.case.leave else ''}] {self.outcome}"
                f"{': ' + self.detail if self.detail else ''} after {self.seconds:.2f}s\n"
                f"    sent: {self.case.raw[:width]!r}{' ...' if len(self.case.raw) > width else ''}"
                f" ({len(self.case.raw)} bytes{via})\n"
                f"    got:  status {self.status}, X-Stb-Source {self.source}, "
                f"{status_line!r}, body {first_body_line!r}")


def judge(case: Case, status: int | None, answer: bytes, upstream: FuzzUpstream) -> tuple[str, str]:
    """An answered case's outcome and why. A 5xx is the upstream's only when it failed this
    very case; an answer naming the upstream (or made because it failed) is a lie when a case
    aimed at the live upstream never reached it."""
    if status is None:
        return GARBLED, ""
    source = re.search(rb"(?im)^x-stb-source: *([^\r\n]*)", answer)
    source = source.group(1).decode("latin-1").strip() if source else "-"
    if status >= 500 and not upstream.failed(case.number):
        if status in UNSUPPORTED:
            return ANSWERED, f"{status} (unsupported)"
        reached = "the upstream answered it fine" if upstream.reached(case.number) else "nothing reached the upstream"
        return PROXY_5XX, f"{status} with X-Stb-Source {source}; {reached}"
    if case.live and not upstream.reached(case.number) and source in BLAMING_SOURCES:
        return BLAMED, f"{status} with X-Stb-Source {source}, but nothing reached the upstream"
    return ANSWERED, ""


async def _read_answer(reader: asyncio.StreamReader, method: bytes) -> tuple[bytes, str]:
    """One answer (interim 1xx answers skipped) and how it ended: "answer", "closed" (nothing
    came) or "partial" (bytes but no whole head). A body is read up to 64 KiB."""
    buffer = b""
    while True:
        while b"\r\n\r\n" not in buffer:
            try:
                chunk = await reader.read(65536)
            except (ConnectionError, ssl.SSLError):
                chunk = b""
            if not chunk:
                return buffer, "closed" if not buffer else "partial"
            buffer += chunk
        head, _, rest = buffer.partition(b"\r\n\r\n")
        if not re.match(rb"HTTP/1\.[01] 1\d\d", head):
            break
        buffer = rest
    status = re.match(rb"HTTP/1\.[01] (\d{3})", head)
    length = re.search(rb"(?im)^content-length: *(\d+)", head)
    if method == b"HEAD" or (status and status.group(1) in (b"204", b"304")):
        want = 0
    elif length:
        want = int(length.group(1))
    else:  # chunked or until the close: what comes, up to the cap
        want = 1 << 16 if re.search(rb"(?im)^transfer-encoding:.*chunked", head) else -1
    while (want < 0 or len(rest) < want) and len(rest) < 1 << 16:
        try:
            chunk = await reader.read(65536)
        except (ConnectionError, ssl.SSLError):
            chunk = b""
        if not chunk or (want == 1 << 16 and rest.endswith(b"0\r\n\r\n")):
            break
        rest += chunk
    return head + b"\r\n\r\n" + rest[:1 << 16], "answer"


async def _connect(port: int, case: Case, client_tls: ssl.SSLContext | None, progress: list[bytes]):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if case.kind != "tunnel":
        return reader, writer, None
    writer.write(b"CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n" % (case.tunnel, case.tunnel))
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = await reader.read(1)
        if not chunk:
            break
        head += chunk
    if not head.startswith(b"HTTP/1.1 200") or client_tls is None:
        writer.close()
        return None, None, f"CONNECT answered {head[:80]!r}"
    progress.append(b"[connected]")
    try:
        await writer.start_tls(client_tls, server_hostname=case.tunnel.rsplit(b":", 1)[0].decode())
    except (ssl.SSLError, ConnectionError) as exc:
        writer.close()
        return None, None, f"TLS handshake with the proxy failed: {exc}"
    return reader, writer, None


async def run_case(case: Case, port: int, upstream: FuzzUpstream, *, timeout: float,
                   client_tls: ssl.SSLContext | None = None) -> Result:
    """One case on its own connection: send it, leave or half-close as the case says, read the
    answer (within ``timeout`` seconds from the connect), judge it."""
    started = time.monotonic()
    progress: list[bytes] = []  # what came back so far, for a case that times out
    writer = None

    async def converse() -> Result:
        nonlocal writer
        try:
            reader, writer, refused = await _connect(port, case, client_tls, progress)
        except OSError as exc:
            return Result(case, REFUSED, detail=f"{type(exc).__name__}: {exc}")
        if refused:
            return Result(case, TUNNEL, detail=refused)
        send_error = ""
        try:
            writer.write(case.raw)
            await writer.drain()
        except (ConnectionError, ssl.SSLError) as exc:
            send_error = f"the proxy closed while the case was sent ({type(exc).__name__})"
        if case.expect == LEFT:
            await asyncio.sleep(LEAVING_AFTER[(case.number or 0) % len(LEAVING_AFTER)])
            if case.leave == "reset" and (sock := writer.get_extra_info("socket")) is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort() if case.leave == "reset" else writer.close()
            return Result(case, GONE)
        if case.expect == ANY and not send_error and writer.can_write_eof():
            writer.write_eof()
        answer, how = await _read_answer(reader, case.raw.lstrip(b"\r\n").split(b" ", 1)[0])
        progress.append(answer)
        if how == "closed":
            return Result(case, CLOSED if case.expect == ANY else NO_ANSWER, detail=send_error)
        if how == "partial":
            return Result(case, GARBLED, answer=answer, detail="the connection closed inside an answer's head")
        status = re.match(rb"HTTP/1\.[01] (\d{3})", answer)
        status = int(status.group(1)) if status else None
        outcome, detail = judge(case, status, answer, upstream)
        return Result(case, outcome, status, answer, detail=detail)

    try:
        result = await asyncio.wait_for(converse(), timeout)
    except asyncio.TimeoutError:
        got = b"".join(progress)
        result = Result(case, HANG, answer=got, detail=f"no answer and no close within {timeout:g}s"
                        + (" (the head came, the body did not end)" if b"HTTP/" in got else ""))
    finally:
        if writer is not None:
            writer.transport.abort()
    result.seconds = time.monotonic() - started
    return result


async def run_cases(port: int, generated: Iterator[Case], upstream: FuzzUpstream, *, seconds: float,
                    max_cases: int, concurrency: int = 8, timeout: float = 8.0,
                    client_tls: ssl.SSLContext | None = None, park_after: float = 0.5,
                    max_open: int = 400, timing: dict | None = None) -> list[Result]:
    """Cases from ``generated`` for up to ``seconds`` (or ``max_cases``), ``concurrency`` at a
    time; each then gets its full ``timeout``. A case still waiting after ``park_after``
    seconds gives its place to the next (at most ``max_open`` connections open), so that cases
    that hang do not starve the run."""
    loop = asyncio.get_running_loop()
    places = asyncio.Semaphore(concurrency)
    results: list[Result] = []
    running: set[asyncio.Task] = set()
    deadline = loop.time() + seconds

    async def one(case: Case) -> None:
        freed = False

        def free() -> None:
            nonlocal freed
            if not freed:
                freed = True
                places.release()

        parked = loop.call_later(park_after, free)
        try:
            results.append(await run_case(case, port, upstream, timeout=timeout, client_tls=client_tls))
        finally:
            parked.cancel()
            free()

    started = 0
    while started < max_cases and loop.time() < deadline:
        await places.acquire()
        while len(running) >= max_open:
            await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        if loop.time() >= deadline:
            places.release()
            break
        task = loop.create_task(one(next(generated)))
        running.add(task)
        task.add_done_callback(running.discard)
        started += 1
    if timing is not None:
        timing["sending"] = seconds - max(0.0, deadline - loop.time())
    if running:
        await asyncio.gather(*running)
    return results


# -- one lane: a proxy, the cases, the checks afterwards, the log ------------------------------

LANES = {"fast-lane": (), "no-fast-lane": ("--no-fast-lane",)}  # serve's default, and mitmproxy's own layers
LOG_MARKERS = ("Traceback", "mitmproxy has crashed", "internal error")


@dataclass
class LaneRun:
    lane: str
    seed: int
    results: list[Result]
    checks: list[tuple[str, bool, str]]  # (what, passed, what came back) after the cases
    log_problems: list[str]  # each marked log line, with the exception that ends its traceback
    output: str
    seconds: float  # from the first case to the last answer (or timeout)
    sending: float = 0.0  # seconds over which cases were started

    @property
    def failures(self) -> list[Result]:
        return [r for r in self.results if r.failed]

    @property
    def ok(self) -> bool:
        return not self.failures and not self.log_problems and all(passed for _, passed, _ in self.checks)

    def counts(self) -> dict[str, Counter]:
        """Outcomes by class."""
        table: dict[str, Counter] = {}
        for result in self.results:
            table.setdefault(result.case.cls, Counter())[result.outcome] += 1
        return table

    def examples(self, limit: int = 8) -> list[Result]:
        """The first failing case of each (class, kind, outcome), up to ``limit``."""
        seen, found = set(), []
        for result in sorted(self.failures, key=lambda r: r.case.number or 0):
            key = (result.case.cls, result.case.kind, result.outcome)
            if key not in seen:
                seen.add(key)
                found.append(result)
        return found[:limit]

    def report(self, examples: int = 8) -> str:
        outcomes = Counter(r.outcome for r in self.results)
        lines = [f"lane {self.lane} (seed {self.seed}): {len(self.results)} cases started over {self.sending:.1f}s, "
                 f"the last one done after {self.seconds:.1f}s: "
                 + ", ".join(f"{name} {count}" for name, count in outcomes.most_common())]
        width = max((len(name) for name in self.counts()), default=5)
        for cls, counter in sorted(self.counts().items()):
            bad = sum(n for outcome, n in counter.items() if outcome not in FINE)
            lines.append(f"  {cls:<{width}} {sum(counter.values()):>6}  {'FAIL' if bad else 'ok  '}  "
                         + ", ".join(f"{outcome} {n}" for outcome, n in counter.most_common()))
        for what, passed, detail in self.checks:
            lines.append(f"  after the run, {what}: {'ok' if passed else 'FAILED: ' + detail}")
        if self.log_problems:
            lines.append(f"  the proxy's log: {len(self.log_problems)} marked lines")
            lines += [f"    {count} x {problem}" for problem, count in Counter(self.log_problems).most_common(10)]
        else:
            lines.append("  the proxy's log: no Traceback, no 'mitmproxy has crashed', no 'internal error'")
        if self.failures:
            lines.append(f"  {len(self.failures)} failing cases; the first of each kind:")
            lines += ["  " + r.describe().replace("\n", "\n  ") for r in self.examples(examples)]
        return "\n".join(lines)


def log_problems(output: str) -> list[str]:
    """The log's marked lines; a traceback is named by the exception line that ends it."""
    lines = output.splitlines()
    found = []
    for at, line in enumerate(lines):
        if not any(marker in line for marker in LOG_MARKERS):
            continue
        text = re.sub(r"^[-\d]+ [:,\d]+ ", "", line.strip())
        if "Traceback" in line:
            end = next((lines[k].strip() for k in range(at + 1, len(lines))
                        if lines[k] and not lines[k].startswith((" ", "\t"))), "?")
            text = f"Traceback ... {end}"
        found.append(text[:300])
    return found


async def _request(port: int, raw: bytes, upstream: FuzzUpstream, kind: str = "proxy", number: int | None = None,
                   client_tls: ssl.SSLContext | None = None, tunnel: bytes = b"") -> Result:
    case = Case(kind, raw, "after the run", ANSWER, number, number is not None, tunnel=tunnel)
    return await run_case(case, port, upstream, timeout=15, client_tls=client_tls)


async def still_serving(port: int, upstream: FuzzUpstream, mode: str,
                        client_tls: ssl.SSLContext | None) -> list[tuple[str, bool, str]]:
    """An ordinary proxied GET, a /virtual call (and a GET inside a tunnel) after the cases."""
    checks = []
    number = 10**9
    own, up = b"127.0.0.1:%d" % port, b"127.0.0.1:%d" % upstream.port
    got = await _request(port, b"GET http://%s/echo?%s%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (up, CASE_TAG, number, up),
                         upstream, number=number)
    checks.append(("a proxied GET", got.status == 200 and got.source == "upstream" and upstream.reached(number),
                   got.describe()))
    body = json.dumps({"category": "Data", "tool_name": "AfterFuzz", "api_name": "still_serving",
                       "tool_input": "{}"}).encode()
    got = await _request(port, b"POST /virtual HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (own, len(body), body), upstream, kind="virtual")
    try:
        answer = json.loads(got.answer.partition(b"\r\n\r\n")[2])
        shaped = isinstance(answer, dict) and {"error", "response"} <= set(answer)
        fine = shaped and (mode != "virtual" or answer["error"] == "")
    except ValueError:
        fine = False
    checks.append(("a /virtual call", got.status == 200 and fine, got.describe()))
    if client_tls is not None and upstream.tls_port:
        number += 1
        host = b"localhost:%d" % upstream.tls_port
        got = await _request(port, b"GET /echo?%s%d HTTP/1.1\r\nHost: %s\r\n\r\n" % (CASE_TAG, number, host),
                             upstream, kind="tunnel", number=number, client_tls=client_tls, tunnel=host)
        checks.append(("a GET inside a CONNECT tunnel",
                       got.status == 200 and got.source == "upstream" and upstream.reached(number), got.describe()))
    return checks


async def _fuzz_lane(folder, lane: str, *, seed: int, seconds: float, max_cases: int, concurrency: int,
                     timeout: float, classes: list[str] | None, tls: bool, mode: str, extra_args: tuple[str, ...]):
    from pathlib import Path

    from stbproxy.serve_process import ServeProcess

    folder = Path(folder)
    ca_file, server_tls = make_tls(folder / "tls") if tls else (None, None)
    upstream = await FuzzUpstream().start(server_tls)
    args = ["--mode", mode, "--simulator", "schema", "--deny-host", "*", "--allow-host", "127.0.0.1",
            "--allow-host", "localhost", "--upstream-timeout", "3", *LANES[lane], *extra_args]
    proxy = ServeProcess(folder / "store", *args, *(["--upstream-ca", ca_file] if ca_file else []))
    try:
        await asyncio.to_thread(proxy.start)
        started = time.monotonic()
        client_tls = ssl.create_default_context(cafile=str(proxy.ca_file)) if tls else None
        generated = hostile_cases(seed, proxy.port, upstream.port, upstream.tls_port, classes)
        timing: dict[str, float] = {}
        results = await run_cases(proxy.port, generated, upstream, seconds=seconds, max_cases=max_cases,
                                  concurrency=concurrency, timeout=timeout, client_tls=client_tls, timing=timing)
        elapsed = time.monotonic() - started
        checks = await still_serving(proxy.port, upstream, mode, client_tls)
    finally:
        await asyncio.to_thread(proxy.stop)
        await upstream.stop()
    size, quiet_since, give_up = -1, time.monotonic(), time.monotonic() + 5  # the output thread reads to the end
    while time.monotonic() - quiet_since < 0.3 and time.monotonic() < give_up:
        if len(proxy.output) != size:
            size, quiet_since = len(proxy.output), time.monotonic()
        await asyncio.sleep(0.05)
    output = "".join(proxy.output)
    return LaneRun(lane, seed, results, checks, log_problems(output), output, elapsed, timing.get("sending", 0.0))


def fuzz_lane(folder, lane: str, *, seed: int, seconds: float = 7.0, max_cases: int = 10_000, concurrency: int = 8,
              timeout: float = 8.0, classes: list[str] | None = None, tls: bool = True, mode: str = "virtual",
              extra_args: tuple[str, ...] = ()) -> LaneRun:
    """Start ``stbproxy serve`` (``lane``: a key of LANES) with its store
    in ``folder`` and a FuzzUpstream, send hostile cases for ``seconds`` (at most ``max_cases``),
    check that it still serves, stop it, scan its log. Only 127.0.0.1 is used; every process
    started is stopped."""
    return asyncio.run(_fuzz_lane(folder, lane, seed=seed, seconds=seconds, max_cases=max_cases,
                                  concurrency=concurrency, timeout=timeout, classes=classes, tls=tls, mode=mode,
                                  extra_args=extra_args))
