"""The fast lane's reading of a request head must be mitmproxy's, byte for byte: the same
request (method, scheme, authority, host, port, path, version, fields) or the same refusal.
Absolute-form ``http://`` targets take a shorter way there (plain_http.read_request_head),
so request lines are generated around it: odd authorities, ports, paths of any byte."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st
from mitmproxy.net.http import http1

from stbproxy.mitm import plain_http

HEADERS = [b"Host: api.example.test", b"Accept: */*"]


def reading(read, lines: list[bytes]):
    try:
        request = read(lines)
    except ValueError:
        return "refused"
    data = request.data
    return (data.method, data.scheme, data.authority, data.host, data.port, data.path, data.http_version,
            request.headers.fields)


def same_as_mitmproxy(line: bytes) -> None:
    lines = [line, *HEADERS]
    assert reading(plain_http.read_request_head, lines) == reading(http1.read_request_head, lines), line


LABEL = st.text(alphabet="abcxyzAZ09-_.", min_size=0, max_size=70)
AUTHORITY = st.one_of(
    st.builds(lambda host, port: host + port, LABEL,
              st.sampled_from(["", ":", ":0", ":80", ":8080", ":65535", ":65536", ":99999", ":1x"])),
    st.sampled_from(["127.0.0.1", "[::1]:8080", "1.2.3.4:443", "a..b", "-a.test", "a-.test", "é.test",
                     "user@host.test", "x" * 64 + ".test", "host.test.", ""]),
)
PATH = st.binary(max_size=40).map(lambda tail: b"/" + tail.replace(b" ", b""))


@settings(max_examples=600, deadline=None)
@given(method=st.sampled_from([b"GET", b"POST", b"get", b"CONNECT", b"DELETE"]),
       scheme=st.sampled_from([b"http://", b"https://", b"HTTP://", b"ftp://"]),
       authority=AUTHORITY, path=st.one_of(st.just(b""), PATH),
       version=st.sampled_from([b"HTTP/1.1", b"HTTP/1.0", b"HTTP/2.0", b"HTTP/1", b"http/1.1"]))
@example(method=b"GET", scheme=b"http://", authority="api.example.test", path=b"/v1/a?b=1&c=[2]#top",
         version=b"HTTP/1.1")
@example(method=b"GET", scheme=b"http://", authority="api.example.test:8080", path=b"//x;p=1?q",
         version=b"HTTP/1.1")
def test_an_absolute_form_request_line_reads_as_mitmproxy_reads_it(method, scheme, authority, path, version):
    line = b"%s %s%s%s %s" % (method, scheme, authority.encode(), path, version)
    same_as_mitmproxy(line)


@given(st.binary(max_size=60))
def test_any_request_line_reads_as_mitmproxy_reads_it(line):
    same_as_mitmproxy(line.replace(b"\n", b"") or b"GET / HTTP/1.1")


def test_the_authority_is_read_by_mitmproxy_once_and_its_refusal_is_kept_too():
    plain_http._TARGET_AUTHORITIES = plain_http.Recent(256)
    for _ in range(3):
        same_as_mitmproxy(b"GET http://api.example.test:81/a HTTP/1.1")
        same_as_mitmproxy(b"GET http://api.example.test:70000/a HTTP/1.1")
    assert plain_http._TARGET_AUTHORITIES.get(b"api.example.test:81") == ("api.example.test", 81)
    assert plain_http._TARGET_AUTHORITIES.get(b"api.example.test:70000") is plain_http._INVALID
