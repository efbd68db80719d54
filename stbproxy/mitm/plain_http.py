"""Plain HTTP/1.1 requests as mitmproxy's HTTP/1 layer reads them, and responses as it
writes them: what the fast lane (fast_lane.py, tunnel_lane.py) needs to answer a request
without that layer and byte for byte as it would.

A plain request: HTTP/1.1, no CONNECT or HEAD, no Expect or Upgrade, no body or a
Content-Length one of at most MAX_BODY bytes, a head mitmproxy itself accepts; on a proxy
connection origin-form or ``http://`` absolute-form, inside a TLS tunnel origin-form.
"""

from __future__ import annotations

import re
import time
from typing import Protocol

from mitmproxy import http
from mitmproxy.net.http import http1
from mitmproxy.net.http.url import parse_authority
from mitmproxy.net.http.validate import parse_content_length
from mitmproxy.proxy.layers.http import HTTPMode, validate_request

from stbproxy.mitm.framing import hides_bytes
from stbproxy.recent import Recent

MAX_BODY = 1 << 20  # larger bodies take mitmproxy's path (which may stream them)
MAX_HEAD = 64 << 10  # a head not complete within this many bytes is mitmproxy's to judge
METHOD_START = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_BLANK_LINE = re.compile(rb"\n\r?\n")  # the end of a head, as mitmproxy's HTTP/1 reader finds it
_AUTHORITIES: Recent[tuple] = Recent(256)
_INVALID = ("", None)
# An absolute-form http:// target whose every byte is one of these: mitmproxy's verdict on it
# depends on its authority alone (the path's bytes cannot make its URL check fail), so that
# verdict is asked once per authority; anything else is read by mitmproxy in full.
_SIMPLE_ABSOLUTE = re.compile(rb"http://([A-Za-z0-9.\-]+(?::[0-9]+)?)(/[\x21-\x7e]*)?")
_TARGET_AUTHORITIES: Recent[tuple] = Recent(256)
# Heads read before, with what was read from them: a client sends the same few heads again
# and again (a /virtual POST's differs only in its Content-Length), and the reading depends
# on the head's bytes and the arguments alone. Small heads only, so memory stays bounded.
_HEADS: Recent[tuple] = Recent(1024)
MEMO_MAX_HEAD = 2048
_NOT_PLAIN = ("not plain",)
_RESPONSE_HEADS: Recent[tuple] = Recent(1024)  # response heads written before, by fields object


class Readable(Protocol):
    """A client's reader: asyncio's, or one that watches it (connections.WatchedReader)."""

    async def read(self, n: int = -1) -> bytes: ...


class Replayed:
    """A client's reader with bytes already read put back in front: what mitmproxy reads
    first when a connection is handed over."""

    def __init__(self, prefix: bytes, reader: Readable) -> None:
        self._prefix = prefix
        self._reader = reader

    async def read(self, n: int = -1) -> bytes:
        if self._prefix:
            if n < 0:
                n = len(self._prefix)
            data, self._prefix = self._prefix[:n], self._prefix[n:]
            return data
        return await self._reader.read(n)

    def __getattr__(self, name: str):
        return getattr(self._reader, name)


def head_end(buffer: bytes | bytearray) -> int | None:
    """Where the first request head in ``buffer`` ends (after its blank line), if it does."""
    found = _BLANK_LINE.search(buffer)
    return found.end() if found is not None else None


def plain_request(head: bytes, validate_headers: bool, destination: tuple[str, int] | None = None,
                  max_body: int = MAX_BODY) -> tuple[http.Request, int, bool] | None:
    """The request mitmproxy would read from ``head``, its body's length and whether it asks
    to close the connection, when it is of the plain kind. ``destination``: the address of
    the TLS tunnel the request came through (mitmproxy's transparent mode inside tunnels);
    ``max_body``: a longer body is mitmproxy's to read (or refuse, over its limit).

    A head read before is not read again: the request is made anew from what was read (its
    fields, which no one changes in place: mitmproxy's headers replace their tuple), with
    its own timestamp, as mitmproxy's reader makes it."""
    if len(head) > MEMO_MAX_HEAD:
        return _read_plain(head, validate_headers, destination, max_body)
    memo_key = (head, validate_headers, destination, max_body)
    known = _HEADS.get(memo_key)
    if known is None:
        read = _read_plain(head, validate_headers, destination, max_body)
        if read is None:
            known = _NOT_PLAIN
        else:
            request, size, closes = read
            data = request.data
            known = ((data.host, data.port, data.method, data.scheme, data.authority, data.path, data.http_version,
                      data.headers.fields), size, closes)
        _HEADS.put(memo_key, known)
        return read
    if known is _NOT_PLAIN:
        return None
    (host, port, method, scheme, authority, path, version, fields), size, closes = known
    headers = http.Headers.__new__(http.Headers)
    headers.fields = fields  # bytes pairs, checked when first read (what Headers(fields) checks)
    request = http.Request.__new__(http.Request)  # what http1.read_request_head makes, without its conversions
    request.data = http.RequestData(host=host, port=port, method=method, scheme=scheme, authority=authority,
                                    path=path, http_version=version, headers=headers, content=None, trailers=None,
                                    timestamp_start=time.time(), timestamp_end=None)
    return request, size, closes


