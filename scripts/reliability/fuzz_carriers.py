"""The valid requests that hostile cases are made from (fuzz_hostile.py mutates them).

``carrier`` picks, from the case's seeded random generator, one valid request of a kind
("proxy": absolute-form to the loopback upstream; "tunnel": the same inside CONNECT with TLS;
"virtual": a /virtual call; "own": the proxy's own address) and returns it as a
``ValidRequest``: its parts before framing, which ``wire`` frames with a Content-Length,
chunked coding or no framing header at all. A request aimed at the upstream carries
``stbfz=<case number>`` (``CASE_TAG``) in its query, so the upstream knows which cases reached
it; ``Destinations`` holds the addresses and names the spans a mutation must leave whole.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass

from scripts.reliability.fuzzkit import ANSWER, Case

CASE_TAG = b"stbfz="  # proxied targets carry stbfz=<case number>: the upstream knows what reached it
BENIGN_PATHS = [b"/echo", b"/echo/a/b", b"/api/items", b"/echo/%41%42", b"/status/200", b"/"]
FAILING_PATHS = [b"/status/500", b"/status/503", b"/garbage", b"/reset"]  # the upstream fails on purpose
OWN_PATHS = [b"/", b"/virtual", b"/nothing-here", b"/virtual/x"]
TOOLS = [b"Data", b"Weather", b"Finance", b"Sports"]
KIND_WEIGHTS = {"proxy": 4, "virtual": 3, "own": 2, "tunnel": 1}  # a tunnel costs a TLS handshake


@dataclass
class ValidRequest:
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


class Destinations:
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


def carrier(rng: random.Random, ctx: Destinations, number: int, kinds: tuple[str, ...] = tuple(KIND_WEIGHTS), *,
            body: bool | None = None, failing: float = 0.0) -> ValidRequest:
    """A valid request of one of ``kinds`` (tunnel only when there is a TLS upstream); with
    ``body`` True it carries one (a POST); ``failing``: the chance to aim at a failing upstream route."""
    kinds = tuple(k for k in kinds if k != "tunnel" or ctx.tls) or ("proxy",)
    kind = rng.choices(kinds, [KIND_WEIGHTS[k] for k in kinds])[0]
    wants_body = rng.random() < 0.5 if body is None else body
    if kind == "virtual":
        method = b"POST" if wants_body or rng.random() < 0.9 else b"GET"
        payload = _call_body(rng) if method == b"POST" else b""
        headers = [b"Host: " + ctx.own] + ([b"Content-Type: application/json"] if payload else [])
        return ValidRequest("virtual", method, rng.choice([b"/virtual", b"/virtual/"]), headers, payload, None, False)
    if kind == "own":
        method = b"POST" if wants_body else b"GET"
        payload = b'{"a": 1}' if wants_body else b""
        headers = [b"Host: " + ctx.own] + ([b"Content-Type: application/json"] if payload else [])
        return ValidRequest("own", method, rng.choice(OWN_PATHS), headers, payload, None, False)
    path = rng.choice(FAILING_PATHS) if rng.random() < failing else rng.choice(BENIGN_PATHS)
    query = b"?" + CASE_TAG + b"%d" % number + rng.choice([b"", b"&q=1", b"&api_key=k3y-s3cr3t"])
    method = rng.choice([b"POST", b"PUT", b"PATCH"]) if wants_body else rng.choice([b"GET", b"GET", b"DELETE"])
    payload = json.dumps({"n": number, "q": "x" * rng.randrange(40)}).encode() if wants_body else b""
    host = ctx.tls if kind == "tunnel" else ctx.upstream
    headers = [b"Host: " + host, b"Accept: */*"] + ([b"Content-Type: application/json"] if payload else [])
    if kind == "tunnel":
        return ValidRequest("tunnel", method, path + query, headers, payload, number, True, host)
    return ValidRequest("proxy", method, b"http://" + host + path + query, headers, payload, number, True)
