"""The hostile case classes and byte-level mutations, and ``hostile_cases`` that mixes them.

Each class (issue 24, items 5-8) is a function ``(rng, destinations, number) -> Case`` that
makes one valid request (fuzz_carriers.py) hostile: non-UTF-8 or NUL bytes in the method, path
or header fields, bare CRs, obsolete line folding, chunked coding with trailers, bad sizes or
extensions, a blank line first, conflicting or huge Content-Lengths, a client that leaves
mid-request, and seeded byte flips, truncations and duplicated bytes; and (issue 38, item 12)
chunk data not followed by CRLF, framing fields with bytes mitmproxy's reader strips unseen and
transfer codings besides chunked (``REFUSED_CLASSES``: refused, never forwarded). ``content``
reuses the hostile content of fuzzkit.py. Each case is labelled with its class and with what its
client may expect: an answer (ANSWER), an answer or a close (ANY: the client half-closes after
bytes whose framing is unknown) or nothing (LEFT: the client leaves). ``CLASSES`` maps each class
to its maker and weight; ``hostile_cases`` yields endless cases numbered from 1, the same for the
same seed and ports.
"""

from __future__ import annotations

import random
import re
from typing import Iterator

from scripts.reliability.fuzz_carriers import CASE_TAG, Destinations, ValidRequest, carrier, chunked
from scripts.reliability.fuzzkit import (
    ANSWER,
    ANY,
    LEFT,
    METHODS,
    RAW_SURROGATE,
    Case,
    body_of,
    headers_of,
    path_of,
    request,
    virtual_body,
)


def _high(rng: random.Random) -> bytes:
    """A few bytes that are not UTF-8 (or not valid as it): lone high bytes, overlongs, surrogates."""
    return rng.choice([b"\xff", b"\xfe", b"\xff\xfe", b"\xc0\xaf", b"\x80", RAW_SURROGATE, b"\xe9", b"\xf5\x80"])


def _insert(rng: random.Random, data: bytes, piece: bytes, start: int = 1) -> bytes:
    at = rng.randint(min(start, len(data)), len(data))
    return data[:at] + piece + data[at:]


def _in_path(rng: random.Random, req: ValidRequest, piece: bytes) -> bytes:
    """The request target with ``piece`` inside its path (never inside the authority or the tag)."""
    target = req.target
    start = target.index(b"/", len(b"http://")) if target.startswith(b"http://") else 0
    end = target.find(b"?")
    end = len(target) if end < 0 else end
    at = rng.randint(start + 1, max(start + 1, end))
    return target[:at] + piece + target[at:]


def _retarget(req: ValidRequest, target: bytes) -> ValidRequest:
    return ValidRequest(req.kind, req.method, target, req.headers, req.body, req.number, req.live, req.tunnel)


AUDIT_PATHS = [(b"POST", b"/virtual\xff\xfe"), (b"GET", b"/\xc0\xaf"), (b"GET", b"/s/\xff/virtual"),
               (b"POST", b"/virtual/\xed\xa0\x80"), (b"GET", b"/\xff")]  # issue 24, item 5, and neighbours


def case_nonutf8_path(rng, ctx, n):
    if rng.random() < 0.4:  # the audit's own examples, to the proxy's own address
        method, target = rng.choice(AUDIT_PATHS)
        call = carrier(rng, ctx, n, ("virtual",), body=True)  # its Host and a /virtual call's body
        if method == b"POST":
            return _retarget(call, target).case("nonutf8-path", _retarget(call, target).wire())
        req = ValidRequest("own", method, target, call.headers[:1], b"", None, False)
        return req.case("nonutf8-path", req.wire())
    req = carrier(rng, ctx, n)
    return req.case("nonutf8-path", _retarget(req, _in_path(rng, req, _high(rng))).wire())


def case_nonutf8_method(rng, ctx, n):
    req = carrier(rng, ctx, n, ("proxy", "proxy", "virtual", "own", "tunnel"))
    method = req.method if rng.random() < 0.5 else rng.choice([b"POST", b"GET"])
    req = ValidRequest(req.kind, _insert(rng, method, _high(rng), 0), req.target, req.headers, req.body, req.number,
                       req.live, req.tunnel)
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


