"""stbproxy/mitm/framing.py on its own: chunks read strictly (h11 0.14 took any two bytes after
a chunk's data for its CRLF, CVE-2025-43859), heads with bytes mitmproxy's reader drops unseen,
transfer codings the proxy does not apply, and the header fields a Connection field names.
The same through a running proxy, on both lanes: tests/proxy/test_framing_proxy.py."""

from __future__ import annotations

import h11
import pytest
from h11._receivebuffer import ReceiveBuffer  # what mitmproxy's HTTP/1 layer reads bodies from

from stbproxy.mitm.framing import ChunkedReader, head_refusal, hides_bytes, without_hop_by_hop


def read_chunked(wire: bytes, piece: int = 0) -> tuple[bytes, bool]:
    """The body ``ChunkedReader`` reads from ``wire`` (fed whole, or ``piece`` bytes at a time),
    and whether it reached the end of the message."""
    reader, buf, body = ChunkedReader(), ReceiveBuffer(), b""
    for start in range(0, len(wire), piece or len(wire)):
        buf += wire[start:start + (piece or len(wire))]
        while True:
            part = reader(buf)
            if part is None:
                break
            if isinstance(part, h11.EndOfMessage):
                return body, True
            body += part.data
    return body, False


@pytest.mark.parametrize("piece", [0, 1, 2, 3, 5])
def test_valid_chunked_bodies_are_read_whole_however_they_arrive(piece):
    assert read_chunked(b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n", piece) == (b"hello world", True)
    assert read_chunked(b"5;name=value\r\nhello\r\n0\r\nX-Trailer: 1\r\nX-Other: two\r\n\r\n",
                        piece) == (b"hello", True)
    assert read_chunked(b"A  \r\n0123456789\r\n0\r\n\r\n", piece) == (b"0123456789", True)


@pytest.mark.parametrize("wire", [
    b"5\r\nhelloXX0\r\n\r\n",  # the audit's case: no CRLF after the data, "XX" instead
    b"5\r\nhello\n0\r\n\r\n",  # a bare LF after the data
    b"5\r\nhello\r0\r\n\r\n",  # a bare CR
    b"5\r\nhelloX\r\n0\r\n\r\n",  # a byte more than the size says
    b"5;a\rb\r\nhello\r\n0\r\n\r\n",  # a bare CR in an extension
    b"5;a\x00\r\nhello\r\n0\r\n\r\n",  # NUL in an extension
    b"5 ;a\r\nhello\r\n0\r\n\r\n",  # (h11's grammar: no space before an extension)
    b"zz\r\nhello\r\n0\r\n\r\n",  # not a size
    b"0\r\nX-T: a\rb\r\n\r\n",  # a bare CR in a trailer field
    b"0\r\n folded\r\n\r\n",  # a trailer line that is not a field
])
@pytest.mark.parametrize("piece", [0, 1])
def test_broken_chunk_framing_is_refused(wire, piece):
    with pytest.raises(h11.LocalProtocolError):
        read_chunked(wire, piece)


def test_a_body_cut_short_is_the_client_leaving():
    assert read_chunked(b"5\r\nhel") == (b"hel", False)
    with pytest.raises(h11.RemoteProtocolError):
        ChunkedReader().read_eof()


def test_a_size_line_without_end_is_refused_past_a_bound():
    reader, buf = ChunkedReader(), ReceiveBuffer()
    buf += b"5;" + b"x" * 5000
    with pytest.raises(h11.LocalProtocolError):
        reader(buf)


@pytest.mark.parametrize("line", [
    b"Transfer-Encoding: chunked\x0b", b"Transfer-Encoding: \x0cchunked", b"Content-Length: 5\x0b",
    b"X-A: ab\r", b"X-A: \x0b ab",
])
def test_bytes_mitmproxys_reader_strips_from_a_value_are_refused(line):
    status, message = head_refusal([b"POST / HTTP/1.1", b"Host: a.test", line])
    assert status == 400 and "control byte" in message
    assert hides_bytes(b"POST / HTTP/1.1\r\nHost: a.test\r\n" + line + b"\r\n\r\n")


def test_a_request_line_split_at_a_vertical_tab_is_refused():
    assert head_refusal([b"GET\x0b/ HTTP/1.1", b"Host: a.test"])[0] == 400
    assert head_refusal([b"GET / HTTP/1.1\r", b"Host: a.test"])[0] == 400


def test_what_limits_py_answers_itself_is_left_to_it():
    # a control byte inside a value is not hidden by mitmproxy's reader: front/limits.py says so
    assert head_refusal([b"GET / HTTP/1.1", b"X-A: a\x0bb", b"X-B: a\tb  "]) is None
    assert not hides_bytes(b"GET / HTTP/1.1\r\nHost: a\r\nX-A: b \t\r\n\r\n")
    assert not hides_bytes(b"GET / HTTP/1.1\nHost: a\n\n")  # bare LF line ends (RFC 9112 allows them)


@pytest.mark.parametrize("value", [b"gzip, chunked", b"deflate,chunked", b"GZIP ,  chunked", b"x-custom, chunked"])
def test_a_transfer_coding_the_proxy_does_not_apply_is_501(value):
    status, message = head_refusal([b"POST / HTTP/1.1", b"Host: a.test", b"Transfer-Encoding: " + value])
    assert status == 501 and "does not apply" in message


@pytest.mark.parametrize("value", [b"chunked", b"Chunked", b"chunked, gzip", b"chunked, chunked", b"gzip"])
def test_other_codings_are_mitmproxys_to_judge(value):
    # chunked alone is read; a coding after chunked, or none, is mitmproxy's 400 (RFC 9112 6.1: MUST)
    assert head_refusal([b"POST / HTTP/1.1", b"Host: a.test", b"Transfer-Encoding: " + value]) is None


def test_header_fields_a_connection_field_names_are_dropped():
    headers = (("Host", "a.test"), ("Connection", "keep-alive, X-Hop , x-other"), ("X-Hop", "1"),
               ("X-Other", "2"), ("X-Kept", "3"), ("Authorization", "Bearer t"))
    assert without_hop_by_hop(headers) == (("Host", "a.test"), ("Connection", "keep-alive, X-Hop , x-other"),
                                           ("X-Kept", "3"), ("Authorization", "Bearer t"))
    assert without_hop_by_hop(headers[:1] + (("Connection", "close, Authorization"),) + headers[5:]) == \
        (("Host", "a.test"), ("Connection", "close, Authorization"))
    plain = (("Host", "a.test"), ("Connection", "keep-alive"))
    assert without_hop_by_hop(plain) is plain
