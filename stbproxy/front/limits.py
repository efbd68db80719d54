"""Bounds on what one request may ask of the proxy, checked before any work is done. Pure.

The proxy serves many agents from one event loop, so a single request must never be able
to hold it: a request with too many header fields, or too many header bytes, is answered
431 as soon as its head is read; a URL longer than MAX_URL_LENGTH, 414; a JSON body nested
deeper than jsonsafe.MAX_JSON_DEPTH is answered 422. Each answer names the limit (and the
option that sets it, where one does).

A head that HTTP forbids is the client's mistake and is answered 400 before anything is
keyed or forwarded (head_problem): a method that is not a token, a target with control
bytes or bytes that are not UTF-8, a header name that is not a token, a header value with
NUL, CR, LF (an obs-fold continuation arrives as CR LF inside the value) or another control
byte. Forwarding such a head would make the upstream's HTTP client refuse it, and that
refusal would then pass for the upstream's answer.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Iterable

from stbproxy import jsonsafe
from stbproxy.keys import is_json_type

DEFAULT_MAX_HEADERS = 100
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
DEFAULT_MAX_REQUEST_BODY = 32 << 20  # larger bodies: 413 before they are read (Anthropic's API takes 32 MB)
DEFAULT_HEAD_TIMEOUT = 30.0  # seconds from a request's first byte to the end of its head
DEFAULT_IDLE_TIMEOUT = 120.0  # seconds a connection may wait for its next request
DEFAULT_MAX_CONNECTIONS = 4096  # open client connections per proxy process
# The longest URL forwarded: httpx's own bound (httpx._urlparse.MAX_URL_LENGTH), so a longer
# one could only ever fail upstream; answered 414 at the door instead, before any work.
MAX_URL_LENGTH = 65536
_URL_FRAME = 32  # what a URL adds to its target and host at most: "https://", "[...]", ":65535"
_FIELD_OVERHEAD = 4  # ": " and CRLF of each header line
_NOT_TOKEN = re.compile(rb"[^!#$%&'*+\-.^_`|~0-9A-Za-z]")  # RFC 9110 tchar
_CONTROL_IN_TARGET = re.compile(rb"[\x00-\x20\x7f]")
_CONTROL_IN_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")  # HTAB and obs-text (>= 0x80) are allowed


@dataclass(frozen=True)
class HeaderLimits:
    max_count: int = DEFAULT_MAX_HEADERS
    max_bytes: int = DEFAULT_MAX_HEADER_BYTES

    def problem(self, fields: Iterable[tuple[bytes, bytes]]) -> str | None:
        """Why these header fields are refused, or None when they are within the limits."""
        fields = list(fields)
        if len(fields) > self.max_count:
            return (f"the request has {len(fields)} header fields, more than the limit of {self.max_count} "
                    "(--max-headers)")
        size = sum(len(name) + len(value) + _FIELD_OVERHEAD for name, value in fields)
        if size > self.max_bytes:
            return (f"the request's header fields take {size} bytes, more than the limit of {self.max_bytes} "
                    "(--max-header-bytes)")
        return None

FILES_KEPT = 256  # descriptors left for the store, upstream connections and the workers' links


def default_max_connections() -> int:
    """DEFAULT_MAX_CONNECTIONS, or fewer where the open-file limit would run out first (each
    client connection holds a descriptor)."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return DEFAULT_MAX_CONNECTIONS
    return max(16, min(DEFAULT_MAX_CONNECTIONS, soft - FILES_KEPT))


def body_problem(body: bytes, content_type: str | None) -> str | None:
    """Why a request body is refused (JSON nested too deep), or None.

    Invalid JSON is not a problem here: it is forwarded and keyed as bytes, as before.
    """
    if body and is_json_type(content_type) and jsonsafe.too_deep(body):
        return f"the request body is {jsonsafe.JsonTooDeep(jsonsafe.MAX_JSON_DEPTH)}"
    return None


def url_problem(target: bytes, host: str, url: Callable[[], str]) -> str | None:
    """Why a request's URL is refused (414): longer than MAX_URL_LENGTH as it would be
    forwarded (``url``, made only when the target and host are long enough to matter)."""
    if len(target) + len(host) + _URL_FRAME <= MAX_URL_LENGTH:
        return None
    size = len(url())
    if size <= MAX_URL_LENGTH:
        return None
    return (f"the request's URL takes {size:,} characters, more than the {MAX_URL_LENGTH:,} this proxy forwards; "
            "nothing was forwarded or stored")


def head_problem(method: bytes, target: bytes, fields: Iterable[tuple[bytes, bytes]]) -> str | None:
    """Why a request head is not HTTP a proxy may pass on (answered 400), or None."""
    if not method or _NOT_TOKEN.search(method):
        return f"the request method {_shown(method)} is not an HTTP token"
    if _CONTROL_IN_TARGET.search(target):
        return f"the request target {_shown(target)} holds a space or a control byte"
    if not target.isascii():
        try:
            target.decode("utf-8")
        except UnicodeDecodeError:
            return f"the request target {_shown(target)} holds bytes that are not UTF-8 (percent-encode them)"
    # This runs on every request: one search over all names and one over all values.
    names = [name for name, _ in fields]
    if b"" in names or _NOT_TOKEN.search(b"".join(names)):
        bad = next(name for name in names if not name or _NOT_TOKEN.search(name))
        return f"the header name {_shown(bad)} is not an HTTP token"
    if _CONTROL_IN_VALUE.search(b"\t".join([value for _, value in fields])):
        name = next(name for name, value in fields if _CONTROL_IN_VALUE.search(value))
        return (f"the value of header {_shown(name)} holds NUL, CR, LF or another control byte "
                "(or continues on a folded line)")
    return None


def _shown(raw: bytes, most: int = 60) -> str:
    """Client bytes quoted safely in an answer and a log line (never more than ``most``)."""
    text = repr(raw[:most])[2:-1]  # bytes that are not printable ASCII as \\xNN escapes
    return f"'{text}{'...' if len(raw) > most else ''}'"