def _read_plain(head: bytes, validate_headers: bool, destination: tuple[str, int] | None,
                max_body: int) -> tuple[http.Request, int, bool] | None:
    """plain_request's reading of a head.

    mitmproxy's header lookups walk every field each time, so the checks below look at the
    lower-cased field names once, and ask mitmproxy's own functions where the answer is not
    plain (several Content-Length or Host fields, a Connection field)."""
    if hides_bytes(head):
        return None  # bytes mitmproxy's reader would drop unseen: its HTTP/1 layer answers 400 (framing.py)
    lines = [line[:-1] if line.endswith(b"\r") else line for line in head.split(b"\n")[:-2]]
    if not lines or not lines[0]:
        return None  # a leading blank line: mitmproxy skips it in its own way
    try:
        request = read_request_head(lines)
    except ValueError:
        return None  # mitmproxy answers 400 and says why
    fields = request.headers.fields
    names = [name.lower() for name, _ in fields]
    if (request.http_version != "HTTP/1.1" or request.method.upper() in ("CONNECT", "HEAD") or request.path == "*"
            or request.scheme not in ("", "http") or b"expect" in names or b"upgrade" in names
            or b"transfer-encoding" in names):
        return None
    mode = HTTPMode.regular if destination is None else HTTPMode.transparent
    if validate_request(mode, request, validate_headers) is not None:
        return None
    lengths = [value for name, (_, value) in zip(names, fields) if name == b"content-length"]
    if not lengths:
        size = 0  # a request without Content-Length or Transfer-Encoding has no body
    elif len(lengths) == 1:
        try:
            size = parse_content_length(lengths[0])
        except ValueError:
            return None
        if size > max_body:
            return None
    else:
        return None
    if destination is not None:  # in a tunnel: its address names the destination
        if request.host:
            return None  # absolute-form in a tunnel: rare, and mitmproxy's to read
        request.data.host, request.data.port = destination
        request.scheme = "https"
    elif not request.host:  # origin-form: the Host header names the destination
        hosts = [value for name, (_, value) in zip(names, fields) if name == b"host"]
        if len(hosts) != 1:
            return None
        authority = _authority(hosts[0])
        if authority is None:
            return None
        host, port = authority
        request.data.host = host
        request.data.port = port or 80
        request.scheme = "http"
    request.authority = ""  # origin-form towards servers, as mitmproxy sends HTTP/1 requests on
    closes = False
    if b"connection" in names:
        values = [value for name, (_, value) in zip(names, fields) if name == b"connection"]
        closes = values != [b"keep-alive"] and http1.connection_close(request.http_version, request.headers)
    return request, size, closes


def read_request_head(lines: list[bytes]) -> http.Request:
    """``http1.read_request_head(lines)``, for less: an absolute-form ``http://`` target, what
    an HTTP_PROXY client sends, costs mitmproxy a full URL parse and check on every request,
    and its host and port depend only on the authority, which repeats. Such a line is read as
    its origin form, and the authority's reading (mitmproxy's own, remembered) put in."""
    parts = lines[0].split()
    if len(parts) == 3 and parts[0] != b"CONNECT":
        found = _SIMPLE_ABSOLUTE.fullmatch(parts[1])
        if found is not None:
            authority = found.group(1)
            known = _target_authority(authority)
            if known is not None:
                request = http1.read_request_head([b"%s %s %s" % (parts[0], found.group(2) or b"/", parts[2]),
                                                   *lines[1:]])
                request.data.host, request.data.port = known
                request.data.scheme, request.data.authority = b"http", authority
                return request
    return http1.read_request_head(lines)