def case_chunk_no_crlf(rng, ctx, n):
    """Chunk data not followed by CRLF (h11 0.14 took any two bytes there: CVE-2025-43859)."""
    req = carrier(rng, ctx, n, ("proxy", "virtual", "tunnel"), body=True)
    piece = req.body[:5]
    after = rng.choice([b"XX", b"\n", b"\r", b"X\r\n", b"\r\r", b""])  # "": the next size line at once
    chunks = b"%x\r\n%s%s0\r\n\r\n" % (len(piece), piece, after)
    return req.case("chunk-no-crlf", req.wire(framing="chunked", chunks=chunks))


def case_hidden_framing(rng, ctx, n):
    """A framing field with a byte mitmproxy's reader strips unseen (VT, FF, a bare CR at a value's end)."""
    req = carrier(rng, ctx, n, ("proxy", "virtual", "tunnel"), body=True)
    byte = rng.choice([b"\x0b", b"\x0c", b"\r"])
    if rng.random() < 0.5:
        framing = b"chunked" + byte if byte == b"\r" or rng.random() < 0.5 else byte + b"chunked"
        line = b"Transfer-Encoding: " + framing
        body = chunked(req.body)
    else:
        line, body = b"Content-Length: %d%s" % (len(req.body), byte), req.body
    return req.case("hidden-framing", req.head([line]) + b"\r\n\r\n" + body)


def case_transfer_coding(rng, ctx, n):
    """A transfer coding besides chunked, which the proxy does not apply (answered 501)."""
    req = carrier(rng, ctx, n, ("proxy", "virtual", "tunnel"), body=True)
    coding = rng.choice([b"gzip, chunked", b"deflate,chunked", b"compress , chunked", b"x-fuzz, chunked"])
    return req.case("transfer-coding", req.head([b"Transfer-Encoding: " + coding]) + b"\r\n\r\n" + chunked(req.body))


def case_blank_line(rng, ctx, n):
    req = carrier(rng, ctx, n)
    return req.case("blank-line-first", req.wire(prefix=rng.choice([b"\r\n", b"\r\n", b"\n"])))


def _leaving(rng, req: ValidRequest, cls: str, raw: bytes) -> Case:
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


def _mutable_base(rng, ctx, n) -> tuple[ValidRequest, bytes]:
    req = carrier(rng, ctx, n, ("proxy", "proxy", "virtual", "own"))
    framing = rng.choice(["length", "length", "chunked"]) if req.body else "length"
    return req, req.wire(framing=framing)


def _mutated(req: ValidRequest, cls: str, raw: bytes) -> Case:
    """A mutated request aimed at the upstream stays live only while its request target still
    carries the case's number in its query (a flip can end the target early: a space, a '#')."""
    if req.live:
        parts = raw.split(b"\n", 1)[0].split(b" ")
        target = parts[1] if len(parts) > 2 else b""
        tagged = re.match(rb"[^#?]*\?[^#]*" + re.escape(CASE_TAG + b"%d" % req.number) + rb"(?!\d)", target)
        req = ValidRequest(req.kind, req.method, req.target, req.headers, req.body, req.number, bool(tagged),
                           req.tunnel)
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


# classes whose every case the proxy must refuse (400, or 501 for a coding) without forwarding it
REFUSED_CLASSES = ("chunk-no-crlf", "hidden-framing", "transfer-coding")
# class -> (maker, weight); the weights favour what costs the proxy little, so thousands fit in seconds
CLASSES = {
    "content": (case_content, 14), "valid": (case_valid, 6),
    "nonutf8-path": (case_nonutf8_path, 6), "nonutf8-method": (case_nonutf8_method, 4),
    "nonutf8-header": (case_nonutf8_header, 4), "nul-header": (case_nul_header, 4), "bare-cr": (case_bare_cr, 4),
    "obs-fold": (case_obs_fold, 4), "nul-path": (case_nul_path, 4), "chunked-trailer": (case_chunked_trailer, 4),
    "chunk-bad-size": (case_chunk_bad_size, 5), "chunk-ext": (case_chunk_ext, 3),
    "chunk-no-crlf": (case_chunk_no_crlf, 3), "hidden-framing": (case_hidden_framing, 3),
    "transfer-coding": (case_transfer_coding, 2),
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
    ctx = Destinations(proxy_port, upstream_port, tls_port)
    weights = [CLASSES[name][1] for name in names]
    number = 0
    while True:
        number += 1
        yield CLASSES[rng.choices(names, weights)[0]][0](rng, ctx, number)
