"""The bytes of one stored record: the embedded store's values, and the shared tier's (the
same bytes under the same keys). A value is::

    b"STB1" | u32 length of the JSON head | JSON head | response body bytes

The head holds the redacted request (body base64), the response status and headers, the
source and timings; the body follows raw so that a hit costs one small JSON parse.
``RecordTemplate`` makes the same bytes at a fraction of the cost for bulk imports.
"""

from __future__ import annotations

import base64
import json
import struct
from dataclasses import replace
from typing import Any

from stbproxy.errors import StoreError
from stbproxy.models import ApiRef, Exchange, Request, Response, Source

MAGIC = b"STB1"
_HEAD_LEN = struct.Struct(">I")
_COMPACT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))  # built once: records are many



def encode_exchange(ex: Exchange) -> bytes:
    head = _COMPACT.encode(_head(ex, base64.b64encode(ex.request.body).decode("ascii")))
    raw_head = head.encode("utf-8", "surrogatepass")
    return MAGIC + _HEAD_LEN.pack(len(raw_head)) + raw_head + ex.response.body


def _head(ex: Exchange, request_body: str) -> dict[str, Any]:
    """A record's JSON head, with the request body (base64) given."""
    return {
        "request": {
            "method": ex.request.method,
            "url": ex.request.url,
            "headers": [list(h) for h in ex.request.headers],
            "body": request_body,
        },
        "response": {
            "status": ex.response.status,
            "reason": ex.response.reason,
            "headers": [list(h) for h in ex.response.headers],
        },
        "source": ex.source.value,
        "stored_at": ex.stored_at,
        "upstream_seconds": ex.upstream_seconds,
        "api": [ex.api.category, ex.api.tool, ex.api.api] if ex.api else None,
        "meta": dict(ex.meta),
    }


class RecordTemplate:
    """The records of exchanges that are ``sample`` but for the request and response
    bodies, at a fraction of encode_exchange's cost (bulk imports): the head is encoded
    once around a marker where the request body goes and split there, so a record costs
    a base64 and a join. The bytes are encode_exchange's exactly: a JSON object's text is
    its members' texts in order, and a base64 text needs no escaping. Should the marker's
    text occur elsewhere in the head (a value of exactly that text), records are encoded
    the plain way."""

    _MARK = "\x00request body\x00"  # never a base64 text

    def __init__(self, sample: Exchange) -> None:
        self.sample = sample
        text = _COMPACT.encode(_head(sample, self._MARK))
        parts = text.split(_COMPACT.encode(self._MARK))
        self._parts = None if len(parts) != 2 else (
            (parts[0] + '"').encode("utf-8", "surrogatepass"), ('"' + parts[1]).encode("utf-8", "surrogatepass"))

    def record(self, request_body: bytes, response_body: bytes) -> bytes:
        if self._parts is None:
            return encode_exchange(replace(self.sample, request=replace(self.sample.request, body=request_body),
                                           response=replace(self.sample.response, body=response_body)))
        before, after = self._parts
        body = base64.b64encode(request_body)
        return b"".join((MAGIC, _HEAD_LEN.pack(len(before) + len(body) + len(after)), before, body, after,
                         response_body))


def decode_head(value: bytes) -> tuple[dict[str, Any], int]:
    """The JSON head of a record and the offset where the response body starts."""
    if value[:4] != MAGIC or len(value) < 8:
        raise ValueError("not an stbproxy record")
    (length,) = _HEAD_LEN.unpack_from(value, 4)
    end = 8 + length
    if end > len(value):
        raise ValueError("record head is truncated")
    return json.loads(value[8:end]), end


def decode_exchange(key: str, value: bytes) -> Exchange:
    try:
        head, body_at = decode_head(value)
        req, resp = head["request"], head["response"]
        api = head.get("api")
        return Exchange(
            key=key,
            request=Request(
                method=req["method"],
                url=req["url"],
                headers=tuple((k, v) for k, v in req["headers"]),
                body=base64.b64decode(req["body"]),
            ),
            response=Response(
                status=int(resp["status"]),
                headers=tuple((k, v) for k, v in resp["headers"]),
                body=value[body_at:],
                reason=resp.get("reason", ""),
            ),
            source=Source(head["source"]),
            stored_at=float(head["stored_at"]),
            upstream_seconds=head.get("upstream_seconds"),
            api=ApiRef(*api) if api else None,
            meta=head.get("meta") or {},
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise StoreError(f"stored entry {key!r} is damaged: {exc}") from exc

