"""HTTP/1 request framing read strictly, where mitmproxy 11.0.2 (and the h11 0.14 it pins) is
lenient, and hop-by-hop header fields (RFC 9110 7.6.1) dropped before a request travels on.

- A head with a byte that mitmproxy's reader drops without a word: VT or FF at either end
  of a header value, a bare CR (``value.strip()`` takes them off), is refused 400 as every
  other control byte in a head is (front/limits.py). ``Transfer-Encoding: chunked\\x0b``
  would otherwise be read as chunked while another reader takes it for no coding at all:
  request smuggling.
- A transfer coding besides chunked (``gzip, chunked``) is refused 501 Not Implemented,
  RFC 9112 6.1's answer for a coding the server does not apply: the proxy would pass the
  gzip bytes on as if they were the body.
- Chunks are read by ``ChunkedReader``: each chunk's data must end in CRLF (h11 0.14 skips
  any two bytes there, CVE-2025-43859: ``5\\r\\nhelloXX0\\r\\n\\r\\n`` was read as "hello"),
  an extension holds no control byte, a trailer field is a field (its value then dropped).
"""

from __future__ import annotations

import re

import h11  # the body reader's answers are h11's events, as mitmproxy's HTTP/1 layer reads them

_STRIPPED = b" \t\r\x0b\x0c"  # what mitmproxy's reader takes off a header value (bytes.strip(), less LF)
_OWS = b" \t"  # ... of which the only bytes HTTP allows there
_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})(;[\t\x20-\x7e\x80-\xff]*)?[ \t]*")  # h11's, with no control byte
_TRAILER_FIELD = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*")
_PLAIN_CONNECTION = frozenset({"keep-alive", "close"})  # what nearly every client sends: no field named
MAX_CHUNK_LINE = 4096  # a chunk-size line (with its extensions) longer than this is refused


def head_refusal(lines: list[bytes]) -> tuple[int, str] | None:
    """Why a request head (its lines, without their line ends) is refused, as (status, message),
    or None. Only what mitmproxy's reader would hide is looked at here; the rest of a head is
    checked once it is read (front/limits.py)."""
    if not lines:
        return None
    if any(byte in lines[0] for byte in (b"\r", b"\x0b", b"\x0c")):  # it splits the request line at them
        return 400, _hidden("the request line", lines[0])
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if value.strip(_STRIPPED) != value.strip(_OWS):
            return 400, _hidden(f"the value of header '{name[:60].decode('ascii', 'backslashreplace')}'", value)
    codings = [line.split(b":", 1)[1] for line in lines[1:] if line[:18].lower() == b"transfer-encoding:"]
    if len(codings) == 1:
        names = [name.strip(_OWS).lower() for name in codings[0].split(b",")]
        others = [name for name in names if name != b"chunked"]
        if names[-1:] == [b"chunked"] and others and all(_TOKEN.fullmatch(name) for name in others):
            return 501, (f"stbproxy: the request body is sent with the transfer coding "
                         f"{others[0].decode('ascii')!r} (Transfer-Encoding: {codings[0].strip().decode('ascii')}), "
                         "which this proxy does not apply; send the body without it (a Content-Encoding is passed "
                         "on as it is); nothing was forwarded or stored")
    return None


def _hidden(where: str, raw: bytes) -> str:
    byte = next(b for b in (b"\x0b", b"\x0c", b"\r") if b in raw)
    name = {b"\x0b": "a vertical tab (0x0b)", b"\x0c": "a form feed (0x0c)", b"\r": "a bare CR"}[byte]
    return (f"stbproxy: {where} holds {name}, a control byte (HTTP allows none in a request head); "
            "nothing was forwarded or stored")


def hides_bytes(head: bytes) -> bool:
    """Whether a whole head holds a byte that head_refusal looks for (VT, FF, a CR not before
    LF): the fast lane's cheap test, on every request, before mitmproxy's reader would drop it."""
    return len(head.translate(None, b"\x0b\x0c")) != len(head) or head.count(b"\r") != head.count(b"\r\n")


class ChunkedReader:
    """A chunked request body, read from mitmproxy's h11 receive buffer as h11's reader reads it
    (h11.Data for each piece, h11.EndOfMessage at the end; trailer fields are not kept), but
    strictly: h11.LocalProtocolError for a chunk whose data does not end in CRLF, a size line
    that is not hex digits with extensions free of control bytes, or a trailer line that is
    not a field."""

    def __init__(self) -> None:
        self._left = 0  # bytes of the current chunk's data still to come
        self._crlf = b""  # the part of a chunk's CRLF still to come
        self._trailer = False

    def __call__(self, buf) -> h11.Data | h11.EndOfMessage | None:
        if self._trailer:
            return self._read_trailer(buf)
        if self._crlf:
            got = buf.maybe_extract_at_most(len(self._crlf))
            if got is None:
                return None
            if bytes(got) != self._crlf[:len(got)]:
                raise h11.LocalProtocolError(f"chunk data not followed by CRLF (found {bytes(got)!r})")
            self._crlf = self._crlf[len(got):]
            if self._crlf:
                return None
        start = False
        if not self._left:
            line = buf.maybe_extract_next_line()
            if line is None:
                if len(buf) > MAX_CHUNK_LINE:
                    raise h11.LocalProtocolError(f"chunk size line longer than {MAX_CHUNK_LINE} bytes")
                return None
            found = _CHUNK_LINE.fullmatch(bytes(line[:-2]))
            if found is None:
                raise h11.LocalProtocolError(f"illegal chunk header: {bytes(line[:80])!r}")
            self._left = int(found.group(1), 16)
            if not self._left:
                self._trailer = True
                return self._read_trailer(buf)
            start = True
        data = buf.maybe_extract_at_most(self._left)
        if data is None:
            return None
        self._left -= len(data)
        if not self._left:
            self._crlf = b"\r\n"
        return h11.Data(data=bytes(data), chunk_start=start, chunk_end=not self._left)

    def _read_trailer(self, buf) -> h11.EndOfMessage | None:
        lines = buf.maybe_extract_lines()
        if lines is None:
            return None
        for line in lines:
            if not _TRAILER_FIELD.fullmatch(bytes(line)):
                raise h11.LocalProtocolError(f"illegal trailer line: {bytes(line[:80])!r}")
        return h11.EndOfMessage()

    def read_eof(self):
        raise h11.RemoteProtocolError("the client closed the connection in the middle of a chunked body")


def without_hop_by_hop(headers: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    """The header fields without those a proxy must not forward: the ones the Connection field
    names (RFC 9110 7.6.1). The standard hop-by-hop fields themselves go where requests are sent
    (upstream/client.py); ``Connection: close, Authorization`` drops Authorization too, as the RFC says."""
    named: set[str] = set()
    for name, value in headers:
        if len(name) == 10 and name.lower() == "connection":
            value = value.lower()
            if value not in _PLAIN_CONNECTION:  # (keep-alive is dropped where requests are sent)
                named.update(part.strip(" \t") for part in value.split(","))
    named.discard("")
    if not named or not any(name.lower() in named for name, _ in headers):
        return headers
    return tuple((name, value) for name, value in headers if name.lower() not in named)