def _target_authority(authority: bytes) -> tuple[str, int] | None:
    """The host and port mitmproxy reads from an ``http://`` target with this authority, or
    None where it refuses it (remembered: a client talks to a few APIs)."""
    known = _TARGET_AUTHORITIES.get(authority)
    if known is None:
        try:
            probe = http1.read_request_head([b"GET http://" + authority + b"/ HTTP/1.1"])
            known = (probe.host, probe.port)
        except ValueError:
            known = _INVALID
        _TARGET_AUTHORITIES.put(authority, known)
    return None if known is _INVALID else known


def connect_request(head: bytes, validate_headers: bool) -> http.Request | None:
    """The CONNECT request mitmproxy would read from ``head``, when it is of the plain kind:
    HTTP/1.1 or HTTP/1.0 (Python's http.client, and so requests and urllib3, send their
    CONNECT so), authority-form, no body, Expect or Upgrade, a head mitmproxy accepts."""
    lines = [line[:-1] if line.endswith(b"\r") else line for line in head.split(b"\n")[:-2]]
    if not lines or not lines[0].startswith(b"CONNECT ") or hides_bytes(head):
        return None
    try:
        request = http1.read_request_head(lines)
    except ValueError:
        return None
    names = {name.lower() for name, _ in request.headers.fields}
    if (request.http_version not in ("HTTP/1.1", "HTTP/1.0") or not request.host or not request.port
            or names & {b"content-length", b"transfer-encoding", b"expect", b"upgrade"}
            or validate_request(HTTPMode.regular, request, validate_headers) is not None):
        return None
    return request


def _authority(value: bytes) -> tuple[str, int | None] | None:
    """A Host header's host and port as mitmproxy reads them (remembered: they repeat)."""
    known = _AUTHORITIES.get(value)
    if known is None:
        try:
            known = parse_authority(value.decode("utf-8", "surrogateescape"), check=True)
        except ValueError:
            known = _INVALID
        _AUTHORITIES.put(value, known)
    return None if known is _INVALID else known


def response_names(response: http.Response) -> frozenset[bytes]:
    """The response's lower-cased field names, with its head as mitmproxy's HTTP/1 server
    writes it (``http1.assemble_response_head``: its status line and fields) made once for
    the same fields object (a recent hit's: flows.Prebuilt), while it is remembered."""
    return _response_head(response)[1]


def _response_head(response: http.Response) -> tuple[bytes, frozenset[bytes]]:
    data = response.data
    fields = data.headers.fields
    known = _RESPONSE_HEADS.get(id(fields))
    if (known is not None and known[0] is fields and known[1] == data.status_code and known[2] == data.reason
            and known[3] == data.http_version):
        return known[4]
    made = (http1.assemble_response_head(response), frozenset(name.lower() for name, _ in fields))
    if len(made[0]) <= MEMO_MAX_HEAD:  # (the memo holds the fields object, so its id is its own)
        _RESPONSE_HEADS.put(id(fields), (fields, data.status_code, data.reason, data.http_version, made))
    return made


def response_bytes(response: http.Response, names: set[bytes] | frozenset[bytes]) -> bytes:
    """The response as mitmproxy's HTTP/1 server writes it (``names``: its lower-cased field names)."""
    head = _response_head(response)[0]
    content = response.raw_content or b""
    if b"transfer-encoding" not in names or "chunked" not in response.headers.get("transfer-encoding", "").lower():
        return head + content
    return head + (b"%x\r\n%s\r\n" % (len(content), content) if content else b"") + b"0\r\n\r\n"


def closes(request: http.Request, response: http.Response, names: set[bytes] | frozenset[bytes]) -> bool:
    """Whether mitmproxy would close the connection after this response to a request that
    does not ask for that itself."""
    if response.status_code == 101:
        return True  # mitmproxy would turn the connection into a pipe; there is nothing to pipe to
    if (response.http_version == "HTTP/1.1" and b"content-length" in names and b"connection" not in names
            and b"transfer-encoding" not in names):
        return False  # a known length (or none expected), nothing asking to close: mitmproxy's answer
    try:
        until_eof = http1.expected_http_body_size(request, response) == -1
    except ValueError:
        until_eof = False
    return until_eof or http1.connection_close(response.http_version, response.headers)
