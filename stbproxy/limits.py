"""Bounds on what one request may ask of the proxy, checked before any work is done. Pure.

The proxy serves many agents from one event loop, so a single request must never be able
to hold it: a request with too many header fields, or too many header bytes, is answered
431 as soon as its head is read; a JSON body nested deeper than jsonsafe.MAX_JSON_DEPTH is
answered 422. Each answer names the limit and the option that sets it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from stbproxy import jsonsafe
from stbproxy.keys import is_json_type

DEFAULT_MAX_HEADERS = 100
DEFAULT_MAX_HEADER_BYTES = 64 * 1024
_FIELD_OVERHEAD = 4  # ": " and CRLF of each header line


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


def body_problem(body: bytes, content_type: str | None) -> str | None:
    """Why a request body is refused (JSON nested too deep), or None.

    Invalid JSON is not a problem here: it is forwarded and keyed as bytes, as before.
    """
    if body and is_json_type(content_type) and jsonsafe.too_deep(body):
        return f"the request body is {jsonsafe.JsonTooDeep(jsonsafe.MAX_JSON_DEPTH)}"
    return None
